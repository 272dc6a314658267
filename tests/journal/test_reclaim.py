"""``reclaim_space`` and restored keys: what is kept survives a rewrite and a reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends import ALL_BACKENDS, store_url
from steadyloop import RecordFactory, SequentialIds, StepClock, StreamWrite
from steadyloop.cli._journal import diagnose
from steadyloop.journal import StoredKey, journal_digests, open_journal


def batch(make: RecordFactory) -> list[StreamWrite]:
    """A keyed batch over two streams."""
    return [StreamWrite("a", [make("x", {"v": 1})]), StreamWrite("b", [make("y", {"v": 2})])]


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_reclaim_keeps_records_and_keys(backend: str, tmp_path: Path) -> None:
    """After a delete and reclaim_space, kept streams and every key read back the same, reopened."""
    make = RecordFactory(StepClock(), SequentialIds("r"))
    async with store_url(backend, tmp_path) as url:
        async with await open_journal(url) as journal:
            first = await journal.append("ns", batch(make), idempotency_key="k")
            await journal.append("ns", StreamWrite("gone", [make("z", {"secret": "S3CRET"})]))
            await journal.restore_key("ns", StoredKey("restored", "d" * 64, {"a": (1, 1)}))
            await journal.delete_stream("ns", "gone")
            before = await journal_digests(journal)
            assert isinstance(await journal.reclaim_space(), str)
        async with await open_journal(url) as journal:
            assert await journal_digests(journal) == before
            again = await journal.append("ns", batch(make), idempotency_key="k")
            assert again.duplicate and dict(again.positions) == dict(first.positions)
            keys = {k.key: k for k in await journal.idempotency_keys("ns")}
            assert keys["restored"].digest == "d" * 64
            assert await diagnose(journal) == []
        if backend == "jsonl":
            raw = b"".join(p.read_bytes() for p in Path(url.removeprefix("jsonl://")).iterdir())
            assert b"S3CRET" not in raw
