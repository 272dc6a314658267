"""The fold: a [`Session`][steadyloop.sessions.Session] from the records of its streams.

The fold is a pure function of what was read, so any backend that stores the same
records yields the same session. It refuses loudly what it cannot explain (an unknown
record kind, a summary commit without its begin, a broken version chain, a duplicate
event id) with [`CorruptionError`][steadyloop.CorruptionError] naming the stream and sequence
number, rather than showing a session that was never written.

**Snapshots.** When a summary commits, a ``session.snapshot`` record rides in the same
batch (no extra sync): the fold of every record before it, with the events the latest
summary does not cover in full and the history as ids only (`steadyloop.sessions._history`).
A reader that needs only what an agent continues from (resume) starts at the latest
snapshot and folds the records after it ([`fold_tail`][steadyloop.sessions._fold.fold_tail]),
so its cost follows the session since its latest summary, not the whole session. The full
fold passes over snapshots; [`snapshot_problems`][steadyloop.sessions._fold.snapshot_problems]
(``journal doctor``) checks each one against the fold of the records before it. Each
snapshot is sealed (`steadyloop._seal`): a reader checks the seal before it trusts it.

Snapshots are written when a summary commits, and only then, because a summary is what
bounds what resume needs: the events before it are covered. A session never summarised
has nothing to skip (its prompt is every event), so a snapshot would only copy its events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from steadyloop._errors import CorruptionError, SessionError, SessionNotFound
from steadyloop._seal import SEAL, seal_problem, sealed, skippable, unsealed
from steadyloop.records import JSONValue, StoredRecord, canonical_json
from steadyloop.sessions._history import History, IdFilter, Known, Positions, legacy_history
from steadyloop.sessions._model import Event, Scope, Session, Summary, key_scope
from steadyloop.sessions._streams import (
    KIND_CREATED,
    KIND_EVENT,
    KIND_SNAPSHOT,
    KIND_STATE_DELTA,
    KIND_STATE_SNAPSHOT,
    KIND_SUMMARY_BEGIN,
    KIND_SUMMARY_COMMIT,
)
from steadyloop.sessions._summaries import check_next_summary

__all__ = [
    "SessionFold",
    "fold_scope_state",
    "fold_scope_tail",
    "fold_session",
    "fold_tail",
    "scope_snapshot_payload",
    "scope_snapshot_problems",
    "snapshot_of",
    "snapshot_payload",
    "snapshot_problems",
]


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
        if rec.kind != KIND_STATE_DELTA and skippable(rec.kind):
            continue  # a derived record of a later release (steadyloop._seal.skippable)
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


def scope_snapshot_payload(
    head: int, scope: Scope, state: Mapping[str, JSONValue], covered: tuple[str, Mapping[str, Any]]
) -> dict[str, JSONValue]:
    """The payload of a ``state.snapshot`` after ``head`` records of a user or the app stream.

    ``covered`` is the kind and payload of the record at ``head``, which the seal names.
    """
    body: dict[str, JSONValue] = {
        "head": head,
        "scope": scope,
        "state": {k: state[k] for k in sorted(state)},
    }
    return sealed(body, head, covered)


def fold_scope_tail(
    namespace: str, tail: Sequence[StoredRecord], scope: Scope
) -> tuple[dict[str, JSONValue] | None, str]:
    """Fold the end of a user or the app stream from the latest ``state.snapshot`` in it.

    Args:
        namespace: The app.
        tail: The last records of the stream, in order, up to its head; the record
            before a snapshot, which its seal names, included.
        scope: ``"user"`` or ``"app"``.

    Returns:
        The state, and ``""``; or ``None`` and why not (no snapshot in ``tail``, or the
            latest one is damaged), for the caller to fold the whole stream.
    """
    for i in range(len(tail) - 1, -1, -1):
        rec = tail[i]
        if rec.kind != KIND_STATE_SNAPSHOT:
            continue
        p: Mapping[str, Any] = rec.payload
        covered = tail[i - 1] if i else None
        problem = seal_problem(
            p, rec.seq, None if covered is None else (covered.kind, covered.payload)
        )
        state = p.get("state")
        if problem is None and (p.get("head") != rec.seq - 1 or p.get("scope") != scope):
            problem = f"it is the {p.get('scope')!r} state after {p.get('head')!r} records"
        if problem is None and (
            not isinstance(state, Mapping) or any(key_scope(k) != scope for k in state)
        ):
            problem = f"its state must be an object of {scope}: keys"
        if problem is not None:
            return None, f"the state snapshot at seq {rec.seq} is damaged ({problem})"
        assert isinstance(state, Mapping)
        try:
            later = fold_scope_state(namespace, tail[i + 1 :], scope)
        except CorruptionError as exc:
            return None, f"a record after the state snapshot at seq {rec.seq}: {exc}"
        return {**state, **later}, ""
    return None, "no snapshot"


def scope_snapshot_problems(
    namespace: str, records: Sequence[StoredRecord], scope: Scope
) -> list[str]:
    """Check every ``state.snapshot`` of a user or the app stream against the full fold.

    Returns:
        One line per snapshot that does not hold the fold of the records before it.

    Raises:
        CorruptionError: If a record cannot be explained (as the full fold would).
    """
    problems: list[str] = []
    state: dict[str, JSONValue] = {}
    for i, rec in enumerate(records):
        if rec.kind != KIND_STATE_SNAPSHOT:
            state.update(fold_scope_state(namespace, [rec], scope))
            continue
        covered = records[i - 1] if i else None
        mine = (
            None
            if covered is None
            else scope_snapshot_payload(rec.seq - 1, scope, state, (covered.kind, covered.payload))
        )
        if mine is None or canonical_json(dict(rec.payload)) != canonical_json(mine):
            problems.append(
                f"{_where(namespace, rec)}: the state snapshot does not match the fold of "
                "the records before it"
            )
    return problems


class SessionFold:
    """The fold of a session stream, one record at a time.

    It starts from nothing (the stream's first record must be ``session.created``) or
    from a snapshot ([`from_snapshot`][steadyloop.sessions._fold.SessionFold.from_snapshot]),
    in which case it holds only the events the snapshot's summary does not cover and knows
    the rest through its [`History`][steadyloop.sessions._history.History].

    Args:
        app: The app (journal namespace).
        user_id: The session's user.
        session_id: The session's id.
    """

    def __init__(self, app: str, user_id: str, session_id: str) -> None:
        self.app, self.user_id, self.session_id = app, user_id, session_id
        self.head = 0
        self.state: dict[str, JSONValue] = {}
        self.events: list[Event] = []  # held: every event, or those after ``base``
        self.base = 0  # events before ``events[0]`` that are not held
        self.positions: dict[str, int] = {}  # held event id -> index among all events
        self.history = IdFilter()  # ids of the events not held
        self.older = IdFilter()  # ids of the summaries not held
        self.pending: dict[str, Summary] = {}  # begin record id -> summary
        self.summaries: list[Summary] = []  # held summaries
        self.covered = 0  # events the latest summary covers
        self.partial = False  # started from a snapshot
        self.legacy = False  # ... written before id filters (steadyloop.sessions._history)
        self.last: StoredRecord | None = None  # the last record folded

    def _where(self, rec: StoredRecord) -> str:
        return _where(self.app, rec)

    def apply(self, rec: StoredRecord) -> None:
        """Fold one record (the next of the stream).

        Raises:
            CorruptionError: If the record cannot be explained; names stream and seq.
        """
        try:
            self._apply(rec)
        except SessionError as exc:
            raise CorruptionError(str(exc), location=self._where(rec)) from None
        self.head = rec.seq
        self.last = rec

    def _apply(self, rec: StoredRecord) -> None:
        p = rec.payload
        kind = rec.kind
        if self.head == 0:
            self._created(rec)
        elif kind == KIND_EVENT:
            event = Event.from_dict(p.get("event"))
            # Of a partial fold, an id the history may hold (its bit is set) was checked
            # against the whole session by its writer (steadyloop.sessions._history).
            if event.id in self.positions or event.id in self.history:
                raise SessionError(f"event id {event.id!r} appears twice")
            if any(key_scope(k) == "temp" for k in event.state_delta):
                raise SessionError(f"event {event.id!r} stored a temp: key")
            self.positions[event.id] = self.base + len(self.events)
            self.events.append(event)
            self.state.update(event.delta_in("session"))
        elif kind == KIND_SUMMARY_BEGIN:
            self.pending[rec.record.id] = Summary.from_dict(p.get("summary"))
        elif kind == KIND_SUMMARY_COMMIT:
            begin = p.get("begin")
            summary = self.pending.pop(begin, None) if isinstance(begin, str) else None
            if summary is None:
                raise SessionError(f"summary.commit of an unknown begin record {begin!r}")
            if p.get("summary_id") != summary.id or p.get("version") != summary.version:
                raise SessionError("summary.commit does not match its begin record")
            latest = self.summaries[-1] if self.summaries else None
            used = Known(self.older, {s.id for s in self.summaries})
            self.covered = check_next_summary(
                self.session_id, latest, used, self._positions(), summary
            )
            self.summaries.append(summary)
        elif kind != KIND_SNAPSHOT and not skippable(kind):
            # A snapshot is checked by snapshot_problems; another skippable kind is a
            # derived record of a later release (steadyloop._seal.skippable).
            raise SessionError(f"unexpected record kind {kind!r} in a session stream")

    def _created(self, rec: StoredRecord) -> None:
        p = rec.payload
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
        if p.get("user_id") != self.user_id or p.get("session_id") != self.session_id:
            raise SessionError(
                f"session.created names user {p.get('user_id')!r} and session "
                f"{p.get('session_id')!r}"
            )
        self.state.update(initial)

    def _positions(self) -> Positions:
        if not self.partial:
            return Positions(self.positions)
        # The last event not held is the one the snapshot's summary covers through.
        last = self.summaries[0].covers_through
        return Positions(self.positions, History(self.base, self.history, self.older), last)

    def _history_now(self) -> History:
        """What a snapshot or a partial session keeps of the history, as ids."""
        split = self.covered - self.base
        return History(
            self.covered,
            self.history.union(e.id for e in self.events[:split]),
            self.older.union(s.id for s in self.summaries[:-1]),
            legacy=self.legacy,
        )

    def _legacy_history(self) -> JSONValue:
        if self.partial:
            raise SessionError("a partial fold cannot list every id of its history")
        return legacy_history(
            self.covered,
            (e.id for e in self.events[: self.covered]),
            (s.id for s in self.summaries[:-1]),
        )

    def snapshot(self, *, legacy: bool = False) -> dict[str, JSONValue]:
        """The fold so far as the payload of a ``session.snapshot`` written after it.

        ``legacy`` gives the history as snapshots wrote it before id filters (every id
        listed), which ``doctor`` compares older snapshots with; a whole fold only.

        Raises:
            SessionError: If no summary has committed yet (a snapshot needs one).
        """
        if not self.summaries:
            raise SessionError("a session snapshot needs a committed summary")
        return snapshot_payload(
            self.head,
            self.user_id,
            self.session_id,
            self.state,
            self.summaries[-1],
            self.events[self.covered - self.base :],
            self._legacy_history() if legacy else self._history_now(),
            None if self.last is None else (self.last.kind, self.last.payload),
        )

    @classmethod
    def from_snapshot(
        cls,
        app: str,
        user_id: str,
        session_id: str,
        rec: StoredRecord,
        covered: StoredRecord | None = None,
    ) -> SessionFold:
        """The fold a ``session.snapshot`` record holds: as if every record to it was folded.

        Args:
            app: The app.
            user_id: The session's user.
            session_id: The session.
            rec: The snapshot record.
            covered: The record stored before it, which its seal names.

        Raises:
            ValueError: If the snapshot is damaged: its seal does not hold (see
                `steadyloop._seal`), it is malformed, of another session, or not at the
                place it says it was written (its ``head`` must be its seq - 1).
        """
        p: Mapping[str, Any] = rec.payload
        problem = seal_problem(
            p, rec.seq, None if covered is None else (covered.kind, covered.payload)
        )
        if problem is not None:
            raise ValueError(problem)
        try:
            if p["head"] != rec.seq - 1:
                raise ValueError(f"it says it follows {p['head']} records, not {rec.seq - 1}")
            if p["user_id"] != user_id or p["session_id"] != session_id:
                raise ValueError(f"it is of session {p['session_id']!r} of {p['user_id']!r}")
            fold = cls(app, user_id, session_id)
            fold.partial = True
            history = History.from_json(p["history"])
            latest = Summary.from_dict(p["summary"])
            state = p["state"]
            if not isinstance(state, Mapping) or any(key_scope(k) != "session" for k in state):
                raise ValueError("its state must be an object of session-scope keys")
            fold.state = dict(state)
            fold.base = fold.covered = history.count
            fold.history = history.ids
            fold.older = history.summaries
            fold.legacy = history.legacy
            fold.summaries = [latest]
            if not history.ids.may_hold(latest.covers_through):
                raise ValueError(f"its summary covers an unknown event {latest.covers_through!r}")
            for item in p["events"]:
                event = Event.from_dict(item)
                if event.id in fold.positions or event.id in history.ids:
                    raise ValueError(f"event id {event.id!r} appears twice")
                fold.positions[event.id] = fold.base + len(fold.events)
                fold.events.append(event)
        except (KeyError, TypeError, ValueError, AttributeError, SessionError) as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from None
        fold.head = rec.seq
        fold.last = rec
        return fold

    def session(
        self,
        user_records: Sequence[StoredRecord] = (),
        app_records: Sequence[StoredRecord] = (),
        *,
        scoped: Mapping[str, JSONValue] | None = None,
    ) -> Session:
        """The session folded so far, with the user's and the app's state merged in.

        A fold that started from a snapshot gives a partial session (see
        [`Session`][steadyloop.sessions.Session]). ``scoped``, when given, is the
        ``user:`` and ``app:`` state already folded, in place of their records.
        """
        merged: dict[str, JSONValue] = dict(self.state)
        if scoped is not None:
            merged.update(scoped)
        else:
            merged.update(fold_scope_state(self.app, user_records, "user"))
            merged.update(fold_scope_state(self.app, app_records, "app"))
        split = self.covered - self.base
        history = self._history_now() if self.partial else None
        return Session(
            app=self.app,
            user_id=self.user_id,
            id=self.session_id,
            events=tuple(self.events[split:]),
            historical_events=() if history is not None else tuple(self.events[:split]),
            state=merged,
            summaries=tuple(self.summaries[-1:] if history is not None else self.summaries),
            version=self.head,
            _history=history,
        )


def snapshot_payload(  # noqa: PLR0917 - the snapshot's fields, each needed
    head: int,
    user_id: str,
    session_id: str,
    state: Mapping[str, JSONValue],
    latest: Summary,
    events: Sequence[Event],
    history: History | JSONValue,
    covered: tuple[str, Mapping[str, Any]] | None,
) -> dict[str, JSONValue]:
    """The payload of a ``session.snapshot`` record that follows ``head`` records.

    Args:
        head: How many records of the session stream it follows.
        user_id: The session's user.
        session_id: The session's id.
        state: The session-scope state.
        latest: The latest committed summary.
        events: The events it does not cover.
        history: The events it covers and the older summaries, as ids (or, for
            ``doctor``, the JSON of a history as older snapshots wrote it).
        covered: The kind and payload of the record at ``head``, for the seal (see
            `steadyloop._seal`).

    A summary attempt begun before the snapshot and never committed is not kept: the
    commit of a summary comes right after its begin, so no later commit can name it
    (a stream that breaks this is read whole, as the full fold reads it).
    """
    body: dict[str, JSONValue] = {
        "head": head,
        "user_id": user_id,
        "session_id": session_id,
        "state": {k: state[k] for k in sorted(state)},
        "summary": latest.to_dict(),
        "events": [e.to_dict() for e in events],
        "history": history.to_json() if isinstance(history, History) else history,
    }
    return sealed(body, head, covered)


def snapshot_of(
    session: Session, head: int, covered: tuple[str, Mapping[str, Any]]
) -> dict[str, JSONValue]:
    """The payload of the ``session.snapshot`` after ``head`` records that fold to ``session``.

    The session may be whole or partial; it must have a committed summary. ``covered``
    is the kind and payload of the record at ``head``, which the seal names.

    Raises:
        SessionError: If the session has no committed summary.
    """
    if not session.summaries:
        raise SessionError("a session snapshot needs a committed summary")
    history = session._history
    if history is None:
        history = History(
            len(session.historical_events),
            IdFilter().union(e.id for e in session.historical_events),
            IdFilter().union(s.id for s in session.summaries[:-1]),
        )
    state = {k: v for k, v in session.state.items() if key_scope(k) == "session"}
    return snapshot_payload(
        head,
        session.user_id,
        session.id,
        state,
        session.summaries[-1],
        session.events,
        history,
        covered,
    )


def fold_session(
    app: str,
    user_id: str,
    session_id: str,
    session_records: Sequence[StoredRecord],
    *,
    user_records: Sequence[StoredRecord] = (),
    app_records: Sequence[StoredRecord] = (),
    scoped: Mapping[str, JSONValue] | None = None,
) -> Session:
    """Fold the records of a session, its user's stream and the app stream.

    Args:
        app: The app (journal namespace).
        user_id: The session's user.
        session_id: The session's id.
        session_records: The session stream, in order.
        user_records: The user stream, in order.
        app_records: The app stream, in order.
        scoped: The ``user:`` and ``app:`` state already folded, in place of
            ``user_records`` and ``app_records``.

    Returns:
        The session: events not covered by the latest summary, covered ones as
            historical events, committed summaries only, merged state, and the session
            stream's head as its version. Snapshot records are passed over.

    Raises:
        SessionNotFound: If the session stream is empty.
        CorruptionError: If a record cannot be explained; names stream and sequence.
    """
    if not session_records:
        raise SessionNotFound(f"no session {session_id!r} of user {user_id!r} in app {app!r}")
    fold = SessionFold(app, user_id, session_id)
    for rec in session_records:
        fold.apply(rec)
    return fold.session(user_records, app_records, scoped=scoped)


def fold_tail(
    app: str, user_id: str, session_id: str, tail: Sequence[StoredRecord]
) -> tuple[SessionFold | None, str]:
    """Fold the end of a session stream from the latest snapshot in it.

    Args:
        app: The app (journal namespace).
        user_id: The session's user.
        session_id: The session's id.
        tail: The last records of the session stream, in order, up to its head.

    Returns:
        The fold from the latest snapshot in ``tail`` through its last record, and
            ``""``; or ``None`` and why not (no snapshot in ``tail``, or the latest one
            is damaged), for the caller to fold the whole stream.

    A record after the snapshot that the fold from it cannot explain gives ``None``
    too: the full fold decides whether the stream is damaged.
    """
    for i in range(len(tail) - 1, -1, -1):
        rec = tail[i]
        if rec.kind != KIND_SNAPSHOT:
            continue
        try:
            fold = SessionFold.from_snapshot(
                app, user_id, session_id, rec, tail[i - 1] if i else None
            )
        except ValueError as exc:
            return None, f"the snapshot at seq {rec.seq} is damaged ({exc})"
        for later in tail[i + 1 :]:
            try:
                fold.apply(later)
            except CorruptionError as exc:
                # Perhaps the history explains it (the full fold is the judge).
                return None, f"a record after the snapshot at seq {rec.seq}: {exc}"
        return fold, ""
    return None, "no snapshot"


def snapshot_problems(
    app: str, user_id: str, session_id: str, records: Sequence[StoredRecord]
) -> list[str]:
    """Check every ``session.snapshot`` of a session stream against the full fold.

    Returns:
        One line per snapshot that does not hold the fold of the records before it
            (where, and that it does not match); empty when all match.

    Raises:
        CorruptionError: If a record cannot be explained (as the full fold would).
    """
    problems: list[str] = []
    fold = SessionFold(app, user_id, session_id)
    for rec in records:
        if rec.kind == KIND_SNAPSHOT:
            mine: dict[str, Any] | None
            history = rec.payload.get("history")
            legacy = isinstance(history, Mapping) and "ids" in history  # before id filters
            try:
                mine = fold.snapshot(legacy=legacy)
            except SessionError:
                mine = None
            if mine is not None and SEAL not in rec.payload:  # written before seals
                mine = unsealed(mine)
            if mine is None or canonical_json(dict(rec.payload)) != canonical_json(mine):
                problems.append(
                    f"{_where(app, rec)}: the session snapshot does not match the fold of "
                    "the records before it"
                )
        fold.apply(rec)
    return problems
