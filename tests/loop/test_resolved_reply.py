"""A model reply given by the caller through resolve() is not a parse failure when read back."""

from __future__ import annotations

import pytest
from loop_helpers import APP

from steadyloop.journal import MemoryJournal
from steadyloop.loop import (
    Agent,
    Budgets,
    Happened,
    ModelReply,
    ReplayPolicy,
    ScriptedModel,
    StopReason,
    ToolRegistry,
    list_runs,
    load_run,
    resolve,
    resume,
    run,
)
from steadyloop.testing import CrashingJournal, SimulatedCrash


def agent() -> Agent:
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.SAFE)
    def add(a: int, b: int) -> int:
        return a + b

    model = ScriptedModel([ModelReply.call("add", {"a": 1, "b": 2}), "three"])
    budgets = Budgets(max_parse_failures=1)
    return Agent("a", model, tools=tools, model_policy=ReplayPolicy.NEVER, budgets=budgets)


async def test_load_run_does_not_count_a_caller_resolved_reply_as_a_parse_failure() -> None:
    """load_run and list_runs report no parse failure for a reply the caller resolved."""
    journal = MemoryJournal()
    # Appends: 1 session, 2 start + intent(model), 3 result(model): the crash hits before it.
    with pytest.raises(SimulatedCrash):
        await run(agent(), CrashingJournal(journal, 3, "before"), APP, "ada", "s1", "r1", "go")
    stopped = await resume(agent(), journal, APP, "r1")
    assert stopped.open_intent is not None
    reply = ModelReply.call("add", {"a": 1, "b": 2}).to_json()
    await resolve(journal, APP, "r1", stopped.open_intent, Happened(reply))
    info = await load_run(journal, APP, "r1")
    assert (info.status, info.state.parse_failures, info.state.end) == ("interrupted", 0, None)
    assert [i.state.parse_failures for i in await list_runs(journal, APP)] == [0]
    result = await resume(agent(), journal, APP, "r1")
    assert (result.stop_reason, result.parse_failures) == (StopReason.COMPLETED, 0)
    assert (await load_run(journal, APP, "r1")).state.parse_failures == 0
