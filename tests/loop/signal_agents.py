"""Agents for the signal tests, configured by environment variables.

``SL_SINK``: a file each tool call appends ``<intent id> started`` / ``<intent id> done``
to (fsynced), so the parent knows when a tool runs and what finished.
``SL_SLEEP``: seconds each tool call sleeps (default 0).
``SL_STEPS``: how many tool calls the run makes (default 3).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from steadyloop.loop import (
    Agent,
    Budgets,
    Message,
    ModelReply,
    ReplayPolicy,
    ScriptedModel,
    ToolContext,
    ToolRegistry,
)


def _note(line: str) -> None:
    fd = os.open(os.environ["SL_SINK"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _agent(name: str, *, thread: bool, policy: ReplayPolicy) -> Agent:
    steps = int(os.environ.get("SL_STEPS", "3"))
    tools = ToolRegistry()

    @tools.tool(policy=policy, thread=thread)
    def work(n: int, context: ToolContext) -> dict[str, int]:
        _note(f"{context.intent_id} started")
        time.sleep(float(os.environ.get("SL_SLEEP", "0")))
        _note(f"{context.intent_id} done")
        return {"done": n}

    def script(index: int, messages: Sequence[Message]) -> ModelReply | str:
        if index < steps:
            return ModelReply.call("work", {"n": index + 1}, id=f"c{index + 1}")
        return f"did {steps}"

    return Agent(
        name=name,
        model=ScriptedModel(script, record=False),
        tools=tools,
        budgets=Budgets(max_steps=steps + 2, max_actions=steps + 2),
    )


def threaded() -> Agent:
    """Safe tools called in a thread."""
    return _agent("threaded", thread=True, policy=ReplayPolicy.SAFE)


def inline() -> Agent:
    """Safe tools called inline, on the event loop's thread."""
    return _agent("inline", thread=False, policy=ReplayPolicy.SAFE)


def never_threaded() -> Agent:
    """Never-repeat tools called in a thread."""
    return _agent("never_threaded", thread=True, policy=ReplayPolicy.NEVER)
