"""The harness: run every case on every store under test, each in an app of its own.

For each case and store the harness opens the store, gives the case an app of its own
(``replay.<case_id>.<random>``), runs the operations through the store's protocol (and,
on Steadyloop's own stores, the real agent loop, summaries and injected failures),
restarts the store and reads back what was stored (the snapshot), and removes that app
— and nothing else — unless asked to keep it. Stores it made itself (a temporary
directory, a named in-memory store) are removed as well. A case needing a capability
the store lacks does not run there: the run is `not_applicable`, naming it.

Ids and times come from a recording id source and clock (sequential ids and a step
clock by default, random ids and the wall clock on request), so the normaliser knows
exactly which strings were generated ids and which integers were clock readings.

This is the drive stage of a replay: it takes the stores the load stage made, reads each
back into a [`Snapshot`][steadyloop.replay.Snapshot] (`steadyloop.replay._snapshot`), and
hands the diff stage a [`CaseRun`][steadyloop.replay.CaseRun]; it imports neither stage.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from steadyloop._errors import (
    BackendUnavailable,
    CaseError,
    EncodingError,
    InvalidBatch,
    ModelError,
    SessionError,
    SteadyloopError,
)
from steadyloop.journal import (
    check_name,
)
from steadyloop.loop import (
    Agent,
    Message,
    ModelReply,
    ReplayPolicy,
    ScriptedModel,
    Tool,
    ToolRegistry,
    resume,
    run,
)
from steadyloop.records import (
    RandomIds,
    RecordFactory,
    SequentialIds,
    StepClock,
    SystemClock,
    canonical_json,
    decode,
)
from steadyloop.replay._backends import tightest_backend
from steadyloop.replay._capabilities import required_capabilities
from steadyloop.replay._cases import (
    AppendEvent,
    Case,
    Checkpoint,
    CreateSession,
    DeleteSession,
    EditEvent,
    FailSummary,
    InjectFailure,
    ListSessions,
    Operation,
    RepeatEvent,
    ResumeLoop,
    RunLoop,
    SearchMemory,
    StoreMemory,
    Summarize,
    TextPartSpec,
    ToolCallSpec,
)
from steadyloop.replay._journal_store import Crash, InjectedDrop, JournalStore
from steadyloop.replay._normalise import Normaliser
from steadyloop.replay._saver import SaverDriver, SaverStore
from steadyloop.replay._saver_cases import SAVER_OPS
from steadyloop.replay._snapshot import (
    Snapshot,
    empty_snapshot,
    read_loop,
    read_memory,
    read_sessions,
)
from steadyloop.replay._store import (
    Capability,
    EventEdit,
    Outcome,
    SessionRef,
    SessionStore,
    StoreEvent,
    without_passwords,
)
from steadyloop.sessions import memory_stream, session_stream, user_stream

__all__ = [
    "CLOCK_START",
    "CLOCK_STEP",
    "CaseRun",
    "NotCreated",
    "check_steadyloop_limits",
    "clock_shift",
    "run_case",
    "steadyloop_limits",
]

_log = logging.getLogger(__name__)

CLOCK_START = 1_700_000_000_123_457
"""The step clock's first reading: microseconds that a lossy backend would lose."""

CLOCK_STEP = 1_234_567
"""The step clock's step, in microseconds (not a round number, on purpose)."""


def clock_shift(case: Case) -> int:
    """The whole seconds, in microseconds, the step clock of a run of `case` is moved by.

    The step clock starts at `CLOCK_START` moved forward to the current second, so
    its readings are as recent as a live agent's: a framework that treats an event
    older than its store's own update time as stale (trpc-agent-py's SQL session
    service reloads the whole session on every such append) stays on the path it
    takes in production. The normaliser moves times that are not readings back by the
    same amount (see [`Normaliser`][steadyloop.replay.Normaliser]), so reports keep
    the bytes a clock starting at `CLOCK_START` gives. A whole-second move keeps every
    reading's microseconds, and its float seconds in the same binary range, so a lossy
    backend loses the same digits. A case with a `tz` runs on the fixed clock: a time
    zone's offset depends on the date.
    """
    if case.tz is not None:
        return 0
    return max(0, int(time.time()) - CLOCK_START // 1_000_000) * 1_000_000


class _RecordingIds:
    def __init__(self, inner: SequentialIds | RandomIds) -> None:
        self.inner = inner
        self.values: list[str] = []

    def new_id(self) -> str:
        value = self.inner.new_id()
        self.values.append(value)
        return value


class _RecordingClock:
    def __init__(self, inner: StepClock | SystemClock) -> None:
        self.inner = inner
        self.values: list[int] = []

    def now_us(self) -> int:
        value = self.inner.now_us()
        if self.values and value <= self.values[-1]:
            # A wall clock may repeat a microsecond (or step back); readings must be
            # distinct and rising for their positions to be tokens.
            value = self.values[-1] + 1
        self.values.append(value)
        return value


@dataclass
class CaseRun:
    """What one case did on one store.

    Attributes:
        case_id: The case.
        backend: The store's name.
        snapshot: The raw [`Snapshot`][steadyloop.replay.Snapshot]; empty when not
            applicable.
        normaliser: The normaliser for this run's generated ids and clock readings.
        injections: ``{"line", "kind", "effect"}`` for every ``inject_failure``.
        seconds: Wall time of the run.
        framework: Whose store it is.
        missing: The capabilities the case needs and the store lacks, each with the
            first line needing it (`{"capability", "line"}`); non-empty means the case
            did not run there: it is `not_applicable`.
        unseen: Snapshot domains the store cannot show (`memory`, the stored memory
            entries, without [`MEMORY_ENTRIES`][steadyloop.replay.Capability]); they are
            left out of its comparisons with other stores.
    """

    case_id: str
    backend: str
    snapshot: Snapshot
    normaliser: Normaliser
    injections: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    framework: str = "steadyloop"
    missing: list[dict[str, Any]] = field(default_factory=list)
    unseen: tuple[str, ...] = ()

    @property
    def applicable(self) -> bool:
        """Whether the case ran on the store (it had every capability needed)."""
        return not self.missing


_BEHIND_THE_CACHE = (Summarize, FailSummary, RunLoop, ResumeLoop)

_MASKED = (
    (Capability.EXPLICIT_EVENT_ID, "id"),
    (Capability.EXPLICIT_TIME, "time"),
    (Capability.INVOCATION_ID, "invocation_id"),
)


@contextlib.contextmanager
def _time_zone(tz: str | None) -> Any:
    """Run under ``TZ=tz`` (``time.tzset``), restoring the previous zone after."""
    if tz is None:
        yield
        return
    before = os.environ.get("TZ")
    os.environ["TZ"] = tz
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


class NotCreated(SessionError):
    """An operation on a session whose create_session failed before the store named it."""


def _may_refuse(op: Operation) -> bool:
    """Whether the case expects the store may refuse the operation."""
    return isinstance(op, RepeatEvent | EditEvent) or (
        isinstance(op, CreateSession) and op.may_refuse
    )


class _Runner:
    def __init__(
        self, case: Case, store: SessionStore, ids: Literal["sequential", "random"]
    ) -> None:
        self.case = case
        self.store = store
        self.own = store if isinstance(store, JournalStore) else None
        self.app = f"replay.{case.case_id}.{uuid.uuid4().hex[:10]}"
        self.ids = _RecordingIds(SequentialIds("id") if ids == "sequential" else RandomIds())
        self.shift = clock_shift(case) if ids == "sequential" else 0
        self.clock = _RecordingClock(
            StepClock(CLOCK_START + self.shift, CLOCK_STEP)
            if ids == "sequential"
            else SystemClock()
        )
        self.records = RecordFactory(clock=self.clock, ids=self.ids)
        self.snapshot = empty_snapshot()
        self.sessions: dict[str, SessionRef] = {}
        self.events: dict[tuple[str, str], StoreEvent] = {}
        self.users: set[str] = set()
        self.runs: dict[str, RunLoop] = {}
        self.effects: dict[str, dict[str, int]] = {}
        # Per run: the assistant turns its session held before it (earlier runs' turns).
        self.offsets: dict[str, int] = {}
        self.injections: list[dict[str, Any]] = []
        # Every error an operation ended with, when asked for (the limits check).
        self.refusals: list[tuple[int, BaseException]] | None = None
        # The checkpointer ops' driver, on a store that has them (see `_saver`).
        self.saver = (
            SaverDriver(store, self.app, self.snapshot.threads)
            if isinstance(store, SaverStore)
            else None
        )

    def _journal_store(self) -> JournalStore:
        if self.own is None:  # pragma: no cover - capabilities keep other stores out
            raise RuntimeError("a Steadyloop-only operation on another store")
        return self.own

    async def _restart(self) -> None:
        # The "process" died or a read-back is due: its handles die with it, whatever
        # closing them says, and the read goes through a fresh client.
        with contextlib.suppress(Exception):
            await self.store.close()
        await self.store.open()

    def _run(self, seconds: float) -> CaseRun:
        return CaseRun(
            case_id=self.case.case_id,
            backend=self.store.name,
            snapshot=self.snapshot,
            normaliser=Normaliser(self.ids.values, self.clock.values, shift=self.shift),
            injections=self.injections,
            seconds=seconds,
            framework=self.store.framework,
            unseen=() if Capability.MEMORY_ENTRIES in self.store.capabilities else ("memory",),
        )

    async def execute(self, keep: bool) -> CaseRun:
        started = time.perf_counter()
        missing = [
            {"capability": str(cap), "line": line}
            for cap, line in sorted(required_capabilities(self.case).items(), key=lambda i: i[1])
            if cap not in self.store.capabilities
        ]
        if missing:
            run = self._run(0.0)
            run.missing = missing
            return run
        inner: Any = self.store
        while not isinstance(inner, JournalStore) and isinstance(
            getattr(inner, "inner", None), SessionStore
        ):
            inner = inner.inner  # a wrapper (a FaultyStore): its clock is ours too
        if isinstance(inner, JournalStore):
            inner.records = self.records
        with _time_zone(self.case.tz):
            await self.store.open()
            try:
                await self._operations()
                await self._restart()
                await self._read_back()
            except BaseException:
                # Clean up as far as the store still allows, then let the original
                # error through: a cleanup failure on a dead store must not mask it.
                with contextlib.suppress(Exception):
                    await self._cleanup(keep)
                raise
            await self._cleanup(keep)
        self._mask()
        return self._run(time.perf_counter() - started)

    async def _operations(self) -> None:
        armed: tuple[int, InjectFailure] | None = None
        for line, op in self.case.operations:
            if isinstance(op, InjectFailure):
                armed = (line, op)
                continue
            plan = armed[1] if armed else None
            injector = self.own.journal if self.own is not None else None
            if injector is not None:
                injector.arm(plan)
            crashed = False
            try:
                await self._do(line, op, plan)
            except Crash:
                crashed = True
            except BackendUnavailable as exc:
                if not isinstance(exc, InjectedDrop):
                    # The store went away on its own: not something the case did, so
                    # not a difference. The run stops here.
                    raise
                self._error(line, op, exc)
            except Exception as exc:
                if self.own is not None and not (
                    isinstance(exc, SteadyloopError) or _may_refuse(op)
                ):
                    raise  # a bug of our own store: never a result
                self._error(line, op, exc)
            if self.own is not None and isinstance(
                op, Summarize | FailSummary | RunLoop | ResumeLoop
            ):
                self.own.forget()  # it wrote the session behind the cached copy's back
            if armed is not None and injector is not None:
                entry: dict[str, Any] = {
                    "line": armed[0],
                    "kind": armed[1].kind,
                    "effect": injector.effect,
                }
                if self.refusals is not None:
                    entry["writes"] = injector.count
                self.injections.append(entry)
                armed = None
            if injector is not None:
                injector.arm(None)
            if crashed:
                await self._restart()

    def _error(self, line: int, op: Operation, exc: BaseException) -> None:
        if self.refusals is not None:
            self.refusals.append((line, exc))
        self.snapshot.errors[str(line)] = {"op": op.op, "error": type(exc).__name__}
        if str(line) in self.snapshot.outcomes:
            return
        if _may_refuse(op):
            self.snapshot.outcomes[str(line)] = {
                "op": op.op,
                "outcome": str(Outcome.REFUSED),
                "error": type(exc).__name__,
                "message": str(exc).replace(self.app, "<app>"),
            }

    def _outcome(self, line: int, op: Operation, outcome: Outcome) -> None:
        self.snapshot.outcomes[str(line)] = {
            "op": op.op,
            "outcome": str(outcome),
            "error": None,
            "message": None,
        }

    async def _cleanup(self, keep: bool) -> None:
        try:
            if not keep:
                await self.store.cleanup(self.app)
        finally:
            await self.store.close()

    async def _capture(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sessions": await read_sessions(self.store, self.sessions, own=self.own is not None)
        }
        if self.own is not None:
            out["memory"] = await read_memory(self.own.journal, self.app, sorted(self.users))
        else:
            out["memory"] = {}
        return out

    async def _read_back(self) -> None:
        captured = await self._capture()
        self.snapshot.sessions.update(captured["sessions"])
        self.snapshot.memory.update(captured["memory"])
        for run_id in self.runs:
            self.snapshot.loops[run_id] = await read_loop(
                self._journal_store().journal, self.app, run_id, self.effects[run_id]
            )
        if self.saver is not None:
            await self.saver.read_back()

    def _mask(self) -> None:
        """Blank the event fields a store does not keep, so they are never compared."""
        blank = [name for cap, name in _MASKED if cap not in self.store.capabilities]
        if not blank:
            return
        checkpoints = self.snapshot.checkpoints.values()
        bodies = [self.snapshot.sessions, *(c.get("sessions", {}) for c in checkpoints)]
        for sessions in bodies:
            for session in sessions.values():
                for key in ("events", "historical_events"):
                    for event in session.get(key, ()):
                        if isinstance(event, dict):
                            for name in blank:
                                if name in event:
                                    event[name] = None
        # Memory hits name the event and its time as the store has them, too.
        hit_fields = {"id": "event_id", "time": "time", "invocation_id": "invocation_id"}
        for query in self.snapshot.queries.values():
            for hit in query.get("hits", ()):
                if isinstance(hit, dict):
                    for name in blank:
                        if hit_fields[name] in hit:
                            hit[hit_fields[name]] = None

    def _ref(self, handle: str) -> SessionRef:
        ref = self.sessions.get(handle)
        if ref is None:
            raise NotCreated(
                f"session {handle!r} has no id: its create_session (with a generated id) "
                "failed, so the store never named it"
            )
        return ref

    async def _do(self, line: int, op: Operation, plan: InjectFailure | None) -> None:
        store = self.store
        if op.op in SAVER_OPS:
            assert self.saver is not None  # the capability keeps other stores out
            await self.saver.do(op)  # type: ignore[arg-type]
            return
        if isinstance(op, CreateSession):
            sid = op.session if op.session_id == "" else op.session_id
            self.users.add(op.user)
            existed = op.may_refuse and any(
                r.user == op.user and r.session_id == sid for r in self.sessions.values()
            )
            previous = None
            if existed:
                previous = await self._peek(SessionRef(self.app, op.user, str(sid)))
            if sid is not None:
                # Known before the store answers: a failed create still has a handle,
                # and what the case does with it next is the store's to answer.
                self.sessions.setdefault(op.session, SessionRef(self.app, op.user, sid))
            used = await store.create_session(self.app, op.user, sid, op.state)
            if sid is None and used not in self.ids.values:
                self.ids.values.append(used)  # a foreign store's own id: normalised too
            self.sessions.setdefault(op.session, SessionRef(self.app, op.user, used))
            if op.may_refuse:
                after = await self._peek(SessionRef(self.app, op.user, used))
                merged = (
                    previous is not None
                    and after is not None
                    and (
                        after.get("events") == previous.get("events")
                        and after.get("state") == previous.get("state")
                    )
                )
                self._outcome(line, op, Outcome.MERGED if merged else Outcome.ACCEPTED)
        elif isinstance(op, AppendEvent):
            await self._append_event(line, op, plan)
        elif isinstance(op, RepeatEvent):
            ref = self._ref(op.session)
            event = self.events[(op.session, op.event_id)]
            await store.append_event(ref, event)
            after = await self._peek(ref)
            copies = sum(1 for e in (after or {}).get("events", ()) if e.get("id") == event.id)
            self._outcome(line, op, Outcome.ACCEPTED if copies >= 2 else Outcome.MERGED)
        elif isinstance(op, EditEvent):
            ref = self._ref(op.session)
            edit = EventEdit(text=op.text, state_delta=dict(op.state_delta))
            await store.edit_appended(ref, op.event_id, edit)
            after = await self._peek(ref)
            seen = False
            for e in (after or {}).get("events", ()):
                if e.get("id") != op.event_id:
                    continue
                texts = [p.get("text") for p in e.get("parts", ()) if p.get("type") == "text"]
                delta = e.get("state_delta") or {}
                if (op.text is not None and op.text in texts) or any(
                    k in delta and delta[k] == v for k, v in op.state_delta.items()
                ):
                    seen = True
            self._outcome(line, op, Outcome.ACCEPTED if seen else Outcome.MERGED)
        elif isinstance(op, ListSessions):
            ids = await store.list_sessions(self.app, op.user)
            self.snapshot.lists[op.list_id] = {"user": op.user, "sessions": sorted(ids)}
        elif isinstance(op, DeleteSession):
            await store.delete_session(self._ref(op.session))
        elif isinstance(op, StoreMemory):
            await store.add_session_to_memory(self._ref(op.session))
        elif isinstance(op, SearchMemory):
            hits = await store.search_memory(self.app, op.user, op.query, op.limit)
            # A plain-JSON copy: an adapter returns plain JSON, or it is an error.
            hits = decode(canonical_json(hits))
            self.snapshot.queries[op.query_id] = {
                "user": op.user,
                "query": op.query,
                "limit": op.limit,
                "hits": hits,
            }
        elif isinstance(op, Summarize | FailSummary):
            own = self._journal_store()
            ref = self._ref(op.session)
            session = await own.session(ref)
            service = own.service(self.app)
            method = service.summarize if isinstance(op, Summarize) else service.fail_summary
            await method(
                session,
                op.text,
                summary_id=op.summary_id,
                version=op.version,
                replaces=op.replaces,
                covers_through=op.covers_through,
            )
        elif isinstance(op, Checkpoint):
            await self._restart()
            self.snapshot.checkpoints[op.name] = await self._capture()
        elif isinstance(op, RunLoop):
            own = self._journal_store()
            self.runs[op.run] = op
            self.effects[op.run] = {name: 0 for name in op.tools}
            ref = self._ref(op.session)
            await run(
                self._agent(op),
                own.journal,
                self.app,
                ref.user,
                ref.session_id,
                op.run,
                op.input,
                records=self.records,
            )
        elif isinstance(op, ResumeLoop):
            own = self._journal_store()
            await resume(
                self._agent(self.runs[op.run]), own.journal, self.app, op.run, records=self.records
            )

    async def _peek(self, ref: SessionRef) -> dict[str, Any] | None:
        """Read a session back after a restart (for an outcome); `None` if unreadable."""
        await self._restart()
        try:
            got = await self.store.get_session(ref)
        except BackendUnavailable:
            raise
        except Exception as exc:
            _log.debug("session %r unreadable after a restart: %s", ref, exc)
            return None
        return None if got is None else got.to_dict()

    async def _append_event(self, line: int, op: AppendEvent, plan: InjectFailure | None) -> None:
        ref = self._ref(op.session)
        parts: list[dict[str, Any]] = []
        if op.text is not None:
            parts.append({"type": "text", "text": op.text})
        for spec in op.parts or ():
            if isinstance(spec, TextPartSpec):
                parts.append({"type": "text", "text": spec.text})
            elif isinstance(spec, ToolCallSpec):
                parts.append(
                    {
                        "type": "tool_call",
                        "call_id": spec.call_id,
                        "name": spec.name,
                        "arguments": spec.arguments,
                    }
                )
            else:
                parts.append(
                    {
                        "type": "tool_result",
                        "call_id": spec.call_id,
                        "name": spec.name,
                        "response": spec.response,
                        "error": spec.error,
                    }
                )
        event_id = self.ids.new_id() if op.event_id is None else op.event_id
        when = self.clock.now_us() if op.time is None else op.time
        event = StoreEvent(
            id=event_id,
            author=op.author,
            parts=tuple(parts),
            state_delta=dict(op.state_delta),
            time=when,
            invocation_id=op.invocation_id,
        )
        self.events[(op.session, event_id)] = event
        key = op.idempotency_key
        if plan is not None and plan.kind in ("duplicate_submission", "dropped_connection"):
            key = key or f"replay:{self.case.case_id}:{line}"
        if plan is not None and plan.kind == "duplicate_submission":
            own = self._journal_store()
            assert key is not None
            await own.submit_twice(ref, event, key)
            own.journal.effect = "submitted twice under one idempotency key"
            return
        try:
            await self.store.append_event(ref, event, idempotency_key=key)
        except InjectedDrop:
            await self.store.append_event(ref, event, idempotency_key=key)

    def _agent(self, op: RunLoop) -> Agent:
        script: list[ModelReply | str] = []
        for reply in op.script:
            if isinstance(reply, str):
                script.append(reply)
            else:
                script.append(ModelReply.call(reply.tool, reply.arguments, id=reply.call_id or ""))
        tools = ToolRegistry()
        effects = self.effects[op.run]
        for name, spec in op.tools.items():
            tools.add(
                Tool(
                    name=name,
                    function=_scripted_tool(effects, name, spec.returns),
                    policy=ReplayPolicy(spec.policy),
                )
            )
        return Agent("replay", ScriptedModel(self._script(op.run, script)), tools)

    def _script(
        self, run_id: str, replies: list[ModelReply | str]
    ) -> Callable[[int, Sequence[Message]], ModelReply | str]:
        """The run's script, counted from its own first model call.

        [`ScriptedModel`][steadyloop.loop.ScriptedModel] passes the number of assistant turns in
        the prompt; in a session that earlier runs (or events) already answered, those come
        first. The count at the run's first call is remembered, so a resumed run (a new model,
        in the "new process") keeps counting where it was.
        """
        offsets = self.offsets

        def reply(index: int, messages: Sequence[Message]) -> ModelReply | str:
            at = index - offsets.setdefault(run_id, index)
            if not 0 <= at < len(replies):
                raise ModelError(
                    f"scripted model 'scripted' has {len(replies)} replies; call {at} has none"
                )
            return replies[at]

        return reply


def _scripted_tool(effects: dict[str, int], name: str, returns: Any) -> Callable[..., Any]:
    def tool(**arguments: Any) -> Any:
        effects[name] += 1
        return returns

    return tool


async def run_case(
    case: Case,
    store: SessionStore,
    *,
    keep: bool = False,
    ids: Literal["sequential", "random"] = "sequential",
) -> CaseRun:
    """Run one case on one store and read back its snapshot.

    Args:
        case: The case.
        store: The store under test (Steadyloop's sessions on a
            [`Backend`][steadyloop.replay.Backend] of yours: `JournalStore(backend)`).
        keep: Leave the case's data in the store instead of removing it.
        ids: ``"sequential"`` ids and a step clock (the default), or ``"random"`` ids
            and the wall clock (normalisation makes both compare the same).

    Returns:
        The run; when the store lacks a capability the case needs, a run with
        `missing` set that did nothing (`not_applicable`).

    Raises:
        BackendUnavailable: The store cannot be reached, or stopped answering during
            the run (what the case had written so far is removed where possible).
    """
    try:
        return await _Runner(case, store, ids).execute(keep)
    except BackendUnavailable as exc:
        raise BackendUnavailable(
            f"backend {store.name!r} became unreachable during case {case.case_id!r}: "
            + without_passwords(str(exc))
        ) from exc


def _limit_error(exc: BaseException) -> bool:
    """Whether an operation's error is Steadyloop refusing a value by its own limits."""
    if isinstance(exc, EncodingError | InvalidBatch):
        return True
    return isinstance(exc, SessionError) and isinstance(
        exc.__context__, EncodingError | InvalidBatch
    )


def _short(pointer: str) -> str:
    """A JSON Pointer cut to its first tokens when a deep value makes it long."""
    tokens = pointer.split("/")[1:]
    if len(tokens) <= 8:
        return pointer
    return "/" + "/".join(tokens[:6]) + f"/… ({len(tokens)} levels)"


def _detail(exc: BaseException) -> str:
    text = str(exc)
    return text.rsplit(" (at /", 1)[0] if isinstance(exc, EncodingError) else text


def _static_limits(case: Case) -> list[tuple[str, int, str, str]]:
    """Ids and keys Steadyloop's journals cannot name (checked without running)."""
    problems: list[tuple[str, int, str, str]] = []

    def check(line: int, field_name: str, fn: Callable[[], object]) -> bool:
        try:
            fn()
        except (SessionError, InvalidBatch) as exc:
            problems.append((case.file, line, field_name, str(exc)))
            return False
        return True

    for line, op in case.operations:
        if isinstance(op, CreateSession | SearchMemory | ListSessions):
            user = op.user
            ok = check(line, "/user", lambda u=user: (user_stream(u), memory_stream(u)))  # type: ignore[misc]
            sid = op.session if isinstance(op, CreateSession) and op.session_id == "" else None
            if isinstance(op, CreateSession) and op.session_id not in ("", None):
                sid = op.session_id
            if ok and sid is not None:
                check(line, "/session_id", lambda u=user, s=sid: session_stream(u, s))  # type: ignore[misc]
        elif isinstance(op, AppendEvent) and op.idempotency_key is not None:
            key = op.idempotency_key
            check(line, "/idempotency_key", lambda k=key: check_name(k, "idempotency key"))  # type: ignore[misc]
    return problems


def _case_field(path: str) -> str:
    """The case field a record's JSON Pointer points into, where it says."""
    for prefix in ("/payload/event", "/payload"):
        if path.startswith(prefix + "/"):
            rest = path[len(prefix) :]
            if rest.split("/")[1] in ("state", "state_delta", "parts"):
                return rest
    return ""


async def steadyloop_limits(case: Case) -> list[tuple[str, int, str, str]]:
    """Find what in a case Steadyloop's own stores would refuse, before anything runs.

    The case runs once on a private in-memory journal that refuses what the strictest
    of Steadyloop's journals refuses. Reported, as `(file, line, field, detail)`:
    a value too deeply nested, an id or key too long or holding a control character
    (Steadyloop's limits on every journal), and an `inject_failure` that can never
    fire (a crash after more writes than the next operation makes). A foreign store's
    refusal of such a value stays an operation result: probing those limits is the
    point of running a case there.
    """
    backend = tightest_backend("limits")
    runner = _Runner(case, JournalStore(backend), "sequential")
    runner.refusals = []
    try:
        await runner.execute(keep=False)
    finally:
        assert backend.dispose is not None
        await backend.dispose()
    problems = _static_limits(case)
    seen = {p[1] for p in problems}
    problems += [
        (case.file, line, _short(_case_field(getattr(exc, "path", ""))), _detail(exc))
        for line, exc in runner.refusals
        if _limit_error(exc) and line not in seen
    ]
    for injection in runner.injections:
        if injection["effect"] == "not triggered":
            problems.append(
                (
                    case.file,
                    injection["line"],
                    "/after" if injection["kind"] == "crash_after_write" else "/write",
                    f"this {injection['kind']} can never fire: the next operation makes "
                    f"only {injection['writes']} write(s)",
                )
            )
    return sorted(problems, key=lambda p: p[1])


async def check_steadyloop_limits(cases: Sequence[Case]) -> None:
    """Refuse cases holding what Steadyloop's own stores refuse, before anything runs.

    `replay()` calls this whenever a Steadyloop store is
    selected (see [`steadyloop_limits`][steadyloop.replay.steadyloop_limits]).

    Raises:
        CaseError: With every problem of every case in `problems`.
    """
    problems = [p for case in cases for p in await steadyloop_limits(case)]
    if problems:
        file, line, where, detail = problems[0]
        raise CaseError(file, line, where, detail, problems=problems)
