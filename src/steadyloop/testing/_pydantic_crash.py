"""The crash kit for Pydantic AI agents: real process deaths at every write, alone and on DBOS.

Give it an agent builder (with a scripted model: ``FunctionModel``, whose function
decides from the messages it is shown; Pydantic AI issues a fresh tool call id on every
call) and a prompt. Each simulated process is a **forked child that SIGKILLs itself** at
its planned write boundary, so nothing of a dead process reaches any store afterwards,
whatever threads the framework (or DBOS) runs: the crash model of
[abandon][steadyloop.testing.abandon], by the kernel.

Two ways of running the agent:

* ``"alone"``: the kit saves the run's ``message_history`` (a file written and renamed
  atomically) after each model response, and a process after a crash runs the agent
  again from what was saved (Pydantic AI then executes the last response's tool calls
  again), with the prompt again if nothing was saved.
* ``"dbos"``: the agent has ``DBOSDurability`` and runs inside a DBOS workflow on an
  embedded SQLite system database in the crash point's folder; a process after a
  crash starts the workflow again by its id, and DBOS re-executes it (model responses
  replay from their recorded steps, tools run again). Unguarded, the kit's effects run
  in DBOS steps, as DBOS advises for side effects (DBOS records a step after it
  returns); guarded, they do not: the guard records them, and a step its replay
  skips would shift DBOS's step numbers.

Write boundaries: every effect written to the sink, every append of the guard's
journal, every history save (alone) and every write statement on DBOS's system
database (dbos). A crash "before" a boundary dies before the write; "after" dies once
it is durable (for DBOS: when its connection goes back to the pool, after the commit).
An unknown effect stops the run with a ``DeferredToolRequests`` output; the kit answers
it with what the effect sink says happened and runs on with the call approved.

[pydantic_aimed_kills][steadyloop.testing.pydantic_aimed_kills] kills from outside
instead: a SIGKILL landing right after a named effect reached the sink.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from steadyloop.effects import Happened, NotHappened, ReplayPolicy, current_intent
from steadyloop.faults import Fired
from steadyloop.testing._death import (
    CrashPoint,
    FrameworkCrashReport,
    KitProcess,
    ProcessDeath,
    ProcessJournal,
)
from steadyloop.testing._effects import EffectSink

try:
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, Tool
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "the Pydantic AI crash kit needs Pydantic AI: install the extra 'steadyloop[pydantic-ai]'"
    ) from exc

from steadyloop.integrations._pydantic_ai import PydanticAIGuard

__all__ = ["AimedKills", "PydanticProcess", "pydantic_aimed_kills", "pydantic_crash_matrix"]

Mode = Literal["alone", "dbos"]
Side = Literal["before", "after"]
CONVERSATION = "conversation-1"
"""The conversation id the kit's alone runs pass (so a run started again keys alike)."""
MAX_DECISIONS = 20
MAX_RESTARTS = 5
LIFE_TIMEOUT = 120.0
"""Seconds one process may take before the kit kills it and reports it hung."""
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class _Killing(ProcessDeath):
    """A process death by the kernel: at the planned boundary the process SIGKILLs itself.

    The fault layer's ``sigkill``; ``after_commit`` holds an ``after`` fault that a DBOS
    write statement hit, fired once its connection went back to the pool.
    """

    def __init__(self, crash_at: int | None = None, side: Side = "before") -> None:
        super().__init__(crash_at, side, how="sigkill")
        self.after_commit: Fired | None = None

    def effect(self, sink: EffectSink, tool: str, policy: str, action: str, **details: Any) -> None:
        """An effect is a write boundary of its own (to the sink)."""
        self.write(f"effect.{tool}", lambda: sink.record(tool, policy, action, **details))


class PydanticProcess(KitProcess[PydanticAIGuard]):
    """What an agent built for the kit may touch: its effects, its tools, its capabilities.

    Attributes:
        mode: ``"alone"`` or ``"dbos"``.
        pause: Seconds each effect sleeps after it reached the sink (aimed kills
            land in that window).
    """

    def __init__(
        self,
        death: ProcessDeath,
        sink: EffectSink,
        guard: PydanticAIGuard | None,
        mode: Mode,
        pause: float = 0.0,
    ) -> None:
        super().__init__(death, sink, guard)
        self.mode = mode
        self.pause = pause
        self._step: Callable[..., None] | None = None

    def tool(self, policy: ReplayPolicy) -> Callable[[Callable[..., Any]], Tool[Any]]:
        """Make a Pydantic AI tool, guarded with this process's guard (plain when unguarded)."""

        def decorate(fn: Callable[..., Any]) -> Tool[Any]:
            if self.guard is None:
                return Tool(fn)
            return self.guard.tool(policy)(fn)

        return decorate

    def capabilities(self) -> list[Any]:
        """The agent's capabilities: ``DBOSDurability`` in mode ``"dbos"``, none alone."""
        if self.mode != "dbos":
            return []
        from pydantic_ai.durable_exec.dbos import DBOSDurability

        return [DBOSDurability()]

    def effect(self, tool: str, policy: str, action: str) -> str:
        """Make one counted effect happen (in a DBOS step in mode ``"dbos"``); return its value."""
        value = f"done:{action}"
        intent = current_intent()
        if self._step is not None:
            self._step(tool, policy, action, value, intent)
        else:
            self._record(tool, policy, action, value, intent)
        if self.pause:
            time.sleep(self.pause)
        return value

    def _record(self, tool: str, policy: str, action: str, value: str, intent: str | None) -> None:
        self.death.effect(self.sink, tool, policy, action, value=value, intent_id=intent)


@dataclass(frozen=True)
class _Setup:
    build: Callable[[PydanticProcess], Agent[Any, Any]]
    prompt: str
    mode: Mode
    guarded: bool
    guard_url: Callable[[Path], str]
    pause: float = 0.0


def conversation(messages: Sequence[ModelMessage]) -> list[Any]:
    """A history as comparable JSON: prompts, and each model response with what its calls returned.

    A response shows its text and its calls, each with its return, without ids (a
    model asked again issues new ids) and sorted (Pydantic AI runs a response's calls
    at once, and a call stopped for a decision returns later, in a request of its own).
    A call without a return is left out.
    """
    returns = {
        p.tool_call_id: p.content
        for m in messages
        if not isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }
    out: list[Any] = []
    for m in messages:
        if not isinstance(m, ModelResponse):
            out.extend(["user", p.content] for p in m.parts if isinstance(p, UserPromptPart))
            continue
        calls = sorted(
            (
                json.dumps([p.tool_name, p.args_as_dict(), returns[p.tool_call_id]], default=str)
                for p in m.parts
                if isinstance(p, ToolCallPart) and p.tool_call_id in returns
            ),
        )
        texts = [p.content for p in m.parts if isinstance(p, TextPart)]
        out.append(["response", texts, [json.loads(c) for c in calls]])
    return out


def _finished(messages: Sequence[ModelMessage]) -> bool:
    last = messages[-1] if messages else None
    return isinstance(last, ModelResponse) and not any(
        isinstance(p, ToolCallPart) for p in last.parts
    )


def _truth(intent_id: str, sink: EffectSink) -> Happened | NotHappened:
    """What the sink says happened to an unknown effect (as a person checking would)."""
    for effect in sink.effects():
        if effect.get("intent_id") == intent_id:
            return Happened(value=effect.get("value"), note="checked in the effect sink")
    return NotHappened(note="the sink holds no such effect")


async def _decide(
    guard: PydanticAIGuard | None, requests: DeferredToolRequests, sink: EffectSink
) -> DeferredToolResults:
    if guard is None:
        raise RuntimeError("an unguarded run stopped for a decision")
    approvals: dict[str, Any] = {}
    for call in requests.approvals:
        meta = requests.metadata.get(call.tool_call_id)
        unknown = await guard.unknown(call, meta)
        if unknown is not None:
            await guard.decide(call, meta, _truth(unknown.intent_id, sink))
        approvals[call.tool_call_id] = True
    return DeferredToolResults(approvals=approvals)


async def _alone(agent: Agent[Any, Any], setup: _Setup, p: PydanticProcess, folder: Path) -> Any:
    saved = folder / "history.json"

    def save(messages: list[ModelMessage]) -> None:
        def write() -> None:
            tmp = saved.with_suffix(".tmp")
            with open(tmp, "wb") as fh:
                fh.write(ModelMessagesTypeAdapter.dump_json(messages))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, saved)

        p.death.write("history.save", write)

    history: list[ModelMessage] = (
        list(ModelMessagesTypeAdapter.validate_json(saved.read_bytes())) if saved.exists() else []
    )
    if _finished(history):
        return history, 0
    prompt: str | None = None if history else setup.prompt
    deferred: DeferredToolResults | None = None
    decided = 0
    for _ in range(MAX_DECISIONS):
        async with agent.iter(
            prompt,
            message_history=history or None,
            deferred_tool_results=deferred,
            conversation_id=CONVERSATION,
        ) as run:
            async for node in run:
                if Agent.is_call_tools_node(node):  # a model response arrived
                    save(run.all_messages())
        assert run.result is not None
        if not isinstance(run.result.output, DeferredToolRequests):
            return run.result.all_messages(), decided
        deferred = await _decide(p.guard, run.result.output, p.sink)
        decided += len(run.result.output.approvals)
        history, prompt = run.result.all_messages(), None
    raise RuntimeError(f"the run still waited for decisions after {MAX_DECISIONS}")


def _install_dbos_boundaries(death: _Killing, db: str, armed: list[bool]) -> None:
    """Make every write statement on DBOS's system database a write boundary.

    Only once ``armed[0]`` is true: the schema DBOS writes when it launches is no
    boundary of the run.
    """
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    from sqlalchemy.pool import Pool

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not armed[0] or not str(conn.engine.url.database or "").endswith(db):
            return
        words = statement.lstrip().split(None, 3)
        if words and words[0].upper() in _WRITES:
            table = next((w for w in words[1:] if w.upper() not in ("INTO", "OR", "FROM")), "?")
            name = table.strip('"').split(".")[-1].split("(")[0]
            label = f"dbos.{words[0].lower()}.{name}"
            hit = death._enter(label)  # a fault before the write kills here
            if hit is not None:
                death.after_commit = hit

    def checkin(dbapi_conn: Any, record: Any) -> None:
        if death.after_commit is not None:
            death._leave(death.after_commit, death.after_commit.label)

    event.listen(Engine, "before_cursor_execute", before)
    event.listen(Pool, "checkin", checkin)


async def _dbos(agent: Agent[Any, Any], setup: _Setup, p: PydanticProcess, folder: Path) -> Any:
    from dbos import DBOS, SetWorkflowID

    decided = 0
    history: list[ModelMessage] | None = None
    deferred: DeferredToolResults | None = None
    workflow: Any = p._workflow  # type: ignore[attr-defined]
    for n in range(MAX_DECISIONS):
        wid = f"kit-run-{n}"
        status = await DBOS.get_workflow_status_async(wid)
        if status is not None and status.status == "PENDING":
            # DBOS.launch() recovers it (in a thread of its own): wait for that
            # execution instead of starting a second one beside it.
            handle: Any = await DBOS.retrieve_workflow_async(wid)
            output, history = await handle.get_result()
        else:
            with SetWorkflowID(wid):
                output, history = await workflow(
                    setup.prompt if n == 0 else None, history, deferred
                )
        if not isinstance(output, DeferredToolRequests):
            DBOS.logger.debug("kit run finished")
            return history, decided
        deferred = await _decide(p.guard, output, p.sink)
        decided += len(output.approvals)
    raise RuntimeError(f"the run still waited for decisions after {MAX_DECISIONS}")


def _live(setup: _Setup, folder: Path, death: _Killing) -> dict[str, Any]:
    """One process's life (in a forked child): start, drive the run to its end, report."""
    guard = None
    if setup.guarded:
        guard = PydanticAIGuard(
            setup.guard_url(folder), wrap=lambda j: ProcessJournal(j, death, "guard.append")
        )
    p = PydanticProcess(death, EffectSink(folder / "effects.log"), guard, setup.mode, setup.pause)
    report: dict[str, Any] = {"boundaries": death.boundaries}
    try:
        if setup.mode == "dbos":
            import logging

            from dbos import DBOS

            logging.getLogger("dbos").setLevel(logging.WARNING)
            armed = [False]
            _install_dbos_boundaries(death, "dbos.sqlite", armed)
            DBOS(
                config={
                    "name": "steadyloop-kit",
                    "system_database_url": f"sqlite:///{folder / 'dbos.sqlite'}",
                }
            )
            agent = setup.build(p)

            @DBOS.step(name="steadyloop_kit_effect")
            def effect_step(tool: str, policy: str, action: str, value: str, intent: Any) -> None:
                p._record(tool, policy, action, value, intent)

            @DBOS.workflow(name="steadyloop_kit_run")
            async def run(
                prompt: str | None, history: Any, deferred: DeferredToolResults | None
            ) -> tuple[Any, list[ModelMessage]]:
                result = await agent.run(
                    prompt, message_history=history, deferred_tool_results=deferred
                )
                return result.output, result.all_messages()

            if guard is None:
                # A guarded effect is no step: the guard records it, and a step that
                # the guard's replay skips would shift DBOS's step numbers
                # (DBOSUnexpectedStepError on recovery).
                p._step = effect_step
            p._workflow = run  # type: ignore[attr-defined]
            DBOS.launch()
            armed[0] = True
            messages, decided = asyncio.run(_dbos(agent, setup, p, folder))
        else:
            agent = setup.build(p)
            messages, decided = asyncio.run(_alone(agent, setup, p, folder))
        report.update(state=conversation(messages), decided=decided)
    except Exception as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        if os.environ.get("STEADYLOOP_KIT_VERBOSE"):
            traceback.print_exc()
    if guard is not None:
        guard.close()
    return report


def _fork(setup: _Setup, folder: Path, crash_at: int | None, side: Side, name: str) -> int:
    """Start one process's life in a forked child; return its pid."""
    out = folder / f"{name}.json"
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            if not os.environ.get("STEADYLOOP_KIT_VERBOSE"):
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.dup2(null, 2)
            report = _live(setup, folder, _Killing(crash_at, side))
            out.write_text(json.dumps(report, default=str))
            code = 0
        finally:
            os._exit(code)
    return pid


def _life(
    setup: _Setup, folder: Path, crash_at: int | None, side: Side, name: str
) -> tuple[bool, dict[str, Any]]:
    """Run one process's life to its end or its death: (killed, its report)."""
    pid = _fork(setup, folder, crash_at, side, name)
    deadline = time.monotonic() + LIFE_TIMEOUT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:  # a hung process: killed, and said so below
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            return False, {"error": f"the process hung for {LIFE_TIMEOUT:g} s and was killed"}
        time.sleep(0.005)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    path = folder / f"{name}.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    if not killed and not path.exists():
        report = {"error": f"the process ended with status {status} and no report"}
    return killed, report


def _finish(setup: _Setup, folder: Path) -> tuple[Any, int, int, str | None]:
    """Start processes after a crash until one finishes: (state, decided, restarts, error)."""
    decided = 0
    error = None
    for restarts in range(1, MAX_RESTARTS + 1):
        killed, report = _life(setup, folder, None, "before", f"restart-{restarts}")
        decided += int(report.get("decided", 0))
        if not killed and "state" in report:
            return report["state"], decided, restarts, None
        error = report.get("error", "killed")
    return None, decided, MAX_RESTARTS, error


def _preload(mode: Mode) -> None:
    """Import what every process's run imports, once here rather than in each forked child."""
    import importlib

    names = ["anyio._backends._asyncio", "genai_prices.data"]
    if mode == "dbos":
        names += ["dbos", "dbos._sys_db_sqlite", "pydantic_ai.durable_exec.dbos", "sqlalchemy.pool"]
        names += ["sqlalchemy.dialects.sqlite.pysqlite"]
    for name in names:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _setup(
    build: Callable[[PydanticProcess], Agent[Any, Any]],
    prompt: str,
    *,
    mode: Mode,
    guarded: bool,
    guard_url: Callable[[Path], str] | None,
    pause: float = 0.0,
) -> _Setup:
    if mode not in ("alone", "dbos"):
        raise ValueError(f"mode must be 'alone' or 'dbos', not {mode!r}")
    _preload(mode)
    return _Setup(
        build, prompt, mode, guarded, guard_url or (lambda d: f"sqlite:///{d / 'guard.db'}"), pause
    )


def pydantic_crash_matrix(
    build: Callable[[PydanticProcess], Agent[Any, Any]],
    prompt: str,
    *,
    workdir: Path,
    mode: Mode = "alone",
    guarded: bool = True,
    guard_url: Callable[[Path], str] | None = None,
    sides: Sequence[Side] = ("before", "after"),
) -> FrameworkCrashReport:
    """Kill a Pydantic AI agent's process at every write boundary, run it again, count effects.

    Args:
        build: Builds the agent for one process; its tools come from
            [PydanticProcess.tool][steadyloop.testing.PydanticProcess.tool], make their
            effects with ``effect``, and it takes
            [PydanticProcess.capabilities][steadyloop.testing.PydanticProcess.capabilities];
            give it ``output_type=[str, DeferredToolRequests]``.
        prompt: What the user asks.
        workdir: An empty folder; each crash point gets a folder of its own in it.
        mode: ``"alone"`` (reruns from the saved message history) or ``"dbos"``.
        guarded: Whether the tools run under a
            [PydanticAIGuard][steadyloop.integrations.pydantic_ai.PydanticAIGuard].
        guard_url: The guard's journal URL for a folder (SQLite in it by default).
        sides: Which sides of each boundary to crash at.

    Raises:
        RuntimeError: The uninterrupted run did not finish.
    """
    setup = _setup(build, prompt, mode=mode, guarded=guarded, guard_url=guard_url)
    ref = workdir / "reference"
    ref.mkdir(parents=True)
    _, report = _life(setup, ref, None, "before", "life")
    if "state" not in report:
        raise RuntimeError(f"the uninterrupted run did not finish: {report.get('error')}")
    reference = report["state"]
    boundaries = tuple(report["boundaries"])
    expected = Counter(str(e["action"]) for e in EffectSink(ref / "effects.log").effects())
    points = []
    for k, label in enumerate(boundaries, start=1):
        for side in sides:
            folder = workdir / f"{k:03d}-{side}"
            folder.mkdir()
            killed, first = _life(setup, folder, k, side, "crash")
            error: str | None
            if not killed:  # nothing was tested at this point: say so
                state, decided, restarts = first.get("state"), 0, 0
                error = f"the run ended before write {k}: {first.get('error')}"
            else:
                state, decided, restarts, error = _finish(setup, folder)
            points.append(
                _point(
                    k,
                    side,
                    label,
                    folder,
                    expected=expected,
                    reference=reference,
                    state=state,
                    decided=decided,
                    restarts=restarts,
                    error=error,
                )
            )
    return FrameworkCrashReport(
        framework="pydantic-ai",
        mode=mode,
        guarded=guarded,
        boundaries=boundaries,
        effects=dict(expected),
        points=tuple(points),
    )


def _point(
    k: int,
    side: Side,
    label: str,
    folder: Path,
    *,
    expected: Counter[str],
    reference: Any,
    state: Any,
    decided: int,
    restarts: int,
    error: str | None,
) -> CrashPoint:
    sink = EffectSink(folder / "effects.log")
    counts = Counter(str(e["action"]) for e in sink.effects())
    return CrashPoint(
        boundary=k,
        side=side,
        label=label,
        repeated=tuple(sink.repeats()),
        lost=tuple(sorted(a for a in expected if counts[a] == 0)),
        final_equal=state == reference,
        interrupts=decided,
        restarts=restarts,
        error=error,
    )


@dataclass(frozen=True)
class AimedKills:
    """What aimed SIGKILLs did to one shape.

    Attributes:
        mode: ``"alone"`` or ``"dbos"``.
        guarded: Whether the tools ran under the guard.
        aim: The action each kill landed right after.
        kills: Kills that landed (the process died of them).
        runs: Runs driven (one kill attempt each).
        runs_with_never_repeats: Runs in which a `NEVER` effect happened twice or more.
        never_repeats: Extra `NEVER` effects over all runs.
        runs_with_losses: Runs that lost an effect of the uninterrupted run.
        unfinished: Runs that did not finish.
        decisions: Unknown effects decided.
    """

    mode: str
    guarded: bool
    aim: str
    kills: int
    runs: int
    runs_with_never_repeats: int
    never_repeats: int
    runs_with_losses: int
    unfinished: int
    decisions: int

    def to_json(self) -> dict[str, Any]:
        """Return the figures as JSON."""
        return dict(self.__dict__)


def pydantic_aimed_kills(
    build: Callable[[PydanticProcess], Agent[Any, Any]],
    prompt: str,
    *,
    workdir: Path,
    aim: str,
    kills: int = 30,
    mode: Mode = "alone",
    guarded: bool = True,
    guard_url: Callable[[Path], str] | None = None,
    window: float = 0.03,
    pause: float = 0.01,
    seed: int = 18,
    max_runs: int | None = None,
) -> AimedKills:
    """SIGKILL a Pydantic AI agent's process right after an effect, run it again, count effects.

    Each run gets a folder of its own: a process starts the run, and once the sink
    holds the effect named ``aim``, the kit SIGKILLs it within ``window`` seconds
    (each effect sleeps ``pause`` after it reached the sink, so most kills land
    before its result is recorded). Then processes continue the run until it ends.

    Args:
        build: As for [pydantic_crash_matrix][steadyloop.testing.pydantic_crash_matrix].
        prompt: What the user asks.
        workdir: An empty folder.
        aim: The action to kill after (for example ``"charge/o-1"``).
        kills: How many kills must land.
        mode: ``"alone"`` or ``"dbos"``.
        guarded: Whether the tools run under the guard.
        guard_url: The guard's journal URL for a folder.
        window: Kills land uniformly within this many seconds after the effect.
        pause: Seconds each effect sleeps after reaching the sink.
        seed: Seeds the kill moments.
        max_runs: Give up after this many runs (``3 * kills`` by default).
    """
    setup = _setup(build, prompt, mode=mode, guarded=guarded, guard_url=guard_url, pause=pause)
    ref = workdir / "reference"
    ref.mkdir(parents=True)
    _, report = _life(setup, ref, None, "before", "life")
    if "state" not in report:
        raise RuntimeError(f"the uninterrupted run did not finish: {report.get('error')}")
    expected = Counter(str(e["action"]) for e in EffectSink(ref / "effects.log").effects())
    rng = random.Random(seed)
    landed = runs = repeated_runs = repeats = lossy = unfinished = decisions = 0
    while landed < kills and runs < (max_runs or 3 * kills):
        runs += 1
        folder = workdir / f"run-{runs:03d}"
        folder.mkdir()
        sink = EffectSink(folder / "effects.log")
        pid = _fork(setup, folder, None, "before", "crash")
        deadline = time.monotonic() + 30
        status: int | None = None
        while time.monotonic() < deadline:
            if any(e.get("action") == aim for e in sink.effects()):
                time.sleep(rng.uniform(0.0, window))
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                break
            done, polled = os.waitpid(pid, os.WNOHANG)
            if done:
                status = polled
                break
            time.sleep(0.001)
        if status is None:
            _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            landed += 1
            _, decided, _, error = _finish(setup, folder)
            decisions += decided
            unfinished += error is not None
        counts = Counter(str(e["action"]) for e in sink.effects())
        never = sum(r.count - 1 for r in sink.repeats() if r.policy == "never")
        repeats += never
        repeated_runs += never > 0
        lossy += any(counts[a] == 0 for a in expected)
    return AimedKills(
        mode, guarded, aim, landed, runs, repeated_runs, repeats, lossy, unfinished, decisions
    )
