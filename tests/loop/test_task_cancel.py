"""Cancelling the task that drives a run: what the journal keeps."""

from __future__ import annotations

import asyncio

import pytest
from loop_helpers import APP

from steadyloop._errors import RunNotFound
from steadyloop.journal import AppendResult, ForwardingJournal, Journal, MemoryJournal
from steadyloop.journal._protocol import PreparedBatch
from steadyloop.loop import Agent, ScriptedModel, StopReason, load_run, run, run_stream


class HangingJournal(ForwardingJournal):
    """Hangs (until cancelled) the ``nth`` append that writes to the run stream."""

    def __init__(self, inner: Journal, nth: int) -> None:
        super().__init__(inner)
        self.nth = nth
        self.seen = 0
        self.hanging = asyncio.Event()

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        if any(w.stream.startswith('["run"') for w in batch.writes):
            self.seen += 1
            if self.seen == self.nth:
                self.hanging.set()
                await asyncio.Event().wait()
        return await super()._append(batch)


async def cancel_at(journal: MemoryJournal, agent: Agent, nth: int) -> None:
    hanging = HangingJournal(journal, nth)
    task = asyncio.create_task(run(agent, hanging, APP, "ada", "s1", "r1", "go"))
    await hanging.hanging.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancel_before_the_first_batch_lands_writes_nothing_to_the_run() -> None:
    """A task cancelled before the run's first batch is durable leaves no run record at all."""
    journal = MemoryJournal()
    agent = Agent("a", ScriptedModel(["done"]))
    await cancel_at(journal, agent, 1)
    assert await journal.read(APP, run_stream("r1")) == []
    with pytest.raises(RunNotFound):
        await load_run(journal, APP, "r1")
    result = await run(Agent("a", ScriptedModel(["done"])), journal, APP, "ada", "s1", "r1", "go")
    assert result.stop_reason is StopReason.COMPLETED
