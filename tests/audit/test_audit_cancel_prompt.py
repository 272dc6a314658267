"""A running task's cancel reaches its worker promptly, not at its next heartbeat."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from audit_helpers import wait_for
from audit_slow_agent import make_agent

from steadyloop.audit import TaskBoard, TaskSpec, TaskStatus, Worker


async def test_a_running_task_is_cancelled_within_seconds_with_a_minute_lease(
    queue_url: str, tmp_path: Path
) -> None:
    """With a 60 s lease (heartbeats 20 s apart), a task whose tool hangs is recorded cancelled under 5 s after ``cancel``; on PostgreSQL by notification (the poll is 30 s)."""
    notifying = queue_url.startswith("postgres")
    poll = 30.0 if notifying else 0.2
    async with (
        await TaskBoard.open(queue_url, poll=poll) as board,
        await TaskBoard.open(queue_url) as person,
    ):
        await board.submit(TaskSpec(prompt="Hang.", task_id="c1"))
        await board.submit(TaskSpec(prompt="After.", task_id="c2", depends_on=("c1",)))
        worker = Worker(board, make_agent, scratch_root=tmp_path, lease=60, grace=0.5)
        assert worker.heartbeat == 20
        running = asyncio.ensure_future(worker.run())
        marker = tmp_path / "c1" / "hung-once"
        assert await asyncio.to_thread(wait_for, marker.exists, 30)
        await asyncio.sleep(0.5)  # the tool hangs; the first heartbeat is 19 s away
        started = time.monotonic()
        assert await person.cancel("c1", "not needed any more") is TaskStatus.RUNNING
        while (await person.get("c1")).status is not TaskStatus.CANCELLED:
            assert time.monotonic() - started < 15, "the cancel waited for a heartbeat"
            await asyncio.sleep(0.05)
        took = time.monotonic() - started
        await asyncio.wait_for(running, 30)
        trail = await person.trail("c1")
        assert trail[-1].kind == "task.cancelled"
        assert trail[-1].payload["reason"] == "not needed any more"
        assert trail[-1].payload["worker"] == worker.worker_id
        assert (await person.get("c2")).status is TaskStatus.BLOCKED
        assert not worker.errors
        assert took < 15  # the first heartbeat was 19 s away


async def test_a_cancel_between_two_model_calls_ends_the_run_at_its_next_write(
    queue_url: str, tmp_path: Path
) -> None:
    """A cancel seen while the run goes on ends it at its next write (stop reason cancelled), well before a heartbeat."""
    from collections.abc import Sequence

    from steadyloop.audit import TaskContext
    from steadyloop.loop import (
        Agent,
        Message,
        ModelReply,
        ReplayPolicy,
        ScriptedModel,
        ToolRegistry,
        load_run,
    )

    gate = asyncio.Event()

    def make(ctx: TaskContext) -> Agent:
        tools = ToolRegistry()

        @tools.tool(policy=ReplayPolicy.SAFE)
        async def step() -> str:
            """Wait for the test's word (well within the grace)."""
            (ctx.workdir / "stepping").write_text("1")
            await gate.wait()
            return "ok"

        def script(index: int, messages: Sequence[Message]) -> ModelReply | str:
            return ModelReply.call("step", {}) if index < 3 else "done"

        return Agent("stepper", ScriptedModel(script), tools)

    async with (
        await TaskBoard.open(queue_url) as board,
        await TaskBoard.open(queue_url) as person,
    ):
        await board.submit(TaskSpec(prompt="Step.", task_id="s1"))
        worker = Worker(board, make, scratch_root=tmp_path, lease=60, grace=30)
        running = asyncio.ensure_future(worker.run())
        assert await asyncio.to_thread(wait_for, (tmp_path / "s1" / "stepping").exists, 30)
        started = time.monotonic()
        assert await person.cancel("s1", "enough") is TaskStatus.RUNNING
        await asyncio.sleep(1.0)  # the worker sees the cancel meanwhile
        gate.set()  # the tool returns: the run's next write ends it, long before the grace
        await asyncio.wait_for(running, 20)
        assert time.monotonic() - started < 15  # not the 30 s grace
        assert (await person.get("s1")).status is TaskStatus.CANCELLED
        info = await load_run(person.journal, person.app, "s1.r1")
        assert info.status == "cancelled"
        assert not worker.errors
