"""A journal that forwards every operation to another one, for wrappers to build on."""

from __future__ import annotations

from steadyloop.journal._protocol import (
    AppendResult,
    Journal,
    PreparedBatch,
    StoredKey,
    StreamWrite,
)
from steadyloop.records import StoredRecord

__all__ = ["ForwardingJournal"]


class ForwardingJournal(Journal):
    """A journal that forwards everything to an inner journal.

    Subclass it to observe or alter what passes through: crash at an append (the test
    kits do), count appends (the benchmarks do), or build a deliberately flawed backend
    for a replay experiment. Override [`check`][steadyloop.journal.ForwardingJournal.check] to
    run something before every operation,
    [`on_write`][steadyloop.journal.ForwardingJournal.on_write] to change what gets stored,
    [`on_read`][steadyloop.journal.ForwardingJournal.on_read] to change what comes back, or
    ``_append`` itself (calling ``super()._append``) to act around the write. Closing the
    wrapper closes the inner journal.

    Args:
        inner: The journal that really stores the records.

    Examples:
        >>> class Shouting(ForwardingJournal):
        ...     def on_read(self, namespace, stream, records):
        ...         return records  # a real flaw would change something here
    """

    def __init__(self, inner: Journal) -> None:
        super().__init__()
        self.inner = inner
        self.url = inner.url

    def check(self) -> None:
        """Called before every forwarded operation except close (nothing by default)."""

    def on_write(self, namespace: str, writes: list[StreamWrite]) -> list[StreamWrite]:
        """Return the writes to store instead of ``writes`` (unchanged by default)."""
        return writes

    def on_read(
        self, namespace: str, stream: str, records: list[StoredRecord]
    ) -> list[StoredRecord]:
        """Return the records to hand back instead of ``records`` (unchanged by default)."""
        return records

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        self.check()
        writes = self.on_write(batch.namespace, list(batch.writes))
        return await self.inner.append(
            batch.namespace, writes, idempotency_key=batch.idempotency_key
        )

    async def _read(
        self, namespace: str, stream: str, start: int, limit: int | None
    ) -> list[StoredRecord]:
        self.check()
        records = await self.inner.read(namespace, stream, start=start, limit=limit)
        return self.on_read(namespace, stream, records)

    async def _head(self, namespace: str, stream: str) -> int:
        self.check()
        return await self.inner.head(namespace, stream)

    async def _streams(self, namespace: str) -> list[str]:
        self.check()
        return await self.inner.streams(namespace)

    async def _namespaces(self) -> list[str]:
        self.check()
        return await self.inner.namespaces()

    async def _delete_stream(self, namespace: str, stream: str) -> None:
        self.check()
        await self.inner.delete_stream(namespace, stream)

    async def _delete_namespace(self, namespace: str) -> None:
        self.check()
        await self.inner.delete_namespace(namespace)

    async def _idempotency_keys(self, namespace: str) -> list[StoredKey]:
        self.check()
        return await self.inner.idempotency_keys(namespace)

    async def _restore_key(self, namespace: str, key: StoredKey) -> None:
        self.check()
        await self.inner.restore_key(namespace, key)

    async def _reclaim_space(self) -> str:
        self.check()
        return await self.inner.reclaim_space()

    async def _close(self) -> None:
        await self.inner.close()
