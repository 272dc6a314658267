"""Appending to a session shares its events with the successor instead of copying them."""

from __future__ import annotations

import pickle

import pytest

from steadyloop import ConflictError, RecordFactory, SequentialIds, StepClock
from steadyloop.journal import MemoryJournal
from steadyloop.sessions import Event, Session, SessionService, TextPart


def _service() -> SessionService:
    return SessionService(
        MemoryJournal(), "app", records=RecordFactory(StepClock(), SequentialIds("r"))
    )


async def test_successors_share_one_chain_and_copy_no_events() -> None:
    """A long run of appends extends one shared chain; no successor copies the events before."""
    service = _service()
    session = await service.create_session("u", "s")
    first = session
    for i in range(200):
        session = await service.append_event(session, service.new_event("user", [TextPart(f"{i}")]))
        assert "events" not in vars(session)  # built only when read
    assert session._view[0] is first._view[0]
    assert [e.text for e in session.events] == [f"{i}" for i in range(200)]
    assert session == await service.get_session("u", "s")
    assert session.version == 201


async def test_each_successor_sees_exactly_its_own_events() -> None:
    """Successors of one session (a retry after a conflict, say) never see each other's events."""
    service = _service()
    base = await service.create_session("u", "s")
    one = await service.append_event(base, service.new_event("user", [TextPart("1")], event_id="a"))
    two = await service.append_event(one, service.new_event("user", [TextPart("2")], event_id="b"))
    with pytest.raises(ConflictError):  # base is stale: nothing is written
        await service.append_event(base, service.new_event("user", [TextPart("x")], event_id="x"))
    fork = base._appended([Event("y", "user")], {}, base.version + 1)
    assert [e.id for e in one.events] == ["a"]
    assert [e.id for e in two.events] == ["a", "b"]
    assert [e.id for e in fork.events] == ["y"]
    assert base.events == ()
    assert two.has_event("a") and two.has_event("b") and not two.has_event("y")
    assert fork.has_event("y") and not fork.has_event("a")
    assert not one.has_event("b") and not base.has_event("a")
    again = await service.append_event(two, service.new_event("user", [TextPart("3")]))
    assert [e.text for e in again.events] == ["1", "2", "3"]
    assert [e.text for e in two.events] == ["1", "2"]


async def test_a_session_made_by_append_behaves_as_a_built_one() -> None:
    """A successor compares, prints, pickles and summarises as the equal session built whole."""
    service = _service()
    session = await service.create_session("u", "s", state={"k": 1})
    for i in range(3):
        event = service.new_event("user", [TextPart(f"t{i}")], state_delta={"k": i})
        session = await service.append_event(session, event)
    built = Session("app", "u", "s", events=session.events, state={"k": 2}, version=session.version)
    fresh = await service.append_event(session, service.new_event("user", [TextPart("t3")]))
    assert session == built and repr(session) == repr(built)
    assert pickle.loads(pickle.dumps(fresh)) == fresh
    summarised = await service.summarize(
        fresh,
        "so far",
        summary_id="sum",
        version=1,
        replaces=None,
        covers_through=fresh.events[1].id,
    )
    assert [e.text for e in summarised.historical_events] == ["t0", "t1"]
    assert [e.text for e in summarised.events] == ["t2", "t3"]
    assert summarised == await service.get_session("u", "s")
    later = await service.append_event(summarised, service.new_event("user", [TextPart("t4")]))
    assert [e.text for e in later.events] == ["t2", "t3", "t4"]
    assert [e.text for e in later.historical_events] == ["t0", "t1"]
    assert later.has_event(fresh.events[0].id)
    assert later == await service.get_session("u", "s")
