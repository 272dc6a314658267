"""Review rv1: depth limits counted from the record (journal, sessions), JSONL groups refuse alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from steadyloop import EncodingError
from steadyloop.journal import JSONLJournal, SQLiteJournal, StreamWrite
from steadyloop.records import (
    JSONValue,
    Record,
    RecordFactory,
    SequentialIds,
    StepClock,
    _Checked,
    _trusted_record,
)
from steadyloop.sessions import Event, SessionService, TextPart

NS = "app"


def nested(levels: int) -> JSONValue:
    """A list nested ``levels`` deep (``levels`` containers, one inside the other)."""
    value: JSONValue = []
    for _ in range(levels - 1):
        value = [value]
    return value


def rec(i: int, payload: dict[str, JSONValue] | None = None) -> Record:
    return Record(kind="test.item", payload=payload or {"i": i}, id=f"r-{i}", time=1)


async def test_jsonl_batch_refused_at_write_fails_alone_in_its_group(tmp_path: Path) -> None:
    """A JSONL batch whose line nests too deep is refused alone; the others of its group commit."""
    journal = await JSONLJournal.open(tmp_path / "j")
    await journal.append(NS, [StreamWrite("warm-up", [rec(0)])])
    bad = rec(2, {"v": nested(511)})  # the record's check passes; its line is one level deeper
    async with journal._mutex_for(NS):
        first = asyncio.ensure_future(journal.append(NS, [StreamWrite("s", [rec(1)], 1)]))
        refused = asyncio.ensure_future(journal.append(NS, [StreamWrite("s", [bad], 2)]))
        after = asyncio.ensure_future(journal.append(NS, [StreamWrite("s", [rec(3)], 2)]))
        await asyncio.sleep(0.05)
    outcomes = await asyncio.gather(first, refused, after, return_exceptions=True)
    assert isinstance(outcomes[1], EncodingError)
    assert "/record/payload/v/0" in str(outcomes[1])
    assert outcomes[0].positions == {"s": (1, 1)}  # type: ignore[union-attr]
    assert outcomes[2].positions == {"s": (2, 2)}  # type: ignore[union-attr]
    await journal.close()
    again = await JSONLJournal.open(tmp_path / "j")
    assert [r.record.id for r in await again.read(NS, "s")] == ["r-1", "r-3"]
    await again.append(NS, [StreamWrite("s", [rec(4)], 3)])  # the batch numbers still run on
    await again.close()


@pytest.mark.parametrize("checked", [False, True], ids=["plain", "checked"])
async def test_payload_too_deep_for_its_record_is_refused_on_sqlite(
    tmp_path: Path, checked: bool
) -> None:
    """A payload nested past the limit counted from its record is refused, so every read succeeds."""
    journal = await SQLiteJournal.open(tmp_path / "d.db")
    payload = {"v": nested(512)}
    # A plain Record accepts it: its own check counts from the payload.
    bad = _trusted_record("test.item", _Checked(payload), "r-1", 1) if checked else rec(1, payload)
    with pytest.raises(EncodingError, match=r"nested more than 512") as caught:
        await journal.append(NS, [StreamWrite("s", [bad])])
    assert "/payload/v/0" in str(caught.value)
    assert await journal.read(NS, "s") == []
    ok = _trusted_record("test.item", _Checked({"v": nested(510)}), "r-2", 1)
    await journal.append(NS, [StreamWrite("s", [ok])])
    assert [r.record.id for r in await journal.read(NS, "s")] == ["r-2"]
    await journal.close()


async def test_state_value_too_deep_for_its_record_is_refused_and_the_session_stays_readable(
    tmp_path: Path,
) -> None:
    """A state value its event accepts but its record nests too deep is refused; nothing stored."""
    journal = await SQLiteJournal.open(tmp_path / "s.db")
    make = RecordFactory(clock=StepClock(), ids=SequentialIds("r"))
    service = SessionService(journal, "app", records=make)
    session = await service.create_session("u", "s")
    event = Event("e1", "user", [TextPart("hi")], {"k": nested(512)})
    with pytest.raises(EncodingError, match=r"nested more than 512.*/payload/event/state_delta/k"):
        await service.append_event(session, event)
    fresh = await service.get_session("u", "s")
    assert fresh.version == session.version and fresh.events == ()
    await journal.close()
