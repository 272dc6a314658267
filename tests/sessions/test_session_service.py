"""Sessions and scoped state on every backend: create, read, list, delete, append."""

from __future__ import annotations

import pytest
from session_helpers import APP, all_records

from steadyloop import ConflictError, CorruptionError, Journal, RecordFactory, StreamWrite
from steadyloop.journal import ForwardingJournal, open_journal
from steadyloop.records import StoredRecord, canonical_json
from steadyloop.sessions import (
    KIND_CREATED,
    KIND_EVENT,
    KIND_STATE_DELTA,
    Event,
    Session,
    SessionError,
    SessionExists,
    SessionNotFound,
    SessionService,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    app_stream,
    fold_session,
    session_stream,
    user_stream,
)


def _say(service: SessionService, text: str, **delta: object) -> Event:
    return service.new_event("user", [TextPart(text)], state_delta=delta)  # type: ignore[arg-type]


async def test_create_then_get_returns_the_same_session(service: SessionService) -> None:
    """A created session reads back equal, with its initial state in every scope."""
    created = await service.create_session("u1", "s1", state={"a": 1, "user:b": "x", "app:c": [1]})
    assert created.state == {"a": 1, "user:b": "x", "app:c": [1]}
    assert created.version == 1
    assert created.events == ()
    assert await service.get_session("u1", "s1") == created


async def test_create_generates_an_id(service: SessionService) -> None:
    """Without a session id, one comes from the service's id source."""
    session = await service.create_session("u1")
    assert session.id == "r-000001"
    assert await service.list_sessions("u1") == [session.id]


async def test_create_twice_is_refused(service: SessionService, journal: Journal) -> None:
    """Creating a session id that exists raises SessionExists and writes nothing."""
    await service.create_session("u1", "s1", state={"user:x": 1})
    before = await all_records(journal)
    with pytest.raises(SessionExists, match="already has a session 's1'"):
        await service.create_session("u1", "s1", state={"user:x": 2})
    assert await all_records(journal) == before


async def test_unknown_session_is_not_found(service: SessionService) -> None:
    """Reading or deleting a session that does not exist raises SessionNotFound."""
    with pytest.raises(SessionNotFound):
        await service.get_session("u1", "nope")
    with pytest.raises(SessionNotFound):
        await service.delete_session("u1", "nope")
    await service.delete_session("u1", "nope", missing_ok=True)


async def test_list_and_delete(service: SessionService) -> None:
    """A user's sessions list sorted by code point; deleting one removes only it."""
    for user, sid in [("u1", "b"), ("u1", "a"), ("u1", "B"), ("u2", "a")]:
        await service.create_session(user, sid)
    assert await service.list_sessions("u1") == ["B", "a", "b"]
    assert await service.list_sessions("u2") == ["a"]
    assert await service.list_sessions("u3") == []
    await service.delete_session("u1", "a")
    assert await service.list_sessions("u1") == ["B", "b"]
    assert await service.get_session("u2", "a")
    with pytest.raises(SessionNotFound):
        await service.get_session("u1", "a")


async def test_hostile_ids_map_to_distinct_sessions(service: SessionService) -> None:
    """Ids with quotes, colons, NUL, DEL, emoji or differing only by case never collide."""
    ids = ['a"b', "a:b", "a\x00b", "a\x7fb", "a\x85b", "A", "a", "😀", '["x"]', "a b", "a,b"]
    for sid in ids:
        await service.create_session("u\x00", sid, state={"who": sid})
    assert await service.list_sessions("u\x00") == sorted(ids)
    for sid in ids:
        assert (await service.get_session("u\x00", sid)).state == {"who": sid}


async def test_events_append_in_order(service: SessionService) -> None:
    """Appended events of every part type read back in order and equal."""
    session = await service.create_session("u1", "s1")
    events = [
        _say(service, "hi"),
        service.new_event(
            "agent",
            [TextPart("looking"), ToolCallPart("c1", "search", {"q": "weather"})],
            invocation_id="run-1",
        ),
        service.new_event("tool", [ToolResultPart("c1", "search", {"temp": 21.5}, error=None)]),
        service.new_event("tool", [ToolResultPart("c2", "fetch", None, error="timeout")]),
    ]
    for event in events:
        session = await service.append_event(session, event)
    assert session.events == tuple(events)
    assert session.version == 5
    assert await service.get_session("u1", "s1") == session


async def test_state_scopes(service: SessionService) -> None:
    """Plain keys stay in the session, user: keys in the user, app: keys in the app."""
    s1 = await service.create_session("u1", "s1")
    s1 = await service.append_event(
        s1, _say(service, "x", **{"n": 1, "user:name": "Ada", "app:mode": "beta"})
    )
    s2 = await service.create_session("u1", "s2")
    other = await service.create_session("u2", "s1")
    assert s2.state == {"user:name": "Ada", "app:mode": "beta"}
    assert other.state == {"app:mode": "beta"}
    assert s1.scope_state("session") == {"n": 1}
    assert s1.scope_state("user") == {"user:name": "Ada"}
    assert s1.scope_state("app") == {"app:mode": "beta"}


async def test_user_state_shared_by_one_users_sessions(service: SessionService) -> None:
    """A user: key set in one session shows in the user's other sessions, latest winning."""
    a = await service.create_session("u1", "a")
    b = await service.create_session("u1", "b")
    a = await service.append_event(a, _say(service, "1", **{"user:lang": "en"}))
    b = await service.append_event(b, _say(service, "2", **{"user:lang": "fr", "k": 1}))
    assert (await service.get_session("u1", "a")).state == {"user:lang": "fr"}
    assert (await service.get_session("u1", "b")).state == {"user:lang": "fr", "k": 1}
    assert (await service.create_session("u2", "a")).state == {}


async def test_app_state_shared_by_all(service: SessionService) -> None:
    """An app: key set by one user's session shows in every user's sessions."""
    a = await service.create_session("u1", "a")
    await service.create_session("u2", "b")
    await service.append_event(a, _say(service, "1", **{"app:flag": True}))
    assert (await service.get_session("u2", "b")).state == {"app:flag": True}


async def test_state_overwrite_and_null(service: SessionService) -> None:
    """A later value of a key replaces the earlier; null is stored as a value."""
    s = await service.create_session("u1", "s1", state={"k": 1})
    s = await service.append_event(s, _say(service, "1", k=2))
    s = await service.append_event(s, _say(service, "2", k=None))
    assert (await service.get_session("u1", "s1")).state == {"k": None}


async def test_temp_state_lives_in_memory_only(service: SessionService, journal: Journal) -> None:
    """Temp keys show in the returned session, never in storage or in a reload."""
    s = await service.create_session("u1", "s1", state={"temp:init": 0})
    assert s.state == {"temp:init": 0}
    s = await service.append_event(
        s, _say(service, "x", **{"temp:scratch": [1, 2], "k": 1, "user:u": 2, "app:a": 3})
    )
    assert s.state == {"temp:init": 0, "temp:scratch": [1, 2], "k": 1, "user:u": 2, "app:a": 3}
    assert s.events[-1].state_delta == {"k": 1, "user:u": 2, "app:a": 3}
    reloaded = await service.get_session("u1", "s1")
    assert reloaded.state == s.stored_state() == {"k": 1, "user:u": 2, "app:a": 3}
    assert reloaded.events == s.events
    for rec in await all_records(journal):
        assert "temp:" not in rec.record.to_json()


async def test_one_batch_carries_every_scope(service: SessionService, journal: Journal) -> None:
    """One append writes the session event and its user: and app: deltas as one batch."""
    s = await service.create_session("u1", "s1")
    event = _say(service, "x", **{"k": 1, "user:u": 2, "app:a": 3, "temp:t": 4})
    writes = service.event_writes(s, event)
    assert [w.stream for w in writes] == [
        session_stream("u1", "s1"),
        user_stream("u1"),
        app_stream(),
    ]
    assert writes[0].expected_next == 2
    assert [w.records[0].kind for w in writes] == [KIND_EVENT, KIND_STATE_DELTA, KIND_STATE_DELTA]
    assert writes[1].records[0].payload["delta"] == {"user:u": 2}
    assert writes[2].records[0].payload["delta"] == {"app:a": 3}
    assert (await journal.read(APP, session_stream("u1", "s1")))[0].kind == KIND_CREATED


async def test_conflict_writes_nothing_in_any_stream(
    service: SessionService, journal: Journal
) -> None:
    """A stale session's append raises ConflictError and no stream gets any record."""
    stale = await service.create_session("u1", "s1")
    await service.append_event(stale, _say(service, "first"))
    before = await all_records(journal)
    with pytest.raises(ConflictError):
        await service.append_event(
            stale, _say(service, "second", **{"k": 1, "user:u": 1, "app:a": 1})
        )
    assert await all_records(journal) == before
    session = await service.get_session("u1", "s1")
    assert [e.text for e in session.events] == ["first"]
    assert session.state == {}


async def test_extra_writes_share_the_batch(
    service: SessionService, journal: Journal, make: RecordFactory
) -> None:
    """Extra writes land with the event, and a conflict in them keeps the event out."""
    s = await service.create_session("u1", "s1")
    run = '["run","r1"]'
    s = await service.append_event(
        s, _say(service, "a", **{"user:u": 1}), extra=[StreamWrite(run, [make("loop.step")])]
    )
    assert [r.kind for r in await journal.read(APP, run)] == ["loop.step"]
    before = await all_records(journal)
    with pytest.raises(ConflictError):
        await service.append_event(
            s,
            _say(service, "b", **{"user:u": 2, "app:a": 2}),
            extra=[StreamWrite(run, [make("loop.step")], expected_next=7)],
        )
    assert await all_records(journal) == before
    assert (await service.get_session("u1", "s1")) == s


async def test_extra_write_to_an_event_stream_is_refused(
    service: SessionService, make: RecordFactory
) -> None:
    """An extra write aimed at a stream the event itself writes is refused."""
    s = await service.create_session("u1", "s1")
    with pytest.raises(SessionError, match="extra write targets"):
        await service.append_event(
            s,
            _say(service, "a", **{"user:u": 1}),
            extra=[StreamWrite(user_stream("u1"), [make("x")])],
        )


async def test_idempotent_append(service: SessionService, journal: Journal) -> None:
    """Resubmitting an append with its idempotency key writes nothing and reads back."""
    s = await service.create_session("u1", "s1")
    event = _say(service, "once", **{"user:n": 1, "temp:t": 1})
    first = await service.append_event(s, event, idempotency_key="k1")
    before = await all_records(journal)
    again = await service.append_event(s, event, idempotency_key="k1")
    assert await all_records(journal) == before
    assert again == first


async def test_duplicate_event_id_is_refused(service: SessionService) -> None:
    """An event whose id the session already has is refused before anything is written."""
    s = await service.create_session("u1", "s1")
    s = await service.append_event(s, Event("e1", "user", [TextPart("a")]))
    with pytest.raises(SessionError, match="already has an event 'e1'"):
        await service.append_event(s, Event("e1", "user", [TextPart("b")]))


@pytest.mark.parametrize(
    ("user_id", "session_id"), [("", "s"), ("u", ""), ("u", "x" * 400), ("\ud800", "s")]
)
async def test_bad_ids_are_refused(service: SessionService, user_id: str, session_id: str) -> None:
    """Empty, too long or invalid-Unicode ids are refused with a SessionError."""
    with pytest.raises(SessionError):
        await service.create_session(user_id, session_id)


async def test_bad_initial_state_is_refused(service: SessionService, journal: Journal) -> None:
    """Initial state with an unknown prefix or a non-JSON value writes nothing."""
    with pytest.raises(SessionError, match="'foo:bar'"):
        await service.create_session("u1", "s1", state={"ok": 1, "foo:bar": 1})
    with pytest.raises(SessionError, match="not a JSON value"):
        await service.create_session("u1", "s1", state={"x": float("inf")})
    assert await all_records(journal) == []


async def test_foreign_or_unread_session_is_refused(
    service: SessionService, journal: Journal
) -> None:
    """A session of another app, or one never read from the journal, cannot be appended to."""
    s = await service.create_session("u1", "s1")
    other = SessionService(journal, "other")
    with pytest.raises(SessionError, match="belongs to app 'app'"):
        await other.append_event(s, _say(service, "x"))
    with pytest.raises(SessionError, match="not read from the journal"):
        await service.append_event(Session(APP, "u1", "s9"), _say(service, "x"))
    with pytest.raises(SessionError, match="expected an Event"):
        await service.append_event(s, "hello")  # type: ignore[arg-type]


async def test_reopen_gives_an_identical_session(journal_url: str, make: RecordFactory) -> None:
    """After closing and reopening the journal, every session reads back identical."""
    async with await open_journal(journal_url) as journal:
        service = SessionService(journal, APP, records=make)
        s = await service.create_session("ü", "s1", state={"user:big": 2**63 + 1})
        for i in range(5):
            s = await service.append_event(
                s,
                service.new_event(
                    "agent",
                    [TextPart(f"line {i} \x00 😀"), ToolCallPart(f"c{i}", "f", {"i": i})],
                    state_delta={"i": i, "f": 0.1 * i, "app:n": i, "temp:x": i},
                ),
            )
        expected = canonical_json(s.to_dict())
    async with await open_journal(journal_url) as journal:
        service = SessionService(journal, APP, records=make)
        again = await service.get_session("ü", "s1")
    assert again == Session.from_dict({**s.to_dict(), "state": s.stored_state()})
    assert canonical_json(again.to_dict()) == expected.replace(',"temp:x":4', "")


async def test_recreate_after_delete_starts_fresh(service: SessionService) -> None:
    """A session created again after deletion has none of the old events or state."""
    s = await service.create_session("u1", "s1", state={"k": 1})
    await service.append_event(s, _say(service, "old", k=2))
    await service.delete_session("u1", "s1")
    fresh = await service.create_session("u1", "s1")
    assert fresh.events == ()
    assert fresh.state == {}
    assert fresh.version == 1


@pytest.mark.parametrize(
    ("kind", "payload", "message"),
    [
        ("loop.step", {}, "unexpected record kind 'loop.step'"),
        (
            KIND_EVENT,
            {"event": {"id": "e9", "author": "x", "state_delta": {"temp:t": 1}}},
            "stored a temp: key",
        ),
        (KIND_EVENT, {"event": {"id": "e9", "author": ""}}, "author"),
    ],
)
async def test_unexplained_records_are_corruption(
    service: SessionService,
    journal: Journal,
    make: RecordFactory,
    *,
    kind: str,
    payload: dict[str, object],
    message: str,
) -> None:
    """A record the fold cannot explain raises CorruptionError naming stream and sequence."""
    await service.create_session("u1", "s1")
    stream = session_stream("u1", "s1")
    await journal.append(APP, [StreamWrite(stream, [make(kind, payload)])])  # type: ignore[arg-type]
    with pytest.raises(CorruptionError, match=message) as info:
        await service.get_session("u1", "s1")
    assert info.value.location == f"{APP}/{stream}#2"


async def test_duplicated_event_record_is_corruption(
    service: SessionService, journal: Journal, make: RecordFactory
) -> None:
    """An event stored twice in one session is reported as corruption, not shown twice."""
    s = await service.create_session("u1", "s1")
    event = Event("e1", "user", [TextPart("once")])
    await service.append_event(s, event)
    stream = session_stream("u1", "s1")
    await journal.append(APP, [StreamWrite(stream, [make(KIND_EVENT, {"event": event.to_dict()})])])
    with pytest.raises(CorruptionError, match="appears twice"):
        await service.get_session("u1", "s1")


async def test_fold_session_is_a_pure_function(service: SessionService, journal: Journal) -> None:
    """Folding the raw stream records gives the same session get_session returns."""
    s = await service.create_session("u1", "s1", state={"user:a": 1, "app:b": 2})
    s = await service.append_event(s, _say(service, "x", k=3))
    folded = fold_session(
        APP,
        "u1",
        "s1",
        await journal.read(APP, session_stream("u1", "s1")),
        user_records=await journal.read(APP, user_stream("u1")),
        app_records=await journal.read(APP, app_stream()),
    )
    assert folded == s
    with pytest.raises(SessionNotFound):
        fold_session(APP, "u1", "s2", [])


async def test_several_events_in_one_batch(service: SessionService, journal: Journal) -> None:
    """Several events append in order in one batch, each state delta applied in turn."""
    s = await service.create_session("u1", "s1")
    events = [
        _say(service, "a", **{"k": 1, "user:u": 1, "temp:t": 1}),
        _say(service, "b", **{"k": 2, "app:a": 1}),
        _say(service, "c", **{"user:u": 2}),
    ]
    s = await service.append_event(s, events)
    assert [e.text for e in s.events] == ["a", "b", "c"]
    assert s.version == 4
    assert s.state == {"k": 2, "user:u": 2, "app:a": 1, "temp:t": 1}
    assert await service.get_session("u1", "s1") == _with_state(s, s.stored_state())
    user_records = await journal.read(APP, user_stream("u1"))
    assert [(r.payload["event_id"], r.payload["delta"]) for r in user_records] == [
        (events[0].id, {"user:u": 1}),
        (events[2].id, {"user:u": 2}),
    ]


async def test_several_events_refused_whole(service: SessionService, journal: Journal) -> None:
    """A batch with a repeated event id, or no events at all, is refused and writes nothing."""
    s = await service.create_session("u1", "s1")
    before = await all_records(journal)
    with pytest.raises(SessionError, match="already has an event 'e1'"):
        await service.append_event(s, [Event("e1", "u"), Event("e2", "u"), Event("e1", "u")])
    with pytest.raises(SessionError, match="no events"):
        await service.append_event(s, [])
    assert await all_records(journal) == before


def _with_state(session: Session, state: dict[str, object]) -> Session:
    return Session.from_dict({**session.to_dict(), "state": state})


async def test_get_session_never_shows_half_of_a_concurrent_event(
    journal: Journal, make: RecordFactory
) -> None:
    """An event committed while get_session reads is seen whole or not at all: events and user:/app: state agree."""
    writer = SessionService(journal, APP, records=make)
    session = await writer.create_session("ada", "s1")
    pending = [_say(writer, "later", **{"user:tier": "gold", "app:mode": "busy"})]

    class CommitsMidRead(ForwardingJournal):
        async def _read(
            self, namespace: str, stream: str, start: int, limit: int | None
        ) -> list[StoredRecord]:
            records = await super()._read(namespace, stream, start, limit)
            if stream == session_stream("ada", "s1") and pending:
                # Between this read and the next, another writer commits an event
                # that changes the session, user: and app: streams in one batch.
                await writer.append_event(session, pending.pop())
            return records

    reader = SessionService(CommitsMidRead(journal), APP, records=make)
    seen = await reader.get_session("ada", "s1")
    has_event = [e.text for e in seen.events] == ["later"]
    assert has_event == (seen.state.get("user:tier") == "gold")
    assert has_event == (seen.state.get("app:mode") == "busy")
    assert not pending, "the concurrent event was never committed"
    again = await reader.get_session("ada", "s1")
    assert [e.text for e in again.events] == ["later"] and again.state["user:tier"] == "gold"
