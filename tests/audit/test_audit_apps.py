"""Apps: a queue from before apps migrates into the default app, and apps never mix."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends import server_store
from steadyloop import TaskSpecError
from steadyloop.audit import (
    DEFAULT_APP,
    TaskBoard,
    TaskSpec,
    TaskStatus,
    open_queue,
)
from steadyloop.audit._queue import QUEUE_SCHEMA_VERSION, _version_3_rebuild
from steadyloop.journal import open_journal
from steadyloop.journal._sql import Dialect, Plan, PlanJournal, Query

HERE = Path(__file__).parent


def _version_2_tables(d: Dialect) -> list[str]:
    """The queue's DDL at schema version 2 (before apps), as that version wrote it."""
    n, t, i, s = d.name_type, d.data_type, d.int_type, d.short_text
    return [
        f"CREATE TABLE {{p}}audit_tasks ({d.serial_key}, task_id {n} NOT NULL UNIQUE, "
        f"idempotency_key {n} UNIQUE, digest {s} NOT NULL, spec {t} NOT NULL, "
        f"priority {i} NOT NULL, status {s} NOT NULL, not_before {i} NOT NULL, "
        f"owner {t}, lease_token {s}, lease_expires {i}, attempts {i} NOT NULL, "
        f"round {i} NOT NULL, audit_rounds {i} NOT NULL, detail {t} NOT NULL, "
        f"submitted_at {i} NOT NULL, updated_at {i} NOT NULL, cancel_requested {t}, "
        f"settled_token {s}, submit_token {s}, prev_owner {t}, prev_token {s}){d.table_suffix}",
        f"CREATE TABLE {{p}}audit_deps (task_id {n} NOT NULL, depends_on {n} NOT NULL, "
        f"PRIMARY KEY (task_id, depends_on)){d.table_suffix}",
        "CREATE INDEX {p}audit_pick ON {p}audit_tasks (status, priority DESC, seq)",
        "CREATE INDEX {p}audit_deps_on ON {p}audit_deps (depends_on)",
        f"CREATE TABLE {{p}}audit_schema (version {i} NOT NULL){d.table_suffix}",
        "INSERT INTO {p}audit_schema (version) VALUES (2)",
    ]


FAR = 4_000_000_000_000_000  # a lease that has not run out (µs)

# (task_id, idempotency key, spec, status, owner, lease token, lease expires)
_V2_ROWS: list[tuple[Any, ...]] = [
    ("a", None, {"prompt": "first", "task_id": "a"}, "queued", None, None, None),
    (
        "b",
        None,
        {"prompt": "second", "task_id": "b", "depends_on": ["a"]},
        "queued",
        None,
        None,
        None,
    ),
    ("k", "key1", {"prompt": "keyed", "task_id": "k"}, "queued", None, None, None),
    ("r", None, {"prompt": "running", "task_id": "r"}, "running", "w0", "tok", FAR),
]


async def _write_version_2_queue(url: str) -> None:
    """Create, at ``url``, a queue exactly as schema version 2 left it, holding four tasks."""
    journal = await open_journal(url)
    assert isinstance(journal, PlanJournal)
    d = journal.dialect

    def plan() -> Plan:
        for statement in _version_2_tables(d):
            yield Query(d.sql(statement))
        for task_id, key, spec, status, owner, token, expires in _V2_ROWS:
            yield Query(
                d.sql(
                    "INSERT INTO {p}audit_tasks (task_id, idempotency_key, digest, spec, "
                    "priority, status, not_before, owner, lease_token, lease_expires, "
                    "attempts, round, audit_rounds, detail, submitted_at, updated_at) "
                    "VALUES (?, ?, 'old-digest', ?, 0, ?, 0, ?, ?, ?, 1, 0, 0, '', 1, 1)"
                ),
                (
                    d.bind_name(task_id),
                    None if key is None else d.bind_name(key),
                    json.dumps(spec),
                    status,
                    owner,
                    token,
                    expires,
                ),
            )
        yield Query(
            d.sql("INSERT INTO {p}audit_deps (task_id, depends_on) VALUES (?, ?)"),
            (d.bind_name("b"), d.bind_name("a")),
        )

    try:
        await journal.run_plan(plan)
    finally:
        await journal.close()


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
async def any_sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A fresh store URL on SQLite, PostgreSQL or MariaDB."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/old.db"
    else:
        async with server_store(request.param) as (url, _prefix):
            yield url


async def test_a_version_2_queue_is_migrated_into_the_default_app(any_sql_url: str) -> None:
    """A queue written before apps opens at the new version: every task, lease, key, dependency and order is kept, in the default app."""
    await _write_version_2_queue(any_sql_url)
    async with await open_queue(any_sql_url) as queue:
        assert queue.app == DEFAULT_APP
        before = await queue.tasks()
        assert [t.task_id for t in before] == ["a", "b", "k", "r"]
        assert [t.seq for t in before] == sorted(t.seq for t in before)
        assert (await queue.get("b")).spec.depends_on == ("a",)
        assert await queue.dependents("a") == ["b"]
        assert await queue.heartbeat("r", "tok", 30)  # the running lease carried over
        with pytest.raises(TaskSpecError, match="key1"):  # the key is still taken
            await queue.submit(TaskSpec(prompt="another body", idempotency_key="key1"))
        claim = await queue.claim("w", 30)
        assert claim is not None and claim.task_id == "a"  # "b" still waits for "a"
        await queue.submit(TaskSpec(prompt="new", task_id="n"))
        new = await queue.get("n")
        assert new.seq > max(t.seq for t in before)  # numbering goes on after the copies
        d = queue.dialect

        def version() -> Plan:
            rows = yield Query(d.sql("SELECT version FROM {p}audit_schema"), fetch=True)
            return [int(r[0]) for r in rows]

        assert await queue.journal.run_plan(version, write=False) == [QUEUE_SCHEMA_VERSION]
    async with await open_queue(any_sql_url, app="other") as other:
        assert await other.tasks() == []
        await other.submit(TaskSpec(prompt="other's a", task_id="a"))
        assert [t.task_id for t in await other.tasks()] == ["a"]
    async with await open_queue(any_sql_url) as again:  # opened again: nothing re-migrated
        assert [t.task_id for t in await again.tasks()] == ["a", "b", "k", "r", "n"]


async def test_a_mysql_migration_killed_after_its_table_swap_completes_on_the_next_open() -> None:
    """On MariaDB, whose DDL commits statement by statement, a rebuild that died between the table swap and dropping the old tables is finished by the next open, every task kept."""
    async with server_store("mysql") as (url, _prefix):
        await _write_version_2_queue(url)
        journal = await open_journal(url)
        assert isinstance(journal, PlanJournal)
        d = journal.dialect
        statements = _version_3_rebuild(d)
        swap = next(i for i, s in enumerate(statements) if s.startswith("RENAME TABLE"))

        def died_after_the_swap() -> Plan:
            for statement in statements[: swap + 1]:
                yield Query(d.sql(statement))

        try:
            await journal.run_plan(died_after_the_swap)
        finally:
            await journal.close()
        async with await open_queue(url) as queue:
            assert [t.task_id for t in await queue.tasks()] == ["a", "b", "k", "r"]
            assert await queue.dependents("a") == ["b"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "COLUMNS": "300",
    }
    return subprocess.run(
        [sys.executable, "-m", "steadyloop", "audit", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def _statuses(out: str) -> dict[str, str]:
    rows: Iterator[dict[str, Any]] = (json.loads(line) for line in out.splitlines() if line)
    return {r["task_id"]: r["status"] for r in rows}


async def test_a_worker_of_another_app_never_touches_the_default_apps_tasks(
    queue_url: str, tmp_path: Path
) -> None:
    """Through the CLI, ``audit work --app other`` works only other's tasks (one with the same id as a default-app task) and writes no trail of the default app's."""

    async def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(_cli, *args)

    s = ("-s", queue_url)
    assert (await cli("submit", *s, "-p", "Say done", "--id", "a1")).returncode == 0
    for tid in ("a1", "o2"):
        r = await cli("submit", *s, "--app", "other", "-p", "Say done", "--id", tid)
        assert r.returncode == 0, r.stderr
    r = await cli(
        "work", *s, "--app", "other", "-a", "audit_cli_agent:agent", "-n", "2",
        "--scratch", str(tmp_path / "scratch"),
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    r = await cli("status", *s, "--app", "other", "--json")
    assert _statuses(r.stdout) == {"a1": "completed", "o2": "completed"}
    r = await cli("status", *s, "--json")
    assert _statuses(r.stdout) == {"a1": "queued"}
    r = await cli("show", "o2", *s)  # the default app has no o2
    assert r.returncode == 1 and "no task 'o2' in app 'audit'" in r.stdout + r.stderr
    r = await cli("cancel", "o2", *s)
    assert r.returncode == 2 and "no task 'o2' in app 'audit'" in r.stderr
    assert (await cli("show", "a1", *s, "--app", "other")).returncode == 0
    async with await TaskBoard.open(queue_url, create=False) as board:
        assert [rec.kind for rec in await board.trail("a1")] == ["task.submitted"]
        assert (await board.get("a1")).status is TaskStatus.QUEUED
        assert (await board.get("a1")).attempts == 0
    async with await TaskBoard.open(queue_url, app="other", create=False) as board:
        kinds = [rec.kind for rec in await board.trail("a1")]
        assert kinds[0] == "task.submitted" and kinds[-1] == "task.completed"
    # A worker of the default app then finds its task untouched, and works it.
    r = await cli("work", *s, "-a", "audit_cli_agent:agent", "--scratch", str(tmp_path / "s2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert _statuses((await cli("status", *s, "--json")).stdout) == {"a1": "completed"}


async def test_a_board_refuses_a_queue_of_another_app(tmp_path: Path) -> None:
    """A board whose app is not its queue's is refused, naming both apps; by default it takes the queue's."""
    url = f"sqlite:///{tmp_path}/q.db"
    async with await open_queue(url, app="other") as queue:
        with pytest.raises(TaskSpecError, match=r"'mine'.*'other'"):
            TaskBoard(queue, app="mine")
        assert TaskBoard(queue).app == "other"
        assert TaskBoard(queue, queue.journal).journal is queue.journal


async def test_a_board_refuses_trails_in_another_journal(tmp_path: Path) -> None:
    """A board is refused a journal other than its queue's (one task change is one transaction), even one on the same URL."""
    url = f"sqlite:///{tmp_path}/q.db"
    async with await open_queue(url) as queue, await open_journal(url) as journal:
        with pytest.raises(TaskSpecError, match="one transaction") as info:
            TaskBoard(queue, journal)
        assert info.value.field == "journal"
