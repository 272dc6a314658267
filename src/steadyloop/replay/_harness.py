"""The harness: run every case on every backend, each in its own namespace.

For each case and backend the harness opens the backend's store, gives the case a
namespace of its own (``replay.<case_id>.<random>``), runs the operations through the
real session service and agent loop, reads back what was stored (the snapshot), and
deletes that namespace — and nothing else — unless asked to keep it. Stores it made
itself (a temporary directory, a named in-memory store) are removed as well.

Ids and times come from a recording id source and clock (sequential ids and a step
clock by default, random ids and the wall clock on request), so the normaliser knows
exactly which strings were generated ids and which integers were clock readings.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from steadyloop._errors import BackendUnavailable, ModelError, SteadyloopError, UnknownBackend
from steadyloop.journal import (
    AppendResult,
    Files,
    ForwardingJournal,
    Journal,
    JSONLJournal,
    MemoryJournal,
    PreparedBatch,
    open_journal,
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
)
from steadyloop.replay._cases import (
    AppendEvent,
    Case,
    Checkpoint,
    CreateSession,
    FailSummary,
    InjectFailure,
    Operation,
    ResumeLoop,
    RunLoop,
    SearchMemory,
    StoreMemory,
    Summarize,
    TextPartSpec,
    ToolCallSpec,
)
from steadyloop.replay._normalise import Normaliser
from steadyloop.replay._snapshot import (
    empty_snapshot,
    read_loop,
    read_memory,
    read_sessions,
)
from steadyloop.sessions import Part, SessionService, TextPart, ToolCallPart, ToolResultPart

__all__ = [
    "EMBEDDED_BACKENDS",
    "SERVER_BACKENDS",
    "Backend",
    "CaseRun",
    "default_backends",
    "resolve_backends",
    "run_case",
]

EMBEDDED_BACKENDS: tuple[str, ...] = ("memory", "sqlite", "jsonl")
"""Backends that need no server; the default selection."""

SERVER_BACKENDS: dict[str, str] = {
    "postgres": "STEADYLOOP_POSTGRES_URL",
    "redis": "STEADYLOOP_REDIS_URL",
    "mysql": "STEADYLOOP_MYSQL_URL",
}
"""Server backends, each with the environment variable that names its server."""

_SCHEME_NAMES = {
    "memory": "memory",
    "sqlite": "sqlite",
    "jsonl": "jsonl",
    "postgresql": "postgres",
    "postgres": "postgres",
    "redis": "redis",
    "mysql": "mysql",
    "mariadb": "mysql",
}

CLOCK_START = 1_700_000_000_123_457
"""The step clock's first reading: microseconds that a lossy backend would lose."""

CLOCK_STEP = 1_234_567
"""The step clock's step, in microseconds (not a round number, on purpose)."""


class _Crash(BaseException):
    """The simulated process died. A ``BaseException``, so nothing swallows it."""


class _InjectedDrop(BackendUnavailable):
    """A connection drop the case asked for; any other ``BackendUnavailable`` is real."""


class _TearingFiles(Files):
    """A file layer that, once armed, writes only a head of the next write and dies."""

    def __init__(self) -> None:
        self._fraction: float | None = None

    def arm(self, fraction: float) -> None:
        self._fraction = fraction

    def write(self, fd: int, data: bytes) -> None:
        fraction, self._fraction = self._fraction, None
        if fraction is None:
            super().write(fd, data)
            return
        cut = min(len(data) - 1, max(1, int(len(data) * fraction)))
        super().write(fd, data[:cut])
        raise _Crash(f"torn write: {cut} of {len(data)} bytes landed")


@dataclass(frozen=True)
class Backend:
    """A backend the harness can run cases on.

    Attributes:
        name: Its name in reports and in allowed differences (``"sqlite"``, …).
        open: Opens the store; called again after a simulated crash, so it must reach
            the same store every time.
        open_files: For file backends: opens the store on a given file layer, which
            lets the harness tear a write in the middle. ``None`` elsewhere.
        dispose: Removes the store itself, if the harness created it.
    """

    name: str
    open: Callable[[], Awaitable[Journal]]
    open_files: Callable[[Files], Awaitable[Journal]] | None = None
    dispose: Callable[[], Awaitable[None]] | None = None

    @classmethod
    def from_url(cls, url: str, name: str | None = None) -> Backend:
        """A backend on an existing store named by a journal URL.

        A nameless ``memory://`` opens a new private store each time, which a case
        that crashes and reopens could never reach again: it stands for a fresh named
        in-memory store instead, the same one for every case run with this backend,
        removed with :attr:`dispose`.
        """
        scheme = url.split(":", 1)[0].lower()
        label = name or _SCHEME_NAMES.get(scheme, scheme)
        if scheme == "memory" and not url[len("memory:") :].lstrip("/").split("?", 1)[0]:
            # The same test open_journal makes for "no name given".
            return _memory_store(label)

        async def opener() -> Journal:
            return await open_journal(url)

        files_opener = None
        if scheme == "jsonl":

            async def files_opener(files: Files) -> Journal:
                return await open_journal(url, files=files)

        return cls(label, opener, files_opener)


def _memory_store(label: str) -> Backend:
    """A backend on a new named in-memory store, forgotten on dispose."""
    store = f"replay-{uuid.uuid4().hex}"

    async def open_memory() -> Journal:
        return await open_journal(f"memory://{store}")

    async def forget() -> None:
        MemoryJournal.forget(store)

    return Backend(label, open_memory, None, forget)


def temporary_backend(name: str, workdir: Path) -> Backend:
    """A backend on a fresh embedded store (`memory`, `sqlite`, `jsonl`) under `workdir`."""
    if name == "memory":
        return _memory_store("memory")
    if name == "sqlite":
        path = workdir / f"sqlite-{uuid.uuid4().hex[:8]}.db"

        async def open_sqlite() -> Journal:
            return await open_journal(f"sqlite://{path}")

        async def remove_sqlite() -> None:
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(f"{path}{suffix}")

        return Backend("sqlite", open_sqlite, None, remove_sqlite)
    directory = workdir / f"jsonl-{uuid.uuid4().hex[:8]}"

    async def open_jsonl() -> Journal:
        directory.mkdir(exist_ok=True)
        return await JSONLJournal.open(directory)

    async def open_jsonl_files(files: Files) -> Journal:
        directory.mkdir(exist_ok=True)
        return await JSONLJournal.open(directory, files=files)

    async def remove_jsonl() -> None:
        shutil.rmtree(directory, ignore_errors=True)

    return Backend("jsonl", open_jsonl, open_jsonl_files, remove_jsonl)


def default_backends(environ: Mapping[str, str] | None = None) -> list[str]:
    """Return the default selection of backends.

    That is ``memory``, ``sqlite`` and ``jsonl``, then each server backend whose
    environment variable (``STEADYLOOP_POSTGRES_URL``, …) is set.
    """
    env = os.environ if environ is None else environ
    return [*EMBEDDED_BACKENDS, *(n for n, var in SERVER_BACKENDS.items() if env.get(var))]


def resolve_backends(
    specs: Sequence[str | Backend],
    workdir: str | Path,
    environ: Mapping[str, str] | None = None,
) -> list[Backend]:
    """Turn backend names and URLs into :class:`Backend` objects.

    Args:
        specs: Names (``memory``, ``sqlite``, ``jsonl`` — fresh stores under
            ``workdir``; ``postgres``, ``redis``, ``mysql`` — the server their
            environment variable names), journal URLs, or ready :class:`Backend` objects.
        workdir: Where temporary stores go.
        environ: The environment to read server URLs from (``os.environ`` by default).

    Raises:
        UnknownBackend: A name is unknown, a server's variable is not set, or two
            backends would have the same name.
    """
    env = os.environ if environ is None else environ
    out: list[Backend] = []
    for spec in specs:
        if isinstance(spec, Backend):
            out.append(spec)
        elif spec in EMBEDDED_BACKENDS:
            out.append(temporary_backend(spec, Path(workdir)))
        elif spec in SERVER_BACKENDS:
            variable = SERVER_BACKENDS[spec]
            url = env.get(variable)
            if not url:
                raise UnknownBackend(f"backend {spec!r}: set {variable} to its server's URL")
            out.append(Backend.from_url(url, spec))
        elif ":" in spec:
            out.append(Backend.from_url(spec))
        else:
            known = ", ".join([*EMBEDDED_BACKENDS, *SERVER_BACKENDS])
            raise UnknownBackend(f"unknown backend {spec!r}; use one of {known}, or a URL")
    names = [b.name for b in out]
    for name in names:
        if names.count(name) > 1:
            raise UnknownBackend(
                f"two backends are named {name!r}; give URLs distinct names with Backend.from_url"
            )
    return out


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


class _Injector(ForwardingJournal):
    """Carries out the failure armed for the current operation."""

    def __init__(self, inner: Journal, files: _TearingFiles | None) -> None:
        super().__init__(inner)
        self.files = files
        self.plan: InjectFailure | None = None
        self.count = 0
        self.effect = ""

    def arm(self, plan: InjectFailure | None) -> None:
        self.plan = plan
        self.count = 0
        self.effect = "not triggered"

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        plan = self.plan
        if plan is None:
            return await super()._append(batch)
        self.count += 1
        n = self.count
        if plan.kind == "crash_after_write":
            if plan.after == 0:
                self.effect = "crashed before the first write"
                raise _Crash(self.effect)
            result = await super()._append(batch)
            if n == plan.after:
                self.effect = f"crashed after write {n}"
                raise _Crash(self.effect)
            return result
        if plan.kind == "torn_write" and n == plan.write:
            if self.files is None:
                self.effect = f"write {n} never landed (not a file backend: no torn bytes)"
                raise _Crash(self.effect)
            self.effect = f"write {n} torn mid-way"
            self.files.arm(plan.fraction)
            await super()._append(batch)
            raise _Crash(self.effect)  # pragma: no cover - the file layer dies first
        if plan.kind == "dropped_connection" and n == plan.write:
            if plan.when == "before":
                self.effect = f"connection dropped before write {n}; retried"
                raise _InjectedDrop("replay: connection dropped before the write")
            await super()._append(batch)
            self.effect = f"connection dropped after write {n} landed; retried"
            raise _InjectedDrop("replay: connection dropped after the write")
        return await super()._append(batch)


@dataclass
class CaseRun:
    """What one case did on one backend.

    Attributes:
        case_id: The case.
        backend: The backend's name.
        snapshot: The raw snapshot (see :mod:`steadyloop.replay._snapshot`).
        normaliser: The normaliser for this run's generated ids and clock readings.
        injections: ``{"line", "kind", "effect"}`` for every ``inject_failure``.
        seconds: Wall time of the run.
    """

    case_id: str
    backend: str
    snapshot: dict[str, Any]
    normaliser: Normaliser
    injections: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


class _Runner:
    def __init__(self, case: Case, backend: Backend, ids: Literal["sequential", "random"]) -> None:
        self.case = case
        self.backend = backend
        self.app = f"replay.{case.case_id}.{uuid.uuid4().hex[:10]}"
        self.ids = _RecordingIds(SequentialIds("id") if ids == "sequential" else RandomIds())
        self.clock = _RecordingClock(
            StepClock(CLOCK_START, CLOCK_STEP) if ids == "sequential" else SystemClock()
        )
        self.records = RecordFactory(clock=self.clock, ids=self.ids)
        self.snapshot = empty_snapshot()
        self.sessions: dict[str, tuple[str, str]] = {}
        self.users: set[str] = set()
        self.runs: dict[str, RunLoop] = {}
        self.effects: dict[str, dict[str, int]] = {}
        # Per run: the assistant turns its session held before it (earlier runs' turns).
        self.offsets: dict[str, int] = {}
        self.injections: list[dict[str, Any]] = []
        self.journal: _Injector
        self.service: SessionService

    async def _open(self) -> None:
        files = _TearingFiles() if self.backend.open_files is not None else None
        if files is not None and self.backend.open_files is not None:
            inner = await self.backend.open_files(files)
        else:
            inner = await self.backend.open()
        self.journal = _Injector(inner, files)
        self.service = SessionService(self.journal, self.app, records=self.records)

    async def _restart(self) -> None:
        # The "process" died: its handles die with it, whatever closing them says.
        with contextlib.suppress(Exception):
            await self.journal.close()
        await self._open()

    async def execute(self, keep: bool) -> CaseRun:
        started = time.perf_counter()
        await self._open()
        try:
            armed: tuple[int, InjectFailure] | None = None
            for line, op in self.case.operations:
                if isinstance(op, InjectFailure):
                    armed = (line, op)
                    continue
                plan = armed[1] if armed else None
                self.journal.arm(plan)
                crashed = False
                try:
                    await self._do(line, op, plan)
                except _Crash:
                    crashed = True
                except BackendUnavailable as exc:
                    if not isinstance(exc, _InjectedDrop):
                        # The backend went away on its own: not something the case
                        # did, so not a difference. The run stops here (see below).
                        raise
                    self.snapshot["errors"][str(line)] = {
                        "op": op.op,
                        "error": type(exc).__name__,
                    }
                except SteadyloopError as exc:
                    self.snapshot["errors"][str(line)] = {
                        "op": op.op,
                        "error": type(exc).__name__,
                    }
                if armed is not None:
                    self.injections.append(
                        {"line": armed[0], "kind": armed[1].kind, "effect": self.journal.effect}
                    )
                    armed = None
                self.journal.arm(None)
                if crashed:
                    await self._restart()
            await self._read_back()
        except BaseException:
            # Clean up as far as the backend still allows, then let the original
            # error through: a cleanup failure on a dead backend must not mask it.
            with contextlib.suppress(Exception):
                await self._cleanup(keep)
            raise
        await self._cleanup(keep)
        return CaseRun(
            case_id=self.case.case_id,
            backend=self.backend.name,
            snapshot=self.snapshot,
            normaliser=Normaliser(self.ids.values, self.clock.values),
            injections=self.injections,
            seconds=time.perf_counter() - started,
        )

    async def _cleanup(self, keep: bool) -> None:
        try:
            if not keep:
                await self.journal.delete_namespace(self.app)
        finally:
            await self.journal.close()

    async def _capture(self) -> dict[str, Any]:
        return {
            "sessions": await read_sessions(self.service, self.sessions),
            "memory": await read_memory(self.journal, self.app, sorted(self.users)),
        }

    async def _read_back(self) -> None:
        captured = await self._capture()
        self.snapshot["sessions"] = captured["sessions"]
        self.snapshot["memory"] = captured["memory"]
        for run_id in self.runs:
            self.snapshot["loops"][run_id] = await read_loop(
                self.journal, self.app, run_id, self.effects[run_id]
            )

    async def _do(self, line: int, op: Operation, plan: InjectFailure | None) -> None:
        service = self.service
        if isinstance(op, CreateSession):
            sid = op.session if op.session_id == "" else op.session_id
            if sid is None:
                sid = self.ids.new_id()
            self.sessions[op.session] = (op.user, sid)
            self.users.add(op.user)
            await service.create_session(op.user, sid, op.state)
        elif isinstance(op, AppendEvent):
            await self._append_event(line, op, plan)
        elif isinstance(op, StoreMemory):
            await service.store_memory(await self._session(op.session))
        elif isinstance(op, SearchMemory):
            hits = await service.search_memory(op.user, op.query, op.limit)
            self.snapshot["queries"][op.query_id] = {
                "user": op.user,
                "query": op.query,
                "limit": op.limit,
                "hits": [h.to_dict() for h in hits],
            }
        elif isinstance(op, Summarize | FailSummary):
            session = await self._session(op.session)
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
            self.snapshot["checkpoints"][op.name] = await self._capture()
        elif isinstance(op, RunLoop):
            self.runs[op.run] = op
            self.effects[op.run] = {name: 0 for name in op.tools}
            user_id, session_id = self.sessions[op.session]
            await run(
                self._agent(op),
                self.journal,
                self.app,
                user_id,
                session_id,
                op.run,
                op.input,
                records=self.records,
            )
        elif isinstance(op, ResumeLoop):
            await resume(
                self._agent(self.runs[op.run]), self.journal, self.app, op.run, records=self.records
            )

    async def _session(self, handle: str) -> Any:
        user_id, session_id = self.sessions[handle]
        return await self.service.get_session(user_id, session_id)

    async def _append_event(self, line: int, op: AppendEvent, plan: InjectFailure | None) -> None:
        session = await self._session(op.session)
        parts: list[Part] = []
        if op.text is not None:
            parts.append(TextPart(op.text))
        for spec in op.parts or ():
            if isinstance(spec, TextPartSpec):
                parts.append(TextPart(spec.text))
            elif isinstance(spec, ToolCallSpec):
                parts.append(ToolCallPart(spec.call_id, spec.name, spec.arguments))
            else:
                parts.append(ToolResultPart(spec.call_id, spec.name, spec.response, spec.error))
        event = self.service.new_event(
            op.author,
            parts,
            state_delta=op.state_delta,
            invocation_id=op.invocation_id,
            event_id=op.event_id,
        )
        key = op.idempotency_key
        if plan is not None and plan.kind in ("duplicate_submission", "dropped_connection"):
            key = key or f"replay:{self.case.case_id}:{line}"
        if plan is not None and plan.kind == "duplicate_submission":
            await self.service.append_event(session, event, idempotency_key=key)
            await self.service.append_event(session, event, idempotency_key=key)
            self.journal.effect = "submitted twice under one idempotency key"
            return
        try:
            await self.service.append_event(session, event, idempotency_key=key)
        except _InjectedDrop:
            await self.service.append_event(session, event, idempotency_key=key)

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

        :class:`ScriptedModel` passes the number of assistant turns in the prompt; in a
        session that earlier runs (or events) already answered, those come first. The
        count at the run's first call is remembered, so a resumed run (a new model, in
        the "new process") keeps counting where it was.
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
    backend: Backend,
    *,
    keep: bool = False,
    ids: Literal["sequential", "random"] = "sequential",
) -> CaseRun:
    """Run one case on one backend and read back its snapshot.

    Args:
        case: The case.
        backend: The backend.
        keep: Leave the case's namespace in the store instead of deleting it.
        ids: ``"sequential"`` ids and a step clock (the default), or ``"random"`` ids
            and the wall clock (normalisation makes both compare the same).

    Raises:
        BackendUnavailable: The backend cannot be reached, or stopped answering during
            the run (what the case had written so far is removed where possible).
    """
    try:
        return await _Runner(case, backend, ids).execute(keep)
    except BackendUnavailable as exc:
        raise BackendUnavailable(
            f"backend {backend.name!r} became unreachable during case {case.case_id!r}: {exc}"
        ) from exc


def make_workdir() -> Path:
    """Create a private temporary directory for embedded stores."""
    return Path(tempfile.mkdtemp(prefix="steadyloop-replay-"))
