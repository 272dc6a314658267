"""The task queue on SQLite and PostgreSQL: priority, dependencies, keys, leases."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from audit_helpers import ManualClock

from steadyloop.audit import (
    LeaseLost,
    TaskNotFound,
    TaskQueue,
    TaskSpec,
    TaskSpecError,
    TaskStatus,
    open_queue,
)
from steadyloop.records import SequentialIds


def manual(url: str) -> dict[str, Any]:
    """Options making a queue on ``url`` read the test's clock (PostgreSQL reads its own)."""
    return {"server_clock": False} if url.startswith("postgres") else {}


@pytest.fixture
async def queue(queue_url: str, clock: ManualClock) -> AsyncIterator[TaskQueue]:
    """A queue on the backend under test with a manual clock."""
    q = await open_queue(queue_url, clock=clock, ids=SequentialIds("t"), **manual(queue_url))
    try:
        yield q
    finally:
        await q.close()


async def test_claims_follow_priority_then_submission_order(queue: TaskQueue) -> None:
    """Higher priority is claimed first; equal priorities go in submission order."""
    for tid, prio in [("a", 0), ("b", 5), ("c", 0), ("d", 5)]:
        await queue.submit(TaskSpec(prompt=tid, task_id=tid, priority=prio))
    order = []
    while (claim := await queue.claim("w", 60)) is not None:
        order.append(claim.task_id)
    assert order == ["b", "d", "a", "c"]


async def test_generated_ids_and_the_stored_spec(queue: TaskQueue) -> None:
    """A spec without an id gets one, and the queue stores the spec exactly as submitted."""
    spec = TaskSpec(prompt="  keep\n my  spacing ✓ ")
    result = await queue.submit(spec)
    assert result.task_id == "t-000001" and not result.duplicate
    row = await queue.get(result.task_id)
    assert row.spec.prompt == spec.prompt and row.status is TaskStatus.QUEUED
    with pytest.raises(TaskNotFound):
        await queue.get("nope")


async def test_idempotency_key_returns_the_first_task(queue: TaskQueue) -> None:
    """The same key with the same body is a duplicate of the first task; nothing new is queued."""
    first = await queue.submit(TaskSpec(prompt="p", idempotency_key="k1"))
    again = await queue.submit(TaskSpec(prompt="p", idempotency_key="k1"))
    assert again.duplicate and again.task_id == first.task_id
    assert len(await queue.tasks()) == 1


async def test_idempotency_key_with_a_different_body_is_refused(queue: TaskQueue) -> None:
    """The same key with a different body is a TaskSpecError naming the key; nothing is queued."""
    await queue.submit(TaskSpec(prompt="p", idempotency_key="k1"))
    with pytest.raises(TaskSpecError, match="idempotency key 'k1' was already used") as info:
        await queue.submit(TaskSpec(prompt="p2", idempotency_key="k1"))
    assert info.value.field == "idempotency_key"
    assert len(await queue.tasks()) == 1


async def test_taken_task_id_is_refused(queue: TaskQueue) -> None:
    """Submitting a task id that exists (without a matching key) is refused."""
    await queue.submit(TaskSpec(prompt="p", task_id="x"))
    with pytest.raises(TaskSpecError, match="already taken"):
        await queue.submit(TaskSpec(prompt="p", task_id="x"))


async def test_unknown_dependency_and_cycles_queue_nothing(queue: TaskQueue) -> None:
    """An unknown dependency or a cycle in a batch refuses the whole batch."""
    with pytest.raises(TaskSpecError, match="depends on 'ghost', which is not a known task"):
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


async def test_dependencies_hold_a_task_until_they_complete(queue: TaskQueue) -> None:
    """A task is claimable only once every dependency is completed."""
    await queue.submit(TaskSpec(prompt="p", task_id="base"))
    await queue.submit(TaskSpec(prompt="p", task_id="top", depends_on=("base",), priority=9))
    first = await queue.claim("w", 60)
    assert first is not None and first.task_id == "base"
    assert await queue.claim("w", 60) is None
    await queue.settle("base", first.lease_token, TaskStatus.COMPLETED, round=1, audit_rounds=1)
    second = await queue.claim("w", 60)
    assert second is not None and second.task_id == "top"


async def test_failed_dependency_dooms_and_blocks_dependents(queue: TaskQueue) -> None:
    """A dependent of a task that ended without completing is reported doomed and can be blocked."""
    await queue.submit(TaskSpec(prompt="p", task_id="base"))
    await queue.submit(TaskSpec(prompt="p", task_id="top", depends_on=("base",)))
    claim = await queue.claim("w", 60)
    assert claim is not None
    await queue.settle("base", claim.lease_token, TaskStatus.NEEDS_HUMAN, round=3, audit_rounds=3)
    assert await queue.doomed() == [("top", "base", "needs-human")]
    assert await queue.block("top", "base failed")
    assert not await queue.block("top", "again")
    assert (await queue.get("top")).status is TaskStatus.BLOCKED


async def test_expired_lease_is_taken_over_and_the_old_token_is_dead(
    queue: TaskQueue, clock: ManualClock
) -> None:
    """After a lease expires another worker claims the task; the old holder can neither renew nor settle."""
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
        await queue.settle("x", first.lease_token, TaskStatus.COMPLETED, round=1, audit_rounds=1)
    await queue.settle("x", second.lease_token, TaskStatus.COMPLETED, round=1, audit_rounds=1)
    assert await queue.claim("w3", 10) is None


async def test_pushed_back_task_waits_for_its_delay(queue: TaskQueue, clock: ManualClock) -> None:
    """A task settled back to queued with a delay is not claimable before the delay passes."""
    await queue.submit(TaskSpec(prompt="p", task_id="x"))
    claim = await queue.claim("w", 10)
    assert claim is not None
    await queue.settle("x", claim.lease_token, TaskStatus.QUEUED, round=1, audit_rounds=1, delay=3)
    assert await queue.claim("w", 10) is None
    clock.advance(3)
    again = await queue.claim("w", 10)
    assert again is not None and again.attempt == 2
    counts = await queue.counts()
    assert counts[TaskStatus.RUNNING] == 1 and sum(counts.values()) == 1


async def test_concurrent_claimers_never_share_a_task(queue_url: str, clock: ManualClock) -> None:
    """Eight claimers with their own connections claim 60 tasks; each task goes to exactly one."""
    queues = [await open_queue(queue_url, clock=clock, **manual(queue_url)) for _ in range(8)]
    try:
        await queues[0].submit_many([TaskSpec(prompt="p", task_id=f"c{i:02d}") for i in range(60)])
        got: list[tuple[str, str]] = []

        async def claimer(n: int, q: TaskQueue) -> None:
            while (claim := await q.claim(f"w{n}", 60)) is not None:
                got.append((claim.task_id, f"w{n}"))
                await asyncio.sleep(0)

        await asyncio.gather(*(claimer(n, q) for n, q in enumerate(queues)))
        ids = [t for t, _ in got]
        assert sorted(ids) == [f"c{i:02d}" for i in range(60)]
        if queue_url.startswith("postgresql"):
            # SQLite's busy handler is not fair: one claimer may win every round.
            assert len({w for _, w in got}) > 1
    finally:
        for q in queues:
            await q.close()
