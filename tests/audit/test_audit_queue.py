"""The task queue conformance suite on every queue backend, and what is particular to each."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from backends import CONNECT_TIMEOUT, server_store, with_options
from steadyloop import CorruptionError, StoreNotFound
from steadyloop.audit import TaskSpec, TaskStatus, open_queue
from steadyloop.testing import QueueConformance, QueueFactory

# The layout before schema versions (steadyloop 0.1): the tables, no audit_schema.
_V1_SQLITE = [
    "CREATE TABLE steadyloop_audit_tasks (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "task_id TEXT NOT NULL UNIQUE, idempotency_key TEXT UNIQUE, digest TEXT NOT NULL, "
    "spec TEXT NOT NULL, priority BIGINT NOT NULL, status TEXT NOT NULL, "
    "not_before BIGINT NOT NULL, owner TEXT, lease_token TEXT, lease_expires BIGINT, "
    "attempts BIGINT NOT NULL, round BIGINT NOT NULL, audit_rounds BIGINT NOT NULL, "
    "detail TEXT NOT NULL, submitted_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)",
    "CREATE TABLE steadyloop_audit_deps (task_id TEXT NOT NULL, depends_on TEXT NOT NULL, "
    "PRIMARY KEY (task_id, depends_on))",
    "INSERT INTO steadyloop_audit_tasks (task_id, digest, spec, priority, status, not_before, "
    "attempts, round, audit_rounds, detail, submitted_at, updated_at) VALUES ('old', 'd', "
    '\'{"prompt":"from 0.1","task_id":"old"}\', 0, \'queued\', 0, 0, 0, 0, \'\', 1, 1)',
]


class TestSQLiteQueue(QueueConformance):
    """The queue contract on a SQLite file."""

    @pytest.fixture
    def queue_factory(self, tmp_path: Path) -> QueueFactory:
        """A queue in a SQLite file of the test's folder; a missing file next to it."""
        url = f"sqlite:///{tmp_path}/audit.db"
        missing = f"sqlite:///{tmp_path}/typo.db"
        return QueueFactory(
            open=lambda **options: open_queue(url, **options),
            missing=lambda: open_queue(missing, create=False),
        )


@pytest.mark.server
class TestPostgresQueue(QueueConformance):
    """The queue contract on PostgreSQL (SKIP LOCKED, the server's clock, NOTIFY)."""

    @pytest.fixture
    async def queue_factory(self) -> AsyncIterator[QueueFactory]:
        """A queue under a fresh table prefix; another, never-created prefix as the missing one."""
        async with server_store("postgres") as (url, _):
            missing = with_options(url, prefix="tnothing_here_")
            yield QueueFactory(
                open=lambda **options: open_queue(url, **options),
                missing=lambda: open_queue(missing, create=False),
                notifies=True,
                server_clock=True,
            )


@pytest.mark.server
class TestMariaDBQueue(QueueConformance):
    """The queue contract on MariaDB (SKIP LOCKED, the server's clock, polling)."""

    @pytest.fixture
    async def queue_factory(self) -> AsyncIterator[QueueFactory]:
        """A queue under a fresh table prefix; another, never-created prefix as the missing one."""
        async with server_store("mysql") as (url, _):
            missing = with_options(url, prefix="tnothing_here_")
            yield QueueFactory(
                open=lambda **options: open_queue(url, **options),
                missing=lambda: open_queue(missing, create=False),
                server_clock=True,
            )


async def test_a_version_1_sqlite_queue_is_migrated_in_place(tmp_path: Path) -> None:
    """A queue file written before schema versions opens: its tasks are kept and the new columns work."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for statement in _V1_SQLITE:
        conn.execute(statement)
    conn.commit()
    conn.close()
    async with await open_queue(f"sqlite:///{path}") as queue:
        row = await queue.get("old")
        assert row.spec.prompt == "from 0.1" and row.status is TaskStatus.QUEUED
        claim = await queue.claim("w", 30)
        assert claim is not None and claim.task_id == "old"
        assert await queue.cancel("old", "stop") is TaskStatus.RUNNING
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM steadyloop_audit_schema").fetchall() == [(3,)]
    conn.close()


@pytest.mark.server
async def test_a_version_1_postgres_queue_is_migrated_in_place() -> None:
    """A PostgreSQL queue written before schema versions opens, keeps its tasks and gains the new columns."""
    import psycopg

    async with server_store("postgres") as (url, prefix):
        base = url.split("?", 1)[0]
        async with await psycopg.AsyncConnection.connect(
            base, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        ) as conn:
            for statement in _V1_SQLITE:
                sql = statement.replace("steadyloop_", prefix).replace(
                    "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY"
                )
                await conn.execute(sql)
        async with await open_queue(url) as queue:
            assert (await queue.get("old")).spec.prompt == "from 0.1"
            assert await queue.cancel("old", "not needed") is TaskStatus.CANCELLED


async def test_work_on_a_mistyped_sqlite_path_creates_nothing(tmp_path: Path) -> None:
    """Opening a queue with create=False on a missing file raises StoreNotFound and leaves no file."""
    path = tmp_path / "typo.db"
    with pytest.raises(StoreNotFound, match="no journal here"):
        await open_queue(f"sqlite:///{path}", create=False)
    assert not path.exists()


async def test_a_sqlite_file_with_a_journal_but_no_queue_is_no_task_store(tmp_path: Path) -> None:
    """create=False on a journal file without queue tables refuses, and adds no tables."""
    from steadyloop.journal import open_journal

    url = f"sqlite:///{tmp_path}/j.db"
    journal = await open_journal(url)
    await journal.close()
    with pytest.raises(StoreNotFound, match="no task store here"):
        await open_queue(url, create=False)
    conn = sqlite3.connect(tmp_path / "j.db")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert not any("audit" in t for t in tables)


async def test_a_sqlite_row_with_a_bad_spec_is_one_line(tmp_path: Path) -> None:
    """A queue row whose spec is not a spec reads as a one-line CorruptionError naming the task."""
    url = f"sqlite:///{tmp_path}/audit.db"
    async with await open_queue(url) as queue:
        await queue.submit(TaskSpec(prompt="p", task_id="x"))
    conn = sqlite3.connect(tmp_path / "audit.db")
    conn.execute("UPDATE steadyloop_audit_tasks SET spec = '{\"prompt\": 5}'")
    conn.commit()
    conn.close()
    async with await open_queue(url) as queue:
        with pytest.raises(CorruptionError, match="task 'x' has a spec") as info:
            await queue.get("x")
        assert "\n" not in str(info.value)


async def test_two_prefixes_share_one_sqlite_file(tmp_path: Path) -> None:
    """`?prefix=` keeps two queues (and their journals) apart in one SQLite file."""
    base = f"sqlite:///{tmp_path}/shared.db"
    async with (
        await open_queue(f"{base}?prefix=one_") as one,
        await open_queue(f"{base}?prefix=two_") as two,
    ):
        await one.submit(TaskSpec(prompt="p", task_id="x"))
        assert [t.task_id for t in await one.tasks()] == ["x"]
        assert await two.tasks() == []
    conn = sqlite3.connect(tmp_path / "shared.db")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert {"one_audit_tasks", "two_audit_tasks", "one_records", "two_records"} <= tables


@pytest.mark.server
@pytest.mark.parametrize("backend", ["postgres", "mysql"])
async def test_poll_in_the_url_is_the_queues_not_the_drivers(backend: str) -> None:
    """`?poll=` sets the idle poll of a board's queue; the journal driver never sees it."""
    from steadyloop.audit import TaskBoard

    async with server_store(backend, poll="0.5") as (url, _), await TaskBoard.open(url) as board:
        assert board.queue.poll == 0.5
        await board.submit(TaskSpec(prompt="p", task_id="x"))
        assert (await board.get("x")).status is TaskStatus.QUEUED


async def test_a_bad_poll_is_refused(tmp_path: Path) -> None:
    """A poll that is not a positive number of seconds is refused before anything is opened."""
    from steadyloop import UnknownBackend

    with pytest.raises(UnknownBackend, match="poll must be a positive number"):
        await open_queue(f"sqlite:///{tmp_path}/q.db?poll=soon")
    assert not (tmp_path / "q.db").exists()


class _AheadClock:
    """A worker clock one hour ahead of everyone else's."""

    def now_us(self) -> int:
        import time

        return int((time.time() + 3600) * 1_000_000)


@pytest.mark.server
@pytest.mark.parametrize("backend", ["postgres", "mysql"])
async def test_a_worker_whose_clock_runs_ahead_cannot_take_a_live_lease(backend: str) -> None:
    """On a server, leases use the server's clock: a worker an hour ahead finds nothing to claim."""
    async with (
        server_store(backend) as (url, _),
        await open_queue(url) as honest,
        await open_queue(url, clock=_AheadClock()) as ahead,
    ):
        await honest.submit(TaskSpec(prompt="p", task_id="x"))
        claim = await honest.claim("w1", 30)
        assert claim is not None
        assert await ahead.claim("w2", 30) is None, "took over a lease that is still live"
        assert await ahead.heartbeat("x", claim.lease_token, 30)  # renewed by the server clock too
        row = await ahead.get("x")
        assert row.owner == "w1" and row.lease_expires is not None
        assert abs(row.lease_expires - row.updated_at - 30_000_000) < 1_000_000


@pytest.mark.parametrize(
    "command", [["status"], ["status", "--json"], ["show", "x"], ["submit", "-p", "p"]]
)
def test_the_cli_reports_a_queue_from_another_version_in_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    """A status this version does not know (but in status: an unreadable row), or a newer schema, is an error message."""
    from typer.testing import CliRunner

    from steadyloop.cli import app

    runner = CliRunner()
    store = f"sqlite:{tmp_path}/a.db"
    submitted = runner.invoke(app, ["audit", "submit", "-s", store, "-p", "p", "--id", "x"])
    assert submitted.exit_code == 0
    conn = sqlite3.connect(tmp_path / "a.db")
    conn.execute("UPDATE steadyloop_audit_tasks SET status = 'paused'")
    conn.commit()
    conn.close()
    if command[0] == "status":  # lists the row as unreadable (see test_audit_status_unreadable)
        r = runner.invoke(app, ["audit", *command, "-s", store])
        assert r.exit_code == 0 and "'paused'" in r.output, r.output
    elif command[0] != "submit":
        r = runner.invoke(app, ["audit", *command, "-s", store])
        assert r.exit_code == 1 and r.output.startswith("error:"), r.output
        assert "'paused'" in r.output
    conn = sqlite3.connect(tmp_path / "a.db")
    conn.execute("UPDATE steadyloop_audit_schema SET version = 99")
    conn.commit()
    conn.close()
    r = runner.invoke(app, ["audit", *command, "-s", store])
    assert r.exit_code == 1 and r.output.startswith("error:"), r.output
    assert "newer than this steadyloop" in " ".join(r.output.split())


@pytest.mark.server
async def test_mariadb_skips_a_locked_row_instead_of_waiting() -> None:
    """While another MariaDB transaction locks the best task's row, a claim returns the next at once."""
    import time

    from asyncmy import connect  # type: ignore[import-untyped]

    async with server_store("mysql") as (url, prefix), await open_queue(url) as queue:
        await queue.submit(TaskSpec(prompt="p", task_id="first", priority=9))
        await queue.submit(TaskSpec(prompt="p", task_id="second"))
        conn = await connect(host="127.0.0.1", port=3306, user="root", database="test")
        try:
            await conn.begin()
            async with conn.cursor() as cur:
                await cur.execute(
                    f"SELECT 1 FROM {prefix}audit_tasks WHERE app = %s AND task_id = %s FOR UPDATE",
                    (b"audit", b"first"),
                )
            started = time.monotonic()
            claim = await queue.claim("w", 30)
            assert claim is not None and claim.task_id == "second"
            assert await queue.claim("w", 30) is None
            assert time.monotonic() - started < 25, "waited for the lock instead of skipping"
            await conn.rollback()
        finally:
            conn.close()
        claim = await queue.claim("w", 30)
        assert claim is not None and claim.task_id == "first"
