"""Summaries: version chains, historical events, and failed attempts never visible."""

from __future__ import annotations

import pytest
from session_helpers import APP, all_records

from steadyloop import ConflictError, CorruptionError, Journal, RecordFactory, StreamWrite
from steadyloop.journal import open_journal
from steadyloop.sessions import (
    KIND_SUMMARY_BEGIN,
    KIND_SUMMARY_COMMIT,
    Session,
    SessionError,
    SessionService,
    TextPart,
    session_stream,
)
from steadyloop.sessions._streams import KIND_SNAPSHOT


async def _session(service: SessionService, n: int = 5) -> Session:
    s = await service.create_session("u1", "s1")
    for i in range(1, n + 1):
        s = await service.append_event(s, service.new_event("user", [TextPart(f"m{i}")]))
    return s


def _ids(events: tuple[object, ...]) -> list[str]:
    return [e.id for e in events]  # type: ignore[attr-defined]


async def test_summary_moves_covered_events_to_history(service: SessionService) -> None:
    """A summary makes the events it covers historical and leads the model context."""
    s = await _session(service)
    third = s.events[2].id
    s = await service.summarize(
        s, "m1 to m3", summary_id="sum1", version=1, replaces=None, covers_through=third
    )
    assert [e.text for e in s.historical_events] == ["m1", "m2", "m3"]
    assert [e.text for e in s.events] == ["m4", "m5"]
    context = s.context()
    assert context.summary_text == "m1 to m3"
    assert [e.text for e in context.events] == ["m4", "m5"]
    assert s.latest_summary is not None
    assert s.latest_summary.session_id == "s1"
    assert await service.get_session("u1", "s1") == s


async def test_summary_version_chain(service: SessionService) -> None:
    """Versions rise by one, each replacing the one before, by new id or in place."""
    s = await _session(service)
    e = _ids(s.events)
    s = await service.summarize(
        s, "v1", summary_id="a", version=1, replaces=None, covers_through=e[0]
    )
    s = await service.summarize(
        s, "v2", summary_id="b", version=2, replaces="a", covers_through=e[2]
    )
    s = await service.summarize(
        s, "v3", summary_id="b", version=3, replaces="b", covers_through=e[2]
    )
    s = await service.append_event(s, service.new_event("user", [TextPart("m6")]))
    assert [(x.id, x.version, x.replaces) for x in s.summaries] == [
        ("a", 1, None),
        ("b", 2, "a"),
        ("b", 3, "b"),
    ]
    assert s.context().summary_text == "v3"
    assert [e.text for e in s.events] == ["m4", "m5", "m6"]
    assert await service.get_session("u1", "s1") == s


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"version": 1, "replaces": "a"}, r"has version 1; the next version .* is 2"),
        ({"version": 3, "replaces": "a"}, "has version 3"),
        ({"version": 2, "replaces": None}, "must replace 'a'"),
        ({"version": 2, "replaces": "zzz"}, "must replace 'a'"),
        ({"covers_through": "nope"}, "does not have"),
        ({"covers_through": "FIRST"}, "before event"),
    ],
)
async def test_broken_chain_is_refused(
    service: SessionService, journal: Journal, kwargs: dict[str, object], message: str
) -> None:
    """A wrong version, wrong replaces, unknown event or shrinking cover is refused."""
    s = await _session(service)
    e = _ids(s.events)
    s = await service.summarize(
        s, "v1", summary_id="a", version=1, replaces=None, covers_through=e[1]
    )
    args: dict[str, object] = {
        "summary_id": "b",
        "version": 2,
        "replaces": "a",
        "covers_through": e[3],
    }
    args.update(kwargs)
    if args["covers_through"] == "FIRST":
        args["covers_through"] = e[0]
    before = await all_records(journal)
    with pytest.raises(SessionError, match=message):
        await service.summarize(s, "v2", **args)  # type: ignore[arg-type]
    with pytest.raises(SessionError, match=message):
        await service.fail_summary(s, "v2", **args)  # type: ignore[arg-type]
    assert await all_records(journal) == before


async def test_first_summary_must_be_version_one(service: SessionService) -> None:
    """The first summary of a session has version 1 and replaces nothing."""
    s = await _session(service)
    e = s.events[0].id
    with pytest.raises(SessionError, match=r"next version .* is 1"):
        await service.summarize(s, "x", summary_id="a", version=2, replaces=None, covers_through=e)
    with pytest.raises(SessionError, match="must replace None"):
        await service.summarize(s, "x", summary_id="a", version=1, replaces="z", covers_through=e)


async def test_reusing_an_older_summary_id_is_refused(service: SessionService) -> None:
    """A summary may not take the id of a summary older than the latest."""
    s = await _session(service)
    e = _ids(s.events)
    s = await service.summarize(
        s, "1", summary_id="a", version=1, replaces=None, covers_through=e[0]
    )
    s = await service.summarize(
        s, "2", summary_id="b", version=2, replaces="a", covers_through=e[1]
    )
    with pytest.raises(SessionError, match="reuses the id"):
        await service.summarize(
            s, "3", summary_id="a", version=3, replaces="b", covers_through=e[1]
        )


async def test_historical_events_survive_reopen(journal_url: str, make: RecordFactory) -> None:
    """Covered events are still there, as historical events, after reopening the journal."""
    async with await open_journal(journal_url) as journal:
        service = SessionService(journal, APP, records=make)
        s = await _session(service, 4)
        s = await service.summarize(
            s, "old", summary_id="a", version=1, replaces=None, covers_through=s.events[2].id
        )
    async with await open_journal(journal_url) as journal:
        again = await SessionService(journal, APP).get_session("u1", "s1")
    assert again == s
    assert [e.text for e in again.historical_events] == ["m1", "m2", "m3"]
    assert [e.text for e in again.all_events] == ["m1", "m2", "m3", "m4"]


async def test_failed_summary_is_never_visible(service: SessionService, journal: Journal) -> None:
    """A summary attempt whose begin landed without its commit never shows, and the chain goes on."""
    s = await _session(service)
    e = _ids(s.events)
    s = await service.summarize(
        s, "v1", summary_id="a", version=1, replaces=None, covers_through=e[0]
    )
    visible = await service.get_session("u1", "s1")
    s = await service.fail_summary(
        s, "broken", summary_id="b", version=2, replaces="a", covers_through=e[4]
    )
    kinds = [r.kind for r in await journal.read(APP, session_stream("u1", "s1"))]
    assert kinds[-4:] == [
        KIND_SUMMARY_BEGIN,
        KIND_SUMMARY_COMMIT,
        KIND_SNAPSHOT,
        KIND_SUMMARY_BEGIN,
    ]
    reread = await service.get_session("u1", "s1")
    assert reread == s
    assert reread.summaries == visible.summaries
    assert reread.events == visible.events
    assert reread.version == visible.version + 1
    s = await service.append_event(s, service.new_event("user", [TextPart("m6")]))
    s = await service.summarize(
        s, "v2", summary_id="b", version=2, replaces="a", covers_through=e[3]
    )
    assert [x.text for x in s.summaries] == ["v1", "v2"]
    assert [ev.text for ev in s.events] == ["m5", "m6"]
    assert await service.get_session("u1", "s1") == s


async def test_failure_between_the_two_batches_is_never_visible(
    service: SessionService, journal: Journal
) -> None:
    """When the commit batch fails after the begin landed, reads show no summary."""
    s = await _session(service)
    real_append = journal.append
    calls = 0

    async def fail_second(namespace: str, writes: object, **kw: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ConnectionError("lost the connection")
        return await real_append(namespace, writes, **kw)  # type: ignore[arg-type]

    journal.append = fail_second  # type: ignore[assignment,method-assign]
    with pytest.raises(ConnectionError):
        await service.summarize(
            s, "x", summary_id="a", version=1, replaces=None, covers_through=s.events[1].id
        )
    journal.append = real_append  # type: ignore[method-assign]
    reread = await service.get_session("u1", "s1")
    assert reread.summaries == ()
    assert reread.events == s.events
    with pytest.raises(ConflictError):
        await service.summarize(
            s, "x", summary_id="a", version=1, replaces=None, covers_through=s.events[1].id
        )
    again = await service.summarize(
        reread, "x", summary_id="a", version=1, replaces=None, covers_through=s.events[1].id
    )
    assert [x.id for x in again.summaries] == ["a"]


async def test_tampered_chain_is_corruption(
    service: SessionService, journal: Journal, make: RecordFactory
) -> None:
    """A commit without its begin, or a stored chain that breaks the rule, is corruption."""
    s = await _session(service, 2)
    stream = session_stream("u1", "s1")
    bad = make(KIND_SUMMARY_COMMIT, {"summary_id": "a", "version": 1, "begin": "nope"})
    await journal.append(APP, [StreamWrite(stream, [bad])])
    with pytest.raises(CorruptionError, match=r"#4.*unknown begin"):
        await service.get_session("u1", "s1")
    await journal.delete_stream(APP, stream)
    s = await _session(service, 2)
    begin = make(
        KIND_SUMMARY_BEGIN,
        {
            "summary": {
                "id": "a",
                "version": 2,
                "replaces": None,
                "session_id": "s1",
                "covers_through": s.events[0].id,
                "text": "stale",
                "time": 0,
            }
        },
    )
    commit = make(KIND_SUMMARY_COMMIT, {"summary_id": "a", "version": 2, "begin": begin.id})
    await journal.append(APP, [StreamWrite(stream, [begin, commit])])
    with pytest.raises(CorruptionError, match="has version 2"):
        await service.get_session("u1", "s1")
