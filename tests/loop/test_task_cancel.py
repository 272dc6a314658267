"""Cancelling the task that drives a run: what the journal keeps."""

from __future__ import annotations

import asyncio

import pytest
from loop_helpers import APP

from steadyloop._errors import RunFinished, RunNotFound
from steadyloop.journal import AppendResult, ForwardingJournal, Journal, MemoryJournal
from steadyloop.journal._protocol import PreparedBatch
from steadyloop.loop import (
    Agent,
    Happened,
    ModelReply,
    ReplayPolicy,
    ScriptedModel,
    StopReason,
    ToolRegistry,
    load_run,
    resolve,
    resume,
    run,
    run_stream,
)
from steadyloop.sessions import SessionService


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


def pay_agent(paid: list[str]) -> Agent:
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.NEVER)
    def pay() -> str:
        paid.append("paid")
        return "receipt-42"

    return Agent("a", ScriptedModel([ModelReply.call("pay"), "done"]), tools=tools)


async def test_cancel_while_a_known_result_is_in_flight_keeps_that_result() -> None:
    """A never-repeat effect's result queued when the task is cancelled is written with the end."""
    journal, paid = MemoryJournal(), []
    # Run-stream batches: 1 start+intent(model), 2 result(model)+intent(pay),
    # 3 result(pay)+event+intent(model): cancelled while it is in flight.
    await cancel_at(journal, pay_agent(paid), 3)
    info = await load_run(journal, APP, "r1")
    assert paid == ["paid"]
    assert info.state.ended is not None
    assert info.state.ended.stop_reason is StopReason.CANCELLED
    assert info.state.ended.open_intent is None
    results = [r.payload for r in info.records if r.kind == "effect.result"]
    assert results[-1]["value"] == "receipt-42"
    session = await SessionService(journal, APP).get_session("ada", "s1")
    assert any(e.id == "r1/2:result" for e in session.events)


async def test_cancel_mid_never_effect_suspends_the_run_for_a_decision() -> None:
    """A task cancelled during a never-repeat effect suspends the run so resolve can decide."""
    journal = MemoryJournal()
    gate, entered = asyncio.Event(), asyncio.Event()
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.NEVER)
    async def wait() -> str:
        entered.set()
        await gate.wait()
        return "waited"

    agent = Agent("gated", ScriptedModel([ModelReply.call("wait"), "done"]), tools)
    task = asyncio.create_task(run(agent, journal, APP, "ada", "s1", "r1", "go"))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    info = await load_run(journal, APP, "r1")
    assert (info.state.ended, info.status) == (None, "resume_state_unknown")
    assert info.state.suspended == "r1/2"
    await resolve(journal, APP, "r1", "r1/2", Happened("waited"))
    result = await resume(agent, journal, APP, "r1")
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "done")


class DownAfterHang(HangingJournal):
    """Hangs the ``nth`` run-stream append; from then on every read fails, until ``up``."""

    up = False

    async def _head(self, namespace: str, stream: str) -> int:
        if self.hanging.is_set() and not self.up:
            raise ConnectionError("the server went away")
        return await super()._head(namespace, stream)


async def cancel_while_down(
    journal: MemoryJournal, paid: list[str]
) -> tuple[DownAfterHang, asyncio.Task[object]]:
    """Start a paying run, and cancel it as its third run-stream batch hangs and reads fail."""
    down = DownAfterHang(journal, 3)
    task = asyncio.create_task(run(pay_agent(paid), down, APP, "ada", "s1", "r1", "go"))
    await down.hanging.wait()
    task.cancel()
    return down, task


async def test_a_cancel_the_journal_cannot_record_is_said_and_the_run_stays_as_recorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A cancelled run whose journal fails while its end is recorded logs one warning and stays as its last durable record says."""
    journal, paid = MemoryJournal(), []
    _, task = await cancel_while_down(journal, paid)
    with (
        caplog.at_level("WARNING", logger="steadyloop.loop"),
        pytest.raises(asyncio.CancelledError),
    ):
        await task
    warned = [r for r in caplog.records if "could not record how the cancelled run" in r.message]
    assert len(warned) == 1 and "ConnectionError" in warned[0].getMessage()
    info = await load_run(journal, APP, "r1")
    assert info.state.ended is None
    assert paid == ["paid"]


async def test_a_cancel_the_journal_could_not_record_is_recorded_once_it_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A cancelled run whose end could not be recorded gets it once the journal answers again, while its process lives, so the run is not left busy."""
    journal, paid = MemoryJournal(), []
    down, task = await cancel_while_down(journal, paid)
    with pytest.raises(asyncio.CancelledError):
        await task
    # In this process the driver is known gone; another process would see it busy.
    assert (await load_run(journal, APP, "r1")).status == "interrupted"
    await asyncio.sleep(0.6)  # a few tries fail while the journal is down
    with caplog.at_level("INFO", logger="steadyloop.loop"):
        down.up = True
        for _ in range(100):
            info = await load_run(journal, APP, "r1")
            if info.status != "interrupted":
                break
            await asyncio.sleep(0.05)
    assert info.status == StopReason.CANCELLED.value, info.status
    assert [r for r in caplog.records if "cancelled run stands is recorded" in r.message]
    assert paid == ["paid"]
    assert info.state.ended is not None and info.state.ended.actions == 1
    with pytest.raises(RunFinished):  # ended for good: the charge is never made again
        await resume(pay_agent(paid), journal, APP, "r1")
    assert paid == ["paid"]
