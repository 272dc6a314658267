"""Where sessions live in the journal: stream names and record kinds.

All streams of one app live in the journal namespace named after the app. Stream names
are canonical JSON arrays built by `steadyloop._names`, so any user id and
session id (spaces, quotes, colons, NUL, text differing only by case) maps to its own
stream and never collides with another:

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
``session.snapshot`` (``head``, ``user_id``, ``session_id``, ``state``, ``summary``,
    ``events``, ``history``, ``seal``)
    The fold of the ``head`` records before it, written in the batch of a
    ``summary.commit`` (no extra sync): the session-scope ``state``, the latest
    ``summary``, the ``events`` it does not cover, and of the rest only ids, in bounded
    space: ``history`` (``count`` of covered events; ``events`` and ``summaries``, the
    ids of the covered events and of older summaries, each as up to 64 ``runs`` and
    ``ids`` by name and the rest as the base64 ``bits`` of a 2,048-bit map). A snapshot
    written before that form lists every id (``ids``, and ``summaries`` as a list); it
    is read as well.
    Resume reads the latest
    snapshot and what follows it once its ``seal`` holds (see `steadyloop._seal`); a
    full fold passes over it, and ``journal doctor`` checks it against the fold of the
    records before it.
``state.snapshot`` (``head``, ``scope``, ``state``, ``seal``)
    The fold of the ``head`` records before it in a user or the app stream: the
    ``user:`` or ``app:`` state they leave. Written in a batch of its own, expecting
    its place, when a write takes the stream past a multiple of
    ``STATE_SNAPSHOT_EVERY`` records (a refused one is simply not written). A read of
    the state starts at the latest one whose ``seal`` holds (see `steadyloop._seal`), so
    it costs the changes since then, however many sessions wrote them; a full fold
    passes over it, and ``journal doctor`` checks it.
``memory.entry`` (``session_id``, ``event_id``, ``author``, ``text``, ``time``)
    The text of one event, stored into the user's memory.
"""

from __future__ import annotations

from typing import Literal

from steadyloop._errors import SessionError
from steadyloop._names import app_problem, id_problem, stream_name
from steadyloop.records import canonical_json, decode

__all__ = [
    "KIND_CREATED",
    "KIND_EVENT",
    "KIND_MEMORY_ENTRY",
    "KIND_SNAPSHOT",
    "KIND_STATE_DELTA",
    "KIND_STATE_SNAPSHOT",
    "KIND_SUMMARY_BEGIN",
    "KIND_SUMMARY_COMMIT",
    "RECORD_KINDS",
    "STATE_SNAPSHOT_EVERY",
    "app_stream",
    "check_id",
    "memory_stream",
    "parse_scope_stream",
    "parse_session_stream",
    "session_stream",
    "user_stream",
]

KIND_CREATED = "session.created"
"""First record of a session stream: ``app``, ``user_id``, ``session_id``, ``state``."""

KIND_EVENT = "session.event"
"""One event of a session, without its ``temp:`` keys: ``event``."""

KIND_STATE_SNAPSHOT = "state.snapshot"
"""The ``user:`` or ``app:`` state of the records before it: ``head``, ``scope``, ``state``."""

STATE_SNAPSHOT_EVERY = 100
"""A user or the app stream gets a ``state.snapshot`` each time it passes a multiple of this."""

KIND_STATE_DELTA = "state.delta"
"""A ``user:`` or ``app:`` state change: ``delta``, ``user_id``, ``session_id``, ``event_id``."""

KIND_SUMMARY_BEGIN = "summary.begin"
"""First half of a summary attempt, invisible on its own: ``summary``."""

KIND_SUMMARY_COMMIT = "summary.commit"
"""Second half of a summary attempt, in a later batch: ``summary_id``, ``version``, ``begin``."""

KIND_SNAPSHOT = "session.snapshot"
"""The fold of a session stream so far, in the batch of a summary commit: ``head``,
``user_id``, ``session_id``, ``state``, ``summary``, ``events``, ``history``."""

KIND_MEMORY_ENTRY = "memory.entry"
"""The text of one event in a user's memory: ``session_id``, ``event_id``, ``author``,
``text``, ``time``."""

RECORD_KINDS: tuple[str, ...] = (
    KIND_CREATED,
    KIND_EVENT,
    KIND_STATE_DELTA,
    KIND_SUMMARY_BEGIN,
    KIND_SUMMARY_COMMIT,
    KIND_SNAPSHOT,
    KIND_STATE_SNAPSHOT,
    KIND_MEMORY_ENTRY,
)
"""Every record kind the sessions layer writes."""


def _name(parts: list[str]) -> str:
    try:
        return stream_name(parts[0], *parts[1:])
    except ValueError as exc:
        raise SessionError(str(exc)) from None


def check_id(value: object, what: str) -> str:
    """Check a user id, session id or app name by the one id rule of `steadyloop._names`.

    An app name is a journal namespace, so it may not hold control characters either.

    Raises:
        SessionError: If it is not a valid id.
    """
    problem = app_problem(value, what) if what == "app name" else id_problem(value, what)
    if problem is not None:
        raise SessionError(problem)
    assert isinstance(value, str)
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


def parse_scope_stream(name: str) -> Literal["user", "app"] | None:
    """``"user"`` or ``"app"`` if ``name`` is a user's or the app's state stream, else ``None``."""
    if name == _APP_STREAM:
        return "app"
    if not name.startswith('["user",'):
        return None
    try:
        value = decode(name)
    except ValueError:
        return None
    if isinstance(value, list) and len(value) == 2 and isinstance(value[1], str):
        return "user"
    return None
