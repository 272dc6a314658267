"""``journal prune`` and ``journal erase``: what goes, what must stay, and what is left on disk."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from loop_helpers import APP, counting_agent
from test_copy_resume import Crash, CrashAt
from typer.testing import CliRunner

from backends import ALL_BACKENDS, CONNECT_TIMEOUT, server_store, store_url
from steadyloop import _names
from steadyloop.cli import app
from steadyloop.cli._journal import diagnose, parse_cutoff
from steadyloop.journal import (
    AppendResult,
    ForwardingJournal,
    Journal,
    StreamWrite,
    journal_digests,
    open_journal,
)
from steadyloop.journal._protocol import PreparedBatch
from steadyloop.loop import StopReason, erase_user, load_run, prune_runs, resume, run
from steadyloop.loop._retention import APP_COPY
from steadyloop.records import RecordFactory, SequentialIds, StepClock
from steadyloop.sessions import SessionService, app_stream
from steadyloop.sessions._streams import KIND_STATE_SNAPSHOT, STATE_SNAPSHOT_EVERY

runner = CliRunner()

OLD = 1_700_000_000_000_000  # 2023-11
NEW = 1_900_000_000_000_000  # 2030-03
CUTOFF = "2026-01-01"


def records(start: int, tag: str) -> RecordFactory:
    """Records stamped from ``start`` on, with ids of their own."""
    return RecordFactory(StepClock(start=start), SequentialIds(tag))


async def populate(journal: Journal, sink: Path) -> None:
    """Old finished runs, an old interrupted one, an old one a task names, a new one."""
    for run_id, user in (("old-1", "ada"), ("old-2", "bob"), ("old-task", "ada")):
        result = await run(
            counting_agent(2, str(sink)),
            journal,
            APP,
            user,
            f"s-{run_id}",
            run_id,
            "go",
            records=records(OLD, run_id),
        )
        assert result.stop_reason is StopReason.COMPLETED
    with pytest.raises(Crash):
        await run(
            counting_agent(4, str(sink)),
            CrashAt(journal, "result"),
            APP,
            "ada",
            "s-open",
            "old-open",
            "go",
            records=records(OLD, "old-open"),
        )
    await run(
        counting_agent(1, str(sink)),
        journal,
        APP,
        "ada",
        "s-new",
        "new-1",
        "go",
        records=records(NEW, "new-1"),
    )
    make = records(OLD, "task")
    await journal.append(
        "audit", StreamWrite(_names.task_stream("t1"), [make("task.round", {"run_id": "old-task"})])
    )


def run_streams(ids: list[str]) -> set[str]:
    """The stream names of these runs."""
    return {_names.run_stream(i) for i in ids}


async def present(journal: Journal) -> set[str]:
    """The run streams of the app."""
    return {s for s in await journal.streams(APP) if s.startswith('["run"')}


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_prune_removes_only_old_finished_runs(backend: str, tmp_path: Path) -> None:
    """Old finished runs go; open, open-intent, task-named and new runs stay; doctor is clean."""
    async with store_url(backend, tmp_path) as url, await open_journal(url) as journal:
        await populate(journal, tmp_path / "sink")
        sessions_before = await journal_digests(journal)
        dry = await prune_runs(journal, parse_cutoff(CUTOFF), dry_run=True)
        assert {r.stream for r in dry.removed} == run_streams(["old-1", "old-2"])
        assert await present(journal) == run_streams(
            ["old-1", "old-2", "old-task", "old-open", "new-1"]
        )
        report = await prune_runs(journal, parse_cutoff(CUTOFF))
        assert {r.stream for r in report.removed} == run_streams(["old-1", "old-2"])
        assert any("old-open: not finished" in k for k in report.kept)
        assert any("old-task: an audit task" in k for k in report.kept)
        assert await present(journal) == run_streams(["old-task", "old-open", "new-1"])
        after = await journal_digests(journal)
        for stream, digest in after[APP]["streams"].items():  # type: ignore[union-attr]
            assert sessions_before[APP]["streams"][stream] == digest  # type: ignore[index]
        assert [f for f in await diagnose(journal) if f.severity == "error"] == []
        assert (await load_run(journal, APP, "old-open")).state.ended is None
        again = await prune_runs(journal, parse_cutoff(CUTOFF))
        assert again.removed == []


async def test_pruned_sqlite_file_shrinks_and_a_kept_run_still_resumes(tmp_path: Path) -> None:
    """VACUUM gives the pruned runs' pages back, and the interrupted run resumes after the prune."""
    url = f"sqlite://{tmp_path}/j.db"
    sink = tmp_path / "sink"
    async with await open_journal(url) as journal:
        await populate(journal, sink)
        for i in range(30):
            await run(
                counting_agent(3, str(sink)),
                journal,
                APP,
                "ada",
                f"s{i}",
                f"bulk-{i}",
                "go" * 500,
                records=records(OLD, f"bulk-{i}"),
            )
    size = os.path.getsize(tmp_path / "j.db")
    result = await asyncio.to_thread(
        runner.invoke, app, ["journal", "prune", url, "--before", CUTOFF], terminal_width=300
    )
    assert result.exit_code == 0, result.output
    assert "32 stream(s)" in result.output and "VACUUM" in result.output
    assert os.path.getsize(tmp_path / "j.db") < size
    wal = tmp_path / "j.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    doctor = await asyncio.to_thread(
        runner.invoke, app, ["journal", "doctor", url], terminal_width=300
    )
    assert "0 error(s)" in doctor.output and doctor.exit_code == 0
    async with await open_journal(url) as journal:
        done = await resume(counting_agent(4, str(sink)), journal, APP, "old-open", takeover=True)
        assert (
            done.stop_reason is StopReason.RESUME_STATE_UNKNOWN
        )  # its third send may have happened


def test_prune_cli_bad_cutoff_and_dry_run(tmp_path: Path) -> None:
    """A cutoff that is no date exits 2 naming it; --dry-run lists and deletes nothing."""
    url = f"sqlite://{tmp_path}/j.db"

    async def fill() -> None:
        async with await open_journal(url) as journal:
            await populate(journal, tmp_path / "sink")

    asyncio.run(fill())
    bad = runner.invoke(app, ["journal", "prune", url, "--before", "last tuesday"])
    assert bad.exit_code == 2 and "last tuesday" in bad.output
    dry = runner.invoke(app, ["journal", "prune", url, "--before", CUTOFF, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    assert '"dry_run":true' in dry.output and '"records":' in dry.output
    shown = runner.invoke(app, ["journal", "show", url, "--json"])
    assert '"old-1"' in shown.output


@pytest.mark.chaos(smoke=["sqlite"])
@pytest.mark.parametrize("backend", ["sqlite", "postgres", "jsonl", "redis"])
async def test_sigkill_during_prune_then_rerun(backend: str, tmp_path: Path) -> None:
    """A prune killed after its first deletion is finished by a rerun; kept streams are untouched."""
    async with store_url(backend, tmp_path) as url:
        async with await open_journal(url) as journal:
            await populate(journal, tmp_path / "sink")
            before = await journal_digests(journal)
        child = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).with_name("retention_kill_child.py")),
                url,
                str(parse_cutoff(CUTOFF)),
                "1",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr
        async with await open_journal(url) as journal:
            assert len(await present(journal)) == 4
        rerun = await asyncio.to_thread(
            runner.invoke, app, ["journal", "prune", url, "--before", CUTOFF, "--json"]
        )
        assert rerun.exit_code == 0, rerun.output
        async with await open_journal(url) as journal:
            assert await present(journal) == run_streams(["old-task", "old-open", "new-1"])
            after = await journal_digests(journal)
            assert [f for f in await diagnose(journal) if f.severity == "error"] == []
        for ns, content in after.items():
            for stream, digest in content["streams"].items():  # type: ignore[union-attr]
                assert before[ns]["streams"][stream] == digest  # type: ignore[index]


async def raw_bytes(backend: str, url: str, prefix: str, path: Path) -> bytes:
    """Everything the backend stores, as raw as it can be read."""
    if backend == "sqlite":
        return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    if backend == "jsonl":
        return b"".join(p.read_bytes() for p in path.iterdir() if p.is_file())
    if backend == "postgres":
        import psycopg

        async with await psycopg.AsyncConnection.connect(url.split("?", maxsplit=1)[0]) as conn:
            out = b""
            for table in ("records", "streams", "keys"):
                cur = await conn.execute(f"SELECT * FROM {prefix}{table}")
                out += repr(await cur.fetchall()).encode()
            return out
    if backend == "mysql":
        from backends import _mysql_connect

        conn = await _mysql_connect(url.split("?", maxsplit=1)[0])
        try:
            out = b""
            async with conn.cursor() as cur:  # type: ignore[attr-defined]
                for table in ("records", "streams", "keys"):
                    await cur.execute(f"SELECT * FROM `{prefix}{table}`")
                    out += repr(await cur.fetchall()).encode()
            return out
        finally:
            conn.close()  # type: ignore[attr-defined]
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(
        url.split("?", maxsplit=1)[0], socket_connect_timeout=CONNECT_TIMEOUT
    )
    try:
        out = b""
        async for key in client.scan_iter(match=prefix + "*"):
            out += key
            kind = (await client.type(key)).decode()
            if kind == "list":
                out += b"".join(await client.lrange(key, 0, -1))
            elif kind == "hash":
                out += repr(await client.hgetall(key)).encode()
            elif kind == "set":
                out += b"".join(await client.smembers(key))
            elif kind == "string":
                out += await client.get(key) or b""
        return out
    finally:
        await client.aclose()


async def _app_changes(service: SessionService, user: str, value: str) -> dict[str, object]:
    """Bob's sessions make 99 ``app:`` changes, then the user one, which a state snapshot covers.

    Returns the app state afterwards. The user's change is the record a state snapshot's
    seal names, so clearing it must rebuild that snapshot.
    """
    bob = await service.create_session("bob", "app-writer")
    for k in range(STATE_SNAPSHOT_EVERY - 1 - await service.journal.head(APP, app_stream())):
        bob = await service.append_event(
            bob, service.new_event("bob", state_delta={f"app:bob{k % 3}": k})
        )
    s = await service.create_session(user, "app-changer")
    await service.append_event(s, service.new_event("user", state_delta={"app:last": value}))
    records = await service.journal.read(APP, app_stream())
    assert records[-1].kind == KIND_STATE_SNAPSHOT and records[-2].payload["user_id"] == user
    return (await service.get_session("bob", "app-writer")).scope_state("app")


@pytest.mark.parametrize("backend", ["sqlite", "jsonl", "postgres", "mysql", "redis"])
async def test_erase_leaves_no_planted_value_in_raw_storage(backend: str, tmp_path: Path) -> None:
    """After erasing a user, none of the values planted for them is in the raw storage; others' are."""
    mine = f"PLANTED{uuid.uuid4().hex}"
    theirs = f"KEPT{uuid.uuid4().hex}"
    user = f"erin{uuid.uuid4().hex[:6]}"
    sink = tmp_path / "sink"
    if backend == "sqlite":
        path = tmp_path / "e.db"
        ctx = None
        url, prefix = f"sqlite://{path}", ""
    elif backend == "jsonl":
        path = tmp_path / "jsonl"
        path.mkdir()
        ctx = None
        url, prefix = f"jsonl://{path}", ""
    else:
        path = tmp_path
        ctx = server_store(backend)
        url, prefix = await ctx.__aenter__()
    try:
        async with await open_journal(url) as journal:
            service = SessionService(journal, APP)
            session = await service.create_session(
                user, "profile", state={"user:secret": f"{mine}-state", "note": f"{mine}-session"}
            )
            await service.store_memory(session)
            await run(
                counting_agent(2, str(sink)),
                journal,
                APP,
                user,
                "chat",
                "erin-run",
                f"{mine}-input",
            )
            chat = await service.get_session(user, "chat")
            await service.store_memory(chat)
            await service.create_session("bob", "b1", state={"user:secret": theirs})
            app_value = f"APPVALUE{uuid.uuid4().hex}"  # the app's: it stays, unnamed
            app_before = await _app_changes(service, user, app_value)
            await run(counting_agent(1, str(sink)), journal, APP, "bob", "b1", "bob-run", theirs)
            assert mine.encode() in await raw_bytes(backend, url, prefix, path)
            report = await erase_user(journal, user)
            whats = {r.why for r in report.removed}
            assert {"session profile", "session chat", "user state", "run erin-run"} <= whats
            assert [f for f in await diagnose(journal) if f.severity == "error"] == []
            assert (await load_run(journal, APP, "bob-run")).state.ended is not None
            assert (await service.get_session("bob", "b1")).state["user:secret"] == theirs
            assert any("app: change(s)" in line for line in report.cleared)
            bob = await service.get_session("bob", "b1")
            assert bob.scope_state("app") == app_before  # the app's state is untouched
            assert await journal.head(APP, APP_COPY) == 0
        raw = await raw_bytes(backend, url, prefix, path)
        assert mine.encode() not in raw
        assert user.encode() not in raw
        assert theirs.encode() in raw
        assert app_value.encode() in raw
    finally:
        if ctx is not None:
            await ctx.__aexit__(None, None, None)


def test_erase_cli_reports_and_refuses_a_bad_user_id(tmp_path: Path) -> None:
    """A dry-run erase lists the user's streams and keeps them; a bad id exits 2; then they go."""
    url = f"sqlite://{tmp_path}/j.db"

    async def fill() -> None:
        async with await open_journal(url) as journal:
            await populate(journal, tmp_path / "sink")

    asyncio.run(fill())
    bad = runner.invoke(app, ["journal", "erase", url, "--user", ""])
    assert bad.exit_code == 2 and "--user" in bad.output
    dry = runner.invoke(app, ["journal", "erase", url, "--user", "bob", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    assert '"why":"run old-2"' in dry.output and '"dry_run":true' in dry.output
    done = runner.invoke(app, ["journal", "erase", url, "--user", "bob"], terminal_width=300)
    assert done.exit_code == 0, done.output
    assert "VACUUM" in done.output
    shown = runner.invoke(app, ["journal", "show", url, "--json"])
    assert '"bob"' not in shown.output and '"ada"' in shown.output


class DieOnWrite(ForwardingJournal):
    """Dies at the k-th append or deletion that touches the app stream or its copy."""

    def __init__(self, inner: Journal, k: int) -> None:
        super().__init__(inner)
        self.k, self.seen = k, 0

    def _tick(self, streams: list[str]) -> None:
        if any(s in (app_stream(), APP_COPY) for s in streams):
            self.seen += 1
            if self.seen == self.k:
                raise Crash

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        self._tick([w.stream for w in batch.writes])
        return await super()._append(batch)

    async def _delete_stream(self, namespace: str, stream: str) -> None:
        self._tick([stream])
        await super()._delete_stream(namespace, stream)


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
async def test_an_erasure_killed_while_it_clears_the_app_stream_is_finished_by_a_rerun(
    backend: str, k: int, tmp_path: Path
) -> None:
    """Killed before each write of the app stream's swap, a rerun clears it, losing nothing."""
    ctx = None
    if backend == "memory":
        url = "memory://"
    elif backend == "sqlite":
        url = f"sqlite://{tmp_path}/k.db"
    else:
        ctx = server_store(backend)
        url, _ = await ctx.__aenter__()
    try:
        async with await open_journal(url) as journal:
            service = SessionService(journal, APP)
            await service.create_session("bob", "b0", state={"app:first": 1})
            before = await _app_changes(service, "erin", "erin's value")
            old = await journal.read(APP, app_stream())
            with pytest.raises(Crash):
                await erase_user(DieOnWrite(journal, k), "erin")
            report = await erase_user(journal, "erin")
            assert report.kept == []
            now = await journal.read(APP, app_stream())
            assert [r.record.id for r in now] == [
                r.record.id for r in old
            ]  # none lost, none doubled
            assert all(r.payload.get("user_id") != "erin" for r in now)
            assert [r.payload.get("user_id") for r in now].count("bob") == sum(
                r.payload.get("user_id") == "bob" for r in old
            )
            assert (await service.get_session("bob", "b0")).scope_state("app") == before
            assert await journal.head(APP, APP_COPY) == 0
            assert [f for f in await diagnose(journal) if f.severity == "error"] == []
    finally:
        if ctx is not None:
            await ctx.__aexit__(None, None, None)
