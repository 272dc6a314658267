"""Resume: what is reused, what is repeated, what stops, and who may drive a run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from loop_helpers import APP, Effects, deterministic, standard_agent

from steadyloop._errors import LoopError, RunBusy, RunFinished, RunNotFound
from steadyloop.journal import Journal, MemoryJournal, StreamWrite
from steadyloop.loop import (
    Agent,
    Happened,
    ModelReply,
    NotHappened,
    Owner,
    ReplayPolicy,
    ScriptedModel,
    StopReason,
    ToolContext,
    ToolRegistry,
    load_run,
    request_cancel,
    resolve,
    resume,
    run,
    run_stream,
)
from steadyloop.records import RecordFactory
from steadyloop.sessions import SessionService
from steadyloop.testing import CrashingJournal, SimulatedCrash

RUN = run_stream("r1")

# Appends of the standard run: 1 session, 2 start+intent(model), 3 intent(lookup),
# 4 intent(model), 5 intent(add), 6 intent(send_email), 7 result(send_email)+intent(model),
# 8 parse failure, 9 intent(explode), 10 intent(model), 11 end.


async def crash(journal: Journal, at: int, side: str, effects: Effects, run_id: str = "r1") -> None:
    crashing = CrashingJournal(journal, at, side)  # type: ignore[arg-type]
    with pytest.raises(SimulatedCrash):
        await run(standard_agent(effects), crashing, APP, "ada", "s1", run_id, "go")


async def kinds(journal: Journal, run_id: str = "r1") -> list[str]:
    return [r.kind for r in await journal.read(APP, run_stream(run_id))]


async def test_completed_effects_are_reused_not_repeated() -> None:
    """After a crash, effects with a recorded result are not executed again."""
    journal, effects = MemoryJournal(), Effects()
    await crash(journal, 8, "after", effects)
    assert (effects.lookups, len(effects.emails)) == (1, 1)
    result = await resume(standard_agent(effects), journal, APP, "r1")
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "all done")
    assert (effects.lookups, len(effects.emails)) == (1, 1)


async def test_safe_intent_without_result_is_executed_again() -> None:
    """A safe tool whose result was lost runs again, under a new intent, attempt 2."""
    journal, effects = MemoryJournal(), Effects()
    await crash(journal, 4, "before", effects)  # lookup ran, its result was never written
    assert effects.lookups == 1
    result = await resume(standard_agent(effects), journal, APP, "r1")
    assert result.stop_reason is StopReason.COMPLETED
    assert effects.lookups == 2
    records = await journal.read(APP, RUN)
    lookups = [r.payload for r in records if r.payload.get("tool") == "lookup"]
    assert [(p["intent_id"], p["attempt"]) for p in lookups] == [("r1/2", 1), ("r1/3", 2)]
    interrupted = [r.payload for r in records if r.payload.get("status") == "interrupted"]
    assert [p["intent_id"] for p in interrupted] == ["r1/2"]


async def test_never_intent_without_result_stops_with_resume_state_unknown() -> None:
    """A never-repeat e-mail that may have been sent stops the run; nothing is guessed."""
    journal, effects = MemoryJournal(), Effects()
    await crash(journal, 7, "before", effects)  # the e-mail went out, its result did not
    assert len(effects.emails) == 1
    result = await resume(standard_agent(effects), journal, APP, "r1")
    assert result.stop_reason is StopReason.RESUME_STATE_UNKNOWN
    assert result.open_intent == "r1/5"
    assert "send_email" in result.detail
    assert len(effects.emails) == 1
    assert (await kinds(journal))[-1] == "run.suspended"
    # Asking again changes nothing and writes nothing.
    before = await kinds(journal)
    again = await resume(standard_agent(effects), journal, APP, "r1")
    assert again.stop_reason is StopReason.RESUME_STATE_UNKNOWN
    assert await kinds(journal) == before
    info = await load_run(journal, APP, "r1")
    assert info.status == "resume_state_unknown"


async def test_caller_decides_it_happened_and_the_run_goes_on() -> None:
    """Resolving 'it happened' records the observation; the e-mail is never sent again."""
    journal, effects = MemoryJournal(), Effects()
    await crash(journal, 7, "before", effects)
    stopped = await resume(standard_agent(effects), journal, APP, "r1")
    assert stopped.open_intent is not None
    await resolve(
        journal, APP, "r1", stopped.open_intent, Happened("sent to ada@example.com", note="outbox")
    )
    result = await resume(standard_agent(effects), journal, APP, "r1")
    assert (result.stop_reason, result.actions) == (StopReason.COMPLETED, 4)
    assert len(effects.emails) == 1
    session = await SessionService(journal, APP).get_session("ada", "s1")
    observations = [p.to_dict() for e in session.events if e.author == "tool" for p in e.parts]
    assert {
        "type": "tool_result",
        "call_id": "c3",
        "name": "send_email",
        "response": "sent to ada@example.com",
        "error": None,
    } in observations


async def test_caller_decides_it_did_not_happen_and_it_is_done_once() -> None:
    """Resolving 'it did not happen' makes resume send it, once, under a new intent."""
    journal, effects = MemoryJournal(), Effects()
    await crash(journal, 6, "after", effects)  # intent durable, e-mail not sent
    assert effects.emails == []
    stopped = await resume(standard_agent(effects), journal, APP, "r1")
    assert stopped.stop_reason is StopReason.RESUME_STATE_UNKNOWN
    assert stopped.open_intent is not None
    await resolve(journal, APP, "r1", stopped.open_intent, NotHappened("not in the outbox"))
    result = await resume(standard_agent(effects), journal, APP, "r1")
    assert result.stop_reason is StopReason.COMPLETED
    assert effects.emails == ["r1/6:ada@example.com"]


async def test_resolve_refuses_an_intent_that_is_not_open() -> None:
    """Only the open intent can be resolved; a finished run cannot be resolved at all."""
    journal, effects = MemoryJournal(), Effects()
    await crash(journal, 7, "before", effects)
    with pytest.raises(LoopError, match="not waiting for a decision"):
        await resolve(journal, APP, "r1", "r1/2", NotHappened())
    stopped = await resume(standard_agent(effects), journal, APP, "r1")
    assert stopped.open_intent is not None
    await resolve(journal, APP, "r1", stopped.open_intent, Happened("sent"))
    await resume(standard_agent(effects), journal, APP, "r1")
    with pytest.raises(RunFinished):
        await resolve(journal, APP, "r1", stopped.open_intent, Happened("sent"))
    with pytest.raises(RunNotFound):
        await resolve(journal, APP, "nope", "x", NotHappened())


async def test_resuming_a_finished_run_raises_run_finished() -> None:
    """A run whose end record is written cannot be resumed, and says how it ended."""
    journal = MemoryJournal()
    await run(standard_agent(), journal, APP, "ada", "s1", "r1", "go")
    with pytest.raises(RunFinished, match="completed"):
        await resume(standard_agent(), journal, APP, "r1")


async def test_unknown_run_id_raises_run_not_found() -> None:
    """Resuming or loading a run id the journal does not hold raises RunNotFound."""
    journal = MemoryJournal()
    with pytest.raises(RunNotFound, match="no run 'ghost'"):
        await resume(standard_agent(), journal, APP, "ghost")
    with pytest.raises(RunNotFound):
        await load_run(journal, APP, "ghost")


async def test_run_again_with_same_arguments_continues_and_different_ones_refuse() -> None:
    """Calling run() again after a crash resumes; other arguments for the id are refused."""
    journal, effects = MemoryJournal(), Effects()
    await crash(journal, 5, "after", effects)
    with pytest.raises(LoopError, match="different input"):
        await run(standard_agent(effects), journal, APP, "ada", "s1", "r1", "other input")
    result = await run(standard_agent(effects), journal, APP, "ada", "s1", "r1", "go")
    assert result.stop_reason is StopReason.COMPLETED
    assert effects.lookups == 1


async def test_resume_with_another_agent_is_refused() -> None:
    """A run resumes only with the agent (by name) it started with."""
    journal = MemoryJournal()
    await crash(journal, 4, "after", Effects())
    with pytest.raises(LoopError, match="started by agent 'standard'"):
        await resume(Agent("other", ScriptedModel(["x"])), journal, APP, "r1")


def gated_agent(
    gate: asyncio.Event, entered: asyncio.Event, policy: ReplayPolicy = ReplayPolicy.NEVER
) -> Agent:
    tools = ToolRegistry()

    @tools.tool(policy=policy)
    async def wait() -> str:
        entered.set()
        await gate.wait()
        return "waited"

    return Agent("gated", ScriptedModel([ModelReply.call("wait"), "done"]), tools)


async def test_a_second_task_cannot_drive_a_running_run() -> None:
    """While one task drives a run, resuming it from another task raises RunBusy."""
    journal = MemoryJournal()
    gate, entered = asyncio.Event(), asyncio.Event()
    agent = gated_agent(gate, entered)
    task = asyncio.create_task(run(agent, journal, APP, "ada", "s1", "r1", "go"))
    await entered.wait()
    with pytest.raises(RunBusy, match="another task"):
        await resume(agent, journal, APP, "r1")
    assert (await load_run(journal, APP, "r1")).status == "running"
    gate.set()
    assert (await task).stop_reason is StopReason.COMPLETED


async def test_a_live_process_on_this_host_holds_the_run() -> None:
    """A claim by a live process refuses resume; once that process is dead, resume works."""
    journal = MemoryJournal()
    await crash(journal, 3, "after", Effects())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = Owner.me("foreign")
        claim = dataclass_replace(owner, pid=child.pid, pid_start=None)
        await journal.append(
            APP, StreamWrite(RUN, [RecordFactory()("run.claimed", {"owner": claim.to_json()})])
        )
        with pytest.raises(RunBusy, match=f"process {child.pid}"):
            await resume(standard_agent(), journal, APP, "r1")
    finally:
        child.kill()
        child.wait()
    result = await resume(standard_agent(), journal, APP, "r1")
    assert result.stop_reason is StopReason.COMPLETED


async def test_a_claim_from_another_host_needs_takeover() -> None:
    """A claimant on another host cannot be checked: resume refuses unless takeover=True."""
    journal = MemoryJournal()
    await crash(journal, 3, "after", Effects())
    other = Owner(host="elsewhere", boot=None, pid=1, pid_start=None, token="t")
    await journal.append(
        APP, StreamWrite(RUN, [RecordFactory()("run.claimed", {"owner": other.to_json()})])
    )
    with pytest.raises(RunBusy, match=r"take the run over \(--takeover\)"):
        await resume(standard_agent(), journal, APP, "r1")
    result = await resume(standard_agent(), journal, APP, "r1", takeover=True)
    assert result.stop_reason is StopReason.COMPLETED


async def test_a_driver_fenced_out_by_a_foreign_write_stops_with_run_busy() -> None:
    """If anything else writes to the run, the driver's next batch is refused: RunBusy."""
    journal = MemoryJournal()
    gate, entered = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run(gated_agent(gate, entered), journal, APP, "ada", "s1", "r1", "go")
    )
    await entered.wait()
    other = Owner(host="elsewhere", boot=None, pid=1, pid_start=None, token="t")
    await journal.append(
        APP, StreamWrite(RUN, [RecordFactory()("run.claimed", {"owner": other.to_json()})])
    )
    gate.set()
    with pytest.raises(RunBusy, match="another driver"):
        await task


async def test_cancel_event_ends_the_run_after_recording_the_effect_in_flight() -> None:
    """Setting the cancel event stops the run at its next write, with the action recorded."""
    journal = MemoryJournal()
    gate, entered = asyncio.Event(), asyncio.Event()
    cancel = asyncio.Event()
    task = asyncio.create_task(
        run(gated_agent(gate, entered), journal, APP, "ada", "s1", "r1", "go", cancel=cancel)
    )
    await entered.wait()
    cancel.set()
    gate.set()
    result = await task
    assert (result.stop_reason, result.actions, result.steps) == (StopReason.CANCELLED, 1, 1)
    assert (await kinds(journal))[-2:] == ["effect.result", "run.ended"]


async def test_request_cancel_from_elsewhere_ends_the_run_at_its_next_write() -> None:
    """A cancel request written by another process ends the run; no new effect starts."""
    journal = MemoryJournal()
    gate, entered = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        run(gated_agent(gate, entered), journal, APP, "ada", "s1", "r1", "go")
    )
    await entered.wait()
    await request_cancel(journal, APP, "r1", "the user pressed stop")
    gate.set()
    result = await task
    assert (result.stop_reason, result.actions) == (StopReason.CANCELLED, 1)
    k = await kinds(journal)
    assert k[-3:] == ["run.cancel_requested", "effect.result", "run.ended"]
    assert "effect.intent" not in k[k.index("run.cancel_requested") :]
    with pytest.raises(RunFinished):
        await request_cancel(journal, APP, "r1")


async def test_cancel_request_ends_a_suspended_run_without_deciding_its_intent() -> None:
    """A run suspended at RESUME_STATE_UNKNOWN ends CANCELLED on resume, its intent named as unknown."""
    journal, effects = MemoryJournal(), Effects()
    await crash(journal, 6, "after", effects)
    stopped = await resume(standard_agent(effects), journal, APP, "r1")
    assert stopped.stop_reason is StopReason.RESUME_STATE_UNKNOWN
    await request_cancel(journal, APP, "r1", "nobody can check the outbox")
    result = await resume(standard_agent(effects), journal, APP, "r1")
    assert result.stop_reason is StopReason.CANCELLED
    assert result.open_intent == stopped.open_intent
    assert f"{stopped.open_intent!r} was unknown; it was left unresolved" in result.detail
    assert effects.emails == []  # the e-mail was never sent, and resume did not guess
    k = await kinds(journal)
    assert k[-3:] == ["run.cancel_requested", "run.claimed", "run.ended"]
    assert "effect.result" not in k[k.index("run.suspended") :]
    with pytest.raises(RunFinished):
        await resolve(journal, APP, "r1", str(stopped.open_intent), NotHappened())


async def test_resolve_refuses_an_outcome_without_a_json_form_and_writes_nothing() -> None:
    """A decision whose error or note cannot be encoded raises LoopError; the run stays suspended."""
    journal, effects = MemoryJournal(), Effects()
    await crash(journal, 6, "after", effects)
    stopped = await resume(standard_agent(effects), journal, APP, "r1")
    intent = str(stopped.open_intent)
    before = await kinds(journal)
    for outcome in (Happened(error="bad \ud800"), NotHappened(note="\udfff"), Happened(1.5e400)):
        with pytest.raises(LoopError, match="no JSON form"):
            await resolve(journal, APP, "r1", intent, outcome)
    assert await kinds(journal) == before


async def test_cancelling_the_task_writes_cancelled_and_leaves_the_intent_open() -> None:
    """A task cancelled mid safe effect ends CANCELLED and keeps that intent open, as unknown."""
    journal = MemoryJournal()
    gate, entered = asyncio.Event(), asyncio.Event()
    agent = gated_agent(gate, entered, ReplayPolicy.SAFE)
    task = asyncio.create_task(run(agent, journal, APP, "ada", "s1", "r1", "go"))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    info = await load_run(journal, APP, "r1")
    assert info.state.ended is not None
    assert info.state.ended.stop_reason is StopReason.CANCELLED
    assert info.state.ended.open_intent == "r1/2"


async def test_model_error_ends_the_run_with_error() -> None:
    """A model call that fails is recorded and ends the run with ERROR, which is final."""
    journal = MemoryJournal()
    agent = Agent("short", ScriptedModel([]))
    result = await run(agent, journal, APP, "ada", "s1", "r1", "go")
    assert result.stop_reason is StopReason.ERROR
    assert "has 0 replies" in result.detail
    with pytest.raises(RunFinished):
        await resume(agent, journal, APP, "r1")


def dataclass_replace(owner: Owner, **changes: object) -> Owner:
    import dataclasses

    return dataclasses.replace(owner, **changes)  # type: ignore[arg-type]


def test_owner_of_this_process_is_alive() -> None:
    """The owner record of this very process reads as alive."""
    assert Owner.me("t").process_alive()
    assert Owner.me("t").pid == os.getpid()


async def test_deterministic_records_do_not_change_the_outcome() -> None:
    """Runs with injected clock and ids give the same result as with the defaults."""
    a = await run(
        standard_agent(), MemoryJournal(), APP, "u", "s", "r", "go", records=deterministic()
    )
    b = await run(standard_agent(), MemoryJournal(), APP, "u", "s", "r", "go")
    assert a.comparable() == b.comparable()


async def test_a_claim_from_before_the_last_boot_is_stale() -> None:
    """A claimant on this host from an earlier boot is gone: resume takes over at once."""
    journal = MemoryJournal()
    await crash(journal, 3, "after", Effects())
    me = Owner.me("old")
    if me.boot is None:
        pytest.skip("no boot id on this platform")
    stale = dataclass_replace(me, boot="another-boot", pid=1)
    await journal.append(
        APP, StreamWrite(RUN, [RecordFactory()("run.claimed", {"owner": stale.to_json()})])
    )
    result = await resume(standard_agent(), journal, APP, "r1")
    assert result.stop_reason is StopReason.COMPLETED


async def test_idempotency_key_is_stable_across_a_wrong_not_happened_decision() -> None:
    """A re-executed action gets a new intent id but the same idempotency key as before."""
    journal = MemoryJournal()
    seen: list[tuple[str, str]] = []
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.NEVER)
    def charge(amount: int, context: ToolContext) -> str:
        seen.append((context.intent_id, context.idempotency_key))
        return f"charged {amount}"

    def agent() -> Agent:
        model = ScriptedModel([ModelReply.call("charge", {"amount": 5}, id="c1"), "done"])
        return Agent("payer", model, tools)

    with pytest.raises(SimulatedCrash):  # the charge ran; its result never became durable
        await run(agent(), CrashingJournal(journal, 4, "before"), APP, "u", "s", "r9", "pay")
    stopped = await resume(agent(), journal, APP, "r9")
    assert stopped.stop_reason is StopReason.RESUME_STATE_UNKNOWN
    assert stopped.open_intent is not None
    await resolve(journal, APP, "r9", stopped.open_intent, NotHappened("wrongly"))
    assert (await resume(agent(), journal, APP, "r9")).stop_reason is StopReason.COMPLETED
    assert len(seen) == 2
    (first_intent, first_key), (second_intent, second_key) = seen
    assert first_intent != second_intent
    assert first_key == second_key == "r9/1/0"
