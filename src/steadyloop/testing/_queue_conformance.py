"""The task queue conformance suite: the contract every queue backend must keep, as pytest tests.

Use it on any SQL journal the queue runs on, including your own, by subclassing and
supplying a factory::

    import pytest
    from steadyloop.audit import open_queue
    from steadyloop.testing import QueueConformance, QueueFactory

    class TestMyQueue(QueueConformance):
        @pytest.fixture
        def queue_factory(self, tmp_path):
            url = f"sqlite:///{tmp_path}/q.db"
            return QueueFactory(open=lambda **options: open_queue(url, **options))

``open(**options)`` must return a queue on the *same* store each time it is called, and
pass ``options`` (``app``, ``clock``, ``ids``, ``server_clock``, ``poll``, ``create``) on
to [`open_queue`][steadyloop.audit.open_queue]; the app cases open two apps on the one
store and check that neither sees, claims or wakes on the other's tasks. ``missing``,
when given, opens with ``create=False`` a place that holds no queue. ``notifies`` says
that idle workers are woken by the store (PostgreSQL ``NOTIFY``) rather than by
polling. The suite needs ``pytest`` and ``pytest-asyncio``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from steadyloop._errors import (
    CorruptionError,
    LeaseLost,
    StoreNotFound,
    TaskCancelled,
    TaskNotFound,
    TaskSpecError,
)
from steadyloop.audit._board import TaskBoard
from steadyloop.audit._queue import QUEUE_SCHEMA_VERSION, TaskQueue
from steadyloop.audit._tasks import TaskEvent, TaskSpec, TaskStatus
from steadyloop.faults import Fault, FaultPlan, SimulatedCrash, SimulatedDisconnect
from steadyloop.journal._sql import Plan, Query
from steadyloop.records import SequentialIds

__all__ = ["QueueConformance", "QueueFactory"]


@dataclass(frozen=True)
class QueueFactory:
    """How the queue conformance suite reaches a backend.

    Attributes:
        open: Opens a queue on the store under test with the given options; every
            call reaches the same store.
        missing: Opens, with ``create=False``, a place that holds no queue (expected to
            raise [`StoreNotFound`][steadyloop.StoreNotFound]); ``None`` skips that test.
        notifies: Whether an idle waiter is woken by the store (not by polling).
        server_clock: Whether the backend reads lease times from a server clock (the
            suite then opens with ``server_clock=False`` to drive leases by hand).
    """

    open: Callable[..., Awaitable[TaskQueue]]
    missing: Callable[[], Awaitable[TaskQueue]] | None = None
    notifies: bool = False
    server_clock: bool = False


class _Clock:
    """A clock that moves only when told to."""

    def __init__(self, start: int = 1_700_000_000_000_000) -> None:
        self.now = start

    def now_us(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1_000_000)


def _sql_plan(sql: str, *params: Any) -> Callable[[], Plan]:
    def make() -> Plan:
        yield Query(sql, params)

    return make


def _lost_reply() -> Fault:
    """The fault of a lost reply: the connection drops once a writing transaction committed."""
    return Fault(at=1, side="after", how="disconnect", label="queue.write")


_STATEMENT = "queue.statement"
"""The boundary label of each statement of a writing transaction (and of a lone append)."""


def _through(inner: Plan, faults: FaultPlan) -> Plan:
    """Run ``inner``, passing a boundary before each of its statements and before commit."""
    rows: Any = None
    while True:
        try:
            query = inner.send(rows)
        except StopIteration as stop:
            faults.point(_STATEMENT)  # every statement sent, the COMMIT not yet
            return stop.value
        faults.point(_STATEMENT)
        rows = yield query


@contextlib.contextmanager
def _statement_boundaries(journal: Any, faults: FaultPlan) -> Iterator[None]:
    """Make every statement the journal's writing transactions send a write boundary.

    A plan run through ``run_plan`` (the queue's and the board's task changes) passes
    ``queue.statement`` before each statement and before its commit; an append of its
    own (``journal.append``, a separate transaction) passes one before it starts, so a
    crash there falls between two transactions.
    """
    real_run, real_append = journal.run_plan, journal.append

    async def run_plan(make: Any, *, write: bool = True, **hints: Any) -> Any:
        if not write:
            return await real_run(make, write=write, **hints)
        return await real_run(lambda: _through(make(), faults), write=write, **hints)

    async def append(*args: Any, **kwargs: Any) -> Any:
        faults.point(_STATEMENT)
        return await real_append(*args, **kwargs)

    journal.run_plan, journal.append = run_plan, append
    try:
        yield
    finally:
        del journal.run_plan, journal.append


class QueueConformance:
    """The task queue contract as tests. Subclass it and provide ``queue_factory``."""

    @pytest.fixture
    def queue_factory(self) -> QueueFactory:
        """Override: return the factory of the backend under test."""
        raise NotImplementedError("subclass QueueConformance and define queue_factory")

    @pytest.fixture
    def clock(self) -> _Clock:
        """The suite's clock: leases expire only when a test moves it."""
        return _Clock()

    async def _open(self, factory: QueueFactory, clock: _Clock, **options: Any) -> TaskQueue:
        if factory.server_clock:
            options.setdefault("server_clock", False)
        return await factory.open(clock=clock, ids=SequentialIds("t"), **options)

    # -- submitting ---------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_claims_follow_priority_then_submission_order(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """Higher priority is claimed first; equal priorities go in submission order."""
        async with await self._open(queue_factory, clock) as queue:
            for tid, prio in [("a", 0), ("b", 5), ("c", 0), ("d", 5)]:
                await queue.submit(TaskSpec(prompt=tid, task_id=tid, priority=prio))
            order = []
            while (claim := await queue.claim("w", 60)) is not None:
                order.append(claim.task_id)
            assert order == ["b", "d", "a", "c"]

    @pytest.mark.asyncio
    async def test_generated_ids_and_the_stored_spec(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A spec without an id gets one, and the queue stores the spec exactly as submitted."""
        async with await self._open(queue_factory, clock) as queue:
            spec = TaskSpec(prompt="  keep\n my  spacing ✓ 😀 ")
            result = await queue.submit(spec)
            assert result.task_id == "t-000001" and not result.duplicate
            row = await queue.get(result.task_id)
            assert row.spec.prompt == spec.prompt and row.status is TaskStatus.QUEUED
            with pytest.raises(TaskNotFound):
                await queue.get("nope")

    @pytest.mark.asyncio
    async def test_ids_are_stored_exactly(self, queue_factory: QueueFactory, clock: _Clock) -> None:
        """Ids differing by case, a trailing space, Unicode form or a C1 control are distinct."""
        ids = ["Task", "task", "task ", "caf\u00e9", "cafe\u0301", "a\x85b", "a:b", "a/b"]
        async with await self._open(queue_factory, clock) as queue:
            await queue.submit_many([TaskSpec(prompt=i, task_id=i) for i in ids])
            rows = await queue.tasks()
            assert [r.task_id for r in rows] == ids
            for task_id in ids:
                assert (await queue.get(task_id)).spec.prompt == task_id

    @pytest.mark.asyncio
    async def test_idempotency_key_returns_the_first_task(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """The same key with the same body is a duplicate of the first task; nothing is queued."""
        async with await self._open(queue_factory, clock) as queue:
            first = await queue.submit(TaskSpec(prompt="p", idempotency_key="k1"))
            again = await queue.submit(TaskSpec(prompt="p", idempotency_key="k1"))
            assert again.duplicate and again.task_id == first.task_id
            other = await queue.submit(TaskSpec(prompt="p", idempotency_key="K1"))
            assert not other.duplicate, "keys differing by case are different keys"
            assert len(await queue.tasks()) == 2

    @pytest.mark.asyncio
    async def test_idempotency_key_with_a_different_body_is_refused(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """The same key with another body is a TaskSpecError naming the key; nothing is queued."""
        async with await self._open(queue_factory, clock) as queue:
            await queue.submit(TaskSpec(prompt="p", idempotency_key="k1"))
            with pytest.raises(
                TaskSpecError, match="idempotency key 'k1' was already used"
            ) as info:
                await queue.submit(TaskSpec(prompt="p2", idempotency_key="k1"))
            assert info.value.field == "idempotency_key"
            assert len(await queue.tasks()) == 1

    @pytest.mark.asyncio
    async def test_taken_task_id_is_refused(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """Submitting a task id that exists (without a matching key) is refused."""
        async with await self._open(queue_factory, clock) as queue:
            await queue.submit(TaskSpec(prompt="p", task_id="x"))
            with pytest.raises(TaskSpecError, match="already taken"):
                await queue.submit(TaskSpec(prompt="p", task_id="x"))

    @pytest.mark.asyncio
    async def test_unknown_dependency_and_cycles_queue_nothing(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """An unknown dependency or a cycle in a batch refuses the whole batch."""
        async with await self._open(queue_factory, clock) as queue:
            with pytest.raises(TaskSpecError, match="depends on 'ghost', which is not a known"):
                await queue.submit_many(
                    [
                        TaskSpec(prompt="p", task_id="ok"),
                        TaskSpec(prompt="p", task_id="b", depends_on=("ghost",)),
                    ]
                )
            with pytest.raises(TaskSpecError, match="dependency cycle: a → b → a"):
                await queue.submit_many(
                    [
                        TaskSpec(prompt="p", task_id="a", depends_on=("b",)),
                        TaskSpec(prompt="p", task_id="b", depends_on=("a",)),
                    ]
                )
            assert await queue.tasks() == []

    # -- dependencies -------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_dependencies_hold_a_task_until_they_complete(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A task is claimable only once every dependency is completed."""
        async with await self._open(queue_factory, clock) as queue:
            await queue.submit(TaskSpec(prompt="p", task_id="base"))
            await queue.submit(
                TaskSpec(prompt="p", task_id="top", depends_on=("base",), priority=9)
            )
            first = await queue.claim("w", 60)
            assert first is not None and first.task_id == "base"
            assert await queue.claim("w", 60) is None
            await queue.settle(
                "base", first.lease_token, TaskStatus.COMPLETED, round=1, audit_rounds=1
            )
            second = await queue.claim("w", 60)
            assert second is not None and second.task_id == "top"
            assert await queue.dependents("base") == ["top"]

    @pytest.mark.asyncio
    async def test_failed_dependency_dooms_and_blocks_dependents(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A dependent of a task that ended without completing is doomed and can be blocked."""
        async with await self._open(queue_factory, clock) as queue:
            await queue.submit(TaskSpec(prompt="p", task_id="base"))
            await queue.submit(TaskSpec(prompt="p", task_id="top", depends_on=("base",)))
            claim = await queue.claim("w", 60)
            assert claim is not None
            await queue.settle(
                "base", claim.lease_token, TaskStatus.NEEDS_HUMAN, round=3, audit_rounds=3
            )
            assert await queue.doomed() == [("top", "base", "needs-human")]
            assert await queue.block("top", "base failed")
            assert not await queue.block("top", "again")
            assert (await queue.get("top")).status is TaskStatus.BLOCKED

    # -- leases -------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_expired_lease_is_taken_over_and_the_old_token_is_dead(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """An expired lease passes to another worker; the old token can neither renew nor settle."""
        async with await self._open(queue_factory, clock) as queue:
            await queue.submit(TaskSpec(prompt="p", task_id="x"))
            first = await queue.claim("w1", 10)
            assert first is not None and first.attempt == 1
            assert await queue.claim("w2", 10) is None
            clock.advance(5)
            assert await queue.heartbeat("x", first.lease_token, 10)  # renewed to now + 10
            clock.advance(9)
            assert await queue.claim("w2", 10) is None
            clock.advance(2)
            second = await queue.claim("w2", 10)
            assert second is not None
            assert (second.attempt, second.previous_owner, second.previous_token) == (
                2,
                "w1",
                first.lease_token,
            )
            assert not await queue.heartbeat("x", first.lease_token, 10)
            with pytest.raises(LeaseLost):
                await queue.settle(
                    "x", first.lease_token, TaskStatus.COMPLETED, round=1, audit_rounds=1
                )
            await queue.settle(
                "x", second.lease_token, TaskStatus.COMPLETED, round=1, audit_rounds=1
            )
            assert await queue.claim("w3", 10) is None

    @pytest.mark.asyncio
    async def test_pushed_back_task_waits_for_its_delay(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A task settled back to queued with a delay is not claimable before the delay passes."""
        async with await self._open(queue_factory, clock) as queue:
            await queue.submit(TaskSpec(prompt="p", task_id="x"))
            claim = await queue.claim("w", 10)
            assert claim is not None
            await queue.settle(
                "x", claim.lease_token, TaskStatus.QUEUED, round=1, audit_rounds=1, delay=3
            )
            assert await queue.claim("w", 10) is None
            clock.advance(3)
            again = await queue.claim("w", 10)
            assert again is not None and again.attempt == 2
            counts = await queue.counts()
            assert counts[TaskStatus.RUNNING] == 1 and sum(counts.values()) == 1

    @pytest.mark.asyncio
    async def test_concurrent_claimers_never_share_a_task(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """Six claimers with their own connections claim 40 tasks; each task goes to exactly one."""
        queues = [await self._open(queue_factory, clock) for _ in range(6)]
        try:
            await queues[0].submit_many(
                [TaskSpec(prompt="p", task_id=f"c{i:02d}") for i in range(40)]
            )
            got: list[str] = []

            async def claimer(n: int, q: TaskQueue) -> None:
                while (claim := await q.claim(f"w{n}", 60)) is not None:
                    got.append(claim.task_id)
                    await asyncio.sleep(0)

            await asyncio.gather(*(claimer(n, q) for n, q in enumerate(queues)))
            assert sorted(got) == [f"c{i:02d}" for i in range(40)]
        finally:
            for q in queues:
                await q.close()

    # -- lost replies -------------------------------------------------------------------

    @staticmethod
    def _lose_next_reply(queue: TaskQueue) -> FaultPlan:
        """Make the queue's next transaction commit and then 'lose' its reply (once).

        Each writing transaction is a write boundary (``queue.write``) of the returned
        plan of the fault layer, which drops the connection once the first one has
        committed; ``plan.arm(_lost_reply())`` arms it again.
        """
        journal: Any = queue.journal
        real_run, real_transient = journal.run_plan, journal.transient
        plan = FaultPlan(_lost_reply())

        async def run_plan(make: Any, *, write: bool = True, **hints: Any) -> Any:
            if not write:
                return await real_run(make, write=write, **hints)
            return await plan.awrite("queue.write", lambda: real_run(make, write=write, **hints))

        def transient(exc: BaseException) -> bool:
            return isinstance(exc, SimulatedDisconnect) or bool(real_transient(exc))

        journal.run_plan, journal.transient = run_plan, transient
        return plan

    @pytest.mark.asyncio
    async def test_a_lost_reply_costs_no_claim_and_no_settle(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A claim, settle or submission whose reply was lost is retried into the same outcome."""
        async with await self._open(queue_factory, clock) as queue:
            plan = self._lose_next_reply(queue)
            result = await queue.submit(TaskSpec(prompt="p", task_id="x"))
            assert result.task_id == "x" and not plan.armed
            assert [t.task_id for t in await queue.tasks()] == ["x"]
            plan.arm(_lost_reply())
            claim = await queue.claim("w", 30)
            assert claim is not None and claim.task_id == "x" and claim.attempt == 1
            assert not plan.armed
            row = await queue.get("x")
            assert row.lease_token == claim.lease_token and row.attempts == 1
            assert await queue.heartbeat("x", claim.lease_token, 30)
            plan.arm(_lost_reply())
            await queue.settle(
                "x", claim.lease_token, TaskStatus.COMPLETED, round=1, audit_rounds=1
            )
            assert not plan.armed
            assert (await queue.get("x")).status is TaskStatus.COMPLETED

    # -- one transaction per task change ------------------------------------------------

    @staticmethod
    async def _agree(board: TaskBoard, task_id: str, where: str) -> TaskStatus | None:
        """The task's row is its trail's projection: the same status, or neither exists."""
        state = await board.state(task_id)
        try:
            row = (await board.get(task_id)).status
        except TaskNotFound:
            row = None
        assert row is state.status, (
            f"{where}: the queue row says {row} but the trail says {state.status}"
        )
        return row

    @staticmethod
    async def _claimed(board: TaskBoard, task_id: str, priority: int) -> tuple[Any, Any]:
        """Submit and claim a task (it outranks every earlier one), its claim recorded."""
        await board.submit(TaskSpec(prompt="p", task_id=task_id, priority=priority))
        got = await board.claim("w", 30)
        assert got is not None and got[0].task_id == task_id
        return got

    @staticmethod
    async def _claim_agrees(board: TaskBoard, task_id: str, where: str) -> None:
        """A running row's lease is its trail's, and the row counts the claims the trail records."""
        row = await board.get(task_id)
        state = await board.state(task_id)
        records = await board.trail(task_id)
        claims = [r for r in records if r.kind == TaskEvent.CLAIMED.value]
        if row.status is TaskStatus.RUNNING:
            assert row.lease_token == state.lease_token, (
                f"{where}: the row's lease {row.lease_token} is not the trail's {state.lease_token}"
            )
        assert row.attempts == len(claims), (
            f"{where}: the row counts {row.attempts} claims, the trail records {len(claims)}"
        )

    @pytest.mark.asyncio
    async def test_each_task_change_is_one_transaction(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A crash between two statements of a task change leaves its row and trail agreeing.

        Both changed, or neither; and the change then goes through, once.
        """
        async with await self._open(queue_factory, clock) as queue:
            board = TaskBoard(queue)
            held: dict[str, Any] = {}

            async def no_setup(tid: str, prio: int) -> None:
                return None

            async def submit(tid: str) -> None:
                await board.submit(TaskSpec(prompt="p", task_id=tid, priority=-1))

            async def hold(tid: str, prio: int) -> None:
                held[tid] = await self._claimed(board, tid, prio)

            async def finish(tid: str) -> None:
                claim, _ = held[tid]
                state = await board.state(tid)
                await board.conclude(
                    state,
                    [(TaskEvent.NEEDS_HUMAN, {"reason": "a person should look"})],
                    claim.lease_token,
                    TaskStatus.NEEDS_HUMAN,
                )

            async def release(tid: str) -> None:
                claim, _ = held[tid]
                state = await board.state(tid)
                await board.conclude(
                    state,
                    [(TaskEvent.RELEASED, {"reason": "handed back"})],
                    claim.lease_token,
                    TaskStatus.QUEUED,
                    delay=3600,  # not claimable again in this test
                )

            async def queued(tid: str, prio: int) -> None:
                await board.submit(TaskSpec(prompt="p", task_id=tid, priority=-1))

            async def cancel(tid: str) -> None:
                await board.cancel(tid, "not needed")

            async def queued_top(tid: str, prio: int) -> None:
                await board.submit(TaskSpec(prompt="p", task_id=tid, priority=prio))

            async def to_person(tid: str, prio: int) -> None:
                await hold(tid, prio)
                await finish(tid)

            async def retry(tid: str) -> None:
                await board.retry(tid, "try again")
                await board.cancel(tid, "done with it")  # not claimable by later cases

            async def doomed(tid: str, prio: int) -> None:
                await hold(tid, prio)
                await board.submit(
                    TaskSpec(prompt="p", task_id=f"{tid}.child", depends_on=(tid,), priority=-1)
                )
                await finish(tid)

            async def block(tid: str) -> None:
                assert f"{tid}.child" in await board.block_doomed()

            async def claim(tid: str) -> None:
                got = await board.claim("w", 30)
                assert got is not None and got[0].task_id == tid, (tid, got)

            async def lapsed(tid: str, prio: int) -> None:
                await hold(tid, prio)  # held by "w" ...
                clock.advance(60)  # ... whose lease then ran out (on the queue's own clock)

            async def take_over(tid: str) -> None:
                got = await board.claim("w2", 30)
                assert got is not None and got[0].task_id == tid, (tid, got)
                assert got[0].previous_owner == "w"

            cases: list[tuple[str, Any, Any, str]] = [
                ("submit", no_setup, submit, ""),
                ("finish", hold, finish, ""),
                ("release", hold, release, ""),
                ("cancel", queued, cancel, ""),
                ("retry", to_person, retry, ""),
                ("block", doomed, block, ".child"),
                ("claim", queued_top, claim, ""),
                ("take-over", lapsed, take_over, ""),
            ]
            priority = 1000
            for name, setup, change, watched in cases:
                crashes = 0
                for k in range(1, 100):
                    tid = f"{name}-{k}"
                    priority += 1
                    await setup(tid, priority)
                    before = await self._agree(board, tid + watched, f"{name} set up")
                    faults = FaultPlan(Fault(at=k, label=_STATEMENT))
                    with _statement_boundaries(queue.journal, faults):
                        try:
                            await change(tid)
                        except SimulatedCrash:
                            crashes += 1
                    where = f"{name}, crash at statement {k}"
                    after = await self._agree(board, tid + watched, where)
                    if not faults.fired:
                        break  # the change ran to its end: every statement was tried
                    if after == before:
                        await change(tid)  # not changed: the same change goes through now
                    await self._agree(board, tid + watched, f"{where}, then redone")
                    await self._claim_agrees(board, tid + watched, f"{where}, then redone")
                    kinds = [r.kind for r in await board.trail(tid + watched)]
                    if name == "take-over":  # the first claim and the taking over, once each
                        kinds.remove(TaskEvent.CLAIMED.value)
                    assert len(kinds) == len(set(kinds)) or name == "retry", (where, kinds)
                else:  # pragma: no cover - a change of 99 statements
                    pytest.fail(f"{name}: still crashing after 99 statements")
                assert crashes >= 2, f"{name}: {crashes} statement(s); a change has several"

    @pytest.mark.asyncio
    async def test_a_lost_reply_of_a_task_change_writes_it_once(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A task change whose reply was lost is retried into one row change and one record."""
        async with await self._open(queue_factory, clock) as queue:
            board = TaskBoard(queue)
            plan = self._lose_next_reply(queue)
            await board.submit(TaskSpec(prompt="p", task_id="x"))  # its reply is lost
            assert not plan.armed
            plan.arm(_lost_reply())
            got = await board.claim("w", 30)  # and the claim's
            assert got is not None and not plan.armed
            claim, state = got
            assert [r.kind for r in await board.trail("x")] == ["task.submitted", "task.claimed"]
            await self._claim_agrees(board, "x", "a claim whose reply was lost")
            assert state.lease_token == claim.lease_token and claim.attempt == 1
            plan.arm(_lost_reply())
            await board.conclude(
                state,
                [(TaskEvent.NEEDS_HUMAN, {"reason": "look"})],
                claim.lease_token,
                TaskStatus.NEEDS_HUMAN,
            )
            assert not plan.armed
            kinds = [r.kind for r in await board.trail("x")]
            assert kinds == ["task.submitted", "task.claimed", "task.needs_human"], kinds
            assert (await board.get("x")).status is TaskStatus.NEEDS_HUMAN
            plan.arm(_lost_reply())
            await board.retry("x", "again")
            assert not plan.armed
            assert [r.kind for r in await board.trail("x")].count("task.retried") == 1
            assert (await board.get("x")).status is TaskStatus.QUEUED

    # -- cancel and retry ---------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_cancel_a_queued_task_and_doom_its_dependents(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A queued task is cancelled at once; it is not claimable and its dependents are doomed."""
        async with await self._open(queue_factory, clock) as queue:
            await queue.submit(TaskSpec(prompt="p", task_id="a"))
            await queue.submit(TaskSpec(prompt="p", task_id="b", depends_on=("a",)))
            assert await queue.cancel("a", "not needed") is TaskStatus.CANCELLED
            row = await queue.get("a")
            assert (row.status, row.detail) == (TaskStatus.CANCELLED, "not needed")
            assert await queue.doomed() == [("b", "a", "cancelled")]
            assert await queue.claim("w", 30) is None
            assert await queue.cancel("a", "again") is TaskStatus.CANCELLED
            with pytest.raises(TaskNotFound):
                await queue.cancel("ghost", "x")

    @pytest.mark.asyncio
    async def test_cancel_a_running_task_reaches_its_worker(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A running task's cancel reaches its worker's heartbeat, which still renews the lease."""
        async with await self._open(queue_factory, clock) as queue:
            await queue.submit(TaskSpec(prompt="p", task_id="x"))
            claim = await queue.claim("w", 10)
            assert claim is not None
            assert await queue.cancel_requested("x", claim.lease_token) is None
            assert await queue.cancel("x", "stop it") is TaskStatus.RUNNING
            assert await queue.cancel_requested("x", claim.lease_token) == "stop it"
            clock.advance(8)
            with pytest.raises(TaskCancelled) as info:
                await queue.heartbeat("x", claim.lease_token, 10)
            assert (info.value.task_id, info.value.reason) == ("x", "stop it")
            clock.advance(8)  # 16 s after the claim, but the cancelled heartbeat renewed it
            assert await queue.claim("w2", 10) is None
            await queue.settle(
                "x", claim.lease_token, TaskStatus.CANCELLED, round=1, audit_rounds=0
            )
            row = await queue.get("x")
            assert row.status is TaskStatus.CANCELLED and row.cancel_requested is None

    @pytest.mark.asyncio
    async def test_a_cancel_outlives_its_lost_worker(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A worker taking over the expired lease of a task asked to cancel is told so."""
        async with await self._open(queue_factory, clock) as queue:
            await queue.submit(TaskSpec(prompt="p", task_id="x"))
            first = await queue.claim("w1", 10)
            assert first is not None and first.cancel_requested is None
            await queue.cancel("x", "stop")
            clock.advance(11)
            second = await queue.claim("w2", 10)
            assert second is not None and second.cancel_requested == "stop"

    @pytest.mark.asyncio
    async def test_requeue_from_a_person(self, queue_factory: QueueFactory, clock: _Clock) -> None:
        """A task that went to a person can be queued again, keeping its counters; others cannot."""
        async with await self._open(queue_factory, clock) as queue:
            await queue.submit(TaskSpec(prompt="p", task_id="x"))
            claim = await queue.claim("w", 10)
            assert claim is not None
            assert not await queue.requeue("x", "too early")
            await queue.settle(
                "x", claim.lease_token, TaskStatus.NEEDS_HUMAN, round=3, audit_rounds=3
            )
            assert await queue.requeue("x", "retried: try B")
            row = await queue.get("x")
            assert (row.status, row.round, row.audit_rounds, row.attempts) == (
                TaskStatus.QUEUED,
                3,
                3,
                1,
            )
            again = await queue.claim("w", 10)
            assert again is not None and again.attempt == 2

    # -- waiting for work ---------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_wait_for_task_returns_when_work_arrives(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """An idle waiter times out on an empty queue and wakes when another process submits."""
        poll = 30.0 if queue_factory.notifies else 0.1
        async with (
            await queue_factory.open(poll=poll) as waiter,
            await queue_factory.open() as submitter,
        ):
            assert not await waiter.wait_for_task(0.3)
            started = time.monotonic()
            task = asyncio.ensure_future(waiter.wait_for_task(60))
            await asyncio.sleep(0.5)
            assert not task.done()
            await submitter.submit(TaskSpec(prompt="p", task_id="x"))
            assert await asyncio.wait_for(task, 60)
            waited = time.monotonic() - started
            # Generous: the point is that a notifying store does not wait for its poll.
            assert waited < 20, f"woke after {waited:.1f}s"

    # -- apps ---------------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_apps_are_separate_queues_on_one_store(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """Two apps on one store share no task: ids, keys, claims, reads, cancels are each app's."""
        async with (
            await self._open(queue_factory, clock) as default,
            await self._open(queue_factory, clock, app="other") as other,
        ):
            assert (default.app, other.app) == ("audit", "other")
            await default.submit(TaskSpec(prompt="default's", task_id="x", idempotency_key="k"))
            await default.submit(TaskSpec(prompt="default only", task_id="d"))
            # The same id and the same key are another app's own.
            made = await other.submit(TaskSpec(prompt="other's", task_id="x", idempotency_key="k"))
            assert not made.duplicate
            assert (await other.get("x")).spec.prompt == "other's"
            assert (await default.get("x")).spec.prompt == "default's"
            with pytest.raises(TaskNotFound):
                await other.get("d")
            with pytest.raises(TaskNotFound):
                await other.cancel("d", "not yours")
            assert [t.task_id for t in await other.tasks()] == ["x"]
            assert (await other.counts())[TaskStatus.QUEUED] == 1
            assert (await default.counts())[TaskStatus.QUEUED] == 2
            claim = await other.claim("w", 30)
            assert claim is not None and (claim.task_id, claim.spec.prompt) == ("x", "other's")
            assert await other.claim("w", 30) is None  # default's tasks are not other's
            assert not await other.wait_for_task(0.05)
            # Leases are held per app: other's lease token does nothing to default's "x".
            assert not await default.heartbeat("x", claim.lease_token, 30)
            with pytest.raises(LeaseLost):
                await default.settle(
                    "x", claim.lease_token, TaskStatus.COMPLETED, round=1, audit_rounds=1
                )
            assert (await default.get("x")).status is TaskStatus.QUEUED
            await other.settle(
                "x", claim.lease_token, TaskStatus.COMPLETED, round=1, audit_rounds=1
            )
            assert (await default.get("x")).status is TaskStatus.QUEUED
            assert await default.cancel("x", "stop") is TaskStatus.CANCELLED
            assert (await other.get("x")).status is TaskStatus.COMPLETED

    @pytest.mark.asyncio
    async def test_dependencies_name_tasks_of_their_own_app(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A dependency is looked up, waited for and doomed within its task's app only."""
        async with (
            await self._open(queue_factory, clock) as default,
            await self._open(queue_factory, clock, app="other") as other,
        ):
            await default.submit(TaskSpec(prompt="p", task_id="base"))
            with pytest.raises(TaskSpecError, match="base"):
                await other.submit(TaskSpec(prompt="p", task_id="y", depends_on=("base",)))
            await other.submit(TaskSpec(prompt="p", task_id="base"))
            await other.submit(TaskSpec(prompt="p", task_id="y", depends_on=("base",)))
            await default.submit(TaskSpec(prompt="p", task_id="y", depends_on=("base",)))
            # default's "base" fails: default's "y" is doomed, other's "y" is not.
            lease = await default.claim("w", 30)
            assert lease is not None and lease.task_id == "base"
            await default.settle(
                "base", lease.lease_token, TaskStatus.NEEDS_HUMAN, round=1, audit_rounds=1
            )
            assert await default.doomed() == [("y", "base", "needs-human")]
            assert await other.doomed() == []
            assert await default.dependents("base") == ["y"]
            # other's "y" waits for other's "base", whatever default's did.
            first = await other.claim("w", 30)
            assert first is not None and first.task_id == "base"
            assert await other.claim("w", 30) is None
            await other.settle(
                "base", first.lease_token, TaskStatus.COMPLETED, round=1, audit_rounds=1
            )
            nxt = await other.claim("w", 30)
            assert nxt is not None and nxt.task_id == "y"

    @pytest.mark.asyncio
    async def test_an_idle_waiter_is_not_woken_by_another_apps_task(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A submission to one app wakes no waiter of another, and is claimable by its own."""
        poll = 30.0 if queue_factory.notifies else 0.1
        async with (
            await queue_factory.open(poll=poll, app="other") as waiter,
            await queue_factory.open(poll=poll) as mine,
            await queue_factory.open() as submitter,
        ):
            assert not await waiter.wait_for_task(0.2)
            waiting = asyncio.ensure_future(waiter.wait_for_task(1.5))
            own = asyncio.ensure_future(mine.wait_for_task(60))
            await asyncio.sleep(0.3)
            await submitter.submit(TaskSpec(prompt="p", task_id="x"))
            assert await asyncio.wait_for(own, 60)
            assert not await waiting

    @pytest.mark.asyncio
    async def test_a_cancel_notifies_the_watchers_of_its_app(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """Where the store notifies, a running task's cancel calls its app's cancel watchers."""
        async with (
            await self._open(queue_factory, clock) as queue,
            await self._open(queue_factory, clock, app="other") as other,
        ):
            seen, elsewhere = asyncio.Event(), asyncio.Event()
            stop = queue.watch_cancels(seen.set)
            stop_other = other.watch_cancels(elsewhere.set)
            if not queue_factory.notifies:
                assert stop is None and stop_other is None
                return
            assert stop is not None and stop_other is not None
            await queue.submit(TaskSpec(prompt="p", task_id="x"))
            claim = await queue.claim("w", 30)
            assert claim is not None
            await asyncio.wait_for(seen.wait(), 30)  # the watch is connected
            await asyncio.wait_for(elsewhere.wait(), 30)
            seen.clear()
            elsewhere.clear()
            assert await queue.cancel("x", "stop") is TaskStatus.RUNNING
            await asyncio.wait_for(seen.wait(), 30)
            assert await queue.cancel_requested("x", claim.lease_token) == "stop"
            await asyncio.sleep(0.3)
            assert not elsewhere.is_set()
            stop()
            stop_other()

    # -- versions and stores ------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_a_newer_schema_is_refused_with_one_line(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A queue whose schema version is newer than this code's is refused, in one line."""
        async with await self._open(queue_factory, clock) as queue:
            d = queue.dialect
            await queue.journal.run_plan(
                _sql_plan(d.sql("UPDATE {p}audit_schema SET version = ?"), QUEUE_SCHEMA_VERSION + 1)
            )
        with pytest.raises(CorruptionError, match="newer than this steadyloop") as info:
            await self._open(queue_factory, clock)
        assert "\n" not in str(info.value)

    @pytest.mark.asyncio
    async def test_a_status_from_another_version_is_one_line(
        self, queue_factory: QueueFactory, clock: _Clock
    ) -> None:
        """A status this version does not know is a one-line CorruptionError naming the task."""
        async with await self._open(queue_factory, clock) as queue:
            await queue.submit(TaskSpec(prompt="p", task_id="x"))
            d = queue.dialect
            await queue.journal.run_plan(
                _sql_plan(
                    d.sql("UPDATE {p}audit_tasks SET status = 'paused' WHERE task_id = ?"),
                    d.bind_name("x"),
                )
            )
            for call in (lambda: queue.get("x"), queue.tasks, queue.counts):
                with pytest.raises(CorruptionError, match="'paused'") as info:
                    await call()
                assert "\n" not in str(info.value)

    @pytest.mark.asyncio
    async def test_inspecting_a_missing_store_creates_nothing(
        self, queue_factory: QueueFactory
    ) -> None:
        """create=False where no queue is raises StoreNotFound, twice: nothing was created."""
        if queue_factory.missing is None:
            pytest.skip("the factory names no missing store")
        for _ in range(2):
            with pytest.raises(StoreNotFound, match="no "):
                await queue_factory.missing()
