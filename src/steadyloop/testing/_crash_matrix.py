"""The crash matrix: crash an agent run at every write boundary, resume, and compare.

Give it a factory for your agent and one for your journal; it runs the agent once
without interruption, counts the journal appends that run makes, and then, for every
append *k*:

* crashes the run just **before** append *k* (the effect before it happened, its result
  never became durable) and just **after** it (the batch is durable, the code after it
  never ran) — a [`SimulatedCrash`][steadyloop.testing.SimulatedCrash] raised by a
  journal wrapper;
* abandons the crashed journal as a killed process would — never closed, fenced so
  nothing more reaches the store, only its OS resources freed (the crash model of
  [`abandon`][steadyloop.testing.abandon]) — then opens the journal anew and resumes
  the run, resolving any ``RESUME_STATE_UNKNOWN`` with the truth (the kit wraps every
  tool and knows whether it ran);
* optionally crashes the resume once more and resumes again;
* compares with the uninterrupted run: the same result (wall times and intent ids
  aside), the same session events, the model shown the same messages at every step,
  and no never-repeat action executed twice.

Every tool's effects are counted outside the journal, in an
[EffectSink][steadyloop.testing.EffectSink]: each case lists the actions whose effect
happened more than once, with the policy the tool was declared under. A repeated
``NEVER`` tool fails the case; a repeated ``SAFE`` one is expected (that is what
``SAFE`` allows) and is reported, so an irreversible tool wrongly declared ``SAFE``
shows up (``CrashMatrixReport.assert_no_repeats`` makes it fail).

Use it on your own agent and backend::

    import pytest
    from steadyloop.journal import open_journal
    from steadyloop.testing import crash_matrix

    async def test_my_agent_survives_every_crash(tmp_path):
        report = await crash_matrix(
            make_my_agent,                                   # a fresh Agent each call
            lambda: open_journal(f"sqlite:///{tmp_path}/j.db"),  # same store each call
        )
        report.assert_ok()

The agent must be deterministic (a [`ScriptedModel`][steadyloop.loop.ScriptedModel], tools that
return the same value for the same arguments), or the comparison means nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from steadyloop._errors import RunFinished, RunNotFound
from steadyloop.effects import Happened, NotHappened, describe
from steadyloop.faults import Fault, FaultPlan, FaultyJournal, SimulatedCrash
from steadyloop.journal import Journal
from steadyloop.loop._agent import Agent
from steadyloop.loop._run import load_run, resolve, resume, run
from steadyloop.loop._state import run_stream
from steadyloop.loop._tools import Tool, ToolContext, ToolRegistry
from steadyloop.loop._types import (
    Message,
    ModelReply,
    ReplayPolicy,
    RunResult,
    StopReason,
    ToolSpec,
)
from steadyloop.records import INTENT_KIND, JSONValue, RecordFactory
from steadyloop.sessions import Session, SessionService
from steadyloop.testing._effects import EffectSink, Repeat, abandon

__all__ = ["CrashCase", "CrashMatrixReport", "CrashingJournal", "crash_matrix"]

Side = Literal["before", "after"]


class CrashingJournal(FaultyJournal):
    """A journal wrapper whose process "dies" at one append.

    A [`FaultyJournal`][steadyloop.faults.FaultyJournal] configured with one crash: the
    fault layer counts the appends and kills the process.

    Args:
        inner: The journal to write through.
        crash_at: The 1-based number of the append to crash at; ``None`` never crashes.
        side: ``"before"``: die before the append reaches the journal; ``"after"``: die
            once it is durable, before the caller sees the result (a batch the journal
            refuses is a boundary reached too).

    Attributes:
        appends: Appends attempted so far (the crashing one included).
        crashed: Whether the simulated process died.
    """

    def __init__(self, inner: Journal, crash_at: int | None = None, side: Side = "before") -> None:
        faults = () if crash_at is None else (Fault(at=crash_at, side=side),)
        super().__init__(inner, FaultPlan(*faults))
        self.crash_at = crash_at
        self.side = side


class _Recorder:
    """What the instrumented agent did across the attempts of one case."""

    def __init__(self, sink: EffectSink, summarize_every: int = 0) -> None:
        self.sink = sink
        self.summarize_every = summarize_every
        self.session: tuple[str, str] = ("", "")  # user id, session id
        self.prompts: list[tuple[Message, ...]] = []
        self.executions: dict[str, tuple[str, JSONValue]] = {}  # intent id -> outcome
        self.never_runs: dict[tuple[int, int], int] = {}  # (step, index) -> executions
        # A model call's step is counted under index -1.
        self.replies: dict[str, JSONValue] = {}  # model intent id -> its reply
        self.where: tuple[Journal, str, str] | None = None  # journal, app, run id

    async def _model_intent(self) -> Mapping[str, Any] | None:
        """The open model intent: the driver calls the model right after it is durable."""
        if self.where is None:
            return None
        journal, app, run_id = self.where
        records = await journal.read(app, run_stream(run_id))
        if not records or records[-1].kind != INTENT_KIND:
            return None
        intent = records[-1].payload
        return intent if intent.get("what") == "model" else None

    def instrument(self, agent: Agent) -> Agent:
        recorder = self

        class _Model:
            name = str(getattr(agent.model, "name", "model"))

            async def complete(
                self, messages: Sequence[Message], tools: Sequence[ToolSpec]
            ) -> ModelReply:
                recorder.prompts.append(tuple(messages))
                intent = await recorder._model_intent()
                if intent is not None and agent.model_policy is ReplayPolicy.NEVER:
                    key = (int(intent.get("step", 0)), -1)
                    recorder.never_runs[key] = recorder.never_runs.get(key, 0) + 1
                reply = await agent.model.complete(messages, tools)
                if intent is not None:
                    recorder.replies[str(intent["intent_id"])] = reply.to_json()
                return reply

        registry = ToolRegistry()
        for tool in agent.tools:
            registry.add(dataclasses.replace(tool, function=self._wrap(tool)))
        return dataclasses.replace(agent, model=_Model(), tools=registry)

    def _wrap(self, tool: Tool) -> Callable[..., Awaitable[Any]]:
        recorder = self

        async def wrapped(context: ToolContext, **arguments: Any) -> Any:
            every = recorder.summarize_every
            if every and context.index == 0 and context.step % every == 0:
                await recorder.summarize()
            recorder.sink.record(
                tool.name, tool.policy.value, context.idempotency_key, intent=context.intent_id
            )
            try:
                value = await tool.invoke(arguments, context)
            except Exception as exc:
                recorder.executions[context.intent_id] = ("error", describe(exc))
                raise
            recorder.executions[context.intent_id] = ("ok", value)
            return value

        return wrapped

    async def summarize(self) -> None:
        """Summarise the case's session (see `summarize_session`)."""
        assert self.where is not None
        await summarize_session(self.where[0], self.where[1], *self.session)

    def decide(self, intent_id: str) -> Happened | NotHappened:
        """The truth about an intent: did the model or tool run, and with what outcome."""
        if intent_id in self.replies:
            return Happened(value=self.replies[intent_id], note="crash matrix: the model replied")
        if intent_id not in self.executions:
            return NotHappened("crash matrix: the tool never ran")
        status, value = self.executions[intent_id]
        if status == "error":
            return Happened(error=str(value), note="crash matrix: the tool ran and raised")
        return Happened(value=value, note="crash matrix: the tool ran")


async def summarize_session(journal: Journal, app: str, user_id: str, session_id: str) -> None:
    """Summarise a session through its last event, as an agent that summarises would.

    The kit does it before a tool's effect, so a tool that runs again after a crash
    summarises again (in place: same text, same id, the next version) and one that is not
    run again had its summary committed already: the model's prompts are those of the
    uninterrupted run either way. The text counts the events instead of naming them (ids
    hold the run id, which differs from case to case).
    """
    service = SessionService(journal, app)
    s = await service.get_session(user_id, session_id, history=False)
    latest = s.latest_summary
    if not s.events and latest is None:
        return
    through = s.events[-1].id if s.events else latest.covers_through  # type: ignore[union-attr]
    same = latest is not None and latest.covers_through == through
    await service.summarize(
        s,
        f"a summary of the first {_event_count(s)} events",
        summary_id=latest.id if same and latest is not None else f"summary-{through}",
        version=1 if latest is None else latest.version + 1,
        replaces=None if latest is None else latest.id,
        covers_through=through,
    )


@dataclass(frozen=True)
class CrashCase:
    """One cell of the matrix.

    Attributes:
        boundary: The append the first crash hit (1-based).
        side: ``"before"`` or ``"after"`` that append.
        second: The append of the first resume that a second crash hit, or ``None``.
        stop_reason: How the resumed run finally stopped.
        resolutions: How many ``RESUME_STATE_UNKNOWN`` stops the caller resolved.
        problems: What differed from the uninterrupted run; empty when the case passed.
        repeats: Tool actions whose effect happened more than once (from the sink),
            with their declared policy; a ``NEVER`` one is also a problem.
    """

    boundary: int
    side: Side
    second: int | None
    stop_reason: str
    resolutions: int
    problems: tuple[str, ...] = ()
    repeats: tuple[Repeat, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the case matched the uninterrupted run."""
        return not self.problems


@dataclass
class CrashMatrixReport:
    """Everything the matrix found.

    Attributes:
        baseline: The uninterrupted run's result.
        boundaries: How many appends the uninterrupted run made.
        cases: One entry per crash point (and second crash).
    """

    baseline: RunResult
    boundaries: int
    cases: list[CrashCase] = field(default_factory=list)

    @property
    def failures(self) -> list[CrashCase]:
        """The cases that did not match."""
        return [c for c in self.cases if not c.ok]

    def rows(self) -> list[dict[str, Any]]:
        """One plain dict per case, for a table or a data frame."""
        return [
            {
                "boundary": c.boundary,
                "side": c.side,
                "second crash": c.second,
                "stop reason": c.stop_reason,
                "resolutions": c.resolutions,
                "ok": c.ok,
                "problems": "; ".join(c.problems),
                "repeats": "; ".join(f"{r.tool} ({r.policy}) ×{r.count}" for r in c.repeats),
            }
            for c in self.cases
        ]

    def repeated_tools(self) -> dict[tuple[str, str], int]:
        """For each ``(tool, declared policy)`` with repeated effects: in how many cases."""
        out: dict[tuple[str, str], int] = {}
        for c in self.cases:
            for key in {(r.tool, r.policy) for r in c.repeats}:
                out[key] = out.get(key, 0) + 1
        return out

    def assert_no_repeats(self) -> None:
        """Raise `AssertionError` if any tool's effect happened twice, whatever its policy.

        For tools whose effect you believe irreversible: a ``SAFE`` tool repeated
        here will be repeated after a real crash.
        """
        repeated = self.repeated_tools()
        if repeated:
            raise AssertionError(
                "effects happened more than once: "
                + "; ".join(
                    f"tool {tool!r} (declared {policy}) in {n} of {len(self.cases)} cases"
                    for (tool, policy), n in sorted(repeated.items())
                )
                + " — declare a tool whose effect must not repeat ReplayPolicy.NEVER"
            )

    def assert_ok(self) -> None:
        """Raise `AssertionError` listing every case that did not match."""
        if self.failures:
            lines = [
                f"boundary {c.boundary} {c.side}"
                + (f" + second crash at {c.second}" if c.second else "")
                + f": {'; '.join(c.problems)}"
                for c in self.failures
            ]
            raise AssertionError(
                f"{len(self.failures)} of {len(self.cases)} crash cases differ from the "
                "uninterrupted run:\n" + "\n".join(lines)
            )


def _comparable(result: RunResult) -> dict[str, JSONValue]:
    data = result.comparable()
    data.pop("run_id")
    data.pop("open_intent")
    return data


async def _session_view(journal: Journal, app: str, user_id: str, session_id: str) -> list[Any]:
    session = await SessionService(journal, app).get_session(user_id, session_id)
    return [(e.author, [p.to_dict() for p in e.parts]) for e in session.all_events]


@dataclass
class _Matrix:
    agent_factory: Callable[[], Agent]
    journal_factory: Callable[[], Awaitable[Journal]]
    input: str
    app: str
    user_id: str
    records: Callable[[], RecordFactory]
    sink: EffectSink
    summarize_every: int = 0
    dead: list[Journal] = field(default_factory=list)

    async def _attempt(
        self,
        run_id: str,
        session_id: str,
        recorder: _Recorder,
        *,
        crash_at: int | None,
        side: Side,
        first: bool,
    ) -> tuple[RunResult | None, int, int]:
        """One process lifetime: (result or None if it crashed, appends, resolutions)."""
        journal = CrashingJournal(await self.journal_factory(), crash_at, side)
        recorder.where = (journal, self.app, run_id)
        recorder.session = (self.user_id, session_id)
        agent = recorder.instrument(self.agent_factory())
        resolutions = 0

        async def start() -> RunResult:
            return await run(
                agent,
                journal,
                self.app,
                self.user_id,
                session_id,
                run_id,
                self.input,
                records=self.records(),
            )

        try:
            if first:
                result = await start()
            else:
                try:
                    result = await resume(agent, journal, self.app, run_id, records=self.records())
                except RunFinished:  # the crash came after the end record was durable
                    ended = (await load_run(journal, self.app, run_id)).state.ended
                    assert ended is not None
                    return ended, journal.appends, resolutions
                except RunNotFound:  # the crash came before the run's first record
                    result = await start()
            while result.stop_reason is StopReason.RESUME_STATE_UNKNOWN:
                assert result.open_intent is not None
                resolutions += 1
                decision = recorder.decide(result.open_intent)
                await resolve(
                    journal, self.app, run_id, result.open_intent, decision, records=self.records()
                )
                result = await resume(agent, journal, self.app, run_id, records=self.records())
            return result, journal.appends, resolutions
        except SimulatedCrash:
            abandon(journal)  # process death: unclosed, only OS resources freed
            self.dead.append(journal.inner)
            return None, journal.appends, resolutions
        finally:
            if not journal.crashed:
                await journal.close()  # a live process shuts down cleanly

    async def baseline(self) -> tuple[RunResult, int, list[Any], list[tuple[Message, ...]]]:
        recorder = _Recorder(self.sink, self.summarize_every)
        result, appends, _ = await self._attempt(
            "baseline", "session-baseline", recorder, crash_at=None, side="before", first=True
        )
        assert result is not None
        async with await self.journal_factory() as journal:
            if await journal.head(self.app, run_stream("baseline")) == 0:
                raise ValueError(
                    f"journal_factory must reach the same store on every call, but the "
                    f"journal it opened ({journal.url or type(journal).__name__}) does not "
                    "hold the run just written through the one it opened before; plain "
                    "memory:// (or a new MemoryJournal) is a new, empty store each time: "
                    "use memory://NAME, a file or a server"
                )
            view = await _session_view(journal, self.app, self.user_id, "session-baseline")
        return result, appends, view, recorder.prompts

    async def case(
        self,
        k: int,
        side: Side,
        second: int | None,
        expected: tuple[RunResult, list[Any], list[tuple[Message, ...]]],
    ) -> CrashCase:
        tag = f"{k}-{side}" + (f"-{second}" if second else "")
        run_id, session_id = f"run-{tag}", f"session-{tag}"
        recorder = _Recorder(self.sink, self.summarize_every)
        problems: list[str] = []
        result, _, _ = await self._attempt(
            run_id, session_id, recorder, crash_at=k, side=side, first=True
        )
        if result is not None:
            problems.append(f"the run did not reach append {k}: it ended first")
        resolutions = 0
        if second is not None:
            result, _, n = await self._attempt(
                run_id, session_id, recorder, crash_at=second, side="before", first=False
            )
            resolutions += n
        if result is None:
            result, _, n = await self._attempt(
                run_id, session_id, recorder, crash_at=None, side="before", first=False
            )
            resolutions += n
        if result is None:  # pragma: no cover - no crash was armed
            problems.append("the resumed run crashed without a crash armed")
            return CrashCase(k, side, second, "crashed", resolutions, tuple(problems))
        clean, clean_view, clean_prompts = expected
        if _comparable(result) != _comparable(clean):
            problems.append(f"result {_comparable(result)} != {_comparable(clean)}")
        async with await self.journal_factory() as journal:
            view = await _session_view(journal, self.app, self.user_id, session_id)
            info = await load_run(journal, self.app, run_id)
        if view != clean_view:
            problems.append("the session's events differ from the uninterrupted run")
        if info.state.ended is None:
            problems.append("the run has no end record")
        asked = set(recorder.prompts)
        for prompt in recorder.prompts:
            if prompt not in clean_prompts:
                problems.append(f"the model saw different messages at {len(prompt)} messages")
                break
        missing = sorted(len(p) for p in clean_prompts if p not in asked)
        if missing:
            problems.append(f"the model was never asked with the prompts of sizes {missing}")
        twice = {key: n for key, n in recorder.never_runs.items() if n > 1}
        if twice:
            problems.append(f"never-repeat model calls ran more than once: {twice}")
        repeats = tuple(self.sink.repeats(prefix=f"{run_id}/"))
        for r in repeats:
            if r.policy == ReplayPolicy.NEVER.value:
                problems.append(
                    f"never-repeat tool {r.tool!r} ran {r.count} times for action {r.action}"
                )
        return CrashCase(
            k, side, second, result.stop_reason.value, resolutions, tuple(problems), repeats
        )


async def crash_matrix(
    agent_factory: Callable[[], Agent],
    journal_factory: Callable[[], Awaitable[Journal]],
    *,
    input: str = "go",
    app: str = "crash-matrix",
    user_id: str = "user",
    sides: Sequence[Side] = ("before", "after"),
    second_crash: Literal["none", "first", "all"] = "first",
    records: Callable[[], RecordFactory] = RecordFactory,
    boundaries: Sequence[int] | None = None,
    sink: EffectSink | None = None,
    summarize_every: int = 0,
) -> CrashMatrixReport:
    """Crash a run at every write boundary, resume it, and compare with a clean run.

    Args:
        agent_factory: Makes a fresh, deterministic agent (called once per process
            lifetime, as a restarted program would).
        journal_factory: Opens the journal under test; every call reaches the same
            store. Each case uses its own run and session ids in it.
        input: The user's message.
        app: The app (journal namespace) to run in.
        user_id: The user.
        sides: Crash before the append, after it, or both.
        second_crash: Also crash the first resume: at its first append (``"first"``),
            at each of its appends (``"all"``, quadratic), or not (``"none"``).
        records: Makes the record factory of each process lifetime.
        boundaries: Only these appends (1-based); all by default.
        sink: Where the kit counts every tool's effects; a temporary file by default.
        summarize_every: If set, the kit summarises the session before the first tool
            call of every step that is a multiple of it (through the session's last
            event, as a second writer of the session), so that crashes also hit summary
            writes and the session snapshots they carry, and resumes read the session
            from a snapshot.

    Returns:
        The report; call
            [`CrashMatrixReport.assert_ok`][steadyloop.testing.CrashMatrixReport.assert_ok] in a
            test.

    Raises:
        ValueError: ``journal_factory`` does not reach the same store on every call
            (plain ``memory://`` opens a new, empty one each time).
    """
    scratch = None
    if sink is None:
        scratch = tempfile.mkdtemp(prefix="steadyloop-crash-matrix-")
        sink = EffectSink(os.path.join(scratch, "effects.log"))
    matrix = _Matrix(
        agent_factory, journal_factory, input, app, user_id, records, sink, summarize_every
    )
    try:
        return await _cases(matrix, sides, second_crash, boundaries)
    finally:
        # The verdict is in: free what the abandoned journals still hold. Whatever a
        # journal that held writes back writes now comes too late to count.
        for journal in matrix.dead:
            with contextlib.suppress(Exception):
                await journal.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


async def _cases(
    matrix: _Matrix,
    sides: Sequence[Side],
    second_crash: Literal["none", "first", "all"],
    boundaries: Sequence[int] | None,
) -> CrashMatrixReport:
    clean, appends, clean_view, clean_prompts = await matrix.baseline()
    report = CrashMatrixReport(baseline=clean, boundaries=appends)
    expected = (clean, clean_view, clean_prompts)
    for k in boundaries if boundaries is not None else range(1, appends + 1):
        for side in sides:
            report.cases.append(await matrix.case(k, side, None, expected))
            if second_crash == "none":
                continue
            seconds = [1] if second_crash == "first" else list(range(1, appends + 1))
            for j in seconds:
                report.cases.append(await matrix.case(k, side, j, expected))
    return report


def _event_count(session: Session) -> int:
    """Every event of a session, historical ones included (of a partial one, by count)."""
    history = session._history
    held = len(session.all_events)
    return held if history is None else history.count + held
