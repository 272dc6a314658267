"""Session snapshots: written with each summary commit, read by partial reads, checked."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from session_helpers import APP

from steadyloop import Journal, StreamWrite
from steadyloop.cli._journal import diagnose
from steadyloop.journal import AppendResult, ForwardingJournal, MemoryJournal
from steadyloop.journal._protocol import PreparedBatch
from steadyloop.records import RecordFactory, SequentialIds, StepClock, StoredRecord
from steadyloop.sessions import (
    KIND_SUMMARY_COMMIT,
    Session,
    SessionError,
    SessionService,
    Summary,
    TextPart,
    session_stream,
)
from steadyloop.sessions._fold import snapshot_problems
from steadyloop.sessions._history import IdSet
from steadyloop.sessions._streams import KIND_SNAPSHOT
from steadyloop.sessions._summaries import begin_record, commit_record

STREAM = session_stream("u1", "s1")


class ReadLog(ForwardingJournal):
    """Remembers where each read of the session stream started."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.starts: list[int] = []

    async def read(
        self, namespace: str, stream: str, start: int = 1, limit: int | None = None
    ) -> list[StoredRecord]:
        if stream == STREAM:
            self.starts.append(start)
        return await super().read(namespace, stream, start=start, limit=limit)


class Appends(ForwardingJournal):
    """Counts appends (batches) on the way through."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.appends = 0

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        self.appends += 1
        return await super()._append(batch)


async def _summarised(service: SessionService, n: int = 40, every: int = 10) -> Session:
    """A session of ``n`` events with a summary every ``every`` events."""
    s = await service.create_session("u1", "s1", state={"count": 0})
    for i in range(1, n + 1):
        event = service.new_event("user", [TextPart(f"m{i}")], state_delta={"count": i})
        s = await service.append_event(s, event)
        if i % every == 0:
            latest = s.latest_summary
            s = await service.summarize(
                s,
                f"up to m{i}",
                summary_id=f"sum{i}",
                version=1 if latest is None else latest.version + 1,
                replaces=None if latest is None else latest.id,
                covers_through=s.events[-2].id,
            )
    return s


async def test_summary_commit_batch_carries_the_snapshot(
    service: SessionService, journal: Journal
) -> None:
    """A summary commit and its snapshot share one batch, right after the commit."""
    counting = Appends(journal)
    service = SessionService(counting, APP, records=service.records)
    s = await _summarised(service, n=10)
    assert counting.appends == 1 + 10 + 2  # create, events, the summary's two batches
    records = await journal.read(APP, STREAM)
    assert [r.kind for r in records[-2:]] == [KIND_SUMMARY_COMMIT, KIND_SNAPSHOT]
    assert records[-1].payload["head"] == records[-2].seq
    assert s.version == records[-1].seq
    assert snapshot_problems(APP, "u1", "s1", records) == []


async def test_partial_read_matches_the_whole_session(service: SessionService) -> None:
    """A partial read gives the same events, state, version and latest summary."""
    s = await _summarised(service)
    s = await service.append_event(s, service.new_event("user", [TextPart("tail")]))
    whole = await service.get_session("u1", "s1")
    part = await service.get_session("u1", "s1", history=False)
    assert part.partial and not whole.partial
    assert part.events == whole.events == s.events
    assert part.state == whole.state
    assert part.version == whole.version
    assert part.summaries == whole.summaries[-1:]
    assert part.context() == whole.context()
    assert part.historical_events == ()
    assert part.event_ids == whole.event_ids
    assert all(part.has_event(e.id) for e in whole.historical_events)


async def test_partial_read_reads_only_the_tail(service: SessionService, journal: Journal) -> None:
    """A partial read of a summarised session starts after the latest snapshot's region."""
    await _summarised(service, n=200, every=10)
    head = await journal.head(APP, STREAM)
    log = ReadLog(journal)
    part = await SessionService(log, APP).get_session("u1", "s1", history=False)
    assert part.partial
    assert min(log.starts) > head - 64
    assert head > 200


async def test_partial_session_refuses_a_historical_event_id(service: SessionService) -> None:
    """An event id used by a historical event is refused when appended to a partial session."""
    await _summarised(service)
    part = await service.get_session("u1", "s1", history=False)
    whole = await service.get_session("u1", "s1")
    old = whole.historical_events[3].id
    with pytest.raises(SessionError, match="already has an event"):
        await service.append_event(part, service.new_event("user", event_id=old))


async def test_summaries_from_a_partial_session_keep_the_chain(service: SessionService) -> None:
    """Summarising a partial session checks the whole chain and writes a true snapshot."""
    s = await _summarised(service)
    await service.append_event(s, service.new_event("user", [TextPart("tail")]))
    part = await service.get_session("u1", "s1", history=False)
    whole = await service.get_session("u1", "s1")
    latest = part.latest_summary
    assert latest is not None
    covered = whole.historical_events[0].id
    with pytest.raises(SessionError, match="before event"):
        await service.summarize(
            part, "x", summary_id="new", version=5, replaces=latest.id, covers_through=covered
        )
    with pytest.raises(SessionError, match="reuses the id of an older summary"):
        await service.summarize(
            part, "x", summary_id="sum10", version=5, replaces=latest.id,
            covers_through=part.events[0].id,
        )  # fmt: skip
    after = await service.summarize(
        part, "v5", summary_id="sum-p", version=5, replaces=latest.id,
        covers_through=part.events[0].id,
    )  # fmt: skip
    fresh = await service.get_session("u1", "s1")
    for taken in (part.events[0].id, part.events[-1].id):  # now historical, and still current
        assert after.has_event(taken)
        with pytest.raises(SessionError, match="already has an event"):
            await service.append_event(after, service.new_event("user", event_id=taken))
    assert after.events == fresh.events
    assert after.version == fresh.version
    assert [x.id for x in fresh.summaries][-2:] == [latest.id, "sum-p"]
    again = await service.get_session("u1", "s1", history=False)
    assert again.events == fresh.events and again.summaries == fresh.summaries[-1:]
    records = await service.journal.read(APP, STREAM)
    assert snapshot_problems(APP, "u1", "s1", records) == []


async def test_damaged_snapshot_falls_back_and_says_so(
    service: SessionService, journal: Journal, caplog: pytest.LogCaptureFixture
) -> None:
    """A damaged latest snapshot is not used: the whole session is folded, with a warning."""
    s = await _summarised(service)
    bad = service.records(KIND_SNAPSHOT, {"head": 1, "nonsense": True})
    await journal.append(APP, [StreamWrite(STREAM, [bad], expected_next=s.version + 1)])
    with caplog.at_level(logging.WARNING, logger="steadyloop.sessions"):
        got = await service.get_session("u1", "s1", history=False)
    assert not got.partial
    assert got == await service.get_session("u1", "s1")
    assert "is damaged" in caplog.text and "folding the whole session" in caplog.text
    problems = snapshot_problems(APP, "u1", "s1", await journal.read(APP, STREAM))
    assert len(problems) == 1 and f"#{s.version + 1}" in problems[0]


async def test_summarised_session_without_snapshot_says_so(
    service: SessionService, journal: Journal, caplog: pytest.LogCaptureFixture
) -> None:
    """A summarised session written before snapshots is folded whole, with a warning."""
    s = await service.create_session("u1", "old")
    for i in range(3):
        s = await service.append_event(s, service.new_event("user", [TextPart(f"m{i}")]))
    summary = Summary(
        id="a", version=1, replaces=None, session_id="old", covers_through=s.events[0].id, text="t"
    )
    stream = session_stream("u1", "old")
    begin = begin_record(service.records, summary)
    commit = commit_record(service.records, summary, begin)
    for n, rec in enumerate((begin, commit)):
        await journal.append(APP, [StreamWrite(stream, [rec], expected_next=s.version + 1 + n)])
    with caplog.at_level(logging.WARNING, logger="steadyloop.sessions"):
        got = await service.get_session("u1", "old", history=False)
    assert not got.partial
    assert got == await service.get_session("u1", "old")
    assert "it has summaries but no snapshot; folding the whole session" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="steadyloop.sessions"):
        await service.create_session("u1", "plain")
        plain = await service.get_session("u1", "plain", history=False)
    assert not plain.partial
    assert caplog.text == ""


async def test_snapshot_that_does_not_match_its_fold_is_reported(
    service: SessionService, journal: Journal
) -> None:
    """A well-formed snapshot holding another state than its fold is named by the check."""
    s = await _summarised(service, n=10)
    records = await journal.read(APP, STREAM)
    snap = dict(records[-1].payload)
    snap["head"] = s.version
    snap["state"] = {"count": 999}
    rec = service.records(KIND_SNAPSHOT, snap)
    await journal.append(APP, [StreamWrite(STREAM, [rec], expected_next=s.version + 1)])
    problems = snapshot_problems(APP, "u1", "s1", await journal.read(APP, STREAM))
    assert problems == [
        f"{APP}/{STREAM}#{s.version + 1}: the session snapshot does not match the fold "
        "of the records before it"
    ]
    findings = [f for f in await diagnose(journal) if f.severity == "error"]
    assert [(f.what, f.location) for f in findings] == [
        ("snapshot-mismatch", f"{APP}/{STREAM}#{s.version + 1}")
    ]


@pytest.mark.parametrize(
    "ids",
    [
        [f"run/{i}:reply" for i in range(1, 200, 2)],
        ["a", "b", "x7", "x07", "x8", "9", "10", "007", "run/1:reply", "run/3:reply"],
        [f"run-5/{i}:{t}" for i in range(1, 60) for t in ("reply", "result")],
    ],
)
def test_id_set_holds_exactly_its_ids(ids: list[str]) -> None:
    """An id set holds exactly the ids put in, survives its JSON form, and stays compact."""
    got = IdSet().union(ids[:5]).union(ids[5:])
    assert sorted(got) == sorted(ids) and len(got) == len(ids)
    back = IdSet.from_json(got.to_json())
    assert back == got and back.to_json() == IdSet().union(ids).to_json()
    for i in ids:
        assert i in back
    for other in ("run/2:reply", "x6", "run/201:reply", "08", "", "run-5/60:reply"):
        assert (other in back) == (other in ids)
    if ids[0] == "run/1:reply":
        assert len(got.to_json()["runs"]) == 1  # type: ignore[arg-type]


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(["a", "b", "run/7:reply", "x"])),
        st.tuples(st.just("summarize"), st.integers(0, 5)),
        st.tuples(st.just("fail"), st.integers(0, 5)),
        st.tuples(st.just("partial"), st.just(0)),
    ),
    max_size=25,
)
_prop_sessions = itertools.count()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=_ops)
async def test_partial_reads_equal_whole_reads_after_any_history(ops: list[Any]) -> None:
    """After any appends and summaries (some through partial sessions), both reads agree."""
    journal = MemoryJournal()
    service = SessionService(journal, APP, records=RecordFactory(StepClock(), SequentialIds("r")))
    sid = f"p{next(_prop_sessions)}"
    s = await service.create_session("u1", sid)
    n = 0
    for k, (op, arg) in enumerate(ops):
        if op == "append":
            n += 1
            event_id = f"{arg}{n}" if arg != "run/7:reply" else f"run/{n}:reply"
            s = await service.append_event(
                s, service.new_event("user", [TextPart(f"m{n}")], event_id=event_id)
            )
        elif op == "partial":
            s = await service.get_session("u1", sid, history=False)
        elif s.events:
            latest = s.latest_summary
            through = s.events[min(arg, len(s.events) - 1)].id
            args: dict[str, Any] = {
                "summary_id": f"sum{k}",
                "version": 1 if latest is None else latest.version + 1,
                "replaces": None if latest is None else latest.id,
                "covers_through": through,
            }
            if op == "summarize":
                s = await service.summarize(s, f"through {through}", **args)
            else:
                s = await service.fail_summary(s, "failed", **args)
    whole = await service.get_session("u1", sid)
    part = await service.get_session("u1", sid, history=False)
    assert (part.events, part.state, part.version) == (whole.events, whole.state, whole.version)
    assert part.summaries == whole.summaries[-1:]
    assert part.event_ids == whole.event_ids
    assert s.events == whole.events and s.version == whole.version
    for e in whole.all_events:
        assert part.has_event(e.id) and s.has_event(e.id)
    records = await journal.read(APP, session_stream("u1", sid))
    assert snapshot_problems(APP, "u1", sid, records) == []
