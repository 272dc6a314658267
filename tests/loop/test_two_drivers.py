"""Two run() calls for one run id at the same time: one drives it, the other gets RunBusy."""

from __future__ import annotations

import asyncio

from loop_helpers import APP

from steadyloop._errors import RunBusy
from steadyloop.journal import AppendResult, ForwardingJournal, MemoryJournal
from steadyloop.journal._protocol import PreparedBatch
from steadyloop.loop import (
    Agent,
    ModelReply,
    ReplayPolicy,
    RunResult,
    ScriptedModel,
    StopReason,
    ToolRegistry,
    run,
)


class Slow(ForwardingJournal):
    """Every append takes a while, as on a server backend."""

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        await asyncio.sleep(0.02)
        return await super()._append(batch)


async def test_the_losing_driver_of_two_concurrent_runs_gets_run_busy() -> None:
    """Of two concurrent run() calls with the same arguments, one completes and one raises RunBusy."""
    journal, paid = MemoryJournal(), []
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.NEVER)
    def pay() -> str:
        paid.append(1)
        return "paid"

    def agent() -> Agent:
        return Agent("a", ScriptedModel([ModelReply.call("pay"), "done"]), tools=tools)

    outcomes = await asyncio.gather(
        run(agent(), Slow(journal), APP, "ada", "s1", "r1", "go"),
        run(agent(), Slow(journal), APP, "ada", "s1", "r1", "go"),
        return_exceptions=True,
    )
    results = [o for o in outcomes if isinstance(o, RunResult)]
    errors = [o for o in outcomes if not isinstance(o, RunResult)]
    assert [r.stop_reason for r in results] == [StopReason.COMPLETED]
    assert [type(e) for e in errors] == [RunBusy]
    assert paid == [1]
