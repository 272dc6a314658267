"""Two run() calls for one run id at the same time: one drives it, the other gets RunBusy."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from loop_helpers import APP

from steadyloop._errors import RunBusy, RunFinished
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
    load_run,
    run,
    run_stream,
)
from steadyloop.records import StoredRecord


class Slow(ForwardingJournal):
    """Every append takes a while, as on a server backend."""

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        await asyncio.sleep(0.02)
        return await super()._append(batch)


def paying_agent(paid: list[int]) -> Callable[[], Agent]:
    """Fresh agents of one run: the model calls a NEVER ``pay`` tool (counted in ``paid``), then ends."""
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.NEVER)
    def pay() -> str:
        paid.append(1)
        return "paid"

    def agent() -> Agent:
        return Agent("a", ScriptedModel([ModelReply.call("pay"), "done"]), tools=tools)

    return agent


async def test_the_losing_driver_of_two_concurrent_runs_gets_run_busy() -> None:
    """Of two concurrent run() calls with the same arguments, one completes and one raises RunBusy."""
    journal, paid = MemoryJournal(), []
    agent = paying_agent(paid)

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


class StartsItMeanwhile(ForwardingJournal):
    """While this driver looks at the run's stream, another driver starts the run and ends it.

    As when a worker is stopped (SIGSTOP) between its look and its first write, and the
    task's next holder drives the whole run in between.
    """

    def __init__(self, inner: MemoryJournal, other: Agent) -> None:
        super().__init__(inner)
        self.other: Agent | None = other

    async def _read(
        self, namespace: str, stream: str, start: int, limit: int | None
    ) -> list[StoredRecord]:
        records = await super()._read(namespace, stream, start, limit)
        if self.other is not None and stream == run_stream("r1"):
            other, self.other = self.other, None
            await run(other, self.inner, APP, "ada", "s1", "r1", "go")
        return records


async def test_a_run_started_by_another_driver_after_the_first_look_is_not_started_twice() -> None:
    """A run() whose first look found no run, while another driver then started and finished it, raises RunFinished and writes nothing."""
    journal, paid = MemoryJournal(), []
    agent = paying_agent(paid)

    wrapped = StartsItMeanwhile(journal, agent())
    with pytest.raises(RunFinished):
        await run(agent(), wrapped, APP, "ada", "s1", "r1", "go")
    assert paid == [1]
    info = await load_run(journal, APP, "r1")
    assert info.state.ended is not None and info.state.ended.stop_reason is StopReason.COMPLETED
