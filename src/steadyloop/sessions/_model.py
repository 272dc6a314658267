"""The session model: content parts, events, summaries and sessions.

Every class here is an immutable value that converts to and from plain JSON
(``to_dict`` / ``from_dict``), and validates itself when built: a bad value raises
[`SessionError`][steadyloop.sessions.SessionError] naming the field, before anything reaches the
journal. JSON values are copied through their canonical encoding when an object is built, so a
tuple becomes a list and a caller mutating its own dict afterwards changes nothing; an object
read back from any backend therefore equals the one that was written.

State keys are scoped by prefix:

=============  =================================  ===========================
key            scope                              stored in
=============  =================================  ===========================
``name``       this session                       the session stream
``user:name``  every session of the same user     the user's stream
``app:name``   every session of the app           the app stream
``temp:name``  the current invocation only        nowhere: never stored
=============  =================================  ===========================

Any other prefix (text before the first ``:``) is refused. Setting a key to ``null``
stores ``null``; keys are never removed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeAlias

from steadyloop._errors import EncodingError, SessionError
from steadyloop.records import JSONValue, _as_json, check_canonical, decode
from steadyloop.sessions._history import History

__all__ = [
    "SCOPES",
    "Event",
    "Part",
    "Scope",
    "Session",
    "SessionContext",
    "Summary",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "json_copy",
    "key_scope",
    "part_from_dict",
]

Scope: TypeAlias = Literal["session", "user", "app", "temp"]
"""The scope of a state key."""

SCOPES: tuple[Scope, ...] = ("session", "user", "app", "temp")
"""Every scope, in the order snapshots list them."""

_PREFIXES: dict[str, Scope] = {"user": "user", "app": "app", "temp": "temp"}


def key_scope(key: object) -> Scope:
    """Return the scope of a state key.

    Args:
        key: The key, for example ``"count"``, ``"user:name"`` or ``"temp:scratch"``.

    Raises:
        SessionError: If the key is not a non-empty string, has an unknown prefix
            (``"foo:bar"``), or has nothing after its prefix (``"user:"``).
    """
    if not isinstance(key, str) or not key:
        raise SessionError(f"state key must be a non-empty string, got {key!r}")
    prefix, colon, rest = key.partition(":")
    if not colon:
        return "session"
    scope = _PREFIXES.get(prefix)
    if scope is None:
        raise SessionError(
            f"state key {key!r} has the unknown scope prefix {prefix + ':'!r}; use no "
            "prefix (session), 'user:', 'app:' or 'temp:'"
        )
    if not rest:
        raise SessionError(f"state key {key!r} has no name after its prefix {prefix + ':'!r}")
    return scope


def json_copy(value: object, where: str) -> Any:
    """Return a canonical-JSON copy of ``value`` (tuples become lists).

    Args:
        value: The value to copy.
        where: What the value is, for the error message (``"state key 'x'"``).

    Raises:
        SessionError: If the value has no canonical JSON form; names the place.
    """
    try:
        check_canonical(value)
    except EncodingError as exc:
        raise SessionError(f"{where} is not a JSON value: {exc}") from None
    if value is None or isinstance(value, str | int | float):
        return value
    if type(value) is dict and all(
        type(k) is str and type(v) in _SCALARS for k, v in value.items()
    ):
        # Exact strings, numbers, booleans and nulls: encoding and decoding would give
        # these same keys and values back, in the same order.
        return dict(value)
    return decode("".join(_COPY_ENCODER(value, 0)))


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _make_copy_encoder() -> Any:
    """The encoder ``json.dumps(value, ensure_ascii=False, allow_nan=False)`` builds, once.

    Keys keep their order. It checks no cycles: it only sees values ``check_canonical``
    accepted, which hold none; a ``Mapping`` that is not a dict encodes as its dict.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - not CPython
        return json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=_as_json).iterencode
    encode_str = json.encoder.encode_basestring
    return make(None, _as_json, encode_str, None, ": ", ", ", False, False, False)


_COPY_ENCODER = _make_copy_encoder()


def _check_str(value: object, what: str, *, empty: bool = False) -> str:
    if type(value) is str and value.isascii() and (empty or value):
        return value  # the common case, decided without encoding the text
    if not isinstance(value, str) or (not empty and not value):
        kind = "a string" if empty else "a non-empty string"
        raise SessionError(f"{what} must be {kind}, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SessionError(f"{what} {value!r} is not valid Unicode") from None
    return value


def _check_time(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SessionError(f"{what} must be integer microseconds >= 0, got {value!r}")
    return value


def _fields(data: object, what: str, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise SessionError(f"{what} must be a JSON object, got {type(data).__name__}")
    missing = sorted(required - data.keys())
    if missing:
        raise SessionError(f"{what} lacks the field {missing[0]!r}")
    unknown = sorted(set(data.keys()) - required - optional)
    if unknown:
        raise SessionError(f"{what} has the unknown field {unknown[0]!r}")
    return dict(data)


@dataclass(frozen=True)
class TextPart:
    """Plain text.

    Attributes:
        text: The text (may be empty).
    """

    text: str

    def __post_init__(self) -> None:
        _check_str(self.text, "TextPart.text", empty=True)

    def to_dict(self) -> dict[str, JSONValue]:
        """Return ``{"type": "text", "text": ...}``."""
        return {"type": "text", "text": self.text}


@dataclass(frozen=True)
class ToolCallPart:
    """A request to call a tool.

    Attributes:
        call_id: Ties the call to its result.
        name: The tool's name.
        arguments: The arguments, a JSON object.
    """

    call_id: str
    name: str
    arguments: Mapping[str, JSONValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_str(self.call_id, "ToolCallPart.call_id")
        _check_str(self.name, "ToolCallPart.name")
        if not isinstance(self.arguments, Mapping):
            raise SessionError(
                f"ToolCallPart.arguments must be a JSON object, got {type(self.arguments).__name__}"
            )
        object.__setattr__(self, "arguments", json_copy(self.arguments, "ToolCallPart.arguments"))

    def to_dict(self) -> dict[str, JSONValue]:
        """Return ``{"type": "tool_call", "call_id", "name", "arguments"}``."""
        return {
            "type": "tool_call",
            "call_id": self.call_id,
            "name": self.name,
            "arguments": dict(self.arguments),
        }


@dataclass(frozen=True)
class ToolResultPart:
    """The result of a tool call.

    Attributes:
        call_id: The id of the call this answers.
        name: The tool's name.
        response: What the tool returned, any JSON value.
        error: The error message if the tool failed, else ``None``.
    """

    call_id: str
    name: str
    response: JSONValue = None
    error: str | None = None

    def __post_init__(self) -> None:
        _check_str(self.call_id, "ToolResultPart.call_id")
        _check_str(self.name, "ToolResultPart.name")
        if self.error is not None:
            _check_str(self.error, "ToolResultPart.error", empty=True)
        object.__setattr__(self, "response", json_copy(self.response, "ToolResultPart.response"))

    def to_dict(self) -> dict[str, JSONValue]:
        """Return ``{"type": "tool_result", "call_id", "name", "response", "error"}``."""
        return {
            "type": "tool_result",
            "call_id": self.call_id,
            "name": self.name,
            "response": self.response,
            "error": self.error,
        }


Part: TypeAlias = TextPart | ToolCallPart | ToolResultPart
"""One piece of an event's content."""

_PART_TYPES = (TextPart, ToolCallPart, ToolResultPart)


def part_from_dict(data: object, where: str = "part") -> Part:
    """Rebuild a part from its ``to_dict`` form.

    Args:
        data: The JSON object.
        where: What the object is, for error messages.

    Raises:
        SessionError: If the type is unknown or a field is missing, unknown or bad.
    """
    if not isinstance(data, Mapping):
        raise SessionError(f"{where} must be a JSON object, got {type(data).__name__}")
    kind = data.get("type")
    if kind == "text":
        d = _fields(data, where, {"type", "text"}, set())
        return TextPart(d["text"])
    if kind == "tool_call":
        d = _fields(data, where, {"type", "call_id", "name"}, {"arguments"})
        return ToolCallPart(d["call_id"], d["name"], d.get("arguments", {}))
    if kind == "tool_result":
        d = _fields(data, where, {"type", "call_id", "name"}, {"response", "error"})
        return ToolResultPart(d["call_id"], d["name"], d.get("response"), d.get("error"))
    raise SessionError(
        f"{where} has the unknown type {kind!r}; expected 'text', 'tool_call' or 'tool_result'"
    )


@dataclass(frozen=True)
class Event:
    """One event of a session: who said or did what, and which state it changed.

    Attributes:
        id: Unique within its session.
        author: Who produced it, for example ``"user"`` or the agent's name.
        parts: Its content, in order (may be empty for a pure state change).
        state_delta: State keys it sets, with their scope prefix (see the module doc).
        time: When it happened, in integer microseconds since the epoch.
        invocation_id: The agent invocation (run) it belongs to, if any.

    Raises:
        SessionError: On an empty id or author, a part of an unknown type, a state key
            with an unknown scope prefix, or a value with no canonical JSON form.
    """

    id: str
    author: str
    parts: Sequence[Part] = ()
    state_delta: Mapping[str, JSONValue] = field(default_factory=dict)
    time: int = 0
    invocation_id: str | None = None

    def __post_init__(self) -> None:
        _check_str(self.id, "event id")
        _check_str(self.author, f"author of event {self.id!r}")
        raw = self.parts
        if (type(raw) is not list and type(raw) is not tuple) and (
            isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable)
        ):
            raise SessionError(f"parts of event {self.id!r} must be a sequence of parts")
        parts = tuple(raw)
        for i, part in enumerate(parts):
            if type(part) not in _PART_TYPES and not isinstance(part, _PART_TYPES):
                raise SessionError(
                    f"part {i} of event {self.id!r} is a {type(part).__name__}; expected "
                    "TextPart, ToolCallPart or ToolResultPart"
                )
        object.__setattr__(self, "parts", parts)
        given = self.state_delta
        if type(given) is not dict and not isinstance(given, Mapping):
            raise SessionError(f"state_delta of event {self.id!r} must be a mapping")
        delta: dict[str, JSONValue] = {}
        for key, value in given.items():
            key_scope(key)
            delta[key] = json_copy(value, f"state key {key!r} of event {self.id!r}")
        object.__setattr__(self, "state_delta", delta)
        _check_time(self.time, f"time of event {self.id!r}")
        if self.invocation_id is not None:
            _check_str(self.invocation_id, f"invocation_id of event {self.id!r}")

    @property
    def text(self) -> str:
        """The event's text parts joined by newlines (``""`` when it has none)."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))

    def delta_in(self, scope: Scope) -> dict[str, JSONValue]:
        """Return the part of the state delta in ``scope``."""
        return {k: v for k, v in self.state_delta.items() if key_scope(k) == scope}

    def without_temp(self) -> Event:
        """Return the event as it is stored: its ``temp:`` keys removed."""
        if not self.state_delta or not any(key_scope(k) == "temp" for k in self.state_delta):
            return self
        kept = {k: v for k, v in self.state_delta.items() if key_scope(k) != "temp"}
        return Event(self.id, self.author, self.parts, kept, self.time, self.invocation_id)

    def to_dict(self) -> dict[str, JSONValue]:
        """Return the event as a JSON object."""
        return {
            "id": self.id,
            "author": self.author,
            "parts": [p.to_dict() for p in self.parts],
            "state_delta": dict(self.state_delta),
            "time": self.time,
            "invocation_id": self.invocation_id,
        }

    @classmethod
    def from_dict(cls, data: object) -> Event:
        """Rebuild an event from [`to_dict`][steadyloop.sessions.Event.to_dict] output.

        Only ``id`` and ``author`` are required; ``parts`` defaults to none,
        ``state_delta`` to ``{}``, ``time`` to 0 and ``invocation_id`` to ``null``.

        Raises:
            SessionError: If a field is missing, unknown or bad.
        """
        d = _fields(
            data, "event", {"id", "author"}, {"parts", "state_delta", "time", "invocation_id"}
        )
        raw_parts = d.get("parts", [])
        if not isinstance(raw_parts, list):
            raise SessionError(f"parts of event {d['id']!r} must be a JSON array")
        parts = [
            part_from_dict(p, f"part {i} of event {d['id']!r}") for i, p in enumerate(raw_parts)
        ]
        return cls(
            id=d["id"],
            author=d["author"],
            parts=parts,
            state_delta=d.get("state_delta", {}),
            time=d.get("time", 0),
            invocation_id=d.get("invocation_id"),
        )


@dataclass(frozen=True)
class Summary:
    """A summary that compacts a session up to one of its events.

    Summaries of a session form one chain: version 1 replaces nothing, and each later
    version replaces the one before it, by id.

    Attributes:
        id: The summary's id.
        version: Its place in the chain, from 1.
        replaces: The id of the summary it replaces; ``None`` for version 1.
        session_id: The session that owns it.
        covers_through: The id of the last event it covers; that event and every one
            before it are historical events from then on.
        text: The summary itself.
        time: When the attempt began, in integer microseconds since the epoch.
    """

    id: str
    version: int
    replaces: str | None
    session_id: str
    covers_through: str
    text: str
    time: int = 0

    def __post_init__(self) -> None:
        _check_str(self.id, "summary id")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise SessionError(
                f"version of summary {self.id!r} must be an integer >= 1, got {self.version!r}"
            )
        if self.replaces is not None:
            _check_str(self.replaces, f"replaces of summary {self.id!r}")
        _check_str(self.session_id, f"session_id of summary {self.id!r}")
        _check_str(self.covers_through, f"covers_through of summary {self.id!r}")
        _check_str(self.text, f"text of summary {self.id!r}")
        _check_time(self.time, f"time of summary {self.id!r}")

    def to_dict(self) -> dict[str, JSONValue]:
        """Return the summary as a JSON object."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object) -> Summary:
        """Rebuild a summary from [`to_dict`][steadyloop.sessions.Summary.to_dict] output.

        Raises:
            SessionError: If a field is missing, unknown or bad.
        """
        d = _fields(
            data,
            "summary",
            {"id", "version", "replaces", "session_id", "covers_through", "text"},
            {"time"},
        )
        return cls(
            id=d["id"],
            version=d["version"],
            replaces=d["replaces"],
            session_id=d["session_id"],
            covers_through=d["covers_through"],
            text=d["text"],
            time=d.get("time", 0),
        )


@dataclass(frozen=True)
class SessionContext:
    """What an agent shows its model: the latest summary, then the uncovered events.

    Attributes:
        summary: The latest summary, or ``None`` when the session has none.
        events: The events the summary does not cover, in order.
    """

    summary: Summary | None
    events: tuple[Event, ...]

    @property
    def summary_text(self) -> str | None:
        """The latest summary's text, or ``None``."""
        return None if self.summary is None else self.summary.text


class _EventChain:
    """Every event of a session, in order, shared append-only by its successors.

    A session sees the first ``end`` events of its chain (the first ``split`` of them
    historical), so appending to the session that sees the whole chain extends the
    chain in place, in time independent of the session's length; a successor of an
    older session gets a copy of the part it sees.
    """

    __slots__ = ("events", "positions")

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self.events: list[Event] = []
        self.positions: dict[str, list[int]] = {}
        self.extend(events)

    def extend(self, events: Iterable[Event]) -> None:
        for event in events:
            self.positions.setdefault(event.id, []).append(len(self.events))
            self.events.append(event)

    def tip(self, end: int) -> _EventChain:
        """This chain, if ``end`` is its length; otherwise a copy of its first ``end``."""
        return self if len(self.events) == end else _EventChain(self.events[:end])


class _FromChain:
    """A session's ``events`` or ``historical_events``, made from its chain when first read.

    Sessions made by [`append_event`][steadyloop.sessions.SessionService.append_event] share
    one chain instead of copying every event into a new tuple on each append.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.historical = name == "historical_events"

    def __get__(self, obj: Session | None, owner: type | None = None) -> tuple[Event, ...]:
        if obj is None:
            return ()
        chain, split, end = obj.__dict__["_view"]
        value = tuple(chain.events[:split] if self.historical else chain.events[split:end])
        obj.__dict__[self.name] = value
        return value


@dataclass(frozen=True)
class Session:
    """A session as the fold of its journal streams gives it.

    Attributes:
        app: The app (the journal namespace).
        user_id: The user who owns it.
        id: Its id, unique per app and user.
        events: Events not covered by a summary, in order.
        historical_events: Events covered by the latest summary, in order; never lost.
        state: The merged state: session keys without prefix, ``user:`` keys of the
            user, ``app:`` keys of the app, and, in a session returned by
            ``append_event``, the ``temp:`` keys of the current invocation.
        summaries: Every committed summary, oldest first; the last is the latest.
        version: The head of the session stream (its last sequence number); the next
            write expects ``version + 1``.

    A session read with ``get_session(..., history=False)`` is *partial*
    ([`partial`][steadyloop.sessions.Session.partial]): read from the session's latest
    snapshot, it holds everything an agent continues from (``events``, ``state``,
    ``version`` and the latest summary) but not the history: ``historical_events`` is
    empty and ``summaries`` holds only the latest summary. Its writes still check the
    whole history: the snapshot keeps the history's ids in bounded space, and an id it
    cannot rule out is checked against the whole session before it is written.
    """

    app: str
    user_id: str
    id: str
    events: tuple[Event, ...] = ()
    historical_events: tuple[Event, ...] = ()
    state: Mapping[str, JSONValue] = field(default_factory=dict)
    summaries: tuple[Summary, ...] = ()
    version: int = 0
    _history: History | None = field(default=None, repr=False, compare=False)

    @property
    def partial(self) -> bool:
        """Whether the session was read without its history (see above)."""
        return self._history is not None

    @property
    def all_events(self) -> tuple[Event, ...]:
        """Historical events, then current events: every event held.

        Of a partial session, its ``events`` only.
        """
        return self.historical_events + self.events

    @property
    def event_ids(self) -> frozenset[str]:
        """The ids of every event of the session, historical ones included.

        Of a partial session: the ids it holds and those of its history its snapshot
        names (a snapshot keeps the history's ids in bounded space; see
        `steadyloop.sessions._history`).
        """
        held = frozenset(e.id for e in self.all_events)
        return held if self._history is None else held | frozenset(self._history.ids.named)

    @functools.cached_property
    def _view(self) -> tuple[_EventChain, int, int]:
        """The chain of every event, how many of them are historical, how many are seen."""
        historical, events = self.historical_events, self.events
        return _EventChain((*historical, *events)), len(historical), len(historical) + len(events)

    def has_event(self, event_id: str) -> bool:
        """Whether the session (historical events included) has an event with this id.

        Takes constant time, however long the session, so an agent loop can check
        every append. Of a partial session, a historical id is known when its snapshot
        names it; for the others
        [`append_event`][steadyloop.sessions.SessionService.append_event] reads the
        session whole when the snapshot cannot rule them out, so a duplicate is refused
        all the same.
        """
        chain, _, end = self._view
        if any(pos < end for pos in chain.positions.get(event_id, ())):
            return True
        return self._history is not None and event_id in self._history.ids

    def _share_index(self, successor: Session, added: Sequence[Event] = ()) -> Session:
        # A successor keeps the order of all_events and may add events at the end, so
        # it can share the chain: extended in place when this session sees all of it,
        # copied otherwise (a second successor of one session never sees the first's).
        chain, _, end = self._view
        if added:
            chain = chain.tip(end)
            chain.extend(added)
        successor.__dict__["_view"] = (chain, len(successor.historical_events), end + len(added))
        return successor

    def _appended(
        self, added: Sequence[Event], state: Mapping[str, JSONValue], version: int
    ) -> Session:
        """This session with ``added`` appended, ``state`` and ``version``; O(len(added)).

        Its events are not copied into a new tuple now: they are made from the shared
        chain if and when they are read.
        """
        chain, split, end = self._view
        chain = chain.tip(end)
        chain.extend(added)
        successor = object.__new__(Session)
        mine, theirs = self.__dict__, successor.__dict__
        theirs.update(
            app=self.app,
            user_id=self.user_id,
            id=self.id,
            state=state,
            summaries=self.summaries,
            version=version,
            _history=self._history,
            _view=(chain, split, end + len(added)),
        )
        if "historical_events" in mine:
            theirs["historical_events"] = mine["historical_events"]
        if "_stream" in mine:
            theirs["_stream"] = mine["_stream"]
        return successor

    @property
    def latest_summary(self) -> Summary | None:
        """The summary in force, or ``None``."""
        return self.summaries[-1] if self.summaries else None

    def context(self) -> SessionContext:
        """Return what the model should see: the latest summary, then uncovered events."""
        return SessionContext(summary=self.latest_summary, events=self.events)

    def scope_state(self, scope: Scope) -> dict[str, JSONValue]:
        """Return the keys of ``state`` in one scope, with their prefixes."""
        return {k: v for k, v in self.state.items() if key_scope(k) == scope}

    def stored_state(self) -> dict[str, JSONValue]:
        """Return ``state`` without ``temp:`` keys: what a reload would show."""
        return {k: v for k, v in self.state.items() if key_scope(k) != "temp"}

    def to_dict(self) -> dict[str, JSONValue]:
        """Return the session as a JSON object (state keys sorted)."""
        return {
            "app": self.app,
            "user_id": self.user_id,
            "id": self.id,
            "events": [e.to_dict() for e in self.events],
            "historical_events": [e.to_dict() for e in self.historical_events],
            "state": {k: self.state[k] for k in sorted(self.state)},
            "summaries": [s.to_dict() for s in self.summaries],
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, data: object) -> Session:
        """Rebuild a session from [`to_dict`][steadyloop.sessions.Session.to_dict] output.

        Raises:
            SessionError: If a field is missing, unknown or bad.
        """
        d = _fields(
            data,
            "session",
            {
                "app",
                "user_id",
                "id",
                "events",
                "historical_events",
                "state",
                "summaries",
                "version",
            },
            set(),
        )
        for name in ("events", "historical_events", "summaries"):
            if not isinstance(d[name], list):
                raise SessionError(f"session field {name!r} must be a JSON array")
        if not isinstance(d["state"], Mapping):
            raise SessionError("session field 'state' must be a JSON object")
        state = {}
        for key, value in d["state"].items():
            key_scope(key)
            state[key] = json_copy(value, f"state key {key!r}")
        version = d["version"]
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise SessionError(f"session version must be an integer >= 0, got {version!r}")
        return cls(
            app=_check_str(d["app"], "app"),
            user_id=_check_str(d["user_id"], "user id"),
            id=_check_str(d["id"], "session id"),
            events=tuple(Event.from_dict(e) for e in d["events"]),
            historical_events=tuple(Event.from_dict(e) for e in d["historical_events"]),
            state=state,
            summaries=tuple(Summary.from_dict(s) for s in d["summaries"]),
            version=version,
        )


# Read from the instance when set there (by __init__ or on first read), else made from
# the shared chain (a session made by _appended): see _FromChain.
Session.events = _FromChain("events")  # type: ignore[assignment]
Session.historical_events = _FromChain("historical_events")  # type: ignore[assignment]
