"""The shortcuts on the append path keep every guarantee they stand in for."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from steadyloop import EncodingError, InvalidBatch, JournalClosed
from steadyloop.journal import MemoryJournal, SQLiteJournal, StreamWrite, check_name
from steadyloop.records import RecordFactory, SequentialIds, StepClock


def _make() -> RecordFactory:
    return RecordFactory(StepClock(start=1), SequentialIds("r"))


async def test_memory_journal_keeps_what_was_appended_not_what_the_caller_changed() -> None:
    """Mutating a payload after append changes nothing stored, nor does a later read."""
    journal = MemoryJournal()
    rec = _make()("k", {"v": [1, 2]})
    text = rec.to_json()
    await journal.append("ns", StreamWrite("s", [rec]))
    rec.payload["v"].append(3)  # type: ignore[union-attr]
    first = await journal.read("ns", "s")
    assert [r.record.to_json() for r in first] == [text]
    assert await journal.read("ns", "s", start=2) == []
    assert await journal.read("ns", "s", limit=5) == first


async def test_a_payload_made_unencodable_after_construction_is_refused() -> None:
    """The journal checks every record as it encodes it, whoever built the record."""
    journal = MemoryJournal()
    rec = _make()("k", {"v": 1})
    rec.payload["v"] = float("nan")  # type: ignore[index]
    with pytest.raises(EncodingError, match="/payload/v"):
        await journal.append("ns", StreamWrite("s", [rec]))
    assert await journal.head("ns", "s") == 0


def test_a_valid_name_seen_before_does_not_let_a_bad_one_through() -> None:
    """The cache of checked names only ever answers for names that passed the check."""
    assert check_name("stream", "stream name") == "stream"
    assert check_name("stream", "stream name") == "stream"
    for bad in ("", "a\x00b", "x" * 401, 5):
        with pytest.raises(InvalidBatch):
            check_name(bad, "stream name")


async def test_sqlite_worker_survives_a_cancelled_caller(tmp_path: Path) -> None:
    """A cancelled append is all or nothing, and the journal goes on working."""
    journal = await SQLiteJournal.open(tmp_path / "j.db", synchronous="OFF")
    make = _make()
    try:
        task = asyncio.ensure_future(journal.append("ns", StreamWrite("s", [make("k", {})])))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        head = await journal.head("ns", "s")
        assert head in (0, 1)
        result = await journal.append("ns", StreamWrite("s", [make("k", {})], head + 1))
        assert result.positions["s"] == (head + 1, head + 1)
        assert [r.seq for r in await journal.read("ns", "s")] == list(range(1, head + 2))
    finally:
        await journal.close()
    with pytest.raises(JournalClosed):
        await journal.head("ns", "s")


async def test_sqlite_errors_from_the_worker_reach_the_caller(tmp_path: Path) -> None:
    """A failure inside the connection's thread is raised to the awaiting caller."""
    journal = await SQLiteJournal.open(tmp_path / "j.db")
    try:
        with pytest.raises(ZeroDivisionError):
            await journal._call(lambda: 1 / 0)
        assert await journal.head("ns", "s") == 0
    finally:
        await journal.close()
