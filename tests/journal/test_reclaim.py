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


@pytest.mark.parametrize("backend", ALL_BACKENDS)
async def test_a_restored_key_refuses_another_batch_and_another_digest(
    backend: str, tmp_path: Path
) -> None:
    """A restored key is a duplicate only for its own batch; restoring it with another digest raises."""
    from steadyloop import IdempotencyKeyReused
    from steadyloop.journal._protocol import prepare_batch

    make = RecordFactory(StepClock(), SequentialIds("r"))
    writes = batch(make)
    digest = prepare_batch("ns", writes, "k").digest
    async with store_url(backend, tmp_path) as url, await open_journal(url) as journal:
        assert await journal.restore_key("ns", StoredKey("k", digest, {"a": (1, 1), "b": (1, 1)}))
        assert not await journal.restore_key("ns", StoredKey("k", digest, None))
        with pytest.raises(IdempotencyKeyReused):
            await journal.restore_key("ns", StoredKey("k", "0" * 64, None))
        again = await journal.append("ns", writes, idempotency_key="k")
        assert again.duplicate and dict(again.positions) == {"a": (1, 1), "b": (1, 1)}
        with pytest.raises(IdempotencyKeyReused):
            await journal.append("ns", StreamWrite("a", [make("other", {})]), idempotency_key="k")
        assert await journal.streams("ns") == []
