"""The journal conformance suite: the contract every backend must keep, as pytest tests.

Use it on any backend, including your own, by subclassing and supplying a factory::

    import pytest
    from steadyloop.testing import JournalConformance, JournalFactory

    class TestMyBackend(JournalConformance):
        @pytest.fixture
        def journal_factory(self, tmp_path):
            return JournalFactory(open=lambda: MyJournal.open(tmp_path), url=None)

``open`` must return a journal on the *same* store each time it is called (the suite
closes and reopens). ``url``, when given, must be a URL that
[`open_journal`][steadyloop.journal.open_journal] in another process opens onto that store; the
multi-process tests need it and are skipped, with a reason, without it. The suite needs
``pytest`` and ``pytest-asyncio``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from steadyloop._errors import (
    ConflictError,
    EncodingError,
    IdempotencyKeyReused,
    InvalidBatch,
    JournalClosed,
)
from steadyloop.journal._protocol import Journal, StreamWrite
from steadyloop.records import Record, RecordFactory, SequentialIds, StepClock

__all__ = ["ADVERSARIAL_PAYLOADS", "JournalConformance", "JournalFactory"]


@dataclass(frozen=True)
class JournalFactory:
    """How the conformance suite reaches a backend.

    Attributes:
        open: Opens a journal on the store under test; every call reaches the same store.
        url: A URL other processes can pass to ``open_journal`` to reach the same
            store, or ``None`` when the store lives only in this process.
    """

    open: Callable[[], Awaitable[Journal]]
    url: str | None = None


ADVERSARIAL_PAYLOADS: dict[str, dict[str, object]] = {
    "nul": {"text": "before\x00after", "\x00key": "nul in a key"},
    "astral": {"text": "emoji 😀🧪 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "flag": "🇨🇳"},
    "combining": {"nfc": "é", "nfd": "e\u0301", "fullwidth": "ＡＢＣ"},
    "big_integers": {"above_2_53": 2**53 + 1, "negative": -(2**63) - 7, "huge": 10**40},
    "floats": {
        "third": 1 / 3,
        "tiny": 5e-324,
        "negative_zero": -0.0,
        "large": 1.7976931348623157e308,
    },
    "whitespace": {"trailing": "x ", "leading": " x", "newline": "a\nb\r\nc", "tab": "\t"},
    "nesting": {"list": [1, [2, [3, [4, {"deep": None}]]]], "empty": {}, "empty_list": []},
    "keys": {"B": 1, "a": 2, "A": 3, "b": 4, "é": 5, "e\u0301": 6},
    "quotes": {"json": '{"not":"parsed"}', "backslash": "\\\\", "slash": "a/b"},
    "booleans": {"t": True, "f": False, "null": None, "zero": 0, "one": 1},
}
"""Payloads that storage layers commonly mangle; each must round-trip byte for byte."""


def _maker() -> RecordFactory:
    return RecordFactory(clock=StepClock(start=1_700_000_000_000_000, step=1), ids=SequentialIds())


async def _all(journal: Journal, namespace: str, stream: str) -> list[str]:
    return [r.record.to_json() for r in await journal.read(namespace, stream)]


class JournalConformance:
    """The journal contract as tests. Subclass it and provide ``journal_factory``."""

    namespace = "conformance"

    @pytest.fixture
    def journal_factory(self) -> JournalFactory:
        """Override: return the factory of the backend under test."""
        raise NotImplementedError("subclass JournalConformance and define journal_factory")

    # -- basics ---------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_append_then_read_returns_records_in_order(
        self, journal_factory: JournalFactory
    ) -> None:
        """Appended records read back in order, numbered from 1, with their content."""
        make = _maker()
        async with await journal_factory.open() as journal:
            records = [make("note", {"n": i}) for i in range(5)]
            result = await journal.append(self.namespace, [StreamWrite("s", records[:2])])
            assert result.positions == {"s": (1, 2)}
            assert not result.duplicate
            result = await journal.append(self.namespace, StreamWrite("s", records[2:]))
            assert result.positions == {"s": (3, 5)}
            got = await journal.read(self.namespace, "s")
            assert [r.seq for r in got] == [1, 2, 3, 4, 5]
            assert all(r.stream == "s" for r in got)
            assert [r.record for r in got] == records
            assert await journal.head(self.namespace, "s") == 5
            assert await journal.head(self.namespace, "missing") == 0
            assert await journal.read(self.namespace, "missing") == []

    @pytest.mark.asyncio
    async def test_read_honours_start_and_limit(self, journal_factory: JournalFactory) -> None:
        """Reading from a start sequence with a limit returns exactly that window."""
        make = _maker()
        async with await journal_factory.open() as journal:
            await journal.append(self.namespace, StreamWrite("s", [make("n") for _ in range(10)]))
            window = await journal.read(self.namespace, "s", start=4, limit=3)
            assert [r.seq for r in window] == [4, 5, 6]
            assert [r.seq for r in await journal.read(self.namespace, "s", start=9)] == [9, 10]
            assert await journal.read(self.namespace, "s", start=11) == []
            assert await journal.read(self.namespace, "s", limit=0) == []

    @pytest.mark.asyncio
    async def test_batch_spans_streams_atomically(self, journal_factory: JournalFactory) -> None:
        """A batch over several streams lands in all of them, with per-stream numbering."""
        make = _maker()
        async with await journal_factory.open() as journal:
            await journal.append(self.namespace, StreamWrite("a", [make("x")]))
            result = await journal.append(
                self.namespace,
                [StreamWrite("a", [make("y"), make("y")]), StreamWrite("b", [make("z")])],
            )
            assert result.positions == {"a": (2, 3), "b": (1, 1)}
            assert await journal.streams(self.namespace) == ["a", "b"]

    @pytest.mark.asyncio
    async def test_conflict_in_one_stream_writes_nothing_anywhere(
        self, journal_factory: JournalFactory
    ) -> None:
        """When one stream's expected sequence is wrong, no stream of the batch changes."""
        make = _maker()
        async with await journal_factory.open() as journal:
            await journal.append(self.namespace, StreamWrite("a", [make("x")]))
            await journal.append(self.namespace, StreamWrite("b", [make("x"), make("x")]))
            before = {s: await _all(journal, self.namespace, s) for s in ("a", "b", "c")}
            with pytest.raises(ConflictError) as info:
                await journal.append(
                    self.namespace,
                    [
                        StreamWrite("a", [make("new")], expected_next=2),
                        StreamWrite("b", [make("new")], expected_next=2),  # is at 3
                        StreamWrite("c", [make("new")], expected_next=1),
                    ],
                )
            assert (info.value.stream, info.value.expected, info.value.actual) == ("b", 2, 3)
            after = {s: await _all(journal, self.namespace, s) for s in ("a", "b", "c")}
            assert after == before
            ok = await journal.append(
                self.namespace, StreamWrite("b", [make("fine")], expected_next=3)
            )
            assert ok.positions == {"b": (3, 3)}

    @pytest.mark.asyncio
    async def test_idempotent_resubmission_writes_nothing(
        self, journal_factory: JournalFactory
    ) -> None:
        """Resubmitting an idempotency key returns the first result and writes nothing."""
        make = _maker()
        async with await journal_factory.open() as journal:
            batch = [StreamWrite("a", [make("x", {"v": 1})]), StreamWrite("b", [make("y")])]
            first = await journal.append(self.namespace, batch, idempotency_key="key-1")
            await journal.append(self.namespace, StreamWrite("a", [make("later")]))
            again = await journal.append(self.namespace, batch, idempotency_key="key-1")
            assert again.duplicate
            assert again.positions == first.positions
            # A retry made afresh (new record ids and times, same content) is the same batch.
            retry = [StreamWrite("a", [make("x", {"v": 1})]), StreamWrite("b", [make("y")])]
            assert (await journal.append(self.namespace, retry, idempotency_key="key-1")).duplicate
            assert await journal.head(self.namespace, "a") == 2
            assert await journal.head(self.namespace, "b") == 1
            with pytest.raises(IdempotencyKeyReused):
                await journal.append(
                    self.namespace, StreamWrite("a", [make("x", {"v": 2})]), idempotency_key="key-1"
                )
            assert await journal.head(self.namespace, "a") == 2
            other = await journal.append("other-ns", batch, idempotency_key="key-1")
            assert not other.duplicate

    @pytest.mark.asyncio
    async def test_idempotency_key_survives_reopen(self, journal_factory: JournalFactory) -> None:
        """An idempotency key is remembered after the journal is closed and reopened."""
        make = _maker()
        batch = StreamWrite("a", [make("x")])
        async with await journal_factory.open() as journal:
            first = await journal.append(self.namespace, batch, idempotency_key="k")
        async with await journal_factory.open() as journal:
            again = await journal.append(self.namespace, batch, idempotency_key="k")
            assert again.duplicate and again.positions == first.positions
            assert await journal.head(self.namespace, "a") == 1

    @pytest.mark.asyncio
    async def test_reopen_returns_identical_records(self, journal_factory: JournalFactory) -> None:
        """After close and reopen, every stream reads back byte-identical."""
        make = _maker()
        async with await journal_factory.open() as journal:
            for i in range(4):
                await journal.append(
                    self.namespace,
                    [StreamWrite("a", [make("x", {"i": i})]), StreamWrite(f"s{i}", [make("y")])],
                )
            before = {
                s: await _all(journal, self.namespace, s)
                for s in await journal.streams(self.namespace)
            }
        async with await journal_factory.open() as journal:
            streams = await journal.streams(self.namespace)
            after = {s: await _all(journal, self.namespace, s) for s in streams}
        assert after == before
        assert set(streams) == {"a", "s0", "s1", "s2", "s3"}

    @pytest.mark.asyncio
    async def test_adversarial_values_round_trip_byte_identical(
        self, journal_factory: JournalFactory
    ) -> None:
        """Values storage layers mangle come back as the same canonical bytes."""
        make = _maker()
        records = [make(f"adversarial.{name}", p) for name, p in ADVERSARIAL_PAYLOADS.items()]  # type: ignore[arg-type]
        async with await journal_factory.open() as journal:
            await journal.append(self.namespace, StreamWrite("values", records))
        async with await journal_factory.open() as journal:
            got = await _all(journal, self.namespace, "values")
        assert got == [r.to_json() for r in records]

    @pytest.mark.asyncio
    async def test_one_mebibyte_payload_round_trips(self, journal_factory: JournalFactory) -> None:
        """A 1 MiB payload is stored whole and reads back byte-identical."""
        make = _maker()
        big = make("big", {"blob": "x" * (1 << 20), "tail": "😀"})
        async with await journal_factory.open() as journal:
            await journal.append(self.namespace, StreamWrite("big", [big]))
        async with await journal_factory.open() as journal:
            assert await _all(journal, self.namespace, "big") == [big.to_json()]

    @pytest.mark.asyncio
    async def test_names_compare_exactly(self, journal_factory: JournalFactory) -> None:
        """Names differing only by case, trailing space or normalisation stay apart."""
        make = _maker()
        names = ["run", "Run", "RUN", "run ", " run", "é", "e\u0301", "😀", "x\u200b"]
        async with await journal_factory.open() as journal:
            for name in names:
                await journal.append(name, StreamWrite(name, [make("n", {"name": name})]))
            for name in names:
                got = await journal.read(name, name)
                assert [r.payload["name"] for r in got] == [name]
                assert await journal.streams(name) == [name]
            assert set(names) <= set(await journal.namespaces())

    @pytest.mark.asyncio
    async def test_ten_thousand_streams_in_one_namespace(
        self, journal_factory: JournalFactory
    ) -> None:
        """A namespace holds 10,000 streams written in one batch, all listed."""
        make = _maker()
        writes = [StreamWrite(f"stream-{i:05d}", [make("n", {"i": i})]) for i in range(10_000)]
        async with await journal_factory.open() as journal:
            result = await journal.append("many", writes)
            assert len(result.positions) == 10_000
            streams = await journal.streams("many")
            assert streams == sorted(w.stream for w in writes)
            last = await journal.read("many", "stream-09999")
            assert last[0].payload == {"i": 9999}

    @pytest.mark.asyncio
    async def test_mutating_payloads_changes_nothing_stored(
        self, journal_factory: JournalFactory
    ) -> None:
        """Mutating a payload after appending it, or a record read back, changes nothing stored."""
        make = _maker()
        payload: dict[str, object] = {"items": [1], "nested": {"k": "v"}}
        record = make("x", payload)  # type: ignore[arg-type]
        written = record.to_json()
        async with await journal_factory.open() as journal:
            await journal.append(self.namespace, StreamWrite("m", [record]))
            payload["items"].append(2)  # type: ignore[attr-defined]
            payload["extra"] = "x"
            first = await journal.read(self.namespace, "m")
            read_back: Any = first[0].record.payload
            read_back["items"].append(99)
            read_back["nested"]["k"] = "changed"
            assert await _all(journal, self.namespace, "m") == [written]
        async with await journal_factory.open() as journal:
            assert await _all(journal, self.namespace, "m") == [written]

    @pytest.mark.asyncio
    async def test_racing_resubmissions_of_one_key_are_duplicates_not_conflicts(
        self, journal_factory: JournalFactory
    ) -> None:
        """Racing submissions of one keyed, checked batch: one writes, the other is a duplicate."""
        make = _maker()
        async with await journal_factory.open() as journal:
            await journal.append(self.namespace, StreamWrite("k", [make("first")]))
            for i in range(5):
                batch = StreamWrite("k", [make("keyed", {"i": i})], expected_next=2 + i)
                results = await asyncio.gather(
                    journal.append(self.namespace, batch, idempotency_key=f"race-{i}"),
                    journal.append(self.namespace, batch, idempotency_key=f"race-{i}"),
                )
                assert sorted(r.duplicate for r in results) == [False, True]
                assert results[0].positions == results[1].positions == {"k": (2 + i, 2 + i)}
            assert await journal.head(self.namespace, "k") == 6

    # -- deletion and listing -------------------------------------------------------

    @pytest.mark.asyncio
    async def test_delete_stream_and_namespace(self, journal_factory: JournalFactory) -> None:
        """Deleting a stream or a namespace removes exactly it, and numbering restarts."""
        make = _maker()
        async with await journal_factory.open() as journal:
            await journal.append(
                "ns1", [StreamWrite("a", [make("x")]), StreamWrite("b", [make("x")])]
            )
            await journal.append("ns2", StreamWrite("a", [make("x")]), idempotency_key="k")
            await journal.delete_stream("ns1", "a")
            await journal.delete_stream("ns1", "never-existed")
            assert await journal.streams("ns1") == ["b"]
            assert await journal.read("ns1", "a") == []
            result = await journal.append("ns1", StreamWrite("a", [make("again")]))
            assert result.positions == {"a": (1, 1)}
            await journal.delete_namespace("ns2")
            assert await journal.streams("ns2") == []
            assert "ns2" not in await journal.namespaces()
            assert {"ns1"} <= set(await journal.namespaces())
            fresh = await journal.append("ns2", StreamWrite("a", [make("x")]), idempotency_key="k")
            assert not fresh.duplicate

    # -- bad input --------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_bad_input_is_refused_and_nothing_is_written(
        self, journal_factory: JournalFactory
    ) -> None:
        """Malformed batches and unencodable values raise clear errors and write nothing."""
        make = _maker()
        good = make("ok")
        async with await journal_factory.open() as journal:
            await journal.append(self.namespace, StreamWrite("s", [good]))
            with pytest.raises(InvalidBatch, match="empty batch"):
                await journal.append(self.namespace, [])
            with pytest.raises(InvalidBatch, match="no records"):
                await journal.append(self.namespace, StreamWrite("s", []))
            with pytest.raises(InvalidBatch, match="twice"):
                await journal.append(
                    self.namespace, [StreamWrite("s", [good]), StreamWrite("s", [good])]
                )
            with pytest.raises(InvalidBatch, match="namespace"):
                await journal.append("", StreamWrite("s", [good]))
            with pytest.raises(InvalidBatch, match="control character"):
                await journal.append(self.namespace, StreamWrite("a\x00b", [good]))
            with pytest.raises(InvalidBatch, match="expected_next"):
                await journal.append(self.namespace, StreamWrite("s", [good], expected_next=0))
            with pytest.raises(InvalidBatch, match="not a Record"):
                await journal.append(self.namespace, StreamWrite("s", [{"kind": "x"}]))  # type: ignore[list-item]
            bad_values: list[object] = [
                float("nan"),
                float("inf"),
                b"bytes",
                {1: "x"},
                {"\ud800": 1},
                {1, 2},
            ]
            for value in bad_values:
                with pytest.raises(EncodingError):
                    await journal.append(
                        self.namespace,
                        [
                            StreamWrite("s", [good]),
                            StreamWrite("t", [_unchecked("x", {"v": value})]),
                        ],
                    )
            assert await _all(journal, self.namespace, "s") == [good.to_json()]
            assert await journal.head(self.namespace, "t") == 0

    @pytest.mark.asyncio
    async def test_closed_journal_refuses_use(self, journal_factory: JournalFactory) -> None:
        """A closed journal raises JournalClosed, and closing twice is harmless."""
        journal = await journal_factory.open()
        await journal.close()
        await journal.close()
        with pytest.raises(JournalClosed):
            await journal.read(self.namespace, "s")
        with pytest.raises(JournalClosed):
            await journal.append(self.namespace, StreamWrite("s", [_maker()("x")]))

    # -- concurrency ------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_concurrent_tasks_never_interleave_or_lose(
        self, journal_factory: JournalFactory
    ) -> None:
        """Concurrent asyncio writers to one stream keep every batch whole and contiguous."""
        make = _maker()
        async with await journal_factory.open() as journal:

            async def writer(w: int) -> None:
                for b in range(8):
                    recs = [make("w", {"w": w, "b": b, "i": i}) for i in range(3)]
                    await journal.append(self.namespace, StreamWrite("shared", recs))

            await asyncio.gather(*(writer(w) for w in range(10)))
            got = await journal.read(self.namespace, "shared")
        _check_batches(got_payloads=[dict(r.payload) for r in got], writers=10, batches=8)

    @pytest.mark.asyncio
    async def test_concurrent_checked_appends_serialise(
        self, journal_factory: JournalFactory
    ) -> None:
        """Writers that check expected_next and retry on conflict lose and double nothing."""
        make = _maker()
        async with await journal_factory.open() as journal:

            async def writer(w: int) -> None:
                for b in range(5):
                    while True:
                        head = await journal.head(self.namespace, "checked")
                        recs = [make("w", {"w": w, "b": b, "i": i}) for i in range(3)]
                        try:
                            await journal.append(
                                self.namespace, StreamWrite("checked", recs, expected_next=head + 1)
                            )
                            break
                        except ConflictError:
                            await asyncio.sleep(0)

            await asyncio.gather(*(writer(w) for w in range(6)))
            got = await journal.read(self.namespace, "checked")
        _check_batches(got_payloads=[dict(r.payload) for r in got], writers=6, batches=5)

    @pytest.mark.asyncio
    @pytest.mark.timeout(180)
    async def test_concurrent_processes_never_interleave_or_lose(
        self, journal_factory: JournalFactory
    ) -> None:
        """Writer processes on one stream keep every batch whole; none is lost or doubled."""
        if journal_factory.url is None:
            pytest.skip("this backend's store lives in one process (no URL to share)")
        writers, batches = 4, 6
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "steadyloop.testing._child",
                journal_factory.url,
                self.namespace,
                "procs",
                str(w),
                str(batches),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            for w in range(writers)
        ]
        outputs = await asyncio.wait_for(
            asyncio.gather(*(p.communicate() for p in procs)), timeout=150
        )
        for p, (_, err) in zip(procs, outputs, strict=True):
            assert p.returncode == 0, f"writer failed: {err.decode()[-2000:]}"
        acked = sum(int(out.decode().split()[-1]) for out, _ in outputs)
        assert acked == writers * batches
        async with await journal_factory.open() as journal:
            got = await journal.read(self.namespace, "procs")
        _check_batches(
            got_payloads=[dict(r.payload) for r in got], writers=writers, batches=batches
        )


def _unchecked(kind: str, payload: dict[str, object]) -> Record:
    """Build a record without validation, to prove the journal validates on its own."""
    rec = object.__new__(Record)
    for name, value in (("kind", kind), ("payload", payload), ("id", "bad"), ("time", 0)):
        object.__setattr__(rec, name, value)
    return rec


def _check_batches(*, got_payloads: list[dict[str, object]], writers: int, batches: int) -> None:
    """Every (writer, batch) appears exactly once, as three contiguous records in order."""
    assert len(got_payloads) == writers * batches * 3, "records were lost or duplicated"
    seen: set[tuple[object, object]] = set()
    for start in range(0, len(got_payloads), 3):
        chunk = got_payloads[start : start + 3]
        key = (chunk[0]["w"], chunk[0]["b"])
        assert [c["i"] for c in chunk] == [0, 1, 2], f"batch {key} interleaved: {chunk}"
        assert all((c["w"], c["b"]) == key for c in chunk), f"batches interleaved: {chunk}"
        assert key not in seen, f"batch {key} written twice"
        seen.add(key)
    per_writer: dict[object, list[object]] = {}
    for w, b in sorted(seen, key=json.dumps):
        per_writer.setdefault(w, []).append(b)
    assert all(len(v) == batches for v in per_writer.values())
