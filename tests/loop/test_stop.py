"""The stop request, per-tool timeouts, and the liveness checks of a run's claimant."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from loop_helpers import APP, counting_agent, standard_agent

from steadyloop._errors import RunBusy, ToolTimeout
from steadyloop.effects._owner import _pid_start
from steadyloop.journal import MemoryJournal, StreamWrite
from steadyloop.loop import (
    RUN_STOPPED,
    Agent,
    Happened,
    ModelReply,
    Owner,
    ReplayPolicy,
    ScriptedModel,
    StopReason,
    Tool,
    ToolRegistry,
    load_run,
    resolve,
    resume,
    run,
    run_stream,
)
from steadyloop.records import RecordFactory
from steadyloop.testing import CrashingJournal, SimulatedCrash


def gated(
    policy: ReplayPolicy, gate: threading.Event, entered: threading.Event, **kw: object
) -> Agent:
    """Three calls of a threaded tool that waits for ``gate`` on its first call."""
    tools = ToolRegistry()
    calls: list[int] = []

    @tools.tool(policy=policy, thread=True, **kw)  # type: ignore[arg-type]
    def work(n: int) -> int:
        calls.append(n)
        entered.set()
        if n == 1:
            gate.wait(30)
        return n

    script: list[ModelReply | str] = [
        ModelReply.call("work", {"n": i}, id=f"c{i}") for i in (1, 2, 3)
    ]
    agent = Agent("gated", ScriptedModel([*script, "done"]), tools)
    object.__setattr__(agent, "calls", calls)
    return agent


async def wait_thread_event(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, 30)


async def test_a_stop_request_lets_the_effect_finish_and_leaves_the_run_resumable() -> None:
    """Stop set mid-tool: the tool's result and run.stopped are written; resume completes it."""
    journal = MemoryJournal()
    gate, entered = threading.Event(), threading.Event()
    agent = gated(ReplayPolicy.NEVER, gate, entered)
    stop = asyncio.Event()
    task = asyncio.create_task(run(agent, journal, APP, "ada", "s1", "r1", "go", stop=stop))
    await wait_thread_event(entered)
    stop.set()
    gate.set()
    result = await task
    assert result.stop_reason is StopReason.STOPPED and not result.stop_reason.final
    info = await load_run(journal, APP, "r1")
    assert info.status == "stopped"
    assert [r.kind for r in info.records][-2:] == ["effect.result", RUN_STOPPED]
    assert info.state.owner is None  # the claim is released
    again = await resume(agent, journal, APP, "r1")
    assert (again.stop_reason, again.output, again.actions) == (StopReason.COMPLETED, "done", 3)
    assert agent.calls == [1, 2, 3]  # type: ignore[attr-defined]


async def test_a_stop_before_the_first_effect_records_a_resumable_run() -> None:
    """A stop already requested when the run starts writes its start and stops, resumable."""
    journal = MemoryJournal()
    stop = asyncio.Event()
    stop.set()
    agent = counting_agent(2)
    result = await run(agent, journal, APP, "ada", "s1", "r1", "go", stop=stop)
    assert result.stop_reason is StopReason.STOPPED and result.steps == 0
    assert (await resume(agent, journal, APP, "r1")).output == "sent 2"


async def test_cancelling_the_task_after_a_stop_request_stops_at_once_not_cancels() -> None:
    """Stop set, then the task cancelled mid-tool: run.stopped, intent open, run resumable."""
    journal = MemoryJournal()
    gate, entered = threading.Event(), threading.Event()
    agent = gated(ReplayPolicy.SAFE, gate, entered)
    stop = asyncio.Event()
    task = asyncio.create_task(run(agent, journal, APP, "ada", "s1", "r1", "go", stop=stop))
    await wait_thread_event(entered)
    stop.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    info = await load_run(journal, APP, "r1")
    assert info.status == "stopped" and info.state.open_intent is not None
    gate.set()
    again = await resume(agent, journal, APP, "r1")
    assert again.stop_reason is StopReason.COMPLETED and again.actions == 3


async def test_a_timed_out_safe_tool_is_an_error_observation() -> None:
    """A SAFE tool past its timeout: the model sees an error saying so, and the run goes on."""
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.SAFE, timeout=0.05)
    async def slow() -> int:
        await asyncio.sleep(30)
        return 1

    agent = Agent("t", ScriptedModel([ModelReply.call("slow", {}), "gave up"]), tools)
    journal = MemoryJournal()
    result = await run(agent, journal, APP, "ada", "s1", "r1", "go")
    assert (result.stop_reason, result.actions) == (StopReason.COMPLETED, 1)
    info = await load_run(journal, APP, "r1")
    error = [r.payload for r in info.records if r.kind == "effect.result"][1]["error"]
    assert error.startswith("ToolTimeout: tool 'slow' did not finish within its timeout of 0.05 s")


async def test_a_timed_out_never_tool_leaves_its_intent_open_as_after_a_crash() -> None:
    """A NEVER tool past its timeout stops the run RESUME_STATE_UNKNOWN, its intent open."""
    gate, entered = threading.Event(), threading.Event()
    agent = gated(ReplayPolicy.NEVER, gate, entered, timeout=0.1)
    journal = MemoryJournal()
    started = time.monotonic()
    result = await run(agent, journal, APP, "ada", "s1", "r1", "go")
    assert time.monotonic() - started < 60  # not waiting for the thread, which waits for ever
    assert result.stop_reason is StopReason.RESUME_STATE_UNKNOWN
    assert result.open_intent == "r1/2" and "timeout of 0.1 s" in result.detail
    info = await load_run(journal, APP, "r1")
    assert info.status == "resume_state_unknown" and info.state.open_intent is not None
    gate.set()  # the abandoned thread acts after all: that is why a person decides
    assert (await resume(agent, journal, APP, "r1")).stop_reason is StopReason.RESUME_STATE_UNKNOWN
    await resolve(journal, APP, "r1", "r1/2", Happened(1, note="it did"))
    assert (await resume(agent, journal, APP, "r1")).stop_reason is StopReason.COMPLETED


async def test_a_tools_own_timeout_error_is_its_outcome_not_a_given_up_call() -> None:
    """A NEVER tool that raises TimeoutError itself finished: an error observation, no stop."""
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.NEVER, timeout=10)
    async def flaky() -> int:
        raise TimeoutError("the API timed out")

    agent = Agent("t", ScriptedModel([ModelReply.call("flaky", {}), "ok"]), tools)
    result = await run(agent, MemoryJournal(), APP, "ada", "s1", "r1", "go")
    assert result.stop_reason is StopReason.COMPLETED


def noop() -> int:
    return 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": 1.0}, "a timeout needs an async function or thread=True"),
        ({"timeout": 0, "thread": True}, "timeout must be a positive number"),
        ({"timeout": float("nan"), "thread": True}, "timeout must be a positive number"),
        ({"timeout": True, "thread": True}, "timeout must be a positive number"),
    ],
)
def test_a_timeout_that_cannot_be_kept_is_refused_when_the_tool_is_declared(
    kwargs: dict[str, object], message: str
) -> None:
    """A timeout on an inline sync function, or not a positive number, raises at declaration."""
    with pytest.raises(ValueError, match=message):
        Tool("noop", noop, ReplayPolicy.SAFE, **kwargs)  # type: ignore[arg-type]


def test_tool_timeout_is_a_timeout_error_and_a_loop_error() -> None:
    """ToolTimeout can be caught as TimeoutError or as a loop error."""
    assert issubclass(ToolTimeout, TimeoutError)


def test_a_killed_but_unreaped_driver_counts_as_dead() -> None:
    """A zombie process holds no run: process_alive is False once it is killed."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        me = Owner.me("t")
        owner = Owner(me.host, me.boot, child.pid, _pid_start(child.pid), "t")
        assert owner.process_alive()
        os.kill(child.pid, 9)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not owner.process_alive()  # not reaped yet: a zombie
    finally:
        child.kill()
        child.wait()


async def test_resolve_takes_over_from_a_claimant_on_another_host_only_when_asked() -> None:
    """Resolving refuses a run claimed on an unverifiable host unless takeover=True."""
    journal = MemoryJournal()
    crashing = CrashingJournal(journal, 7, "before")  # type: ignore[arg-type]
    with pytest.raises(SimulatedCrash):  # dies with the never-repeat e-mail's intent open
        await run(standard_agent(), crashing, APP, "ada", "s1", "r1", "go")
    info = await load_run(journal, APP, "r1")
    other = Owner(host="elsewhere", boot=None, pid=1, pid_start=None, token="x")
    rec = RecordFactory()("run.claimed", {"owner": other.to_json()})
    await journal.append(APP, StreamWrite(run_stream("r1"), [rec], info.state.head + 1))
    with pytest.raises(RunBusy, match="--takeover"):
        await resolve(journal, APP, "r1", "r1/5", Happened("sent"))
    await resolve(journal, APP, "r1", "r1/5", Happened("sent"), takeover=True)
    result = await resume(standard_agent(), journal, APP, "r1", takeover=True)
    assert result.stop_reason is StopReason.COMPLETED
