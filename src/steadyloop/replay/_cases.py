"""The case language: one replay case per JSONL file, and the loader that checks it.

A case file holds one JSON object per line. The first is the header::

    {"op": "case", "case_id": "single_turn", "description": "…",
     "expected": {…partial snapshot…}, "allowed_diffs": [{"backend": …, "pointer": …,
     "reason": …}]}

and every later line is one operation, run in order:

``create_session`` (``session``, ``user``, optional ``session_id``, ``state``)
    Create a session. ``session`` is the case's handle for it (the key under
    ``/sessions`` in the snapshot); ``session_id`` defaults to the handle, and
    ``"session_id": null`` asks the id source for one (normalised to an alias).
``append_event`` (``session``, ``author``, ``parts`` or ``text``, optional
``event_id``, ``state_delta``, ``invocation_id``, ``idempotency_key``)
    Append one event; parts are ``{"type": "text", "text"}``, ``{"type":
    "tool_call", "call_id", "name", "arguments"}`` or ``{"type": "tool_result",
    "call_id", "name", "response", "error"}``. Without ``event_id`` the id source
    names the event.
``store_memory`` (``session``)
    Store the session's text into its user's memory.
``search_memory`` (``query_id``, ``user``, ``query``, optional ``limit``)
    Search a user's memory; the hits are kept under ``/queries/<query_id>``.
``summarize`` / ``fail_summary`` (``session``, ``summary_id``, ``version``,
``replaces``, ``covers_through``, ``text``)
    Add a summary, or make an attempt that fails after its first write.
``inject_failure`` (``kind``, and per kind ``after``, ``write``, ``when``,
``fraction``)
    Arm a failure for the next operation: ``duplicate_submission`` (the next
    ``append_event`` is submitted twice under one idempotency key),
    ``crash_after_write`` (the process dies once ``after`` journal writes of the next
    operation landed; the harness reopens the journal), ``dropped_connection`` (the
    ``write``-th write of the next ``append_event`` is lost ``before`` or ``after`` it
    reached the backend, and the client retries it under the same idempotency key),
    ``torn_write`` (on file backends, the ``write``-th write is cut after ``fraction``
    of its bytes and the process dies; elsewhere the write never lands).
``checkpoint`` (``name``)
    Take a snapshot of sessions and memory now, kept under ``/checkpoints/<name>``.
``run_loop`` (``run``, ``session``, ``input``, ``script``, ``tools``)
    Run a scripted agent loop in a session: ``script`` is the model's replies in
    order (a string is a final answer; ``{"tool": name, "arguments": {…}}`` calls a
    tool), ``tools`` maps each tool name to ``{"policy": "safe"|"never",
    "returns": …}``. The script counts from the run's own first model call, so a
    session may hold several runs, one after another, each with its own script.
``resume_loop`` (``run``)
    Resume a run, typically after ``crash_after_write`` stopped it.
``saver_put``, ``saver_put_writes``, ``saver_get``, ``saver_list``, ``saver_delete_thread``
    The checkpointer domain: what a graph asks of its checkpoint saver (see
    `steadyloop.replay._saver_cases`); read back under ``/threads``.
``list_sessions`` (``list_id``, ``user``)
    List a user's sessions; the ids, sorted, are kept under ``/lists/<list_id>``.
``delete_session`` (``session``)
    Delete a session.
``repeat_event`` (``session``, ``event_id``)
    Append an event of the session again, exactly as before (same id, same time).
``edit_event`` (``session``, ``event_id``, ``text`` and/or ``state_delta``)
    Edit the event object the caller appended, after appending it.

``append_event`` may also give ``time`` (integer microseconds; the harness's clock by
default), and ``create_session`` ``"may_refuse": true`` to create a session again on
an existing id. That, ``repeat_event`` and ``edit_event`` are operations a store may
refuse: their outcome (``refused`` with the store's error and message, ``accepted`` or
``merged``) goes to ``/outcomes/<line>``. The header may also give ``tz`` (an IANA time
zone the case runs under), ``reference_only`` (compare only with reference stores: no
``expected``), ``expected_everywhere`` (``expected`` and ``absent`` hold for other
frameworks' stores too, not only Steadyloop's) and ``absent`` (JSON Pointers where the
snapshot must hold nothing).

Every record may carry a ``note`` (free text, ignored). The loader checks everything
before anything runs, and reports the file, the line and the field (a JSON Pointer into
the record) of each problem as a [`CaseError`][steadyloop.replay.CaseError].
"""

from __future__ import annotations

import json
import math
import zoneinfo
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

from steadyloop._errors import CaseError, EncodingError, SessionError
from steadyloop.records import check_canonical, decode
from steadyloop.replay._saver_cases import (
    SAVER_OPS,
    SaverChecker,
    SaverDeleteThread,
    SaverGet,
    SaverList,
    SaverProblem,
    SaverPut,
    SaverPutWrites,
)
from steadyloop.replay._snapshot import SECTIONS
from steadyloop.replay._store import MAX_CASE_TIME_US
from steadyloop.sessions import key_scope

__all__ = [
    "DOMAINS",
    "ERROR_NAMES",
    "AllowedDiff",
    "Case",
    "CaseHeader",
    "Operation",
    "case_record_adapter",
    "load_case",
    "load_cases",
    "parse_case",
]

DOMAINS: tuple[str, ...] = SECTIONS
"""The top-level keys of a case's ``expected``: the snapshot's
[`SECTIONS`][steadyloop.replay.SECTIONS]."""

ERROR_NAMES: tuple[str, ...] = (
    "ConflictError",
    "CorruptionError",
    "IdempotencyKeyReused",
    "LoopError",
    "RunBusy",
    "RunFinished",
    "RunNotFound",
    "SessionError",
    "SessionExists",
    "SessionNotFound",
)
"""Error class names an operation may end with, as recorded under ``/errors``."""

_CASE_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
_MAX_INT = 2**63 - 1

NonEmpty = Annotated[str, Field(min_length=1)]


def _integral(value: object) -> object:
    # JSON Schema calls 1.0 an integer (numbers compare by value), so the shipped
    # schema accepts it; the loader agrees, for the language's own counts and times.
    # Data (state, arguments) keeps 1 and 1.0 apart: there the type is the point.
    if type(value) is float and value.is_integer():
        return int(value)
    return value


Integer = Annotated[int, BeforeValidator(_integral)]
"""A count or time of the case language: `1` or `1.0`, as JSON Schema has it."""
Handle = Annotated[str, Field(min_length=1, max_length=200)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    note: str | None = Field(default=None, description="Free text for the reader; ignored.")


class AllowedDiff(BaseModel):
    """A difference a case accepts: one backend, one exact JSON Pointer, one reason.

    There are no wildcards: the pointer must equal a difference's pointer exactly. JSON
    Pointer has no wildcard syntax, so ``*`` is an ordinary character — a pointer with
    ``*`` in it names a key with ``*`` in it (``/sessions/s1/state/user:*``), and one
    meant as a wildcard matches nothing and is reported as unused.

    Attributes:
        backend: The backend name the allowance is for.
        pointer: The exact JSON Pointer of the accepted difference.
        reason: Why it is acceptable.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    backend: NonEmpty
    pointer: Annotated[str, Field(pattern=r"^(/([^~]|~[01])*)+$")]
    reason: NonEmpty


class CaseHeader(_Model):
    """The first record of a case file.

    Attributes:
        op: Always ``"case"``.
        case_id: The case's id: letters, digits, ``_``, ``.``, ``-``; at most 100.
        description: What the case exercises, in a sentence.
        expected: A partial snapshot; every value in it must match (subset semantics:
            objects may leave keys out, arrays must have every element).
        allowed_diffs: Differences accepted for one backend at one exact pointer.
        absent: JSON Pointers where the snapshot must hold nothing.
        tz: The time zone the case runs under, or `None` (the process's own).
        reference_only: Whether the case is compared only with reference stores.
        expected_everywhere: Whether `expected` and `absent` hold for every store.
    """

    op: Literal["case"]
    case_id: Annotated[str, Field(pattern=_CASE_ID)]
    description: NonEmpty
    expected: dict[str, Any] = Field(default_factory=dict)
    allowed_diffs: list[AllowedDiff] = Field(default_factory=list)
    absent: list[Annotated[str, Field(pattern=r"^(/([^~]|~[01])*)+$")]] = Field(
        default_factory=list,
        description="JSON Pointers into the snapshot where nothing may be, for example "
        "/sessions/s1/state/user/user:token; checked like 'expected'.",
    )
    tz: NonEmpty | None = Field(
        default=None,
        description="An IANA time zone (for example 'Asia/Shanghai') the case runs under: "
        "the harness sets TZ for the run and restores it after.",
    )
    reference_only: bool = Field(
        default=False,
        description="Compare every store only with its reference store; the case holds "
        "no 'expected'.",
    )
    expected_everywhere: bool = Field(
        default=False,
        description="'expected' and 'absent' hold for every store, other frameworks' too "
        "(by default only for Steadyloop's own): for what a reference store cannot show.",
    )


class TextPartSpec(_Model):
    """A text part of an event."""

    type: Literal["text"]
    text: str


class ToolCallSpec(_Model):
    """A tool-call part of an event."""

    type: Literal["tool_call"]
    call_id: NonEmpty
    name: NonEmpty
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolResultSpec(_Model):
    """A tool-result part of an event."""

    type: Literal["tool_result"]
    call_id: NonEmpty
    name: NonEmpty
    response: Any = None
    error: str | None = None


PartSpec: TypeAlias = Annotated[
    TextPartSpec | ToolCallSpec | ToolResultSpec, Field(discriminator="type")
]


class CreateSession(_Model):
    """Create a session (``session_id`` defaults to the handle; null: generated)."""

    op: Literal["create_session"]
    session: Handle
    user: NonEmpty
    session_id: NonEmpty | None = Field(default="", description="Defaults to the handle.")
    state: dict[str, Any] = Field(default_factory=dict)
    may_refuse: bool = Field(
        default=False,
        description="The session may exist already (a second create on an existing id): "
        "the store may refuse; the outcome goes to /outcomes/<line>.",
    )


class AppendEvent(_Model):
    """Append one event to a session."""

    op: Literal["append_event"]
    session: Handle
    author: NonEmpty
    event_id: NonEmpty | None = None
    parts: list[PartSpec] | None = None
    text: str | None = None
    state_delta: dict[str, Any] = Field(default_factory=dict)
    invocation_id: NonEmpty | None = None
    idempotency_key: NonEmpty | None = None
    time: Annotated[Integer, Field(ge=0, lt=MAX_CASE_TIME_US)] | None = Field(
        default=None,
        description="The event's time in integer microseconds since the epoch (default: "
        "the harness's clock).",
    )


class RepeatEvent(_Model):
    """Append an event of the session again, exactly as before (same id, same time).

    The store may refuse it; the outcome goes to ``/outcomes/<line>``.
    """

    op: Literal["repeat_event"]
    session: Handle
    event_id: NonEmpty = Field(
        description="The event to append again: one appended earlier with this event_id."
    )


class EditEvent(_Model):
    """Edit the event object the caller appended, after appending it.

    The store may refuse the edit; the outcome goes to ``/outcomes/<line>``.
    """

    op: Literal["edit_event"]
    session: Handle
    event_id: NonEmpty = Field(
        description="The event whose object to edit: one appended earlier with this event_id."
    )
    text: str | None = Field(default=None, description="New text of its first text part.")
    state_delta: dict[str, Any] = Field(
        default_factory=dict, description="Keys to set in the object's state delta."
    )


class ListSessions(_Model):
    """List a user's sessions; the ids go to ``/lists/<list_id>``."""

    op: Literal["list_sessions"]
    list_id: Handle = Field(
        description="Name of the listing: the ids go to /lists/<list_id>; unique in the case."
    )
    user: NonEmpty = Field(description="Whose sessions to list (any user, with sessions or not).")


class DeleteSession(_Model):
    """Delete a session."""

    op: Literal["delete_session"]
    session: Handle


class StoreMemory(_Model):
    """Store a session's text into its user's memory."""

    op: Literal["store_memory"]
    session: Handle


class SearchMemory(_Model):
    """Search a user's memory; hits go to ``/queries/<query_id>``."""

    op: Literal["search_memory"]
    query_id: Handle
    user: NonEmpty
    query: str
    limit: Annotated[Integer, Field(ge=0, le=1000)] = 10


class Summarize(_Model):
    """Add a summary to a session's version chain."""

    op: Literal["summarize"]
    session: Handle
    summary_id: NonEmpty
    version: Annotated[Integer, Field(ge=1)]
    replaces: NonEmpty | None
    covers_through: NonEmpty
    text: NonEmpty


class FailSummary(_Model):
    """A summary attempt that fails after its first write; never visible."""

    op: Literal["fail_summary"]
    session: Handle
    summary_id: NonEmpty
    version: Annotated[Integer, Field(ge=1)]
    replaces: NonEmpty | None
    covers_through: NonEmpty
    text: NonEmpty


FailureKind: TypeAlias = Literal[
    "duplicate_submission", "crash_after_write", "dropped_connection", "torn_write"
]


class InjectFailure(_Model):
    """Arm a failure for the next operation."""

    op: Literal["inject_failure"]
    kind: FailureKind
    after: Annotated[Integer, Field(ge=0)] = Field(
        default=0, description="crash_after_write: writes that land before the crash."
    )
    write: Annotated[Integer, Field(ge=1)] = Field(
        default=1, description="dropped_connection, torn_write: which write fails."
    )
    when: Literal["before", "after"] = Field(
        default="after", description="dropped_connection: before or after the write lands."
    )
    fraction: Annotated[float, Field(gt=0, lt=1)] = Field(
        default=0.5, description="torn_write: the share of the write's bytes that land."
    )


class Checkpoint(_Model):
    """Snapshot sessions and memory now, under ``/checkpoints/<name>``."""

    op: Literal["checkpoint"]
    name: Handle


class ToolReply(_Model):
    """A scripted model reply that calls one tool."""

    tool: NonEmpty
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_id: NonEmpty | None = None


class ToolDef(_Model):
    """A scripted tool: its replay policy and what it returns."""

    policy: Literal["safe", "never"]
    returns: Any = None


class RunLoop(_Model):
    """Run a scripted agent loop in a session."""

    op: Literal["run_loop"]
    run: Handle
    session: Handle
    input: str
    script: Annotated[list[str | ToolReply], Field(min_length=1)]
    tools: dict[str, ToolDef] = Field(default_factory=dict)


class ResumeLoop(_Model):
    """Resume a run."""

    op: Literal["resume_loop"]
    run: Handle


Operation: TypeAlias = (
    CreateSession
    | AppendEvent
    | RepeatEvent
    | EditEvent
    | ListSessions
    | DeleteSession
    | StoreMemory
    | SearchMemory
    | Summarize
    | FailSummary
    | InjectFailure
    | Checkpoint
    | RunLoop
    | ResumeLoop
    | SaverPut
    | SaverPutWrites
    | SaverGet
    | SaverList
    | SaverDeleteThread
)
"""One operation of a case."""

_OPS: dict[str, type[BaseModel]] = {
    "case": CaseHeader,
    "create_session": CreateSession,
    "append_event": AppendEvent,
    "repeat_event": RepeatEvent,
    "edit_event": EditEvent,
    "list_sessions": ListSessions,
    "delete_session": DeleteSession,
    "store_memory": StoreMemory,
    "search_memory": SearchMemory,
    "summarize": Summarize,
    "fail_summary": FailSummary,
    "inject_failure": InjectFailure,
    "checkpoint": Checkpoint,
    "run_loop": RunLoop,
    "resume_loop": ResumeLoop,
    **SAVER_OPS,
}

_WRITING = (
    CreateSession,
    AppendEvent,
    RepeatEvent,
    DeleteSession,
    StoreMemory,
    Summarize,
    FailSummary,
    RunLoop,
    ResumeLoop,
)
_MAX_WRITES: dict[type[BaseModel], int] = {
    CreateSession: 1,
    AppendEvent: 1,
    RepeatEvent: 1,
    StoreMemory: 1,
    Summarize: 2,
    FailSummary: 1,
}


def case_record_adapter() -> TypeAdapter[Any]:
    """Return a pydantic adapter for any case record (header or operation).

    Its JSON Schema is the shipped ``case.schema.json``.
    """
    return TypeAdapter(Annotated[CaseHeader | Operation, Field(discriminator="op")])


@dataclass(frozen=True)
class Case:
    """A loaded, checked case.

    Attributes:
        case_id: Its id.
        description: What it exercises.
        expected: The partial snapshot every backend must match.
        allowed_diffs: Accepted differences.
        operations: ``(line, operation)`` in file order.
        file: The file it came from (as given to the loader).
        sessions: The session handles, in order of creation.
        tz: The time zone it runs under (`None`: the process's own).
        reference_only: Whether it is compared only with reference stores.
        absent: JSON Pointers where its snapshot must hold nothing.
        expected_everywhere: Whether `expected` and `absent` hold for every store.
    """

    case_id: str
    description: str
    expected: Mapping[str, Any]
    allowed_diffs: tuple[AllowedDiff, ...]
    operations: tuple[tuple[int, Operation], ...]
    file: str = ""
    sessions: tuple[str, ...] = field(default=(), repr=False)
    tz: str | None = None
    reference_only: bool = False
    absent: tuple[str, ...] = ()
    expected_everywhere: bool = False


def _pointer(loc: Iterable[object]) -> str:
    parts = []
    for item in loc:
        text = str(item)
        parts.append("/" + text.replace("~", "~0").replace("/", "~1"))
    return "".join(parts)


class _Problem(Exception):
    def __init__(self, field: str, detail: str) -> None:
        super().__init__(detail)
        self.field = field
        self.detail = detail


def _check_json(value: object, where: str) -> None:
    try:
        check_canonical(value, where)
    except EncodingError as exc:
        raise _Problem(exc.path, str(exc).rsplit(" (at ", 1)[0]) from None
    stack = [(value, where)]
    while stack:
        item, path = stack.pop()
        if (
            isinstance(item, int)
            and not isinstance(item, bool)
            and not -_MAX_INT - 1 <= item <= _MAX_INT
        ):
            raise _Problem(path, "integers must fit in 64 bits")
        if isinstance(item, float) and not math.isfinite(item):
            raise _Problem(path, "numbers must be finite")
        if isinstance(item, dict):
            stack.extend((v, f"{path}/{_pointer([k])[1:]}") for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, f"{path}/{i}") for i, v in enumerate(item))


def _check_state(state: Mapping[str, Any], where: str) -> None:
    for key in state:
        try:
            key_scope(key)
        except SessionError as exc:
            raise _Problem(f"{where}/{_pointer([key])[1:]}", str(exc)) from None
    _check_json(dict(state), where)


def _validate_record(data: object) -> BaseModel:
    if not isinstance(data, dict):
        raise _Problem("", f"a case record must be a JSON object, not {type(data).__name__}")
    op = data.get("op")
    if "op" not in data:
        raise _Problem("/op", "the record has no 'op'")
    if not isinstance(op, str) or op not in _OPS:
        known = ", ".join(sorted(_OPS))
        raise _Problem("/op", f"unknown op {op!r}; the ops are: {known}")
    try:
        return _OPS[op].model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        # For a script item (a string or a tool reply), report the tool-reply branch's
        # error when the item is an object: that is the branch the author meant.
        preferred = [
            e
            for e in errors
            if not (len(e["loc"]) >= 3 and e["loc"][0] == "script" and e["loc"][2] == "str")
        ]
        first = (preferred or errors)[0]
        clean: list[object] = []
        for p in first["loc"]:
            # Drop pydantic's union-branch labels: the part's tag after /parts/<i>, and
            # ``str`` / ``ToolReply`` after /script/<i>.
            if (
                len(clean) == 2
                and clean[0] in ("parts", "script")
                and isinstance(clean[1], int)
                and isinstance(p, str)
            ):
                clean.append(None)
                continue
            clean.append(p)
        clean = [p for p in clean if p is not None]
        return_field = _pointer(clean)
        msg = first["msg"]
        if first["type"] == "extra_forbidden":
            msg = "unknown field"
        elif first["type"] == "missing":
            msg = "required field is missing"
        raise _Problem(return_field, msg) from None


@dataclass
class _SessionInfo:
    user: str
    session_id: str | None = None
    events: list[str] = field(default_factory=list)
    latest: tuple[str, int, int] | None = None  # (summary id, version, covered index)
    summary_ids: set[str] = field(default_factory=set)


class _Checker:
    """Cross-record checks: references, unique ids, version chains, failure targets."""

    def __init__(self) -> None:
        self.sessions: dict[str, _SessionInfo] = {}
        self.ids: set[tuple[str, str]] = set()
        self.users: set[str] = set()
        self.queries: set[str] = set()
        self.checkpoints: set[str] = set()
        self.runs: set[str] = set()
        self.lists: set[str] = set()
        self.outcome_lines: set[int] = set()
        self.armed: InjectFailure | None = None
        self.lines: set[int] = set()
        self.saver = SaverChecker()

    def _session(self, handle: str) -> _SessionInfo:
        info = self.sessions.get(handle)
        if info is None:
            raise _Problem("/session", f"session {handle!r} is used before create_session")
        return info

    def check(self, line: int, op: BaseModel) -> None:
        armed, self.armed = self.armed, None
        if armed is not None:
            self._check_target(armed, op)
        self.lines.add(line)
        # An operation that dies before its last write lands changes nothing visible:
        # the case may retry it (same handle, same event id) on a later line.
        lost = armed is not None and (
            armed.kind == "torn_write"
            or (armed.kind == "crash_after_write" and armed.after < _MAX_WRITES.get(type(op), 0))
        )
        if isinstance(op, CreateSession):
            sid = op.session if op.session_id == "" else op.session_id
            again = op.may_refuse and sid is not None and (op.user, sid) in self.ids
            if op.session in self.sessions:
                existing = self.sessions[op.session]
                if not (again and existing.user == op.user and existing.session_id == sid):
                    raise _Problem("/session", f"session handle {op.session!r} is already used")
            if sid is not None and not again:
                if (op.user, sid) in self.ids:
                    raise _Problem(
                        "/session_id",
                        f"user {op.user!r} already has a session {sid!r} "
                        '(say "may_refuse": true to create it again on purpose)',
                    )
                self.ids.add((op.user, sid))
            _check_state(op.state, "/state")
            if lost and sid is not None and not again:
                self.ids.discard((op.user, sid))
            if op.may_refuse:
                self.outcome_lines.add(line)
            if not lost and op.session not in self.sessions:
                self.sessions[op.session] = _SessionInfo(op.user, session_id=sid)
            self.users.add(op.user)
        elif isinstance(op, AppendEvent):
            info = self._session(op.session)
            if op.parts is not None and op.text is not None:
                raise _Problem("/text", "give either 'parts' or 'text', not both")
            if op.event_id is not None and op.event_id in info.events:
                raise _Problem(
                    "/event_id", f"session {op.session!r} already has event {op.event_id!r}"
                )
            if not lost:
                info.events.append(op.event_id or "")
            for i, part in enumerate(op.parts or ()):
                if isinstance(part, ToolCallSpec):
                    _check_json(part.arguments, f"/parts/{i}/arguments")
                elif isinstance(part, ToolResultSpec):
                    _check_json(part.response, f"/parts/{i}/response")
                else:
                    _check_json(part.text, f"/parts/{i}/text")
            if op.text is not None:
                _check_json(op.text, "/text")
            _check_state(op.state_delta, "/state_delta")
        elif isinstance(op, RepeatEvent | EditEvent):
            info = self._session(op.session)
            if op.event_id not in info.events:
                raise _Problem(
                    "/event_id",
                    f"session {op.session!r} has no event {op.event_id!r} yet "
                    "(name it with event_id on its append_event)",
                )
            if isinstance(op, EditEvent):
                if op.text is None and not op.state_delta:
                    raise _Problem("/text", "an edit changes 'text', 'state_delta' or both")
                if op.text is not None:
                    _check_json(op.text, "/text")
                _check_state(op.state_delta, "/state_delta")
            self.outcome_lines.add(line)
        elif isinstance(op, ListSessions):
            if op.list_id in self.lists:
                raise _Problem("/list_id", f"list id {op.list_id!r} is already used")
            self.lists.add(op.list_id)
        elif isinstance(op, DeleteSession | StoreMemory):
            self._session(op.session)
        elif isinstance(op, SearchMemory):
            if op.query_id in self.queries:
                raise _Problem("/query_id", f"query id {op.query_id!r} is already used")
            if op.user not in self.users:
                raise _Problem("/user", f"user {op.user!r} has no session yet")
            _check_json(op.query, "/query")
            self.queries.add(op.query_id)
        elif isinstance(op, Summarize | FailSummary):
            self._check_summary(op, commits=isinstance(op, Summarize) and not lost)
        elif isinstance(op, InjectFailure):
            self.armed = op
        elif isinstance(op, Checkpoint):
            if op.name in self.checkpoints:
                raise _Problem("/name", f"checkpoint {op.name!r} is already taken")
            self.checkpoints.add(op.name)
        elif isinstance(op, RunLoop):
            if op.run in self.runs:
                raise _Problem("/run", f"run {op.run!r} is already started")
            self._session(op.session)
            for i, reply in enumerate(op.script):
                if isinstance(reply, ToolReply):
                    if reply.tool not in op.tools:
                        raise _Problem(
                            f"/script/{i}/tool", f"tool {reply.tool!r} is not in 'tools'"
                        )
                    _check_json(reply.arguments, f"/script/{i}/arguments")
            for name, tool in op.tools.items():
                _check_json(tool.returns, f"/tools/{_pointer([name])[1:]}/returns")
            self.runs.add(op.run)
        elif isinstance(op, ResumeLoop) and op.run not in self.runs:
            raise _Problem("/run", f"run {op.run!r} is resumed before run_loop")
        elif isinstance(op, SaverPut | SaverPutWrites | SaverGet | SaverList | SaverDeleteThread):
            try:
                values = self.saver.check(op)
            except SaverProblem as exc:
                raise _Problem(exc.field, exc.detail) from None
            for where, value in values:
                _check_json(value, where)

    def _check_summary(self, op: Summarize | FailSummary, *, commits: bool) -> None:
        info = self._session(op.session)
        latest = info.latest
        want_version = 1 if latest is None else latest[1] + 1
        want_replaces = None if latest is None else latest[0]
        if op.version != want_version:
            raise _Problem(
                "/version",
                f"session {op.session!r} is at summary version "
                f"{want_version - 1}; the next is {want_version}",
            )
        if op.replaces != want_replaces:
            raise _Problem("/replaces", f"version {want_version} must replace {want_replaces!r}")
        if op.summary_id in info.summary_ids and (latest is None or op.summary_id != latest[0]):
            raise _Problem("/summary_id", f"summary id {op.summary_id!r} was used before")
        if op.covers_through not in info.events:
            raise _Problem(
                "/covers_through",
                f"session {op.session!r} has no event {op.covers_through!r} yet "
                "(name it with event_id)",
            )
        index = info.events.index(op.covers_through)
        if latest is not None and index < latest[2]:
            raise _Problem(
                "/covers_through", "a summary must not cover less than the one it replaces"
            )
        _check_json(op.text, "/text")
        if commits:
            info.latest = (op.summary_id, op.version, index)
            info.summary_ids.add(op.summary_id)

    def _check_target(self, armed: InjectFailure, op: BaseModel) -> None:
        kind = armed.kind
        if kind in ("duplicate_submission", "dropped_connection"):
            if not isinstance(op, AppendEvent):
                raise _Problem("/op", f"{kind} must be followed by append_event")
            if kind == "dropped_connection" and armed.write != 1:
                raise _Problem(
                    "/op", "append_event makes one write; the previous line's 'write' must be 1"
                )
            return
        if not isinstance(op, _WRITING):
            raise _Problem("/op", f"{kind} must be followed by an operation that writes")
        most = _MAX_WRITES.get(type(op))
        if most is not None:
            if kind == "crash_after_write" and armed.after >= most:
                raise _Problem(
                    "/op",
                    f"{op.__class__.__name__} makes at most {most} write(s); the crash "
                    f"after write {armed.after} would never happen",
                )
            if kind == "torn_write" and armed.write > most:
                raise _Problem("/op", f"{op.__class__.__name__} makes at most {most} write(s)")

    def finish(self) -> None:
        if self.armed is not None:
            raise _Problem("/op", "inject_failure must be followed by an operation")


class _Repeated(dict[str, Any]):
    """A decoded JSON object in which ``key`` appeared more than once."""

    key: str


def _keep_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out and not isinstance(out, _Repeated):
            out = _Repeated(out)
            out.key = key
        out[key] = value
    return out


def _find_repeated(value: Any, loc: list[object]) -> str | None:
    """The pointer to the first repeated key under ``value``, depth first, or ``None``."""
    if isinstance(value, dict):
        if isinstance(value, _Repeated):
            return _pointer([*loc, value.key])
        for key, item in value.items():
            found = _find_repeated(item, [*loc, key])
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _find_repeated(item, [*loc, i])
            if found is not None:
                return found
    return None


def _decode_line(line: str) -> Any:
    """Decode one case line, refusing what `decode` refuses and repeated keys.

    A repeated key is refused because JSON decoders disagree on which copy counts
    (Python keeps the last, silently dropping the first — an ``expected`` could vanish).
    """
    data = decode(line)
    if '"' not in line:
        return data
    strict = json.loads(line, object_pairs_hook=_keep_pairs)
    repeated = _find_repeated(strict, [])
    if repeated is not None:
        key = repeated.rsplit("/", 1)[1].replace("~1", "/").replace("~0", "~")
        raise _Problem(repeated, f"the key {key!r} appears more than once in one JSON object")
    return data


def _check_expected(expected: Mapping[str, Any], checker: _Checker) -> None:
    _check_json(dict(expected), "/expected")
    known: dict[str, set[str] | None] = {  # the names each section may hold
        "sessions": set(checker.sessions),
        "memory": set(checker.users),
        "queries": checker.queries,
        "lists": checker.lists,
        "checkpoints": checker.checkpoints,
        "errors": {str(n) for n in checker.lines},
        "outcomes": {str(n) for n in checker.outcome_lines},
        "loops": checker.runs,
        "threads": set(checker.saver.threads),
    }
    for key, value in expected.items():
        where = f"/expected/{_pointer([key])[1:]}"
        if key not in DOMAINS:
            raise _Problem(where, f"unknown snapshot domain; expected one of {', '.join(DOMAINS)}")
        if not isinstance(value, dict):
            raise _Problem(where, "must be a JSON object")
        names = known.get(key)  # a section the checker names nothing of takes any name
        for name in value:
            if names is not None and name not in names:
                raise _Problem(
                    f"{where}/{_pointer([name])[1:]}",
                    f"the case defines no {key[:-1] if key.endswith('s') else key} {name!r}",
                )


def _check_header(header: CaseHeader) -> None:
    if header.reference_only and header.expected_everywhere:
        raise _Problem("/expected_everywhere", "a reference_only case has no expectation")
    if header.reference_only and (header.expected or header.absent):
        field = "/expected" if header.expected else "/absent"
        raise _Problem(
            field, "a reference_only case is compared with reference stores only: no expectation"
        )
    for i, pointer in enumerate(header.absent):
        domain = pointer.split("/")[1]
        if domain not in DOMAINS:
            raise _Problem(
                f"/absent/{i}",
                f"unknown snapshot domain {domain!r}; expected one of {', '.join(DOMAINS)}",
            )
    if header.tz is not None:
        try:
            zoneinfo.ZoneInfo(header.tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise _Problem("/tz", f"unknown time zone {header.tz!r} (use an IANA name)") from None


def parse_case(text: bytes | str, file: str = "<case>") -> Case:
    """Parse and check the text of one case file.

    Args:
        text: The file's content.
        file: The name to report in errors.

    Raises:
        CaseError: On the first problem, with every problem found in ``problems``.
    """
    problems: list[tuple[str, int, str, str]] = []
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    lines = raw.split(b"\n")
    header: CaseHeader | None = None
    header_line = 0
    ops: list[tuple[int, Operation]] = []
    checker = _Checker()
    for number, blob in enumerate(lines, start=1):
        if not blob.strip():
            continue
        try:
            try:
                line = blob.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _Problem("", f"the line is not valid UTF-8 (byte {exc.start})") from None
            try:
                data = _decode_line(line)
            except ValueError as exc:
                raise _Problem("", f"not JSON: {exc}") from None
            record = _validate_record(data)
            if isinstance(record, CaseHeader):
                if header is not None:
                    raise _Problem("/op", f"a second header; the header is on line {header_line}")
                if ops:
                    raise _Problem("/op", "the header must come before every operation")
                header, header_line = record, number
                continue
            if header is None:
                raise _Problem("/op", 'the first record must be the header {"op": "case"}')
            checker.check(number, record)
            ops.append((number, record))  # type: ignore[arg-type]
        except _Problem as exc:
            problems.append((file, number, exc.field, exc.detail))
            if header is None and number == 1:
                break
        except Exception as exc:  # pragma: no cover - a safety net, never a traceback
            problems.append((file, number, "", f"{type(exc).__name__}: {exc}"))
    if header is None and not problems:
        problems.append((file, 0, "", "the file holds no case header"))
    if header is not None and not problems:
        last = max(n for n, _ in ops) if ops else header_line
        try:
            checker.finish()
        except _Problem as exc:
            problems.append((file, last, exc.field, exc.detail))
        try:
            _check_header(header)
            _check_expected(header.expected, checker)
        except _Problem as exc:
            problems.append((file, header_line, exc.field, exc.detail))
    if problems:
        first = problems[0]
        raise CaseError(first[0], first[1], first[2], first[3], problems=problems)
    assert header is not None
    return Case(
        case_id=header.case_id,
        description=header.description,
        expected=header.expected,
        allowed_diffs=tuple(header.allowed_diffs),
        operations=tuple(ops),
        file=file,
        sessions=tuple(checker.sessions),
        tz=header.tz,
        reference_only=header.reference_only,
        absent=tuple(header.absent),
        expected_everywhere=header.expected_everywhere,
    )


def load_case(path: str | Path) -> Case:
    """Load and check one case file.

    Raises:
        CaseError: If the file cannot be read or the case is invalid.
    """
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CaseError(name, 0, "", f"cannot read the file: {exc.strerror or exc}") from None
    return parse_case(data, name)


def _expand(paths: Sequence[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            # Every *.jsonl file, whatever the case of its suffix (X.JSONL is a case
            # file too); hidden files (._x.jsonl, which macOS leaves beside copies)
            # are not cases.
            found = sorted(
                p
                for p in path.iterdir()
                if p.suffix.lower() == ".jsonl" and not p.name.startswith(".") and p.is_file()
            )
            if not found:
                raise CaseError(str(path), 0, "", "the directory holds no *.jsonl case")
            out.extend(found)
        else:
            out.append(path)
    return out


def load_cases(paths: Sequence[str | Path]) -> list[Case]:
    """Load and check case files.

    A directory means every file in it whose name ends in `.jsonl` in any letter case
    (`X.JSONL` too), in name order, except hidden files (names starting with `.`,
    such as the `._x.jsonl` files macOS leaves beside copies). Subdirectories are not
    searched.

    Every file is checked before this returns, so a bad case is reported before any
    case runs.

    Raises:
        CaseError: On the first problem, with every problem of every file in
            ``problems``; also when two files share a ``case_id``.
    """
    problems: list[tuple[str, int, str, str]] = []
    cases: list[Case] = []
    seen: dict[str, str] = {}
    for path in _expand(paths):
        try:
            case = load_case(path)
        except CaseError as exc:
            problems.extend(exc.problems)
            continue
        if case.case_id in seen:
            problems.append(
                (case.file, 1, "/case_id", f"case id {case.case_id!r} is also {seen[case.case_id]}")
            )
            continue
        seen[case.case_id] = case.file
        cases.append(case)
    if problems:
        first = problems[0]
        raise CaseError(first[0], first[1], first[2], first[3], problems=problems)
    return cases
