"""The fold: a [`Session`][steadyloop.sessions.Session] from the records of its streams.

The fold is a pure function of what was read, so any backend that stores the same
records yields the same session. It refuses loudly what it cannot explain (an unknown
record kind, a summary commit without its begin, a broken version chain, a duplicate
event id) with [`CorruptionError`][steadyloop.CorruptionError] naming the stream and sequence
number, rather than showing a session that was never written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from steadyloop._errors import CorruptionError, SessionError, SessionNotFound
from steadyloop.records import JSONValue, StoredRecord
from steadyloop.sessions._model import Event, Scope, Session, Summary, key_scope
from steadyloop.sessions._streams import (
    KIND_CREATED,
    KIND_EVENT,
    KIND_STATE_DELTA,
    KIND_SUMMARY_BEGIN,
    KIND_SUMMARY_COMMIT,
)
from steadyloop.sessions._summaries import check_next_summary

__all__ = ["fold_scope_state", "fold_session"]


def _where(namespace: str, rec: StoredRecord) -> str:
    return f"{namespace}/{rec.stream}#{rec.seq}"


def fold_scope_state(
    namespace: str, records: Sequence[StoredRecord], scope: Scope
) -> dict[str, JSONValue]:
    """Fold a user or app stream into its state, later records winning key by key.

    Raises:
        CorruptionError: If a record is not a ``state.delta`` of keys in ``scope``.
    """
    state: dict[str, JSONValue] = {}
    for rec in records:
        delta = rec.payload.get("delta")
        try:
            if rec.kind != KIND_STATE_DELTA:
                raise SessionError(f"unexpected record kind {rec.kind!r}")
            if not isinstance(delta, Mapping):
                raise SessionError("a state.delta record without a 'delta' object")
            for key in delta:
                if key_scope(key) != scope:
                    raise SessionError(f"key {key!r} is not in scope {scope!r}")
        except SessionError as exc:
            raise CorruptionError(str(exc), location=_where(namespace, rec)) from None
        state.update(delta)
    return state


def fold_session(
    app: str,
    user_id: str,
    session_id: str,
    session_records: Sequence[StoredRecord],
    *,
    user_records: Sequence[StoredRecord] = (),
    app_records: Sequence[StoredRecord] = (),
) -> Session:
    """Fold the records of a session, its user's stream and the app stream.

    Args:
        app: The app (journal namespace).
        user_id: The session's user.
        session_id: The session's id.
        session_records: The session stream, in order.
        user_records: The user stream, in order.
        app_records: The app stream, in order.

    Returns:
        The session: events not covered by the latest summary, covered ones as
            historical events, committed summaries only, merged state, and the session
            stream's head as its version.

    Raises:
        SessionNotFound: If the session stream is empty.
        CorruptionError: If a record cannot be explained; names stream and sequence.
    """
    if not session_records:
        raise SessionNotFound(f"no session {session_id!r} of user {user_id!r} in app {app!r}")
    first = session_records[0]
    state: dict[str, JSONValue] = {}
    events: list[Event] = []
    positions: dict[str, int] = {}
    pending: dict[str, Summary] = {}
    summaries: list[Summary] = []
    covered = 0
    for rec in session_records:
        p = rec.payload
        try:
            if rec is first:
                if rec.kind != KIND_CREATED:
                    raise SessionError(
                        f"a session stream must start with {KIND_CREATED!r}, not {rec.kind!r}"
                    )
                initial = p.get("state")
                if not isinstance(initial, Mapping):
                    raise SessionError("session.created without a 'state' object")
                for key in initial:
                    if key_scope(key) != "session":
                        raise SessionError(f"initial key {key!r} is not session scope")
                if p.get("user_id") != user_id or p.get("session_id") != session_id:
                    raise SessionError(
                        f"session.created names user {p.get('user_id')!r} and session "
                        f"{p.get('session_id')!r}"
                    )
                state.update(initial)
            elif rec.kind == KIND_EVENT:
                event = Event.from_dict(p.get("event"))
                if event.id in positions:
                    raise SessionError(f"event id {event.id!r} appears twice")
                if any(key_scope(k) == "temp" for k in event.state_delta):
                    raise SessionError(f"event {event.id!r} stored a temp: key")
                positions[event.id] = len(events)
                events.append(event)
                state.update(event.delta_in("session"))
            elif rec.kind == KIND_SUMMARY_BEGIN:
                pending[rec.record.id] = Summary.from_dict(p.get("summary"))
            elif rec.kind == KIND_SUMMARY_COMMIT:
                begin = p.get("begin")
                summary = pending.pop(begin, None) if isinstance(begin, str) else None
                if summary is None:
                    raise SessionError(f"summary.commit of an unknown begin record {begin!r}")
                if p.get("summary_id") != summary.id or p.get("version") != summary.version:
                    raise SessionError("summary.commit does not match its begin record")
                covered = check_next_summary(session_id, summaries, positions, summary)
                summaries.append(summary)
            else:
                raise SessionError(f"unexpected record kind {rec.kind!r} in a session stream")
        except SessionError as exc:
            raise CorruptionError(str(exc), location=_where(app, rec)) from None
    merged: dict[str, JSONValue] = dict(state)
    merged.update(fold_scope_state(app, user_records, "user"))
    merged.update(fold_scope_state(app, app_records, "app"))
    return Session(
        app=app,
        user_id=user_id,
        id=session_id,
        events=tuple(events[covered:]),
        historical_events=tuple(events[:covered]),
        state=merged,
        summaries=tuple(summaries),
        version=session_records[-1].seq,
    )
