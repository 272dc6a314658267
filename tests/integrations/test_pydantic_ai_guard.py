from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from steadyloop.effects import Happened, NotHappened, ReplayPolicy
from steadyloop.integrations import EffectBusy, GuardError
from steadyloop.integrations.pydantic_ai import PydanticAIGuard, call_position


class Refused(Exception):
    """The payment provider refused the connection: nothing was charged."""


def charge_then_answer(cents: list[int]) -> Any:
    """A model that charges each amount in one response (fresh call ids), then answers."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if "charged:" not in str(messages):
            return ModelResponse(parts=[ToolCallPart("charge", {"cents": c}) for c in cents])
        return ModelResponse(parts=[TextPart("done")])

    return respond


def shop(
    guard: PydanticAIGuard, calls: list[int], respond: Any, **options: Any
) -> Agent[None, Any]:
    @guard.tool(ReplayPolicy.NEVER, **options)
    def charge(cents: int) -> str:
        calls.append(cents)
        return f"charged:{cents}"

    return Agent(FunctionModel(respond), tools=[charge], output_type=[str, DeferredToolRequests])


def first_response(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The history as saved right after the first model response (before any tool ran)."""
    return messages[:2]


@pytest.fixture
def guard(tmp_path: Path) -> Any:
    with PydanticAIGuard(f"sqlite:///{tmp_path / 'guard.db'}") as g:
        yield g


async def test_rerun_from_saved_history_returns_the_recorded_charges(
    guard: PydanticAIGuard,
) -> None:
    """A run started again from the history saved after the response charges nobody again: both calls find their records."""
    calls: list[int] = []
    agent = shop(guard, calls, charge_then_answer([500, 500]))
    result = await agent.run("pay", conversation_id="c-1")
    assert result.output == "done" and calls == [500, 500]
    again = await agent.run(message_history=first_response(result.all_messages()))
    assert again.output == "done" and calls == [500, 500]


async def test_model_asked_again_keys_calls_by_position(guard: PydanticAIGuard) -> None:
    """A model asked again after a crash issues new call ids: the calls at the same positions find their records."""
    calls: list[int] = []
    agent = shop(guard, calls, charge_then_answer([300, 700]))
    await agent.run("pay", conversation_id="c-2")
    again = await agent.run("pay", conversation_id="c-2")  # nothing was saved: asked anew
    assert again.output == "done" and calls == [300, 700]


async def test_changed_arguments_at_a_position_ask_instead_of_matching(
    guard: PydanticAIGuard,
) -> None:
    """A charge asked again with another amount at the same position stops the run for a decision, never matched."""
    calls: list[int] = []
    await shop(guard, calls, charge_then_answer([300])).run("pay", conversation_id="c-3")
    result = await shop(guard, calls, charge_then_answer([400])).run("pay", conversation_id="c-3")
    assert isinstance(result.output, DeferredToolRequests)
    call = result.output.approvals[0]
    meta = result.output.metadata[call.tool_call_id]
    assert meta["reason"] == "arguments_changed" and meta["recorded_arguments"] == {"cents": 300}
    assert calls == [300]


async def test_not_happened_error_runs_again_under_a_new_intent(guard: PydanticAIGuard) -> None:
    """A charge that raised an exception declared not to have acted runs again on the next run, under a new intent."""
    calls: list[int] = []
    failures = [Refused("connection refused")]

    @guard.tool(ReplayPolicy.NEVER, not_happened_on=(Refused,))
    def charge(cents: int) -> str:
        if failures:
            raise failures.pop()
        calls.append(cents)
        return f"charged:{cents}"

    agent = Agent(
        FunctionModel(charge_then_answer([200])),
        tools=[charge],
        output_type=[str, DeferredToolRequests],
    )
    with pytest.raises(Refused):
        await agent.run("pay", conversation_id="c-4")
    result = await agent.run("pay", conversation_id="c-4")
    assert result.output == "done" and calls == [200]


async def test_raised_charge_is_asked_about_and_decided(guard: PydanticAIGuard) -> None:
    """A charge that raised anything else is unknown: the run stops, and a decision of 'not happened' runs it once."""
    calls: list[int] = []
    failures = [TimeoutError("read timed out")]

    @guard.tool(ReplayPolicy.NEVER)
    def charge(cents: int) -> str:
        if failures:
            raise failures.pop()
        calls.append(cents)
        return f"charged:{cents}"

    agent = Agent(
        FunctionModel(charge_then_answer([900])),
        tools=[charge],
        output_type=[str, DeferredToolRequests],
    )
    with pytest.raises(TimeoutError):
        await agent.run("pay", conversation_id="c-5")
    stopped = await agent.run("pay", conversation_id="c-5")
    assert isinstance(stopped.output, DeferredToolRequests)
    call = stopped.output.approvals[0]
    meta = stopped.output.metadata[call.tool_call_id]
    assert meta["reason"] == "raised"
    unknown = await guard.unknown(call, meta)
    assert unknown is not None and unknown.key == ("c-5", 0, 0)
    await guard.decide(call, meta, NotHappened(note="the provider has no such charge"))
    done = await agent.run(
        message_history=stopped.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: True}),
    )
    assert done.output == "done" and calls == [900]


async def test_decided_happened_returns_the_value_without_acting(guard: PydanticAIGuard) -> None:
    """An unknown charge decided 'happened' returns the value given and does not act."""
    calls: list[int] = []
    agent = shop(guard, calls, charge_then_answer([100]))
    begun = await guard._bridge.run_async(
        guard.ledger.begin(("c-6", 0, 0), "charge", ReplayPolicy.NEVER, {"cents": 100})
    )
    guard.ledger.abandon(begun)  # the process died after its intent
    stopped = await agent.run("pay", conversation_id="c-6")
    call = stopped.output.approvals[0]
    meta = stopped.output.metadata[call.tool_call_id]
    await guard.decide(call, meta, Happened(value="charged:100"))
    done = await agent.run(
        message_history=stopped.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: True}),
    )
    assert done.output == "done" and calls == []


def test_call_position_needs_the_call_in_a_response() -> None:
    """A tool call id that no model response holds has no position: a clear error, not a made-up key."""
    messages: list[ModelMessage] = [ModelResponse(parts=[ToolCallPart("a", {}, tool_call_id="x")])]
    assert call_position(messages, "x")[:2] == (0, 0)
    with pytest.raises(GuardError, match="no model response"):
        call_position(messages, "y")


def test_second_live_process_is_busy_then_unknown_once_it_dies(tmp_path: Path) -> None:
    """While another live process holds a charge, a run of the same history raises EffectBusy; once it is killed, the charge is asked about."""
    url = f"sqlite:///{tmp_path / 'guard.db'}"
    started = tmp_path / "started"
    respond = charge_then_answer([500])
    history: list[ModelMessage] = [
        ModelResponse(parts=[ToolCallPart("charge", {"cents": 500}, tool_call_id="k")])
    ]
    pid = os.fork()
    if pid == 0:  # the first process: charges slowly
        try:
            with PydanticAIGuard(url) as g:

                @g.tool(ReplayPolicy.NEVER)
                def charge(cents: int) -> str:
                    started.write_text("1")
                    time.sleep(60)
                    return "charged"

                agent = Agent(
                    FunctionModel(respond), tools=[charge], output_type=[str, DeferredToolRequests]
                )
                asyncio.run(agent.run(message_history=history, conversation_id="c-7"))
        finally:
            os._exit(0)
    try:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert started.exists()
        calls: list[int] = []
        with PydanticAIGuard(url) as g:
            agent = shop(g, calls, respond)
            with pytest.raises(EffectBusy):
                asyncio.run(agent.run(message_history=history, conversation_id="c-7"))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            stopped = asyncio.run(agent.run(message_history=history, conversation_id="c-7"))
        assert isinstance(stopped.output, DeferredToolRequests)
        assert calls == []
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
