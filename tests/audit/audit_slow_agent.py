"""Agents for the lifecycle tests, loaded as ``audit_slow_agent:make_agent`` and friends.

``make_agent(ctx)`` is an agent factory: its one tool hangs (an async sleep of ten
minutes) the first time any round of a task runs it, and returns at once afterwards,
so a worker stopped mid-tool leaves a round the next worker can finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from steadyloop.audit import TaskContext
from steadyloop.loop import Agent, Message, ModelReply, ReplayPolicy, ScriptedModel, ToolRegistry


def make_agent(ctx: TaskContext) -> Agent:
    """The agent for one drive of one round: call ``slow`` once, then answer."""
    assert isinstance(ctx, TaskContext)
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.SAFE)
    async def slow() -> str:
        """Hang the first time, return at once later."""
        marker = ctx.workdir / "hung-once"
        if not marker.exists():
            marker.write_text(ctx.worker)
            await asyncio.sleep(600)
        return "done"

    def script(index: int, messages: Sequence[Message]) -> ModelReply | str:
        return ModelReply.call("slow", {}) if index == 0 else f"finished by {ctx.worker}"

    return Agent("slow", ScriptedModel(script), tools)
