"""SQLite's set-based group append writes what the one-by-one append plan writes.

A group of appends sharing one transaction is written with one statement per table
(`group_append_plan`). Whatever the batches (several namespaces and streams, right and
wrong ``expected_next``, idempotency keys reused with the same or another content,
repeated within the group), each batch must get the outcome, and the database the rows,
that running the shared `append_plan` for each batch in turn gives.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steadyloop.journal import SQLiteJournal, StreamWrite
from steadyloop.journal._protocol import PreparedBatch, prepare_batch
from steadyloop.journal._sql import append_plan
from steadyloop.records import Record

STREAMS = ("a", "b", "c")


def _record(i: int, tag: str) -> Record:
    return Record(kind="test.item", payload={"i": i, "tag": tag}, id=f"{tag}-{i}", time=1)


@st.composite
def batches(draw: Any) -> list[tuple[str, list[tuple[str, int, int | None]], str | None, int]]:
    """Up to 12 batches: namespace, writes (stream, record count, expected_next), key, content."""
    out = []
    for _ in range(draw(st.integers(1, 12))):
        ns = draw(st.sampled_from(("n1", "n2")))
        streams = draw(st.lists(st.sampled_from(STREAMS), min_size=1, max_size=3, unique=True))
        writes = [
            (s, draw(st.integers(1, 3)), draw(st.one_of(st.none(), st.integers(1, 6))))
            for s in streams
        ]
        key = draw(st.one_of(st.none(), st.sampled_from(("k1", "k2"))))
        out.append((ns, writes, key, draw(st.integers(0, 1))))
    return out


def prepared(spec: list[Any]) -> list[PreparedBatch]:
    made = []
    for n, (ns, writes, key, content) in enumerate(spec):
        tag = f"c{content}" if key is not None else f"b{n}"
        stream_writes = [
            StreamWrite(s, [_record(i, tag) for i in range(count)], expected_next=expected)
            for s, count, expected in writes
        ]
        made.append(prepare_batch(ns, stream_writes, key))
    return made


def _shape(outcome: tuple[Any, BaseException | None]) -> Any:
    result, error = outcome
    if error is not None:
        return type(error).__name__
    return (dict(result.positions), result.duplicate, result.namespace)


async def _tables(journal: SQLiteJournal) -> Any:
    def dump() -> Any:
        conn = journal._conn
        assert conn is not None
        return [
            sorted(conn.execute(f"SELECT * FROM steadyloop_{t}").fetchall())
            for t in ("streams", "records", "keys")
        ]

    return await journal._call(dump)


async def _compare(tmp: Path, spec: list[Any]) -> None:
    grouped = await SQLiteJournal.open(tmp / "grouped.db")
    alone = await SQLiteJournal.open(tmp / "alone.db")
    try:
        # The same history first, so checks meet existing heads and keys.
        for journal in (grouped, alone):
            await journal.append("n1", [StreamWrite("a", [_record(0, "seed")])])
            await journal.append(
                "n2", [StreamWrite("b", [_record(0, "seed")])], idempotency_key="k2"
            )
        batches = prepared(spec)
        payloads = [(b, lambda b=b: append_plan(grouped.dialect, b)) for b in batches]
        got = await grouped._call(grouped._group_transaction, payloads)

        def one_by_one() -> list[tuple[Any, BaseException | None]]:
            outcomes: list[tuple[Any, BaseException | None]] = []
            for b in batches:
                try:
                    outcomes.append((alone._transaction(append_plan(alone.dialect, b)), None))
                except Exception as exc:
                    outcomes.append((None, exc))
            return outcomes

        want = await alone._call(one_by_one)
        assert [_shape(o) for o in got] == [_shape(o) for o in want]
        assert await _tables(grouped) == await _tables(alone)
    finally:
        await grouped.close()
        await alone.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spec=batches())
def test_a_set_based_group_writes_what_one_by_one_appends_write(
    tmp_path_factory: Any, spec: list[Any]
) -> None:
    """For any group of batches, the set-based group gives each batch the one-by-one outcome and stores the same rows."""
    asyncio.run(_compare(tmp_path_factory.mktemp("group"), spec))


async def test_a_group_takes_the_same_statements_however_many_batches_it_holds(
    tmp_path: Path,
) -> None:
    """One append alone and a group of 64 run the same few statements (one per table), not a few per batch."""
    journal = await SQLiteJournal.open(tmp_path / "count.db")
    statements: list[str] = []
    try:
        assert journal._conn is not None
        journal._conn.set_trace_callback(statements.append)
        counts = []
        for size in (1, 64):
            statements.clear()
            batches = [
                prepare_batch("ns", [StreamWrite(f"s{size}-{i}", [_record(i, "x")])], None)
                for i in range(size)
            ]
            payloads = [(b, lambda b=b: append_plan(journal.dialect, b)) for b in batches]
            outcomes = await journal._call(journal._group_transaction, payloads)
            assert all(error is None for _, error in outcomes)
            counts.append(len(statements))
        assert counts[0] == counts[1] <= 5  # BEGIN, heads, records, heads, COMMIT
    finally:
        await journal.close()
