"""Review rv2: bugs found in the audit loop's app scoping, prompt cancel and queue migration."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from audit_helpers import wait_for
from test_audit_apps import _write_version_2_queue

from backends import remove_prefix, require_server, unique_prefix, with_options
from steadyloop.audit import TaskBoard, TaskContext, TaskSpec, TaskStatus, Worker, open_queue
from steadyloop.loop import Agent, Message, ModelReply, ReplayPolicy, ScriptedModel, ToolRegistry


def quick_agent(ctx: TaskContext) -> Agent:
    """An agent that answers at once, without a tool."""
    return Agent("quick", ScriptedModel(lambda i, m: "done"), ToolRegistry())


async def test_a_cancels_grace_timer_does_not_interrupt_the_next_task(
    queue_url: str, tmp_path: Path
) -> None:
    """A cancelled round that ends at its next write, before the grace period, leaves no timer behind that interrupts the worker's next task."""
    gate = asyncio.Event()

    def make(ctx: TaskContext) -> Agent:
        tools = ToolRegistry()

        @tools.tool(policy=ReplayPolicy.SAFE)
        async def step() -> str:
            """Wait for the test's word (first task) or a few seconds (second task)."""
            (ctx.workdir / "stepping").write_text("1")
            if ctx.task_id == "s1":
                await gate.wait()
            else:
                await asyncio.sleep(3.0)
            return "ok"

        def script(index: int, messages: Sequence[Message]) -> ModelReply | str:
            return ModelReply.call("step", {}) if index < 1 else "done"

        return Agent("stepper", ScriptedModel(script), tools)

    async with (
        await TaskBoard.open(queue_url, poll=0.2) as board,
        await TaskBoard.open(queue_url) as person,
    ):
        await board.submit(TaskSpec(prompt="Step.", task_id="s1", priority=1))
        await board.submit(TaskSpec(prompt="Step too.", task_id="s2"))
        worker = Worker(board, make, scratch_root=tmp_path, lease=60, grace=2.0)
        running = asyncio.ensure_future(worker.run())
        assert await asyncio.to_thread(wait_for, (tmp_path / "s1" / "stepping").exists, 30)
        assert await person.cancel("s1", "enough") is TaskStatus.RUNNING
        await asyncio.sleep(0.6)  # the worker sees the cancel: its grace timer starts
        gate.set()  # the run's next write ends it, well within the grace
        await asyncio.wait_for(running, 60)
        assert (await person.get("s1")).status is TaskStatus.CANCELLED
        kinds = [r.kind for r in await person.trail("s2")]
        assert "task.released" not in kinds, kinds
        assert not worker.errors


async def test_a_stopped_worker_no_longer_watches_for_cancels(
    queue_url: str, tmp_path: Path
) -> None:
    """Once ``Worker.run`` returns, the worker's cancel watch is off its queue, so workers run one after another on one board do not pile up."""
    async with await TaskBoard.open(queue_url, poll=0.2) as board:
        for n in range(3):
            await board.submit(TaskSpec(prompt="Quick.", task_id=f"q{n}"))
            worker = Worker(board, quick_agent, scratch_root=tmp_path, lease=60)
            await asyncio.wait_for(worker.run(), 60)
            assert not worker.errors
        assert board.queue._cancel_watchers == set()


@pytest.mark.parametrize(("backend", "length"), [("postgres", 52), ("mysql", 51)])
async def test_a_version_2_queue_under_a_long_prefix_is_migrated(backend: str, length: int) -> None:
    """Under the longest prefix whose queue names fit the server (PostgreSQL cuts longer names at 63 bytes, MySQL refuses them past 64), a version-2 queue migrates with every task kept."""
    base = await require_server(backend)
    prefix = unique_prefix(backend).ljust(length, "x")
    url = with_options(base, prefix=prefix)
    try:
        await _write_version_2_queue(url)
        async with await open_queue(url) as queue:
            assert [t.task_id for t in await queue.tasks()] == ["a", "b", "k", "r"]
            assert await queue.dependents("a") == ["b"]
    finally:
        await remove_prefix(backend, base, prefix)


async def test_an_interrupt_right_after_a_claim_hands_the_lease_back(
    queue_url: str, tmp_path: Path
) -> None:
    """A worker interrupted (a second Ctrl-C) just after its claim, before the claim's trail record is written, leaves no lease held: the task is claimable at once."""
    from steadyloop.audit import WorkerEvent

    async with await TaskBoard.open(queue_url, poll=0.2) as board:
        await board.submit(TaskSpec(prompt="Quick.", task_id="i1"))
        worker: Worker

        def on_event(event: WorkerEvent) -> None:
            if event.kind == "claimed":
                worker.interrupt()

        worker = Worker(board, quick_agent, scratch_root=tmp_path, lease=600, on_event=on_event)
        await asyncio.wait_for(worker.run(), 60)
        row = await board.get("i1")
        assert row.status is not TaskStatus.RUNNING, row.lease_token
        if row.status is TaskStatus.QUEUED:  # handed back (unless the round beat the interrupt)
            after = Worker(board, quick_agent, scratch_root=tmp_path, lease=600)
            assert await asyncio.wait_for(after.run_once(), 60) == "i1"
