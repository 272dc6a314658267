"""Group commit: appends queued together share one commit, each settled on its own.

On SQLite the appends queued behind each other on the connection's thread share one
transaction (one ``COMMIT``, one WAL sync); on JSONL the appends queued for one
namespace file share one ``write`` and one ``fsync``. Each caller still gets its own
result or its own error, and only once its batch is durable.

To make a group deterministic, a test holds the writer (SQLite: a call that blocks the
connection's thread; JSONL: the namespace's lock) while the appends queue up behind it.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from steadyloop import (
    BackendUnavailable,
    ConflictError,
    CorruptionError,
    IdempotencyKeyReused,
)
from steadyloop.journal import (
    AppendResult,
    Files,
    Journal,
    JSONLJournal,
    SQLiteJournal,
    StreamWrite,
)
from steadyloop.records import Record
from steadyloop.replay import bundled_cases, load_cases, replay

NS = "app"
CHILD = Path(__file__).with_name("group_commit_child.py")


def rec(i: int, tag: str = "x") -> Record:
    return Record(kind="test.item", payload={"i": i, "tag": tag}, id=f"{tag}-{i}", time=1)


def write(
    stream: str, i: int = 0, *, expected_next: int | None = None, tag: str = "x"
) -> StreamWrite:
    return StreamWrite(stream, [rec(i, tag)], expected_next=expected_next)


class CountingFiles(Files):
    """Counts ``fsync`` calls of file contents; can make the next one fail."""

    def __init__(self) -> None:
        self.syncs = 0
        self.fail_next_sync = False

    def sync(self, fd: int) -> None:
        """Count (or fail) one sync."""
        if self.fail_next_sync:
            self.fail_next_sync = False
            raise OSError(5, "Input/output error (injected)")
        self.syncs += 1
        super().sync(fd)


@dataclass
class Harness:
    """One durable journal, a way to hold its writer, and its commit count."""

    journal: Journal
    reopen: Callable[[], Awaitable[Journal]]
    hold: Callable[[], Any]
    commits: Callable[[], int]
    statements: list[str] = field(default_factory=list)


async def sqlite_harness(tmp_path: Path) -> Harness:
    path = tmp_path / "group.db"
    journal = await SQLiteJournal.open(path)
    statements: list[str] = []
    assert journal._conn is not None
    journal._conn.set_trace_callback(statements.append)

    @asynccontextmanager
    async def hold() -> AsyncIterator[None]:
        gate = threading.Event()
        blocker = journal._executor.submit(gate.wait)
        try:
            yield
            await settle_queue()
        finally:
            gate.set()
            await blocker

    async def reopen() -> Journal:
        return await SQLiteJournal.open(path)

    return Harness(
        journal,
        reopen,
        hold,
        lambda: sum(1 for s in statements if s == "COMMIT"),
        statements,
    )


async def jsonl_harness(tmp_path: Path) -> Harness:
    files = CountingFiles()
    journal = await JSONLJournal.open(tmp_path / "group", files=files)
    await journal.append(NS, write("warm-up"))  # the file, its header and lock exist
    files.syncs = 0

    @asynccontextmanager
    async def hold() -> AsyncIterator[None]:
        async with journal._mutex_for(NS):
            yield
            await settle_queue()

    async def reopen() -> Journal:
        return await JSONLJournal.open(tmp_path / "group")

    harness = Harness(journal, reopen, hold, lambda: files.syncs)
    harness.files = files  # type: ignore[attr-defined]
    return harness


HARNESSES = {"sqlite": sqlite_harness, "jsonl": jsonl_harness}


@pytest.fixture(params=sorted(HARNESSES))
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    built = await HARNESSES[request.param](tmp_path)
    try:
        yield built
    finally:
        await built.journal.close()


async def settle_queue() -> None:
    """Let every task created so far run up to its first real wait (its queued append)."""
    for _ in range(3):
        await asyncio.sleep(0)


async def grouped(h: Harness, *calls: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Start ``calls`` while the writer is held, so they queue as one group; their outcomes."""
    async with h.hold():
        tasks = [asyncio.ensure_future(c()) for c in calls]
    return list(await asyncio.gather(*tasks, return_exceptions=True))


async def stored(h: Harness, stream: str) -> list[dict[str, Any]]:
    """What a freshly opened journal reads back from ``stream``."""
    again = await h.reopen()
    try:
        return [dict(r.record.payload) for r in await again.read(NS, stream)]
    finally:
        await again.close()


async def test_queued_appends_share_one_commit_and_each_gets_its_own_result(h: Harness) -> None:
    """Twenty appends queued together are made durable by one commit, each with its positions."""
    before = h.commits()
    outcomes = await grouped(
        h, *(lambda i=i: h.journal.append(NS, write(f"s{i}", i)) for i in range(20))
    )
    assert h.commits() - before == 1
    for i, outcome in enumerate(outcomes):
        assert isinstance(outcome, AppendResult), outcome
        assert outcome.positions == {f"s{i}": (1, 1)} and not outcome.duplicate
        assert await stored(h, f"s{i}") == [{"i": i, "tag": "x"}]


@pytest.fixture
def h(harness: Harness) -> Harness:
    return harness


async def test_an_append_alone_commits_alone(h: Harness) -> None:
    """Appends one after another commit one each, and SQLite sets no savepoint for them."""
    before = h.commits()
    for i in range(5):
        result = await h.journal.append(NS, write("solo", i))
        assert result.positions == {"solo": (i + 1, i + 1)}
    assert h.commits() - before == 5
    assert not [s for s in h.statements if "SAVEPOINT" in s]


async def test_batches_of_one_group_see_each_other_in_queue_order(h: Harness) -> None:
    """Within a group each batch is checked after the ones queued before it, on the same stream."""
    outcomes = await grouped(
        h,
        lambda: h.journal.append(NS, write("shared", 1, expected_next=1)),
        lambda: h.journal.append(NS, write("shared", 2, expected_next=2)),
        lambda: h.journal.append(NS, write("shared", 3)),
    )
    assert [o.positions for o in outcomes] == [{"shared": (k, k)} for k in (1, 2, 3)]
    assert [p["i"] for p in await stored(h, "shared")] == [1, 2, 3]


async def test_a_conflicting_batch_fails_alone_and_the_rest_are_durable(h: Harness) -> None:
    """One batch with a wrong expected_next fails with ConflictError; the others commit."""
    before = h.commits()
    outcomes = await grouped(
        h,
        lambda: h.journal.append(NS, write("a", 1)),
        lambda: h.journal.append(NS, write("b", 2, expected_next=7)),
        lambda: h.journal.append(NS, write("c", 3)),
        lambda: h.journal.append(NS, [write("d", 4), write("a", 5, expected_next=3)]),
        lambda: h.journal.append(NS, write("e", 6)),
    )
    assert isinstance(outcomes[1], ConflictError)
    assert isinstance(outcomes[3], ConflictError)  # a multi-stream batch is all or nothing
    assert [o.positions for o in (outcomes[0], outcomes[2], outcomes[4])] == [
        {"a": (1, 1)},
        {"c": (1, 1)},
        {"e": (1, 1)},
    ]
    assert h.commits() - before == 1
    assert await stored(h, "a") == [{"i": 1, "tag": "x"}]
    assert await stored(h, "b") == [] and await stored(h, "d") == []
    assert await stored(h, "c") == [{"i": 3, "tag": "x"}]
    assert await stored(h, "e") == [{"i": 6, "tag": "x"}]


async def test_one_idempotency_key_twice_in_a_group_is_written_once(h: Harness) -> None:
    """The second batch with a key the group already wrote is its duplicate; a changed one is refused."""
    outcomes = await grouped(
        h,
        lambda: h.journal.append(NS, write("k", 1), idempotency_key="key-1"),
        lambda: h.journal.append(NS, write("other", 2)),
        lambda: h.journal.append(NS, write("k", 1), idempotency_key="key-1"),
        lambda: h.journal.append(NS, write("k", 99), idempotency_key="key-1"),
    )
    first, other, again, changed = outcomes
    assert first.positions == {"k": (1, 1)} and not first.duplicate
    assert other.positions == {"other": (1, 1)}
    assert again.duplicate and again.positions == first.positions
    assert isinstance(changed, IdempotencyKeyReused)
    assert await stored(h, "k") == [{"i": 1, "tag": "x"}]
    later = await h.journal.append(NS, write("k", 1), idempotency_key="key-1")
    assert later.duplicate and later.positions == first.positions


async def test_a_read_queued_between_appends_keeps_its_place(h: Harness) -> None:
    """A read queued after one append and before another sees the first and not the second."""
    outcomes = await grouped(
        h,
        lambda: h.journal.append(NS, write("order", 1)),
        lambda: h.journal.head(NS, "order"),
        lambda: h.journal.append(NS, write("order", 2)),
    )
    assert outcomes[1] == 1
    assert await h.journal.head(NS, "order") == 2


async def test_a_caller_that_awaited_its_append_reads_it(h: Harness) -> None:
    """Under concurrent appends, every caller reads its own batch right after its append returns."""

    async def append_then_read(i: int) -> None:
        for k in range(5):
            await h.journal.append(NS, write(f"own{i}", k))
            assert await h.journal.head(NS, f"own{i}") == k + 1

    await asyncio.gather(*(append_then_read(i) for i in range(12)))


async def test_a_cancelled_queued_append_is_not_written(h: Harness) -> None:
    """An append cancelled while still queued writes nothing; the rest of its group commits."""
    async with h.hold():
        tasks = [asyncio.ensure_future(h.journal.append(NS, write(f"q{i}", i))) for i in range(3)]
        await settle_queue()
        tasks[1].cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(outcomes[1], asyncio.CancelledError)
    assert await stored(h, "q1") == []
    assert await stored(h, "q0") == [{"i": 0, "tag": "x"}]
    assert await stored(h, "q2") == [{"i": 2, "tag": "x"}]


async def test_sqlite_a_damaged_stream_fails_its_batch_alone(tmp_path: Path) -> None:
    """A batch hitting a record stored beyond its head raises CorruptionError; its group commits."""
    h = await sqlite_harness(tmp_path)
    try:
        await h.journal.append(NS, write("hurt", 0))
        raw = sqlite3.connect(tmp_path / "group.db")
        raw.execute(
            "INSERT INTO steadyloop_records VALUES (?, ?, 2, ?)", (NS, "hurt", rec(9).to_json())
        )
        raw.commit()
        raw.close()
        outcomes = await grouped(
            h,
            lambda: h.journal.append(NS, write("fine1", 1)),
            lambda: h.journal.append(NS, write("hurt", 2)),
            lambda: h.journal.append(NS, write("fine2", 3)),
        )
        assert isinstance(outcomes[1], CorruptionError)
        assert "beyond its head" in str(outcomes[1])
        assert outcomes[0].positions == {"fine1": (1, 1)}
        assert outcomes[2].positions == {"fine2": (1, 1)}
        assert await stored(h, "fine1") == [{"i": 1, "tag": "x"}]
        assert await stored(h, "fine2") == [{"i": 3, "tag": "x"}]
    finally:
        await h.journal.close()


async def test_sqlite_a_failed_commit_fails_every_batch_of_the_group(tmp_path: Path) -> None:
    """When the group's COMMIT fails, no caller is told its batch is durable, and none is stored."""
    h = await sqlite_harness(tmp_path)
    conn = h.journal._conn  # type: ignore[attr-defined]
    assert conn is not None

    def refuse_commit(action: int, arg1: Any, *_: Any) -> int:
        if action == sqlite3.SQLITE_TRANSACTION and arg1 == "COMMIT":
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    try:
        async with h.hold():
            conn.set_authorizer(refuse_commit)
            tasks = [
                asyncio.ensure_future(h.journal.append(NS, write(f"f{i}", i))) for i in range(4)
            ]
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(o, BackendUnavailable) for o in outcomes), outcomes
        assert all("commit failed" in str(o) for o in outcomes)
        conn.set_authorizer(None)
        for i in range(4):
            assert await stored(h, f"f{i}") == []
        # The connection is usable again: nothing of the group stayed open.
        assert (await h.journal.append(NS, write("f0", 5))).positions == {"f0": (1, 1)}
    finally:
        conn.set_authorizer(None)
        await h.journal.close()


async def test_jsonl_a_failed_sync_fails_every_batch_of_the_group(tmp_path: Path) -> None:
    """When the group's fsync fails, every caller gets BackendUnavailable and nothing stays in the file."""
    h = await jsonl_harness(tmp_path)
    files: CountingFiles = h.files  # type: ignore[attr-defined]
    try:
        files.fail_next_sync = True
        outcomes = await grouped(
            h, *(lambda i=i: h.journal.append(NS, write(f"f{i}", i)) for i in range(4))
        )
        assert all(isinstance(o, BackendUnavailable) for o in outcomes), outcomes
        for i in range(4):
            assert await stored(h, f"f{i}") == []
        assert (await h.journal.append(NS, write("f0", 5))).positions == {"f0": (1, 1)}
        assert await stored(h, "f0") == [{"i": 5, "tag": "x"}]
    finally:
        await h.journal.close()


async def test_jsonl_each_batch_of_a_group_keeps_its_own_check(tmp_path: Path) -> None:
    """A group written with one write still holds one checked batch per append, in order."""
    h = await jsonl_harness(tmp_path)
    try:
        await grouped(
            h,
            *(
                lambda i=i: h.journal.append(NS, [write(f"m{i}", i), write("z", i)])
                for i in range(5)
            ),
        )
        assert isinstance(h.journal, JSONLJournal)
        path = h.journal.namespace_path(NS)
    finally:
        await h.journal.close()
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()[1:]]
    assert [o["batch"] for o in lines] == [1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]
    assert sum(1 for o in lines if "check" in o) == 6
    assert [o["seq"] for o in lines if o.get("stream") == "z"] == [1, 2, 3, 4, 5]
    assert [p["i"] for p in await stored(h, "z")] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("backend", ["sqlite", "jsonl"])
def test_acknowledged_appends_survive_sigkill(backend: str, tmp_path: Path) -> None:
    """After SIGKILL of a process with 16 concurrent appenders, every acknowledged append is stored."""
    url = f"sqlite:///{tmp_path / 'kill.db'}" if backend == "sqlite" else f"jsonl://{tmp_path}/kill"
    child = subprocess.Popen(
        [sys.executable, str(CHILD), url, "16"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    acked: list[tuple[str, int]] = []
    deadline = time.monotonic() + 30
    while len(acked) < 400 and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        stream, seq = line.split()
        acked.append((stream, int(seq)))
    os.kill(child.pid, signal.SIGKILL)
    rest, errors = child.communicate()
    acked.extend((stream, int(seq)) for stream, seq in (line.split() for line in rest.splitlines()))
    assert child.returncode == -signal.SIGKILL, errors
    assert len(acked) >= 400, "the child acknowledged too few appends before the deadline"

    async def check() -> None:
        from steadyloop.journal import open_journal

        async with await open_journal(url) as journal:
            for stream, seq in acked:
                got = await journal.read(NS, stream, start=seq, limit=1)
                assert got and got[0].record.payload == {"i": seq, "tag": stream}, (stream, seq)

    asyncio.run(check())


async def test_sqlite_a_group_that_sqlite_rolled_back_is_rerun_one_by_one(tmp_path: Path) -> None:
    """If an error makes SQLite roll back the group's transaction, the other batches still commit."""
    h = await sqlite_harness(tmp_path)
    journal = h.journal
    assert isinstance(journal, SQLiteJournal)
    conn = journal._conn
    assert conn is not None
    real = journal._execute
    failures = 0

    def execute(query: Any) -> Any:
        nonlocal failures
        if "boom" in str(query.params):
            failures += 1
            conn.execute("ROLLBACK")  # what SQLite does itself after SQLITE_FULL or SQLITE_IOERR
            raise sqlite3.OperationalError("database or disk is full")
        return real(query)

    journal._execute = execute  # type: ignore[method-assign]
    try:
        outcomes = await grouped(
            h,
            lambda: journal.append(NS, write("r1", 1)),
            lambda: journal.append(NS, write("boom", 2)),
            lambda: journal.append(NS, write("r3", 3)),
        )
        assert isinstance(outcomes[1], BackendUnavailable)
        assert "disk is full" in str(outcomes[1])
        # Tried in the group's shared statements, then in its own plan, where it fails
        # alone; after that it is not run again.
        assert failures == 2
        assert outcomes[0].positions == {"r1": (1, 1)}
        assert outcomes[2].positions == {"r3": (1, 1)}
        assert await stored(h, "r1") == [{"i": 1, "tag": "x"}]
        assert await stored(h, "r3") == [{"i": 3, "tag": "x"}]
    finally:
        await journal.close()


async def test_jsonl_a_crash_inside_the_write_leaves_no_unread_future(tmp_path: Path) -> None:
    """A torn write (the replay harness's simulated death inside a JSONL write) leaves asyncio no future whose error was never read."""
    cases = [c for c in load_cases([bundled_cases()]) if c.case_id == "crash_mid_batch"]
    assert cases, "the bundled torn-write case"
    unread: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unread.append(context))
    try:
        report = await replay(cases, ["jsonl"], workdir=tmp_path)
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert report.counts()["unexpected"] == 0
    assert unread == []
