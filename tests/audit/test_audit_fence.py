"""A worker cut off from its store stops its verify command before its lease can expire."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from audit_helpers import APP

from steadyloop import BackendUnavailable
from steadyloop.audit import (
    GoalSpec,
    InProcessExecutor,
    TaskBoard,
    TaskSpec,
    Verifier,
    VerifySpec,
    Worker,
    WorkerEvent,
)
from steadyloop.faults import FaultProxy
from steadyloop.loop import Agent, ScriptedModel

pytestmark = pytest.mark.slow

LEASE, HEARTBEAT = 3.0, 1.0

# Each verify takes the task folder's lock (or says it found it taken), notes its pid
# as the test sees it (``$$`` is the pid inside the supervisor's PID namespace; the
# shell reads its own from /proc, which is the host's) and becomes a sleep far past
# the test, holding the lock.
VERIFY = (
    "read -r pid _ < /proc/self/stat; exec 9>>verify.lock; "
    'if flock -n 9; then echo "$pid" >> starts; exec sleep 40; '
    'else echo "$pid" >> overlaps; exit 1; fi'
)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _starts(folder: Path) -> list[int]:
    path = folder / "starts"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


async def _until(predicate: Any, seconds: float) -> None:
    """Wait until ``predicate()`` holds, or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while True:
        if predicate() or time.monotonic() >= deadline:
            return
        await asyncio.sleep(0.02)


class _Observer:
    """Samples, from outside the workers, how many verify commands are alive at once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.most = 0
        self.samples = 0

    async def watch(self) -> None:
        while True:
            live = sum(1 for pid in _starts(self.folder) if _alive(pid))
            self.most = max(self.most, live)
            self.samples += 1
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def _cut_off(kind: str, url: str) -> AsyncIterator[tuple[str, Any, Any]]:
    """The cut-off worker's store URL, and how to cut and restore its renewals.

    SQLite: its queue's renewals and claims fail (a fault injected in ``heartbeat`` and
    ``claim``, as if the store's disk were gone). PostgreSQL:
    every connection it has goes through a loopback proxy that stalls (no error, no
    reset: silence).
    """
    if kind == "sqlite":
        cut = asyncio.Event()

        def wrap(board: TaskBoard) -> None:
            for owner, name in ((board.queue, "heartbeat"), (board, "claim")):
                call = getattr(owner, name)

                async def failing(*args: Any, _call: Any = call, **kw: Any) -> Any:
                    if cut.is_set():
                        await asyncio.sleep(0.2)
                        raise BackendUnavailable("injected: the store cannot be reached")
                    return await _call(*args, **kw)

                setattr(owner, name, failing)

        yield url, (cut.set, cut.clear), wrap
        return
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    async with FaultProxy(parts.hostname, parts.port) as proxy:
        netloc = parts.netloc.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{proxy.port}")
        yield urlunsplit(parts._replace(netloc=netloc)), (proxy.stall, proxy.resume), None


async def test_a_worker_without_renewals_stops_its_verify_before_the_lease_expires(
    queue_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No renewal for longer than a lease: the verify dies before the lease ends, none overlaps another."""
    kind = "sqlite" if queue_url.startswith("sqlite") else "postgres"
    folder = tmp_path / "task"
    folder.mkdir()
    spec = TaskSpec(
        prompt="wait for the check",
        task_id="t1",
        workdir=str(folder),
        goal=GoalSpec(
            goal="the check passes",
            verify=VerifySpec(("sh", "-c", VERIFY), timeout=60),
            round_budget=3,
        ),
    )
    events: list[WorkerEvent] = []

    def agent() -> Agent:
        return Agent("idle", ScriptedModel(lambda _i, _m: "done"))

    def worker(board: TaskBoard, name: str) -> Worker:
        return Worker(
            board,
            agent(),
            worker_id=name,
            verifier=Verifier(),
            lease=LEASE,
            heartbeat=HEARTBEAT,
            poll=0.05,
            on_event=events.append,
        )

    caplog.set_level(logging.WARNING, logger="steadyloop.audit")
    observer = _Observer(folder)
    async with (
        _cut_off(kind, queue_url) as (url_a, (cut, restore), wrap),
        await TaskBoard.open(url_a, app=APP) as board_a,
        await TaskBoard.open(queue_url, app=APP) as board_b,
    ):
        if wrap is not None:
            wrap(board_a)
        await board_b.submit(spec)
        a, b = worker(board_a, "a"), worker(board_b, "b")
        watching = asyncio.ensure_future(observer.watch())
        running_a = asyncio.ensure_future(a.run(until_idle=False))
        running_b: asyncio.Future[int] | None = None
        try:
            await _until(lambda: _starts(folder), 30)
            (first,) = _starts(folder)
            running_b = asyncio.ensure_future(b.run(until_idle=False))
            await asyncio.sleep(HEARTBEAT * 1.2)  # a renewal succeeds while the verify runs
            cut()
            cut_at = time.monotonic()
            # The lease in the store ends no earlier than cut_at + LEASE, and b may
            # claim then: a's verify must be gone by then (a little margin for load).
            await _until(lambda: not _alive(first), LEASE + 0.5)
            gone_after = time.monotonic() - cut_at
            assert not _alive(first), (
                f"a's verify still runs {gone_after:.1f} s after its renewals stopped "
                f"(lease {LEASE:g} s)"
            )
            # b takes the task over and starts its own verify, alone.
            await _until(lambda: len(_starts(folder)) >= 2, 30)
            assert len(_starts(folder)) == 2, "b never started its verify"
            b.interrupt()  # b hands the task back
            await asyncio.wait_for(running_b, 30)
            restore()
            # a comes back and claims the task again; its verify runs alone too.
            await _until(lambda: len(_starts(folder)) >= 3, 60)
            assert len(_starts(folder)) == 3, "a did not go back to claiming"
        finally:
            restore()
            a.interrupt()
            if running_b is not None:
                b.interrupt()
            await asyncio.wait_for(
                asyncio.gather(running_a, *([running_b] if running_b else [])), 60
            )
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        assert not (folder / "overlaps").exists(), (
            f"a verify found another one running: {(folder / 'overlaps').read_text()}"
        )
        assert observer.most == 1 and observer.samples > 100
        assert not any(_alive(pid) for pid in _starts(folder))
        lost = [e for e in events if e.kind == "lease-lost"]
        assert [e.worker for e in lost] == ["a"], [(e.worker, e.kind, e.detail) for e in events]
        warnings = [r for r in caplog.records if r.name == "steadyloop.audit._worker"]
        fences = [r for r in warnings if "no renewal of the lease succeeded" in r.getMessage()]
        assert len(fences) == 1 and fences[0].levelno == logging.WARNING
        assert "worker a: task 't1'" in fences[0].getMessage()
        # Each failed renewal before it, one line each, naming the worker and the task
        # (on SQLite they fail; through the stalled proxy they hang, and the fence acts).
        failed = [r for r in warnings if "a lease renewal failed" in r.getMessage()]
        assert all("worker a: task 't1'" in r.getMessage() for r in failed)
        assert bool(failed) == (kind == "sqlite"), [r.getMessage() for r in warnings]
        assert [e.worker for e in events if e.kind == "claimed"] == ["a", "b", "a"]
        assert not a.errors and not b.errors
        assert os.path.exists(folder / "verify.lock")


async def test_a_renewal_that_finds_another_owner_stops_the_verify_at_once(
    board: TaskBoard, clock: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """When a heartbeat finds the task claimed by another worker, the running verify is stopped at once."""
    started, stopped = asyncio.Event(), asyncio.Event()

    async def check(_cwd: Path) -> int:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            stopped.set()
        return 0

    await board.submit(
        TaskSpec(
            prompt="wait",
            task_id="t1",
            goal=GoalSpec(goal="checked", verify=VerifySpec(("check",)), round_budget=3),
        )
    )
    events: list[WorkerEvent] = []
    worker = Worker(
        board,
        Agent("idle", ScriptedModel(lambda _i, _m: "done")),
        worker_id="a",
        verifier=Verifier(InProcessExecutor({"check": check})),
        scratch_root=tmp_path,
        lease=10,
        heartbeat=0.05,
        on_event=events.append,
    )
    caplog.set_level(logging.WARNING, logger="steadyloop.audit")
    working = asyncio.ensure_future(worker.run_once())
    await asyncio.wait_for(started.wait(), 10)
    clock.advance(11)  # the lease has expired: another worker takes the task
    other = await board.queue.claim("b", 10)
    assert other is not None and other.task_id == "t1"
    taken = time.monotonic()
    await asyncio.wait_for(stopped.wait(), 2)  # the next heartbeat sees it
    assert time.monotonic() - taken < 1.0
    assert await asyncio.wait_for(working, 10) == "t1"
    assert [e.kind for e in events if e.kind in ("lease-lost", "error")] == ["lease-lost"]
    (warning,) = [r for r in caplog.records if r.name == "steadyloop.audit._worker"]
    assert "no longer this worker's" in warning.getMessage()
    # Nothing was written for the lost claim: no verification, no release.
    kinds = [r.kind.removeprefix("task.") for r in await board.trail("t1")]
    assert kinds == ["submitted", "claimed", "round_started", "run_finished"], kinds
    assert (await board.queue.tasks())[0].owner == "b"


async def test_a_slow_store_does_not_shrink_the_fences_margin(
    board: TaskBoard, tmp_path: Path
) -> None:
    """Renewals that each take most of a heartbeat, but succeed, never fence a live round.

    Each renewal answers 0.7 heartbeats late. Renewals started a heartbeat after the one
    before ended would be 1.7 heartbeats apart, and the fence (lease - heartbeat = 2
    heartbeats after the last successful start) would cut the round; started a heartbeat
    after the one before started, each succeeds within the margin.
    """
    lease, beat, late = 3.0, 1.0, 0.7
    starts: list[float] = []
    renew = board.queue.heartbeat

    async def slow_heartbeat(*args: Any, **kw: Any) -> Any:
        starts.append(time.monotonic())
        await asyncio.sleep(late)  # the store's answer is slow, and it comes
        return await renew(*args, **kw)

    board.queue.heartbeat = slow_heartbeat  # type: ignore[method-assign]

    async def check(_cwd: Path) -> int:
        await asyncio.sleep(3 * lease)  # a verify three leases long
        return 0

    await board.submit(
        TaskSpec(
            prompt="wait",
            task_id="t1",
            goal=GoalSpec(goal="checked", verify=VerifySpec(("check",)), round_budget=1),
        )
    )
    events: list[WorkerEvent] = []
    worker = Worker(
        board,
        Agent("idle", ScriptedModel(lambda _i, _m: "done")),
        worker_id="a",
        verifier=Verifier(InProcessExecutor({"check": check})),
        scratch_root=tmp_path,
        lease=lease,
        heartbeat=beat,
        on_event=events.append,
    )
    assert await asyncio.wait_for(worker.run_once(), 60) == "t1"
    assert [e.kind for e in events if e.kind in ("lease-lost", "error")] == [], [
        (e.kind, e.detail) for e in events
    ]
    assert len(starts) >= 6, f"{len(starts)} renewals in a verify of {3 * lease:g} s"
    kinds = [r.kind.removeprefix("task.") for r in await board.trail("t1")]
    assert "verified" in kinds and kinds[-1] != "released", kinds


async def test_a_deadline_passing_during_the_last_transaction_does_not_end_the_worker(
    board: TaskBoard, tmp_path: Path
) -> None:
    """The fence's deadline passing while the claim's settling transaction waits on the store leaves the worker alive and the task settled."""
    lease, beat = 1.0, 0.2
    cut = asyncio.Event()
    renew, conclude = board.queue.heartbeat, board.conclude

    async def heartbeat(*args: Any, **kw: Any) -> Any:
        if cut.is_set():
            raise BackendUnavailable("injected: the store cannot be reached")
        return await renew(*args, **kw)

    async def slow_conclude(*args: Any, **kw: Any) -> Any:
        cut.set()  # renewals fail from here on ...
        await asyncio.sleep(3 * lease)  # ... and the settling transaction waits past the margin
        return await conclude(*args, **kw)

    board.queue.heartbeat = heartbeat  # type: ignore[method-assign]
    board.conclude = slow_conclude  # type: ignore[method-assign]
    await board.submit(TaskSpec(prompt="p", task_id="t1"))
    events: list[WorkerEvent] = []
    worker = Worker(
        board,
        Agent("idle", ScriptedModel(lambda _i, _m: "done")),
        worker_id="a",
        scratch_root=tmp_path,
        lease=lease,
        heartbeat=beat,
        on_event=events.append,
    )
    assert await asyncio.wait_for(worker.run_once(), 30) == "t1"
    assert not worker.errors and not [e for e in events if e.kind in ("lease-lost", "error")]
    assert (await board.get("t1")).status.terminal
