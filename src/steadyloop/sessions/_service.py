"""The session service: sessions, scoped state, memory and summaries on a journal.

Every write of one operation goes out as one journal batch (a summary is two, on
purpose), and every read is a fold over what the journal holds, so a session read back
from any backend, or after a crash, is exactly what was committed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence

from steadyloop._errors import ConflictError, SessionError, SessionExists, SessionNotFound
from steadyloop._seal import first_report
from steadyloop.journal import AppendResult, Journal, StreamWrite
from steadyloop.records import (
    JSONValue,
    RecordFactory,
    StoredRecord,
    _Checked,
    _make_unchecked,
)
from steadyloop.sessions._fold import (
    fold_scope_state,
    fold_scope_tail,
    fold_session,
    fold_tail,
    scope_snapshot_payload,
    snapshot_of,
)
from steadyloop.sessions._history import History, IdFilter, Known, Positions
from steadyloop.sessions._memory import MemoryHit, memory_records, rank, read_entries
from steadyloop.sessions._model import (
    Event,
    Part,
    Scope,
    Session,
    Summary,
    json_copy,
    key_scope,
)
from steadyloop.sessions._streams import (
    KIND_CREATED,
    KIND_EVENT,
    KIND_SNAPSHOT,
    KIND_STATE_DELTA,
    KIND_STATE_SNAPSHOT,
    STATE_SNAPSHOT_EVERY,
    app_stream,
    check_id,
    memory_stream,
    parse_scope_stream,
    parse_session_stream,
    session_stream,
    user_stream,
)
from steadyloop.sessions._summaries import begin_record, check_next_summary, commit_record

__all__ = ["SessionService"]


_CONSISTENT_READS = 20
"""Attempts of [`SessionService.get_session`][steadyloop.sessions.SessionService.get_session] to
read its streams consistently."""

_TAIL_CHUNK = 64
"""Records of a session stream read in the first chunk when looking for its snapshot."""

_log = logging.getLogger("steadyloop.sessions")


class SessionService:
    """Sessions of one app, stored in a journal namespace named after the app.

    Args:
        journal: The journal to read and write.
        app: The app name; also the journal namespace.
        records: Makes records (and generated session and event ids) with an injected
            clock and id source; wall clock and random ids by default.

    Examples:
        >>> import asyncio
        >>> from steadyloop.journal import open_journal
        >>> from steadyloop.sessions import SessionService, TextPart
        >>> async def demo():
        ...     async with await open_journal("memory://") as journal:
        ...         service = SessionService(journal, "demo")
        ...         s = await service.create_session("ada", "s1", state={"user:lang": "en"})
        ...         e = service.new_event("user", [TextPart("hi")], state_delta={"turns": 1})
        ...         s = await service.append_event(s, e)
        ...         return [ev.text for ev in s.events], s.state
        >>> asyncio.run(demo())
        (['hi'], {'user:lang': 'en', 'turns': 1})
    """

    def __init__(self, journal: Journal, app: str, *, records: RecordFactory | None = None) -> None:
        self.journal = journal
        self.app = check_id(app, "app name")
        self.records = records or RecordFactory()

    # -- sessions -----------------------------------------------------------------

    def new_event(
        self,
        author: str,
        parts: Sequence[Part] = (),
        *,
        state_delta: Mapping[str, JSONValue] | None = None,
        invocation_id: str | None = None,
        event_id: str | None = None,
    ) -> Event:
        """Make an event stamped with a new id (unless given) and the current time.

        Raises:
            SessionError: If the event is invalid (see [`Event`][steadyloop.sessions.Event]).
        """
        return Event(
            id=self.records.ids.new_id() if event_id is None else event_id,
            author=author,
            parts=parts,
            state_delta=dict(state_delta or {}),
            time=self.records.clock.now_us(),
            invocation_id=invocation_id,
        )

    async def create_session(
        self,
        user_id: str,
        session_id: str | None = None,
        state: Mapping[str, JSONValue] | None = None,
    ) -> Session:
        """Create a session, with its initial state, in one batch.

        Args:
            user_id: The user who owns it.
            session_id: Its id; a new one from the id source when ``None``.
            state: Initial state. Plain keys start the session's state; ``user:`` and
                ``app:`` keys are written to the user and app streams in the same batch;
                ``temp:`` keys appear in the returned session only.

        Returns:
            The session as read back, with the current ``user:`` and ``app:`` state.

        Raises:
            SessionExists: If the user already has a session with this id; nothing was
                written.
            SessionError: If an id, key or value is invalid; nothing was written.
        """
        if session_id is None:
            session_id = self.records.ids.new_id()
        stream = session_stream(user_id, session_id)
        if state is not None and not isinstance(state, Mapping):
            raise SessionError(f"initial state must be a mapping, got {type(state).__name__}")
        scoped: dict[str, dict[str, JSONValue]] = {"session": {}, "user": {}, "app": {}, "temp": {}}
        for key, value in (state or {}).items():
            scoped[key_scope(key)][key] = json_copy(value, f"initial state key {key!r}")
        make = self.records
        created = make(
            KIND_CREATED,
            {
                "app": self.app,
                "user_id": user_id,
                "session_id": session_id,
                "state": scoped["session"],
            },
        )
        writes = [StreamWrite(stream, [created], expected_next=1)]
        writes += self._state_writes(user_id, session_id, None, scoped["user"], scoped["app"])
        try:
            created_at = await self.journal.append(self.app, writes)
        except ConflictError as exc:
            if exc.stream == stream:
                raise SessionExists(
                    f"user {user_id!r} already has a session {session_id!r} in app "
                    f"{self.app!r}; nothing was written"
                ) from None
            raise
        await self._snapshot_scopes(writes[1:], created_at)
        session = await self.get_session(user_id, session_id)
        if not scoped["temp"]:
            return session
        return _with(session, state={**session.state, **scoped["temp"]})

    async def get_session(self, user_id: str, session_id: str, *, history: bool = True) -> Session:
        """Read a session: a fold over its stream and its user's and app's state.

        The three streams are read so that an event's session, ``user:`` and ``app:``
        changes (committed in one batch) are seen all together or not at all: the
        ``user:`` and ``app:`` streams are read first, then the session, and the read
        is extended until their heads have not moved meanwhile.

        Args:
            user_id: The session's user.
            session_id: The session's id.
            history: ``True`` (the default) folds the whole session stream and gives the
                whole session. ``False`` reads the session from its latest
                ``session.snapshot`` (written when a summary commits) and the records
                after it, and gives a *partial* session (see
                [`Session`][steadyloop.sessions.Session]): what an agent continues from,
                at a cost that follows the session since its latest summary rather than
                its whole length. Resume reads it so. A session without a usable snapshot
                is folded whole (a warning says why when it has summaries, so should have
                one), and the result is the whole session.

        Raises:
            SessionNotFound: If the user has no session with this id.
            SessionError: If ``user:`` or ``app:`` state changed during every one of
                many consecutive attempts (an implausible write rate).
            CorruptionError: If stored records cannot be explained; names where.
        """
        journal, app = self.journal, self.app
        stream = session_stream(user_id, session_id)
        shared = (user_stream(user_id), app_stream())
        read: dict[str, list[StoredRecord]] = {name: [] for name in shared}
        own: list[StoredRecord] = []
        for _ in range(_CONSISTENT_READS):
            for name in shared:
                got = read[name]
                if got:
                    got.extend(await journal.read(app, name, start=got[-1].seq + 1))
                else:
                    got.extend(await self._read_tail(name, KIND_STATE_SNAPSHOT))
            if own:
                own.extend(await journal.read(app, stream, start=own[-1].seq + 1))
            elif history:
                own = await journal.read(app, stream)
            else:
                own = await self._read_tail(stream)
            if not own:
                raise SessionNotFound(
                    f"user {user_id!r} has no session {session_id!r} in app {app!r}"
                )
            heads = [await journal.head(app, name) for name in shared]
            seen = [read[n][-1].seq if read[n] else 0 for n in shared]
            if heads == seen:
                break
            for h, name, last in zip(heads, shared, seen, strict=True):
                if h < last:  # deleted and written again: start it over
                    read[name] = []
        else:
            raise SessionError(
                f"the user: and app: state of session {session_id!r} kept changing during "
                f"{_CONSISTENT_READS} reads; nothing consistent could be read"
            )
        scoped: dict[str, JSONValue] = {}
        scoped.update(await self._scope_state(shared[0], "user", read[shared[0]]))
        scoped.update(await self._scope_state(shared[1], "app", read[shared[1]]))
        if history:
            return fold_session(app, user_id, session_id, own, scoped=scoped)
        fold, why = fold_tail(app, user_id, session_id, own)
        if fold is not None:
            return fold.session(scoped=scoped)
        if own[0].seq > 1:  # the latest snapshot is damaged: read what comes before it
            own = [*await journal.read(app, stream, limit=own[0].seq - 1), *own]
        session = fold_session(app, user_id, session_id, own, scoped=scoped)
        if (session.summaries or why != "no snapshot") and first_report(
            journal.url, app, stream, why
        ):
            _log.warning(
                "session %r of user %r in app %r: %s; folding the whole session",
                session_id,
                user_id,
                app,
                why if why != "no snapshot" else "it has summaries but no snapshot",
            )
        return session

    async def _scope_state(
        self, stream: str, scope: Scope, tail: list[StoredRecord]
    ) -> dict[str, JSONValue]:
        """The ``user:`` or ``app:`` state of a stream whose end is ``tail``.

        ``tail`` runs from the latest snapshot (and the record before it) to the head:
        the state is folded from that snapshot, or from the whole stream if it fails.
        """
        if not tail or (tail[0].seq == 1 and not any(r.kind == KIND_STATE_SNAPSHOT for r in tail)):
            return fold_scope_state(self.app, tail, scope)
        state, why = fold_scope_tail(self.app, tail, scope)
        if state is not None:
            return state
        if first_report(self.journal.url, self.app, stream, why):
            _log.warning(
                "%s state stream %s in app %r: %s; folding the whole stream",
                scope,
                stream,
                self.app,
                why,
            )
        if tail[0].seq > 1:
            tail = [*await self.journal.read(self.app, stream, limit=tail[0].seq - 1), *tail]
        return fold_scope_state(self.app, tail, scope)

    async def _snapshot_scopes(self, writes: Sequence[StreamWrite], result: AppendResult) -> None:
        """Snapshot the user and app streams a batch took past a multiple of the interval.

        Each gets a ``state.snapshot`` when the batch takes it past a multiple of
        ``STATE_SNAPSHOT_EVERY``, in a batch of its own expecting its place. Best effort:
        if another writer got there first the snapshot is not written (a later multiple
        writes one), and a reader folds from the one before.
        """
        every = STATE_SNAPSHOT_EVERY
        for w in writes:
            scope = parse_scope_stream(w.stream)
            first, last = result.positions.get(w.stream, (0, 0))
            if scope is None or not last or last // every == (first - 1) // every:
                continue
            tail = await self._read_tail(w.stream, KIND_STATE_SNAPSHOT)
            if not tail or tail[-1].seq != last:
                continue  # another writer moved on meanwhile
            state = await self._scope_state(w.stream, scope, tail)
            at = tail[-1]
            payload = scope_snapshot_payload(last, scope, state, (at.kind, at.payload))
            snapshot = self.records(KIND_STATE_SNAPSHOT, payload)
            with contextlib.suppress(ConflictError):
                await self.journal.append(
                    self.app, [StreamWrite(w.stream, [snapshot], expected_next=last + 1)]
                )

    async def _read_tail(self, stream: str, kind: str = KIND_SNAPSHOT) -> list[StoredRecord]:
        """The end of a stream, back to its latest record of ``kind`` or to its start.

        Read backwards in growing chunks, so a session summarised recently costs a read
        of its last records, and one never summarised costs one read of it all. The
        record before that snapshot, which its seal names, is read too.
        """
        journal, app = self.journal, self.app
        hi = await journal.head(app, stream)
        size = _TAIL_CHUNK
        got: list[StoredRecord] = []
        while hi > 0:
            lo = max(1, hi - size + 1)
            chunk = await journal.read(app, stream, start=lo, limit=hi - lo + 1)
            got[:0] = chunk
            if any(r.kind == kind for r in chunk):
                break
            hi, size = lo - 1, size * 4
        if (
            got
            and got[0].kind == kind
            and got[0].seq > 1
            and not any(r.kind == kind for r in got[1:])
        ):  # the record the snapshot's seal covers
            got[:0] = await journal.read(app, stream, start=got[0].seq - 1, limit=1)
        return got

    async def list_sessions(self, user_id: str) -> list[str]:
        """Return the ids of a user's sessions, sorted by code point."""
        check_id(user_id, "user id")
        ids = []
        for name in await self.journal.streams(self.app):
            parsed = parse_session_stream(name)
            if parsed is not None and parsed[0] == user_id:
                ids.append(parsed[1])
        return sorted(ids)

    async def delete_session(
        self, user_id: str, session_id: str, *, missing_ok: bool = False
    ) -> None:
        """Delete a session's stream: its events and summaries.

        ``user:`` and ``app:`` state it wrote stay (they belong to the user and the
        app), and so does what it stored into memory.

        Raises:
            SessionNotFound: If there is no such session, unless ``missing_ok``.
        """
        stream = session_stream(user_id, session_id)
        if not missing_ok and await self.journal.head(self.app, stream) == 0:
            raise SessionNotFound(
                f"user {user_id!r} has no session {session_id!r} in app {self.app!r}"
            )
        await self.journal.delete_stream(self.app, stream)

    # -- events -------------------------------------------------------------------

    def _check_session(self, session: object) -> Session:
        if not isinstance(session, Session):
            raise SessionError(f"expected a Session, got {type(session).__name__}")
        if session.app != self.app:
            raise SessionError(
                f"session {session.id!r} belongs to app {session.app!r}, not {self.app!r}"
            )
        if session.version < 1:
            raise SessionError(
                f"session {session.id!r} has version {session.version}: it was not read "
                "from the journal (use create_session or get_session)"
            )
        return session

    def _state_writes(
        self,
        user_id: str,
        session_id: str,
        event_id: str | None,
        user_delta: Mapping[str, JSONValue],
        app_delta: Mapping[str, JSONValue],
    ) -> list[StreamWrite]:
        writes: list[StreamWrite] = []
        if not user_delta and not app_delta:
            return writes
        for stream, delta in ((user_stream(user_id), user_delta), (app_stream(), app_delta)):
            if delta:
                payload: dict[str, JSONValue] = {
                    "delta": dict(delta),
                    "user_id": user_id,
                    "session_id": session_id,
                    "event_id": event_id,
                }
                writes.append(StreamWrite(stream, [self.records(KIND_STATE_DELTA, payload)]))
        return writes

    def _events(self, session: Session, event: Event | Sequence[Event]) -> list[Event]:
        events = [event] if isinstance(event, Event) else list(event)
        if not events:
            raise SessionError("no events to append")
        seen: set[str] = set()
        for e in events:
            if not isinstance(e, Event):
                raise SessionError(f"expected an Event, got {type(e).__name__}")
            if session.has_event(e.id) or e.id in seen:
                raise SessionError(f"session {session.id!r} already has an event {e.id!r}")
            seen.add(e.id)
        return events

    def event_writes(self, session: Session, event: Event | Sequence[Event]) -> list[StreamWrite]:
        """Return the journal writes that append an event (or several) to ``session``.

        The first write goes to the session stream: one ``session.event`` record per
        event (without its ``temp:`` keys), expecting sequence ``session.version + 1``.
        Then, if any event sets ``user:`` keys, a write to the user stream with one
        ``state.delta`` per such event, and likewise for ``app:`` keys and the app
        stream. Written as one batch, they land together or not at all.

        Args:
            session: The session as last read or returned.
            event: One event, or several to append in order.

        Raises:
            SessionError: If the session is not one of this app's or was not read from
                the journal, there are no events, an item is not an
                [`Event`][steadyloop.sessions.Event], or an event id is already used.
        """
        session = self._check_session(session)
        events = self._events(session, event)
        unsure = _unsure(session, [e.id for e in events])
        if unsure:
            raise SessionError(
                f"event id {unsure[0]!r} may be one of partial session {session.id!r}'s "
                "historical events, which only a read of the whole session can tell: read it "
                "with get_session(..., history=True), or use append_event"
            )
        return self._event_writes(session, events, checked=False)[0]

    def _event_writes(
        self, session: Session, events: list[Event], *, checked: bool
    ) -> tuple[list[StreamWrite], list[Event]]:
        """`event_writes` for checked events, and the events as stored (no ``temp:``).

        With ``checked``, the event records are appended at once, by us: their payloads
        are marked as checked (``_Checked``), since an event checks its content when it
        is built. Records handed to a caller are not, the caller may change them.
        """
        wrap = _Checked if checked else dict
        make = self.records
        by_stream: dict[str, list[StreamWrite]] = {}
        for e in events:
            if not e.state_delta:
                continue  # the common case: nothing for the user or app streams
            for w in self._state_writes(
                session.user_id, session.id, e.id, e.delta_in("user"), e.delta_in("app")
            ):
                by_stream.setdefault(w.stream, []).append(w)
        stored = [e.without_temp() for e in events]
        # Events validated their content when they were built, and the journal checks
        # every record again as it encodes it, before writing anything: the event
        # records need no third check here.
        writes = [
            StreamWrite(
                _stream_of(session),
                [_make_unchecked(make, KIND_EVENT, wrap(event=e.to_dict())) for e in stored],
                expected_next=session.version + 1,
            )
        ]
        if by_stream:
            for stream in (user_stream(session.user_id), app_stream()):
                if stream in by_stream:
                    records = [r for w in by_stream[stream] for r in w.records]
                    writes.append(StreamWrite(stream, records))
        return writes, stored

    async def append_event(
        self,
        session: Session,
        event: Event | Sequence[Event],
        *,
        extra: Sequence[StreamWrite] = (),
        idempotency_key: str | None = None,
    ) -> Session:
        """Append an event, and the state it changes in every scope, in one batch.

        Takes time independent of the session's length: the returned session shares
        the given one's events instead of copying them.

        Args:
            session: The session as last read or returned; its ``version`` is the
                optimistic-concurrency check.
            event: The event, or several events to append in order in the same batch.
                Their ``temp:`` keys update the returned session's state and are never
                stored.
            extra: More writes (other streams of this app's namespace) to commit in the
                same atomic batch, for example an agent run's own records.
            idempotency_key: If this key was already used for the same batch, nothing is
                written and the session is read back from the journal.

        Returns:
            The session with the events appended: ``version`` is the new head, and
                ``state`` is the given session's state updated with each delta in turn
                (``temp:`` keys included). ``user:`` and ``app:`` keys written meanwhile by
                other sessions show only after
                [`get_session`][steadyloop.sessions.SessionService.get_session].

        Raises:
            ConflictError: Another writer appended to the session (or to a stream of
                ``extra`` with its own check) first; nothing was written.
            SessionError: If the session or an event is invalid, or ``extra`` names a
                stream the events write; nothing was written.
        """
        session = self._check_session(session)
        events = self._events(session, event)
        if session._history is not None:
            await self._check_history(session, [e.id for e in events])
        writes, stored = self._event_writes(session, events, checked=True)
        if extra:
            ours = {w.stream for w in writes}
            for w in extra:
                if not isinstance(w, StreamWrite):
                    raise SessionError(f"extra writes must be StreamWrite, got {type(w).__name__}")
                if w.stream in ours:
                    raise SessionError(
                        f"an extra write targets stream {w.stream!r}, which the event writes itself"
                    )
        result = await self.journal.append(
            self.app, [*writes, *extra], idempotency_key=idempotency_key
        )
        if len(writes) > 1 and not result.duplicate:
            await self._snapshot_scopes(writes[1:], result)
        state = dict(session.state)
        for e in events:
            if e.state_delta:
                state.update(e.state_delta)
        if result.duplicate:
            fresh = await self.get_session(session.user_id, session.id)
            temp = {k: v for k, v in state.items() if key_scope(k) == "temp"}
            return _with(fresh, state={**fresh.state, **temp})
        return session._appended(stored, state, result.positions[writes[0].stream][1])

    async def _check_history(
        self, session: Session, event_ids: Sequence[str] = (), summary_id: str | None = None
    ) -> None:
        """Refuse an id a partial session's history may hold, after reading it whole.

        A snapshot keeps the ids of the history in bounded space
        (`steadyloop.sessions._history`): an id it does not name but whose bit is set
        may be historical. Only then is the session read whole, and the id refused if it
        is there; nothing is read for a whole session or for ids the filter rules out.

        Raises:
            SessionError: If an event id or the summary id is already used.
        """
        history = session._history if isinstance(session, Session) else None
        if history is None:
            return  # a whole session checks every id itself; a wrong type is refused later
        unsure = _unsure(session, event_ids)
        latest = session.latest_summary
        summary_unsure = (
            summary_id is not None
            and isinstance(summary_id, str)
            and (latest is None or summary_id != latest.id)
            and summary_id not in history.summaries
            and history.summaries.may_hold(summary_id)
        )
        known = history.read.get("events")
        if known is not None:  # read whole before, for this history
            taken = [i for i in unsure if i in known]
            if taken:
                raise SessionError(f"session {session.id!r} already has an event {taken[0]!r}")
            unsure = []
        if not unsure and not summary_unsure:
            return
        whole = await self.get_session(session.user_id, session.id)
        if len(whole.all_events) >= history.count:
            history.read["events"] = frozenset(e.id for e in whole.all_events[: history.count])
        for event_id in unsure:
            if whole.has_event(event_id):
                raise SessionError(f"session {session.id!r} already has an event {event_id!r}")
        if summary_unsure and any(s.id == summary_id for s in whole.summaries):
            raise SessionError(
                f"summary {summary_id!r} reuses the id of an older summary of session "
                f"{session.id!r}"
            )

    # -- memory -------------------------------------------------------------------

    async def store_memory(self, session: Session) -> int:
        """Store the text of a session's events into its user's memory, in one batch.

        Events without text, and events of this session stored before, are skipped.

        Returns:
            How many entries were added.

        Raises:
            ConflictError: Another writer changed the memory stream meanwhile; nothing
                was written, and storing again is safe.
        """
        session = self._check_session(session)
        if session.partial:
            session = await self.get_session(session.user_id, session.id)
        stream = memory_stream(session.user_id)
        existing = await self.journal.read(self.app, stream)
        stored = read_entries(existing, f"{self.app}/{stream}")
        records = memory_records(self.records, session, stored)
        if not records:
            return 0
        head = existing[-1].seq if existing else 0
        await self.journal.append(self.app, [StreamWrite(stream, records, expected_next=head + 1)])
        return len(records)

    async def search_memory(self, user_id: str, query: str, limit: int = 10) -> list[MemoryHit]:
        """Search a user's memory (semantics in `steadyloop.sessions._memory`).

        Tokens are NFKC-case-folded letter/digit runs, with each Han or kana character
        a token of its own; score is the number of distinct query tokens an entry
        holds; ties come in (session id, event id) order, which is deterministic but
        not a promise callers should rely on.

        Raises:
            SessionError: If the query is not a string or the limit is negative.
        """
        stream = memory_stream(user_id)
        records = await self.journal.read(self.app, stream)
        return rank(read_entries(records, f"{self.app}/{stream}"), query, limit)

    # -- summaries ----------------------------------------------------------------

    def _summary(
        self,
        session: Session,
        text: str,
        *,
        summary_id: str,
        version: int,
        replaces: str | None,
        covers_through: str,
    ) -> tuple[Session, Summary, int]:
        session = self._check_session(session)
        summary = Summary(
            id=summary_id,
            version=version,
            replaces=replaces,
            session_id=session.id,
            covers_through=covers_through,
            text=text,
            time=self.records.clock.now_us(),
        )
        history = session._history
        base = 0 if history is None else history.count
        latest = session.latest_summary
        held = {e.id: base + i for i, e in enumerate(session.all_events)}
        held_ids = {s.id for s in session.summaries}
        used = held_ids if history is None else Known(history.summaries, held_ids)
        positions = Positions(held, history, None if latest is None else latest.covers_through)
        covered = check_next_summary(session.id, latest, used, positions, summary)
        return session, summary, covered - base

    async def summarize(
        self,
        session: Session,
        text: str,
        *,
        summary_id: str,
        version: int,
        replaces: str | None,
        covers_through: str,
    ) -> Session:
        """Add a summary: ``summary.begin`` in one batch, then ``summary.commit``.

        Args:
            session: The session as last read or returned.
            text: The summary.
            summary_id: Its id: new, or the latest summary's id to update it in place.
            version: The latest summary's version plus one (1 for the first).
            replaces: The latest summary's id (``None`` for the first).
            covers_through: The id of the last event it covers; that event and all
                before it become historical events.

        The second batch also holds a ``session.snapshot`` of the session as it then
        stands, so that a later partial read (resume) starts there.

        Returns:
            The session with the summary in force and the covered events historical
                (of a partial session: known by their ids).

        Raises:
            SessionError: If the summary breaks the version chain (wrong version or
                ``replaces``, an older summary's id, an unknown event, or covering less
                than the latest summary); nothing was written.
            ConflictError: Another writer appended to the session first. If this comes
                from the second batch, the attempt failed and stays invisible.
        """
        await self._check_history(session, summary_id=summary_id)
        session, summary, covered = self._summary(
            session,
            text,
            summary_id=summary_id,
            version=version,
            replaces=replaces,
            covers_through=covers_through,
        )
        stream = session_stream(session.user_id, session.id)
        begin = begin_record(self.records, summary)
        await self.journal.append(
            self.app, [StreamWrite(stream, [begin], expected_next=session.version + 1)]
        )
        every = session.all_events
        history = session._history
        if history is not None and history.legacy:
            # Its filters are not in event order: build them as a whole fold would.
            whole = await self.get_session(session.user_id, session.id)
            history = History(
                history.count,
                IdFilter().union(e.id for e in whole.all_events[: history.count]),
                IdFilter().union(s.id for s in whole.summaries[:-1]),
            )
        if history is None:
            successor = _with(
                session,
                events=every[covered:],
                historical_events=every[:covered],
                summaries=(*session.summaries, summary),
                version=session.version + 3,
            )
        else:
            successor = _with(
                session,
                events=every[covered:],
                summaries=(summary,),
                version=session.version + 3,
                history=History(
                    history.count + covered,
                    history.ids.union(e.id for e in every[:covered]),
                    history.summaries.union(s.id for s in session.summaries),
                ),
            )
        commit = commit_record(self.records, summary, begin)
        snapshot = self.records(
            KIND_SNAPSHOT,
            snapshot_of(successor, session.version + 2, (commit.kind, commit.payload)),
        )
        await self.journal.append(
            self.app,
            [StreamWrite(stream, [commit, snapshot], expected_next=session.version + 2)],
        )
        # A whole session keeps the order of its events, so its successor shares the
        # event index; a partial one drops the covered events, and builds its own.
        return successor if history is not None else session._share_index(successor)

    async def fail_summary(
        self,
        session: Session,
        text: str,
        *,
        summary_id: str,
        version: int,
        replaces: str | None,
        covers_through: str,
    ) -> Session:
        """Make a summary attempt that fails after its first part was written.

        Writes the ``summary.begin`` record exactly as
        [`summarize`][steadyloop.sessions.SessionService.summarize] would, then stops, as a
        crash or a lost connection between the two batches would leave it. The arguments are
        checked as in [`summarize`][steadyloop.sessions.SessionService.summarize]. The attempt
        stays invisible to every read; the version chain goes on from the last committed
        summary.

        Returns:
            The session unchanged but for ``version``, which counts the begin record.
        """
        await self._check_history(session, summary_id=summary_id)
        session, summary, _ = self._summary(
            session,
            text,
            summary_id=summary_id,
            version=version,
            replaces=replaces,
            covers_through=covers_through,
        )
        stream = session_stream(session.user_id, session.id)
        result = await self.journal.append(
            self.app,
            [
                StreamWrite(
                    stream, [begin_record(self.records, summary)], expected_next=session.version + 1
                )
            ],
        )
        return _with(session, version=result.positions[stream][1])


def _with(
    session: Session,
    *,
    events: tuple[Event, ...] | None = None,
    historical_events: tuple[Event, ...] | None = None,
    state: Mapping[str, JSONValue] | None = None,
    summaries: tuple[Summary, ...] | None = None,
    version: int | None = None,
    history: History | None = None,
) -> Session:
    return Session(
        app=session.app,
        user_id=session.user_id,
        id=session.id,
        events=session.events if events is None else events,
        historical_events=(
            session.historical_events if historical_events is None else historical_events
        ),
        state=session.state if state is None else state,
        summaries=session.summaries if summaries is None else summaries,
        version=session.version if version is None else version,
        _history=session._history if history is None else history,
    )


def _stream_of(session: Session) -> str:
    """The session's stream name, worked out once and kept by its successors."""
    known: str | None = session.__dict__.get("_stream")
    if known is None:
        known = session.__dict__["_stream"] = session_stream(session.user_id, session.id)
    return known


def _unsure(session: Session, event_ids: Sequence[str]) -> list[str]:
    """The ids a partial session neither holds nor rules out: its history may hold them."""
    history = session._history
    if history is None:
        return []
    return [
        i
        for i in event_ids
        if not session.has_event(i) and i not in history.ids and history.ids.may_hold(i)
    ]
