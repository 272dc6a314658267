"""The crash kit for OpenAI Agents SDK agents: die at every session write, run again, count effects.

Give it an agent builder (with a scripted model: `agents.testing.ScriptedModel`, whose
responder decides from the input it is shown, and issues a fresh call id on every call,
as a real model asked again does) and a session factory. It runs the agent once and
counts the write boundaries: every ``add_items``/``pop_item``/``clear_session`` of the
session and, when guarded, every append of the guard's journal. Then for every boundary
it lets the simulated process die just before and just after that write (the crash
model of [ProcessDeath][steadyloop.testing.ProcessDeath]), and continues the run the
SDK's way: a new process runs the agent again over the session's history (with the
input again if the session never got it). An unknown effect surfaces as an approval
interruption; the kit answers it with what the effect sink says happened. Each simulated
process runs on an event loop of its own, so call the kit from synchronous code.

Examples:
    ```python
    def build(p: AgentProcess) -> Agent:
        @p.tool(ReplayPolicy.NEVER)
        def refund(order: str) -> str:
            return p.effect("refund", "never", f"refund/{order}")

        return Agent(name="support", tools=[refund], model=ScriptedModel(...))

    report = agents_crash_matrix(
        build, lambda d: SQLiteSession("s", str(d / "conv.db")), "refund o-1",
        workdir=tmp_path, guarded=True,
    )
    report.assert_guarded()
    ```
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from steadyloop.loop import Happened, NotHappened, ReplayPolicy
from steadyloop.testing._death import (
    FrameworkCrashReport,
    KitProcess,
    Life,
    ProcessDeath,
    ProcessJournal,
    crash_every_boundary,
)
from steadyloop.testing._effects import EffectSink

try:
    from agents import Agent, FunctionTool, RunConfig, Runner, function_tool
    from agents.memory.session import SessionABC
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "the OpenAI Agents crash kit needs the SDK: install the extra 'steadyloop[openai-agents]'"
    ) from exc

from steadyloop.integrations._openai_agents import (
    AgentsGuard,
    _is_answer,
    handoff_names,
    without_handoffs,
)

__all__ = ["AgentProcess", "agents_crash_matrix"]

MAX_DECISIONS = 20
QUIET = RunConfig(tracing_disabled=True)
"""The kit's runs export no traces (they would need an API key, and say so on stderr)."""


class AgentProcess(KitProcess[AgentsGuard]):
    """What an agent built for the crash kit may touch: its effects, and its tools."""

    def tool(self, policy: ReplayPolicy) -> Callable[[Callable[..., Any]], FunctionTool]:
        """Make a function tool, guarded with this process's guard (plain in an unguarded run)."""

        def decorate(fn: Callable[..., Any]) -> FunctionTool:
            if self.guard is None:
                return function_tool(fn)
            return self.guard.function_tool(policy)(fn)

        return decorate


class _DyingSession(SessionABC):
    """A session of a simulated process: each write a boundary, nothing after death."""

    def __init__(self, inner: Any, death: ProcessDeath) -> None:
        self.inner = inner
        self.death = death
        self.session_id = inner.session_id
        self.session_settings = getattr(inner, "session_settings", None)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        self.death.check()
        items = await self.inner.get_items(limit)
        self.death.check()
        return list(items)

    async def add_items(self, items: list[Any]) -> None:
        await self.death.awrite("add_items", lambda: self.inner.add_items(items))

    async def pop_item(self) -> Any:
        return await self.death.awrite("pop_item", self.inner.pop_item)

    async def clear_session(self) -> None:
        await self.death.awrite("clear_session", self.inner.clear_session)


def _conversation(items: Sequence[Any], handoffs: frozenset[str] = frozenset()) -> list[Any]:
    """A session's items as comparable JSON: what was said, and what each call returned.

    Handoffs (``handoffs`` names their tools) are left out: a run continued after a
    crash starts at the first agent again, which hands off again, so a resumed
    conversation holds one handoff more for each restart without saying anything else.

    Each call is shown where its output is, with that output, and without the call id
    (a model asked again issues new ids). A call without an output is left out, as
    the SDK leaves it out of the model's input: a run that stopped for approval saved
    the waiting call, the approved run died before saving its output, and the model
    asked again made the call anew, perhaps in a response of its own. So a resumed
    run equals the uninterrupted one when every call returned the same, in the same
    order, whichever responses the calls came in.
    """
    raws = without_handoffs(list(items), handoffs)
    calls = {r.get("call_id"): r for r in raws if r.get("type") == "function_call"}
    out = []
    for raw in raws:
        kind = raw.get("type") or raw.get("role")
        if kind == "function_call":
            continue
        if kind == "function_call_output":
            call = calls.get(raw.get("call_id"), {})
            arguments = json.loads(call.get("arguments") or "{}")
            out.append(["call", call.get("name"), arguments, raw.get("output")])
        else:
            content = raw.get("content")
            if isinstance(content, list):
                content = [c.get("text") for c in content if isinstance(c, dict)]
            out.append([str(raw.get("role", kind)), content])
    return out


def agents_crash_matrix(
    build: Callable[[AgentProcess], Agent[Any]],
    session: Callable[[Path], Any],
    agent_input: str,
    *,
    workdir: Path,
    guarded: bool = True,
    guard_url: Callable[[Path], str] | None = None,
    sides: Sequence[Literal["before", "after"]] = ("before", "after"),
    recovery_crashes: bool = False,
) -> FrameworkCrashReport:
    """Crash an OpenAI Agents SDK agent at every write boundary, run it again, count effects.

    Args:
        build: Builds the agent for one simulated process; its tools come from
            [AgentProcess.tool][steadyloop.testing.AgentProcess.tool] and make their
            effects with [AgentProcess.effect][steadyloop.testing.AgentProcess.effect].
        session: A fresh session object on the store in the given folder (the same
            folder is the same store).
        agent_input: What the user asks.
        workdir: An empty folder; each crash point gets a folder of its own in it.
        guarded: Whether the tools run under an
            [AgentsGuard][steadyloop.integrations.openai_agents.AgentsGuard].
        guard_url: The guard's journal URL for a folder (SQLite in it by default).
        sides: Which sides of each boundary to crash at.
        recovery_crashes: Also crash the first run after each crash at every write
            boundary it passes (a second crash during recovery); the points grow
            with the square of the boundaries.
    """
    url_for = guard_url or (lambda d: f"sqlite:///{d / 'guard.db'}")
    Running = tuple[Agent[Any], _DyingSession, AgentProcess, list[Any]]

    def start(folder: Path, death: ProcessDeath) -> Running:
        guard = None
        if guarded:
            guard = AgentsGuard(
                url_for(folder), wrap=lambda j: ProcessJournal(j, death, "guard.append")
            )
        process = AgentProcess(death, EffectSink(folder / "effects.log"), guard)
        return build(process), _DyingSession(session(folder), death), process, []

    async def drive(running: Running, first: bool) -> int:
        agent, store, process, final = running
        guard = process.guard
        if guard is not None:
            if first:
                found: Any = await guard.run(agent, agent_input, session=store, run_config=QUIET)
            else:
                found = await guard.continue_run(
                    agent, agent_input, session=store, run_config=QUIET
                )
        else:
            history = await store.get_items()
            found = None
            if first or not history or not _is_answer(history[-1]):
                given: Any = agent_input if first or not history else []
                found = await Runner.run(agent, given, session=store, run_config=QUIET)
        if found is None:  # the run had ended before the crash: its answer is saved
            final.append(_conversation(await store.get_items())[-1][1][0])
            return 0
        result = found
        decided = 0
        for _ in range(MAX_DECISIONS):
            if not result.interruptions:
                final.append(result.final_output)
                return decided
            if guard is None:
                raise RuntimeError("an unguarded run stopped for approval")
            state = result.to_state()
            for item in result.interruptions:
                unknown = await guard.unknown(item)
                if unknown is None:
                    raise RuntimeError(
                        f"the run stopped for an approval the kit cannot give: {item}"
                    )
                await guard.decide(state, item, _truth(unknown.intent_id, process.sink))
                decided += 1
            result = await guard.run(agent, state, session=store, run_config=QUIET)
        raise RuntimeError(f"the run was still interrupted after {MAX_DECISIONS} decisions")

    def state(running: Running) -> Any:
        items = asyncio.run(running[1].inner.get_items())
        handoffs = handoff_names(running[0])
        return {
            "output": running[3][-1] if running[3] else None,
            "session": _conversation(items, handoffs),
        }

    life: Life[Running] = Life(
        start=start,
        finish=lambda running, first: asyncio.run(drive(running, first)),
        state=state,
        sink=lambda running: running[2].sink,
        end=lambda running, dead: running[2].end(dead),
    )
    return crash_every_boundary(
        life,
        framework="openai-agents",
        mode="session",
        guarded=guarded,
        workdir=workdir,
        sides=sides,
        recovery_crashes=recovery_crashes,
    )


def _truth(intent_id: str, sink: EffectSink) -> Happened | NotHappened:
    """What the sink says happened to an unknown effect (as a person checking would)."""
    for effect in sink.effects():
        if effect.get("intent_id") == intent_id:
            return Happened(value=effect.get("value"), note="checked in the effect sink")
    return NotHappened(note="the sink holds no such effect")
