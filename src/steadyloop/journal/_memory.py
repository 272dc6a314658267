"""The in-memory backend: fast, exact, and durable in no way at all.

Durability: none. Everything is lost when the process ends. ``memory://NAME`` opens a
store shared by every journal opened with the same name in this process (so a test can
close and reopen it); plain ``memory://`` gives a private store.

Opened to inspect (``create=False``), a memory URL names a store only if it already
exists in this process: ``memory://NAME`` after a journal of that name was opened (and
not [`forget`][steadyloop.journal.MemoryJournal.forget]-ten); plain ``memory://`` never,
since it would be a new, empty store.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from steadyloop._errors import ConflictError, IdempotencyKeyReused, StoreNotFound
from steadyloop.journal._protocol import AppendResult, Journal, PreparedBatch, StoredKey
from steadyloop.records import StoredRecord, _trusted_record, decode

__all__ = ["MemoryJournal"]


@dataclass
class _Store:
    # Each stream holds its records' canonical texts; every read decodes fresh copies,
    # so neither the writer nor a reader can change what is stored by mutating a payload.
    streams: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    keys: dict[tuple[str, str], tuple[str, AppendResult]] = field(default_factory=dict)


_NAMED: dict[str, _Store] = {}


class MemoryJournal(Journal):
    """A journal held in this process's memory.

    Durability: none; a returned append survives nothing but the process itself.

    A named store *exists* from the moment a journal of that name is first opened with
    ``create=True`` until [`forget`][steadyloop.journal.MemoryJournal.forget] drops it (or
    the process ends); closing its journals does not end it. A private store (no name)
    exists only inside its one journal, so no other opening can find it.

    Args:
        name: Share the store with every other journal of this name in the process;
            ``None`` for a private store.
        create: Whether a store that does not exist is created. ``False`` (tools that
            only inspect) raises [`StoreNotFound`][steadyloop.StoreNotFound] for a name
            no journal of this process opened, and always for a private store.

    Raises:
        StoreNotFound: With ``create=False``: no such store exists in this process.
    """

    def __init__(self, name: str | None = None, *, create: bool = True) -> None:
        super().__init__()
        self.url = f"memory://{name or ''}"
        if not create and (not name or name not in _NAMED):
            what = f"no store named {name!r}" if name else "a private store is always new"
            raise StoreNotFound(
                f"{self.url}: no journal here: {what} in this process; nothing was created"
            )
        self._store = _NAMED.setdefault(name, _Store()) if name else _Store()
        self._lock = asyncio.Lock()

    @staticmethod
    def forget(name: str) -> None:
        """Drop a named store, as if the process had ended."""
        _NAMED.pop(name, None)

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        store, ns = self._store, batch.namespace
        # No lock: nothing below awaits, so no other task of the event loop can
        # run between the checks and the writes.
        key = batch.idempotency_key
        if key is not None and (ns, key) in store.keys:
            digest, earlier = store.keys[(ns, key)]
            if digest != batch.digest:
                raise IdempotencyKeyReused(ns, key)
            return AppendResult(namespace=ns, positions=earlier.positions, duplicate=True)
        heads = {w.stream: len(store.streams.get((ns, w.stream), [])) for w in batch.writes}
        for w in batch.writes:
            if w.expected_next is not None and w.expected_next != heads[w.stream] + 1:
                raise ConflictError(ns, w.stream, w.expected_next, heads[w.stream] + 1)
        positions: dict[str, tuple[int, int]] = {}
        for w, texts in zip(batch.writes, batch.encoded, strict=True):
            records = store.streams.setdefault((ns, w.stream), [])
            first = len(records) + 1
            # Keep the canonical texts: a caller mutating its payload afterwards
            # changes nothing, and the records are decoded once, when first read.
            records.extend(texts)
            positions[w.stream] = (first, len(records))
        result = AppendResult(namespace=ns, positions=positions)
        if key is not None:
            store.keys[(ns, key)] = (batch.digest, result)
        return result

    async def _read(
        self, namespace: str, stream: str, start: int, limit: int | None
    ) -> list[StoredRecord]:
        records = self._store.streams.get((namespace, stream), [])
        end = len(records) if limit is None else min(len(records), start - 1 + limit)
        out: list[StoredRecord] = []
        for i in range(start - 1, end):
            # The canonical encoding prepare_batch made (and validated) decodes to a
            # valid record: no need to check it again.
            data = decode(records[i])
            rec = _trusted_record(data["kind"], data["payload"], data["id"], data["time"])
            out.append(StoredRecord(stream=stream, seq=i + 1, record=rec))
        return out

    async def _head(self, namespace: str, stream: str) -> int:
        return len(self._store.streams.get((namespace, stream), []))

    async def _streams(self, namespace: str) -> list[str]:
        return [s for (ns, s), recs in self._store.streams.items() if ns == namespace and recs]

    async def _namespaces(self) -> list[str]:
        return list({ns for (ns, _), recs in self._store.streams.items() if recs})

    async def _delete_stream(self, namespace: str, stream: str) -> None:
        async with self._lock:
            self._store.streams.pop((namespace, stream), None)

    async def _delete_namespace(self, namespace: str) -> None:
        async with self._lock:
            for table in (self._store.streams, self._store.keys):
                for key in [k for k in table if k[0] == namespace]:
                    del table[key]

    async def _idempotency_keys(self, namespace: str) -> list[StoredKey]:
        return [
            StoredKey(key, digest, dict(result.positions))
            for (ns, key), (digest, result) in self._store.keys.items()
            if ns == namespace
        ]

    async def _restore_key(self, namespace: str, key: StoredKey) -> None:
        async with self._lock:
            positions = dict(key.positions or {})
            result = AppendResult(namespace=namespace, positions=positions)
            self._store.keys.setdefault((namespace, key.key), (key.digest, result))

    async def _close(self) -> None:
        return None
