"""The exact journal writes of a run: kinds, streams and batch boundaries."""

from __future__ import annotations

from loop_helpers import APP, RecordingJournal, deterministic, standard_agent

from steadyloop.journal import MemoryJournal
from steadyloop.loop import Agent, ModelReply, ReplayPolicy, ScriptedModel, ToolRegistry, run
from steadyloop.sessions import SessionService

RUN = '["run","r1"]'
SESSION = '["session","ada","s1"]'


async def test_one_tool_step_writes_one_batch_per_effect() -> None:
    """A run with one tool call makes exactly these batches: one sync per effect, end included."""
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.SAFE)
    def echo(text: str) -> str:
        return text

    agent = Agent("echo", ScriptedModel([ModelReply.call("echo", {"text": "hi"}), "done"]), tools)
    journal = RecordingJournal(MemoryJournal())
    result = await run(agent, journal, APP, "ada", "s1", "r1", "say hi", records=deterministic())
    assert result.stop_reason.value == "completed"
    assert journal.batches == [
        # create_session (the session did not exist)
        [(SESSION, ["session.created"])],
        # user input + start + claim + intent, then the model is called
        [(SESSION, ["session.event"]), (RUN, ["run.started", "run.claimed", "effect.intent"])],
        # model result + its reply event + the tool's intent, then the tool is called
        [(SESSION, ["session.event"]), (RUN, ["effect.result", "effect.intent"])],
        # tool result + its observation + the next model intent, then the model is called
        [(SESSION, ["session.event"]), (RUN, ["effect.result", "effect.intent"])],
        # final reply + end record, before run() returns
        [(SESSION, ["session.event"]), (RUN, ["effect.result", "run.ended"])],
    ]


async def test_standard_run_payloads_carry_intent_ids_and_policies() -> None:
    """Every intent names its id, policy, step and attempt; every result names its intent."""
    journal = MemoryJournal()
    result = await run(
        standard_agent(), journal, APP, "ada", "s1", "r1", "go", records=deterministic()
    )
    assert (result.stop_reason.value, result.output) == ("completed", "all done")
    assert (result.steps, result.actions, result.parse_failures) == (5, 4, 1)
    records = await journal.read(APP, RUN)
    intents = [r.payload for r in records if r.kind == "effect.intent"]
    results = [r.payload for r in records if r.kind == "effect.result"]
    assert [i["intent_id"] for i in intents] == [f"r1/{n}" for n in range(1, 10)]
    assert [r["intent_id"] for r in results] == [i["intent_id"] for i in intents]
    assert [(i["what"], i.get("tool"), i["policy"]) for i in intents] == [
        ("model", None, "safe"),
        ("tool", "lookup", "safe"),
        ("model", None, "safe"),
        ("tool", "add", "safe"),
        ("tool", "send_email", "never"),
        ("model", None, "safe"),  # the broken reply
        ("model", None, "safe"),
        ("tool", "explode", "safe"),
        ("model", None, "safe"),
    ]
    assert all(i["attempt"] == 1 for i in intents)
    assert [r["status"] for r in results] == ["ok"] * 7 + ["error", "ok"]
    assert results[5]["decision"]["kind"] == "parse_failure"
    assert results[7]["error"] == "ValueError: the tool broke"
    assert records[-1].kind == "run.ended"
    assert records[-1].payload["stop_reason"] == "completed"


async def test_the_prompt_is_derived_from_the_session_summaries_included() -> None:
    """A second run in a summarised session shows the model the summary, then uncovered events."""
    journal = MemoryJournal()
    first = ScriptedModel(["Paris."])
    await run(Agent("a", first), journal, APP, "ada", "s1", "r1", "Capital of France?")
    service = SessionService(journal, APP)
    session = await service.get_session("ada", "s1")
    await service.summarize(
        session,
        "Ada asked for the capital of France; it is Paris.",
        summary_id="sum-1",
        version=1,
        replaces=None,
        covers_through=session.events[-1].id,
    )
    second = ScriptedModel(["Berlin."])
    await run(
        Agent("a", second, system_prompt="Be brief."),
        journal,
        APP,
        "ada",
        "s1",
        "r2",
        "And Germany?",
    )
    ((_, prompt),) = second.calls
    assert [(m.role, m.content) for m in prompt] == [
        ("system", "Be brief."),
        (
            "system",
            "Summary of the earlier conversation:\n"
            "Ada asked for the capital of France; it is Paris.",
        ),
        ("user", "And Germany?"),
    ]
