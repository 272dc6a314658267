"""Tools declared ``thread=True``: a blocking sync tool runs off the event loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from loop_helpers import APP

from steadyloop.journal import MemoryJournal
from steadyloop.loop import (
    Agent,
    ModelReply,
    ReplayPolicy,
    ScriptedModel,
    StopReason,
    ToolContext,
    ToolRegistry,
    run,
)


def blocking_agent(thread: bool, seen: list[str]) -> Agent:
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.NEVER, thread=thread)
    def wait(seconds: float, context: ToolContext) -> str:
        """Block the calling thread."""
        seen.append(threading.current_thread().name)
        time.sleep(seconds)
        return context.idempotency_key

    model = ScriptedModel([ModelReply.call("wait", {"seconds": 0.3}, id="c1"), "done"])
    return Agent("blocker", model, tools)


async def ticks_during(agent: Agent) -> tuple[int, str | None]:
    """Run the agent while a ticker counts 10 ms ticks; return the ticks and the output."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    counting = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    result = await run(agent, MemoryJournal(), APP, "u", "s", "r", "go")
    counting.cancel()
    assert result.stop_reason is StopReason.COMPLETED
    return ticks, result.output


@pytest.mark.parametrize("thread", [True, False])
async def test_a_threaded_tool_leaves_the_event_loop_free(thread: bool) -> None:
    """While a thread=True tool blocks, other tasks run; an inline sync tool stalls them."""
    seen: list[str] = []
    ticks, output = await ticks_during(blocking_agent(thread, seen))
    assert output == "done"
    on_loop = seen == [threading.current_thread().name]
    if thread:
        assert not on_loop and ticks >= 10, (seen, ticks)
    else:
        assert on_loop and ticks <= 3, (seen, ticks)


async def test_thread_true_leaves_an_async_tool_on_the_loop_with_its_arguments() -> None:
    """An async tool registered with thread=True runs on the loop, given its arguments and context."""
    tools = ToolRegistry()
    where: list[str] = []

    @tools.tool(policy=ReplayPolicy.SAFE, thread=True)
    async def probe(n: int, context: ToolContext) -> int:
        """Report the thread it runs on."""
        where.append(threading.current_thread().name)
        return n + context.index

    value = await tools.get("probe").invoke({"n": 41}, ToolContext("r", "i", 1, 1, 1))
    assert value == 42 and where == [threading.current_thread().name]
