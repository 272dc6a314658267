"""A session snapshot's size follows its state, not its history, and duplicates stay refused."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from session_helpers import APP

from steadyloop import Journal, StreamWrite
from steadyloop.journal import ForwardingJournal, MemoryJournal
from steadyloop.records import Record, StoredRecord, canonical_json
from steadyloop.sessions import SessionError, SessionService, TextPart, session_stream
from steadyloop.sessions._fold import SessionFold, snapshot_problems
from steadyloop.sessions._history import BITS, KEEP, History, IdFilter
from steadyloop.sessions._streams import KIND_SNAPSHOT


def _random_id(i: int) -> str:
    """An id like a random one (hex, digits anywhere), the same on every run."""
    return hashlib.sha256(f"event {i}".encode()).hexdigest()[:32]


async def _random_session(service: SessionService, sid: str, n: int) -> None:
    """A session of ``n`` events with random-looking ids, summarised once near its end."""
    s = await service.create_session("u1", sid)
    batch = 100
    for start in range(0, n, batch):
        events = [
            service.new_event("user", [TextPart(f"m{i}")], event_id=_random_id(i))
            for i in range(start, min(n, start + batch))
        ]
        s = await service.append_event(s, events)
    await service.summarize(
        s,
        f"the first {n - 1} events",
        summary_id="sum-1",
        version=1,
        replaces=None,
        covers_through=s.events[-2].id,
    )


async def _snapshot_bytes(journal: Journal, sid: str) -> int:
    records = await journal.read(APP, session_stream("u1", sid))
    snap = [r for r in records if r.kind == KIND_SNAPSHOT][-1]
    return len(canonical_json(dict(snap.payload)).encode("utf-8"))


async def test_snapshot_bytes_do_not_grow_with_history(service: SessionService) -> None:
    """The latest snapshot of 10,000 random-id events is at most 2x that of 1,000."""
    await _random_session(service, "small", 1_000)
    await _random_session(service, "large", 10_000)
    small = await _snapshot_bytes(service.journal, "small")
    large = await _snapshot_bytes(service.journal, "large")
    assert large <= 2 * small, (small, large)
    assert large < 20_000  # the old form listed every id: about 440 KB


async def test_a_partial_session_still_refuses_every_historical_id(
    service: SessionService,
) -> None:
    """Ids the snapshot keeps only as bits are refused too, and fresh ids are taken."""
    await _random_session(service, "s1", 600)
    part = await service.get_session("u1", "s1", history=False)
    whole = await service.get_session("u1", "s1")
    history = part._history
    assert history is not None and history.count == 599
    dropped = [e.id for e in whole.historical_events if e.id not in history.ids]
    assert len(dropped) >= 599 - KEEP  # most are known only by their bit
    for old in (whole.historical_events[0].id, dropped[0], dropped[-1]):
        with pytest.raises(SessionError, match="already has an event"):
            await service.append_event(part, service.new_event("user", event_id=old))
        with pytest.raises(SessionError, match=r"already has an event|may be one of"):
            service.event_writes(part, service.new_event("user", event_id=old))
    fresh = await service.append_event(part, service.new_event("user", event_id="fresh-id"))
    assert fresh.has_event("fresh-id")
    after = await service.get_session("u1", "s1")
    assert [e.id for e in after.all_events].count(dropped[0]) == 1


async def test_a_summary_id_the_history_may_hold_is_checked_whole(
    service: SessionService,
) -> None:
    """Reusing an older summary's id is refused from a partial session, bits or names."""
    s = await service.create_session("u1", "s1")
    for k in range(KEEP + 20):
        s = await service.append_event(s, service.new_event("user", [TextPart(f"m{k}")]))
        latest = s.latest_summary
        s = await service.summarize(
            s,
            f"through {k}",
            summary_id=_random_id(k),
            version=k + 1,
            replaces=None if latest is None else latest.id,
            covers_through=s.events[-1].id,
        )
    part = await service.get_session("u1", "s1", history=False)
    assert part._history is not None and part._history.summaries.bits  # some only as bits
    latest = part.latest_summary
    assert latest is not None
    s = await service.append_event(part, service.new_event("user", [TextPart("more")]))
    for old in (_random_id(0), _random_id(KEEP + 10)):
        with pytest.raises(SessionError, match="reuses the id"):
            await service.summarize(
                s,
                "again",
                summary_id=old,
                version=latest.version + 1,
                replaces=latest.id,
                covers_through=s.events[-1].id,
            )
    done = await service.summarize(
        s,
        "new",
        summary_id="a-new-summary",
        version=latest.version + 1,
        replaces=latest.id,
        covers_through=s.events[-1].id,
    )
    records = await service.journal.read(APP, session_stream("u1", "s1"))
    assert done.latest_summary is not None and snapshot_problems(APP, "u1", "s1", records) == []


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(
        st.one_of(
            st.text("ab0123456789/:", min_size=1, max_size=8),
            st.integers(0, 400).map(lambda n: f"run/{n}:reply"),
        ),
        unique=True,
        max_size=300,
    ),
    cut=st.integers(0, 300),
    probes=st.lists(st.text("ab0123456789/:", min_size=1, max_size=8), max_size=20),
)
def test_an_id_filter_never_rules_out_an_id_it_was_given(
    ids: list[str], cut: int, probes: list[str]
) -> None:
    """A filter may say 'perhaps' of any id, but never 'no' of one it holds, in any JSON round."""
    got = IdFilter().union(ids[:cut]).union(ids[cut:])
    assert got == IdFilter().union(ids)
    back = IdFilter.from_json(got.to_json())
    assert back == got and back.to_json() == got.to_json()
    for i in ids:
        assert back.may_hold(i)
    for p in probes:
        if p in back:  # named means held
            assert p in ids
    named = len(back.named.plain) + sum(len(r) for r in back.named.runs.values())
    assert named <= KEEP + len(back.named.runs)  # bounded whatever the history


def test_the_snapshot_history_form_is_pinned() -> None:
    """The history of a snapshot: count, named ids, base64 bits of CRC-32 mod BITS."""
    ids = [f"run/{n}:reply" for n in range(1, 200, 2)] + [f"a{k}b{k}" for k in range(KEEP + 10)]
    history = History(len(ids), IdFilter().union(ids), IdFilter().union(["s"]))
    text = canonical_json(history.to_json())
    assert BITS == 2048 and KEEP == 64
    assert text.startswith('{"count":174,"events":{"bits":"AAAAAQAAAAAAAAAA')
    assert '["a9b","",9,1,1],["run/",":reply",1,2,100]]}' in text
    assert text.endswith(',"summaries":{"bits":"","ids":["s"],"runs":[]}}')
    assert bin(history.ids.bits).count("1") == 11  # the 11 ids past KEEP
    assert hashlib.sha256(text.encode()).hexdigest() == (
        "1df02920a10963a76ec966796e426b64282af0db7fbbe54e61f75b2a6b1c4223"
    )


async def test_a_snapshot_written_before_id_filters_is_read_and_passes_doctor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An older snapshot that lists every id is used by resume reads and is clean in doctor."""
    journal = MemoryJournal()
    service = SessionService(journal, APP)
    await _random_session(service, "s1", 300)
    stream = session_stream("u1", "s1")
    records = await journal.read(APP, stream)
    fold = SessionFold(APP, "u1", "s1")
    old = MemoryJournal()
    for rec in records:
        payload = dict(rec.payload)
        if rec.kind == KIND_SNAPSHOT:
            payload = fold.snapshot(legacy=True)
            assert "ids" in payload["history"]  # type: ignore[operator]
        await old.append(
            APP, StreamWrite(stream, [Record(rec.kind, payload, rec.record.id, rec.record.time)])
        )
        fold.apply(rec)
    moved = await old.read(APP, stream)
    assert snapshot_problems(APP, "u1", "s1", moved) == []
    with caplog.at_level(logging.WARNING, logger="steadyloop"):
        part = await SessionService(old, APP).get_session("u1", "s1", history=False)
    assert part.partial and not caplog.records
    whole = await SessionService(old, APP).get_session("u1", "s1")
    assert (part.events, part.version, part.summaries) == (
        whole.events,
        whole.version,
        whole.summaries[-1:],
    )
    with pytest.raises(SessionError, match="already has an event"):
        await SessionService(old, APP).append_event(
            part, service.new_event("user", event_id=whole.historical_events[-5].id)
        )
    # The next summary from that partial session writes the new form, as doctor folds it.
    moving = SessionService(old, APP)
    s = await moving.append_event(part, moving.new_event("user", [TextPart("after")]))
    s = await moving.summarize(
        s,
        "on",
        summary_id="sum-2",
        version=2,
        replaces="sum-1",
        covers_through=s.events[-2].id,
    )
    after = await old.read(APP, stream)
    assert "events" in after[-1].payload["history"]  # type: ignore[operator]
    assert snapshot_problems(APP, "u1", "s1", after) == []
    again = await moving.get_session("u1", "s1", history=False)
    assert again.events == (await moving.get_session("u1", "s1")).events


class WholeReads(ForwardingJournal):
    """Counts reads of a session stream from its first record (whole reads)."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.whole = 0

    async def read(
        self, namespace: str, stream: str, start: int = 1, limit: int | None = None
    ) -> list[StoredRecord]:
        if stream.startswith('["session"') and start == 1 and limit is None:
            self.whole += 1
        return await super().read(namespace, stream, start=start, limit=limit)


async def test_a_partial_session_reads_its_history_once_for_all_its_successors(
    service: SessionService,
) -> None:
    """After one whole read for an unsure id, later appends need none, and still refuse."""
    await _random_session(service, "s1", 600)
    counting = WholeReads(service.journal)
    reader = SessionService(counting, APP, records=service.records)
    s = await reader.get_session("u1", "s1", history=False)
    history = s._history
    assert history is not None
    unsure = [f"new-{k}" for k in range(400) if history.ids.may_hold(f"new-{k}")][:3]
    assert len(unsure) == 3
    before = counting.whole
    s = await reader.append_event(s, reader.new_event("user", event_id=unsure[0]))
    assert counting.whole == before + 1
    s = await reader.append_event(s, reader.new_event("user", event_id=unsure[1]))
    whole = await service.get_session("u1", "s1")
    dropped = next(e.id for e in whole.historical_events if e.id not in history.ids)
    after = counting.whole
    with pytest.raises(SessionError, match="already has an event"):
        await reader.append_event(s, reader.new_event("user", event_id=dropped))
    s = await reader.append_event(s, reader.new_event("user", event_id=unsure[2]))
    assert counting.whole == after  # the successors share the first read
    assert [e.id for e in (await service.get_session("u1", "s1")).events][-3:] == unsure


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(["a", "b", "run/7:reply", "x"])),
        st.tuples(st.just("again"), st.integers(0, 40)),
        st.tuples(st.just("summarize"), st.integers(0, 5)),
        st.tuples(st.just("partial"), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(ops=_ops)
@example(ops=[("append", "a"), ("append", "a"), ("append", "b"), ("append", "a"), ("summarize", 3)])
@example(
    ops=[
        *[("append", "a")] * 6,
        *[("summarize", 4), ("partial", 0), ("again", 1), ("again", 4), ("append", "a")],
        *[("summarize", 1), ("partial", 0), ("again", 6), ("append", "a")],
    ]
)
async def test_with_a_tiny_filter_reads_agree_and_every_duplicate_is_refused(
    ops: list[tuple[str, Any]],
) -> None:
    """With 2 ids kept by name, partial and whole reads agree, doctor is clean, no id repeats."""
    from unittest import mock

    from steadyloop.sessions import _history

    journal = MemoryJournal()
    service = SessionService(journal, APP)
    with mock.patch.object(_history, "KEEP", 2):
        s = await service.create_session("u1", "p")
        used: list[str] = []
        for k, (op, arg) in enumerate(ops):
            if op == "append":
                letters = "".join(chr(97 + int(d)) for d in str(k))  # no digits: not a run
                event_id = f"{arg}-{letters}" if arg != "run/7:reply" else f"run/{k}:reply"
                s = await service.append_event(s, service.new_event("user", event_id=event_id))
                used.append(event_id)
            elif op == "again" and used:
                with pytest.raises(SessionError, match="already has an event"):
                    await service.append_event(
                        s, service.new_event("user", event_id=used[arg % len(used)])
                    )
            elif op == "partial":
                s = await service.get_session("u1", "p", history=False)
            elif op == "summarize" and s.events:
                latest = s.latest_summary
                s = await service.summarize(
                    s,
                    f"through {k}",
                    summary_id=f"sum{k}",
                    version=1 if latest is None else latest.version + 1,
                    replaces=None if latest is None else latest.id,
                    covers_through=s.events[min(arg, len(s.events) - 1)].id,
                )
        whole = await service.get_session("u1", "p")
        part = await service.get_session("u1", "p", history=False)
        records = await journal.read(APP, session_stream("u1", "p"))
        assert snapshot_problems(APP, "u1", "p", records) == []
    assert [e.id for e in whole.all_events] == used
    assert (part.events, part.version) == (whole.events, whole.version)
    assert part.summaries == whole.summaries[-1:]
