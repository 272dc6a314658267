"""Budgets, parse failures and failing tools: each stops or is recorded as documented."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from loop_helpers import APP, counting_agent

from steadyloop.journal import MemoryJournal
from steadyloop.loop import (
    Agent,
    Budgets,
    Message,
    ModelReply,
    ReplayPolicy,
    ScriptedModel,
    StopReason,
    ToolRegistry,
    ToolSpec,
    resume,
    run,
    run_stream,
)
from steadyloop.sessions import SessionService, TextPart
from steadyloop.testing import CrashingJournal, SimulatedCrash


async def test_step_budget_stops_the_run() -> None:
    """A run that would make more model calls than max_steps stops with BUDGET_EXHAUSTED."""
    agent = counting_agent(10, policy=ReplayPolicy.SAFE)
    agent = Agent(agent.name, agent.model, agent.tools, budgets=Budgets(max_steps=3))
    result = await run(agent, MemoryJournal(), APP, "u", "s", "r", "go")
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert (result.steps, result.actions) == (3, 3)
    assert "step budget" in result.detail


async def test_action_budget_stops_before_the_action() -> None:
    """A tool call beyond max_actions is not executed; the run stops with BUDGET_EXHAUSTED."""
    agent = counting_agent(10, policy=ReplayPolicy.SAFE)
    agent = Agent(agent.name, agent.model, agent.tools, budgets=Budgets(max_actions=2))
    journal = MemoryJournal()
    result = await run(agent, journal, APP, "u", "s", "r", "go")
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert (result.steps, result.actions) == (3, 2)
    assert "action budget" in result.detail
    tools = [r for r in await journal.read(APP, run_stream("r")) if r.payload.get("what") == "tool"]
    assert len(tools) == 2


async def test_prompt_budget_stops_before_the_model_call() -> None:
    """A prompt larger than max_prompt_chars is never sent; no intent is written for it."""
    agent = Agent("big", ScriptedModel(["never"]), budgets=Budgets(max_prompt_chars=10))
    journal = MemoryJournal()
    result = await run(agent, journal, APP, "u", "s", "r", "a question longer than ten")
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert "prompt would be" in result.detail
    assert result.steps == 0
    assert [r.kind for r in await journal.read(APP, run_stream("r"))] == [
        "run.started",
        "run.claimed",
        "run.ended",
    ]


async def test_unparseable_replies_count_against_their_budget() -> None:
    """Replies that do not parse count; three in a row stop the run with PARSE_FAILURES."""
    broken = [
        ModelReply(),  # empty
        ModelReply.call("nope", {}),  # unknown tool
        ModelReply.call("echo", "[1, 2]"),  # arguments not an object
    ]
    tools = ToolRegistry()
    tools.tool(policy=ReplayPolicy.SAFE)(lambda: "x")  # registered as "<lambda>"
    agent = Agent("broken", ScriptedModel(broken), tools, budgets=Budgets(max_parse_failures=3))
    result = await run(agent, MemoryJournal(), APP, "u", "s", "r", "go")
    assert result.stop_reason is StopReason.PARSE_FAILURES
    assert (result.steps, result.parse_failures) == (3, 3)
    assert "3 model replies in a row" in result.detail


async def test_a_good_reply_resets_the_consecutive_parse_failures() -> None:
    """Only failures in a row stop the run; the model is told why each reply failed."""
    script: list[ModelReply | str] = [ModelReply(), ModelReply(), "fine"]
    model = ScriptedModel(script)
    agent = Agent("flaky", model, budgets=Budgets(max_parse_failures=3))
    result = await run(agent, MemoryJournal(), APP, "u", "s", "r", "go")
    assert (result.stop_reason, result.parse_failures, result.steps) == (StopReason.COMPLETED, 2, 3)
    last_prompt = model.calls[-1][1]
    feedback = [m.content for m in last_prompt if m.role == "user"][1:]
    assert (
        feedback
        == [
            "Your last reply could not be used: the reply is empty: call a tool "
            "or give a final answer"
        ]
        * 2
    )


async def test_a_tool_that_raises_is_recorded_as_its_observation() -> None:
    """A raising tool's error becomes the observation the model sees; the run goes on."""
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.NEVER)
    def charge(amount: int) -> None:
        raise RuntimeError(f"card declined for {amount}")

    model = ScriptedModel([ModelReply.call("charge", {"amount": 5}, id="c1"), "gave up"])
    result = await run(Agent("pay", model, tools), MemoryJournal(), APP, "u", "s", "r", "go")
    assert (result.stop_reason, result.actions) == (StopReason.COMPLETED, 1)
    tool_message = model.calls[1][1][-1]
    assert (tool_message.role, tool_message.content) == (
        "tool",
        "error: RuntimeError: card declined for 5",
    )


async def test_a_never_tool_that_raised_is_not_run_again_after_a_crash() -> None:
    """Its error is a recorded outcome: resume reuses it and never calls the tool again."""
    calls = []
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.NEVER)
    def charge() -> None:
        calls.append(1)
        raise RuntimeError("declined")

    def agent() -> Agent:
        return Agent("pay", ScriptedModel([ModelReply.call("charge"), "ok"]), tools)

    journal = MemoryJournal()
    # appends: 1 session, 2 start+intent(model), 3 intent(charge), 4 result(charge)+intent(model)
    with pytest.raises(SimulatedCrash):
        await run(agent(), CrashingJournal(journal, 4, "after"), APP, "u", "s", "r", "go")
    result = await resume(agent(), journal, APP, "r")
    assert result.stop_reason is StopReason.COMPLETED
    assert calls == [1]


async def test_a_tool_returning_no_json_value_is_an_error_observation() -> None:
    """A tool result that JSON cannot carry is recorded as an error, not a crash."""
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.SAFE)
    def weird() -> object:
        return {1, 2}

    model = ScriptedModel([ModelReply.call("weird"), "ok"])
    result = await run(Agent("w", model, tools), MemoryJournal(), APP, "u", "s", "r", "go")
    assert result.stop_reason is StopReason.COMPLETED
    assert "no JSON value" in (model.calls[1][1][-1].content or "")


def test_budgets_refuse_nonsense() -> None:
    """Budgets must be positive integers."""
    with pytest.raises(ValueError, match="max_steps"):
        Budgets(max_steps=0)
    with pytest.raises(ValueError, match="max_prompt_chars"):
        Budgets(max_prompt_chars=True)


def test_tools_must_state_a_policy_and_unique_names() -> None:
    """A tool without a ReplayPolicy, or a second tool of the same name, is refused."""
    tools = ToolRegistry()
    tools.tool(policy=ReplayPolicy.SAFE, name="t")(lambda: 1)
    with pytest.raises(ValueError, match="already registered"):
        tools.tool(policy=ReplayPolicy.SAFE, name="t")(lambda: 2)
    with pytest.raises(TypeError, match="ReplayPolicy"):
        tools.tool(policy="safe", name="u")(lambda: 3)  # type: ignore[arg-type]


async def test_prompt_budget_is_checked_again_when_the_session_moved_under_an_intent() -> None:
    """A session write that refuses an intent's batch sends the loop back to its budget checks."""
    journal = MemoryJournal()
    service = SessionService(journal, APP)
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.SAFE)
    async def note() -> str:
        session = await service.get_session("ada", "s1")
        await service.append_event(session, service.new_event("user", [TextPart("x" * 5000)]))
        return "ok"

    sizes: list[int] = []

    class Measuring(ScriptedModel):
        async def complete(
            self, messages: Sequence[Message], tools: Sequence[ToolSpec]
        ) -> ModelReply:
            sizes.append(sum(m.size for m in messages))
            return await super().complete(messages, tools)

    model = Measuring([ModelReply.call("note"), "done"])
    agent = Agent("a", model, tools=tools, budgets=Budgets(max_prompt_chars=1000))
    result = await run(agent, journal, APP, "ada", "s1", "r1", "go")
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert len(sizes) == 1
