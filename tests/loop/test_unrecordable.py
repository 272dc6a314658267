"""Replies and errors that the session could not hold: the run still reaches a stop reason."""

from __future__ import annotations

from loop_helpers import APP

from steadyloop.journal import MemoryJournal
from steadyloop.loop import (
    Agent,
    Decision,
    FinalAnswer,
    ModelReply,
    ReplayPolicy,
    ScriptedModel,
    StopReason,
    ToolCall,
    ToolCalls,
    ToolRegistry,
    load_run,
    run,
)


async def test_a_tool_error_with_lone_surrogates_is_recorded_and_the_run_completes() -> None:
    """A tool error whose text has lone surrogates is stored escaped and the run completes."""
    journal, calls = MemoryJournal(), []
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.SAFE)
    def open_file() -> str:
        calls.append(1)
        name = b"report-\xff.txt".decode("utf-8", "surrogateescape")
        raise FileNotFoundError(f"no such file: {name}")

    agent = Agent("a", ScriptedModel([ModelReply.call("open_file"), "done"]), tools=tools)
    result = await run(agent, journal, APP, "ada", "s1", "r1", "go")
    assert (result.stop_reason, len(calls)) == (StopReason.COMPLETED, 1)
    info = await load_run(journal, APP, "r1")
    errors = [r.payload.get("error") for r in info.records if r.kind == "effect.result"]
    assert "no such file: report-\\udcff.txt" in str(errors[1])


async def test_a_tool_call_with_an_empty_id_is_a_parse_failure() -> None:
    """A tool call with an empty id is a parse failure counted against the budget, not a crash."""
    journal, calls = MemoryJournal(), []
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.SAFE)
    def add() -> int:
        calls.append(1)
        return 1

    bad = ModelReply(tool_calls=(ToolCall("", "add", "{}"),))
    agent = Agent("a", ScriptedModel([bad, "done"]), tools=tools)
    result = await run(agent, journal, APP, "ada", "s1", "r1", "go")
    assert (result.stop_reason, result.parse_failures, calls) == (StopReason.COMPLETED, 1, [])


class LaxParser:
    """A custom parser that passes an empty call id through."""

    def parse(self, reply: ModelReply, tools: ToolRegistry) -> Decision:
        if reply.tool_calls:
            return ToolCalls(tuple((c.id, c.name, {}) for c in reply.tool_calls))
        return FinalAnswer(reply.text or "")


async def test_a_decision_the_session_refuses_becomes_a_parse_failure() -> None:
    """A decision whose events the session refuses is stored as a parse failure, not a crash."""
    journal = MemoryJournal()
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.SAFE)
    def add() -> int:
        return 1

    bad = ModelReply(tool_calls=(ToolCall("", "add", "{}"),))
    agent = Agent("a", ScriptedModel([bad, "done"]), tools=tools, parser=LaxParser())
    result = await run(agent, journal, APP, "ada", "s1", "r1", "go")
    assert (result.stop_reason, result.parse_failures) == (StopReason.COMPLETED, 1)
    assert result.actions == 0
