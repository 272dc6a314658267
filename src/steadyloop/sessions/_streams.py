"""Where sessions live in the journal: stream names and record kinds.

All streams of one app live in the journal namespace named after the app. Stream names
are canonical JSON arrays, so any user id and session id (spaces, quotes, colons, NUL,
text differing only by case) maps to its own stream and never collides with another:

=========================================  ==========================================
stream                                     holds
=========================================  ==========================================
``["session", user_id, session_id]``       one session: ``session.*`` and ``summary.*``
``["user", user_id]``                      ``user:`` state of one user: ``state.delta``
``["app"]``                                ``app:`` state of the whole app: ``state.delta``
``["memory", user_id]``                    one user's memory: ``memory.entry``
=========================================  ==========================================

Record kinds (payload fields in brackets):

``session.created`` (``app``, ``user_id``, ``session_id``, ``state``)
    First record of a session stream. ``state`` holds the initial session-scope keys
    (no prefix); initial ``user:`` and ``app:`` keys go to their streams in the same
    batch.
``session.event`` (``event``)
    One event, as [`Event.to_dict`][steadyloop.sessions.Event.to_dict] gives it, with every
    ``temp:`` key removed from its state delta. Its ``user:`` and ``app:`` keys are kept (the
    event is complete), and are also written to their own streams in the same batch.
``state.delta`` (``delta``, ``user_id``, ``session_id``, ``event_id``)
    A change to ``user:`` state (user stream) or ``app:`` state (app stream), keys with
    their prefix. ``event_id`` is ``null`` for the initial state of ``create_session``.
    Later records win, key by key.
``summary.begin`` (``summary``, the summary as
[`Summary.to_dict`][steadyloop.sessions.Summary.to_dict] gives it)
    First half of a summary attempt. Invisible on its own.
``summary.commit`` (``summary_id``, ``version``, ``begin``, the record id of its begin)
    Second half, written in a later batch. Only a begin with its commit is a summary.
``memory.entry`` (``session_id``, ``event_id``, ``author``, ``text``, ``time``)
    The text of one event, stored into the user's memory.
"""

from __future__ import annotations

from steadyloop._errors import InvalidBatch, SessionError
from steadyloop.journal import check_name
from steadyloop.records import canonical_json, decode

__all__ = [
    "KIND_CREATED",
    "KIND_EVENT",
    "KIND_MEMORY_ENTRY",
    "KIND_STATE_DELTA",
    "KIND_SUMMARY_BEGIN",
    "KIND_SUMMARY_COMMIT",
    "RECORD_KINDS",
    "app_stream",
    "check_id",
    "memory_stream",
    "parse_session_stream",
    "session_stream",
    "user_stream",
]

KIND_CREATED = "session.created"
"""First record of a session stream: ``app``, ``user_id``, ``session_id``, ``state``."""

KIND_EVENT = "session.event"
"""One event of a session, without its ``temp:`` keys: ``event``."""

KIND_STATE_DELTA = "state.delta"
"""A ``user:`` or ``app:`` state change: ``delta``, ``user_id``, ``session_id``, ``event_id``."""

KIND_SUMMARY_BEGIN = "summary.begin"
"""First half of a summary attempt, invisible on its own: ``summary``."""

KIND_SUMMARY_COMMIT = "summary.commit"
"""Second half of a summary attempt, in a later batch: ``summary_id``, ``version``, ``begin``."""

KIND_MEMORY_ENTRY = "memory.entry"
"""The text of one event in a user's memory: ``session_id``, ``event_id``, ``author``,
``text``, ``time``."""

RECORD_KINDS: tuple[str, ...] = (
    KIND_CREATED,
    KIND_EVENT,
    KIND_STATE_DELTA,
    KIND_SUMMARY_BEGIN,
    KIND_SUMMARY_COMMIT,
    KIND_MEMORY_ENTRY,
)
"""Every record kind the sessions layer writes."""


def _escape_controls(text: str) -> str:
    # json.dumps escapes C0 controls but leaves DEL and the C1 controls as they are;
    # journal names refuse every control character, so escape those too. The result is
    # still JSON that decodes to the same array, so the mapping stays injective.
    return "".join(
        f"\\u{ord(ch):04x}" if ch == "\x7f" or "\x80" <= ch <= "\x9f" else ch for ch in text
    )


_NAMES: dict[tuple[str, ...], str] = {}
"""Stream names already made: a run names the same few streams on every append, and
encoding them (canonical JSON, escaping, the name check) is the cost. Keys are tuples
of exact ``str`` ids, checked before they get here; a name never changes."""

_NAMES_MAX = 4096


def _name(parts: list[str]) -> str:
    key = tuple(parts)
    cached = _NAMES.get(key)
    if cached is not None:
        return cached
    name = _escape_controls(canonical_json(parts))
    try:
        check_name(name, "stream name")
    except InvalidBatch as exc:
        raise SessionError(f"cannot name a stream for {parts[1:]!r}: {exc}") from None
    if all(type(p) is str for p in parts):
        if len(_NAMES) >= _NAMES_MAX:
            _NAMES.clear()
        _NAMES[key] = name
    return name


def check_id(value: object, what: str) -> str:
    """Check a user id, session id or app name: a non-empty string of valid Unicode.

    Raises:
        SessionError: If it is not.
    """
    if not isinstance(value, str) or not value:
        raise SessionError(f"{what} must be a non-empty string, got {value!r}")
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SessionError(f"{what} {value!r} is not valid Unicode") from None
    return value


def session_stream(user_id: str, session_id: str) -> str:
    """Return the stream name of one session.

    Raises:
        SessionError: If an id is empty, not text, or too long for a stream name.
    """
    return _name(["session", check_id(user_id, "user id"), check_id(session_id, "session id")])


def user_stream(user_id: str) -> str:
    """Return the stream name of one user's ``user:`` state."""
    return _name(["user", check_id(user_id, "user id")])


_APP_STREAM = canonical_json(["app"])


def app_stream() -> str:
    """Return the stream name of the app's ``app:`` state."""
    return _APP_STREAM


def memory_stream(user_id: str) -> str:
    """Return the stream name of one user's memory."""
    return _name(["memory", check_id(user_id, "user id")])


def parse_session_stream(name: str) -> tuple[str, str] | None:
    """Return ``(user_id, session_id)`` if ``name`` is a session stream, else ``None``."""
    if not name.startswith('["session",'):
        return None
    try:
        value = decode(name)
    except ValueError:
        return None
    if (
        isinstance(value, list)
        and len(value) == 3
        and value[0] == "session"
        and isinstance(value[1], str)
        and isinstance(value[2], str)
    ):
        return value[1], value[2]
    return None
