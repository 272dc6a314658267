"""The journal protocol every backend implements.

A journal holds *namespaces*; a namespace holds *streams*; a stream is an append-only
sequence of records numbered from 1 without gaps.
[`Journal.append`][steadyloop.journal.Journal.append] writes a batch that may span several
streams of one namespace, atomically.

Backends subclass [`Journal`][steadyloop.journal.Journal] and implement the underscore methods.
The public methods validate arguments once, here, so every backend refuses the same bad input
with the same error before anything is written.
"""

from __future__ import annotations

import hashlib
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from steadyloop._errors import (
    EncodingError,
    IdempotencyKeyReused,
    InvalidBatch,
    JournalClosed,
    JournalError,
)
from steadyloop.records import (
    Record,
    StoredRecord,
    _encode_str,
    _payload_json,
    _record_json,
)

__all__ = [
    "MAX_NAME_BYTES",
    "AppendResult",
    "Journal",
    "PreparedBatch",
    "StoredKey",
    "StreamWrite",
    "check_name",
    "prepare_batch",
]

MAX_NAME_BYTES = 400
"""Longest namespace, stream or idempotency key, in UTF-8 bytes, on every backend."""


@dataclass(frozen=True, slots=True)
class StreamWrite:
    """The part of a batch that goes to one stream.

    Attributes:
        stream: The stream to append to.
        records: The records, in order; at least one.
        expected_next: If set, the sequence number the caller expects the first record
            to get. On mismatch the whole batch is refused with
            [`ConflictError`][steadyloop.ConflictError] and nothing is written.
    """

    stream: str
    records: Sequence[Record]
    expected_next: int | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where a batch landed.

    Attributes:
        namespace: The batch's namespace.
        positions: For each stream of the batch, the sequence numbers of its first and
            last record.
        duplicate: True when the batch was a resubmission of an idempotency key that
            had already been written: nothing was written this time.
    """

    namespace: str
    positions: Mapping[str, tuple[int, int]]
    duplicate: bool = False

    def to_dict(self) -> dict[str, object]:
        """Return a JSON form (used by backends to store the first result of a key)."""
        return {
            "namespace": self.namespace,
            "positions": {s: [a, b] for s, (a, b) in sorted(self.positions.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object], *, duplicate: bool) -> AppendResult:
        """Rebuild a result stored by [`to_dict`][steadyloop.journal.AppendResult.to_dict]."""
        raw = data["positions"]
        assert isinstance(raw, Mapping)
        positions = {str(s): (int(v[0]), int(v[1])) for s, v in raw.items()}
        return cls(namespace=str(data["namespace"]), positions=positions, duplicate=duplicate)


@dataclass(frozen=True, slots=True)
class StoredKey:
    """An idempotency key as a journal keeps it (for copying a journal elsewhere).

    Attributes:
        key: The key.
        digest: The digest of the batch first written under it
            (`PreparedBatch.digest`).
        positions: Where that batch landed, per stream; ``None`` when the backend does
            not keep the streams' names with the key (Redis keeps only the first sequence
            numbers, in the batch's order).
    """

    key: str
    digest: str
    positions: Mapping[str, tuple[int, int]] | None


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A validated batch, ready for a backend to write.

    Attributes:
        namespace: Its namespace.
        writes: Its per-stream parts, in the order given.
        idempotency_key: The key, if any.
        digest: SHA-256 of the batch's content (each stream with its records' kinds and
            payloads; record ids and times are writer metadata and left out), so a key
            reused for a different batch is told apart from a true resubmission. Empty
            when the batch has no key.
        encoded: For each write, the canonical JSON text of each record.
    """

    namespace: str
    writes: tuple[StreamWrite, ...]
    idempotency_key: str | None
    digest: str
    encoded: tuple[tuple[str, ...], ...] = field(repr=False)

    @property
    def size(self) -> int:
        """How many records the batch holds."""
        return sum(len(w.records) for w in self.writes)


_VALID_NAMES: dict[str, None] = {}
"""Names that passed [`check_name`][steadyloop.journal.check_name] (a name's validity never
changes, and a run checks the same few names on every append; the per-character scan is the
cost)."""

_VALID_NAMES_MAX = 4096


def check_name(value: object, what: str) -> str:
    """Check a namespace, stream name or idempotency key, and return it.

    Names are compared exactly, byte for byte: ``"A"`` and ``"a"``, or ``"x"`` and
    ``"x "``, are different names on every backend.

    Raises:
        InvalidBatch: If it is not a non-empty string of at most
            [`MAX_NAME_BYTES`][steadyloop.journal.MAX_NAME_BYTES] UTF-8 bytes without control
            characters.
    """
    if type(value) is str and value in _VALID_NAMES:
        return value
    if not isinstance(value, str) or not value:
        raise InvalidBatch(f"{what} must be a non-empty string, got {value!r}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidBatch(f"{what} {value!r} is not valid Unicode") from None
    if size > MAX_NAME_BYTES:
        raise InvalidBatch(f"{what} is {size} UTF-8 bytes long; the limit is {MAX_NAME_BYTES}")
    for ch in value:
        if unicodedata.category(ch) == "Cc":
            raise InvalidBatch(f"{what} {value!r} holds the control character {ch!r}")
    if type(value) is str:
        if len(_VALID_NAMES) >= _VALID_NAMES_MAX:
            _VALID_NAMES.clear()
        _VALID_NAMES[value] = None
    return value


def prepare_batch(
    namespace: str, writes: Sequence[StreamWrite], idempotency_key: str | None
) -> PreparedBatch:
    """Validate a batch and encode its records, before any backend sees it.

    Each record's payload is encoded once: its text goes into the record's text and,
    for a batch with an idempotency key, into the digest's.

    Raises:
        InvalidBatch: If the batch is empty, names a stream twice, or has a bad name or
            expected sequence number.
        EncodingError: If a record cannot be encoded canonically.
    """
    check_name(namespace, "namespace")
    if idempotency_key is not None:
        check_name(idempotency_key, "idempotency key")
    if isinstance(writes, StreamWrite):
        writes = [writes]
    if not writes:
        raise InvalidBatch(f"empty batch for namespace {namespace!r}: nothing to append")
    seen: set[str] = set()
    encoded: list[tuple[str, ...]] = []
    digest_parts: list[str] = []
    keyed = idempotency_key is not None
    for i, w in enumerate(writes):
        if type(w) is not StreamWrite and not isinstance(w, StreamWrite):
            raise InvalidBatch(f"batch item {i} is a {type(w).__name__}, not a StreamWrite")
        stream = w.stream
        if type(stream) is not str or stream not in _VALID_NAMES:
            check_name(stream, f"stream name of batch item {i}")
        if stream in seen:
            raise InvalidBatch(f"stream {stream!r} appears twice in one batch")
        seen.add(stream)
        if not w.records:
            raise InvalidBatch(f"stream {stream!r} has no records in the batch")
        expected = w.expected_next
        if expected is not None and (
            isinstance(expected, bool) or not isinstance(expected, int) or expected < 1
        ):
            raise InvalidBatch(
                f"expected_next for stream {stream!r} must be an integer >= 1, got {expected!r}"
            )
        texts: list[str] = []
        kinds: list[str] = []
        for j, rec in enumerate(w.records):
            if type(rec) is not Record and not isinstance(rec, Record):
                raise InvalidBatch(
                    f"record {j} of stream {stream!r} is a {type(rec).__name__}, not a Record"
                )
            try:
                payload = _payload_json(rec)
                texts.append(_record_json(rec, payload))
                if keyed:
                    kinds.append(f"[{_encode_str(rec.kind)},{payload}]")
            except EncodingError as exc:
                raise EncodingError(
                    f"record {j} of stream {stream!r}: {exc}", path=exc.path
                ) from None
            except (ValueError, TypeError, RecursionError) as exc:
                raise EncodingError(
                    f"record {j} of stream {stream!r} has no canonical JSON form: {exc}"
                ) from None
        encoded.append(tuple(texts))
        if keyed:
            digest_parts.append(f"[{_encode_str(stream)},[{','.join(kinds)}]]")
    digest = ""
    if keyed:
        # The canonical JSON of [[stream, [[kind, payload], ...]], ...], put together
        # from the payload texts already made.
        text = f"[{','.join(digest_parts)}]"
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return PreparedBatch(
        namespace=namespace,
        writes=tuple(writes),
        idempotency_key=idempotency_key,
        digest=digest,
        encoded=tuple(encoded),
    )


class Journal(ABC):
    """An append-only journal of records, in streams grouped by namespace.

    Backends differ in durability; each states its level in its class docstring.
    Every method may raise [`BackendUnavailable`][steadyloop.BackendUnavailable] when the backend
    cannot be reached.

    A journal is an async context manager that closes itself on exit.
    """

    url: str = ""
    """The URL the journal was opened with (secrets removed)."""

    def __init__(self) -> None:
        self._closed = False

    # -- public API ---------------------------------------------------------------

    async def append(
        self,
        namespace: str,
        writes: Sequence[StreamWrite] | StreamWrite,
        *,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Append a batch atomically: every record of it is stored, or none is.

        Args:
            namespace: The namespace all streams of the batch belong to.
            writes: One part per stream; a stream may appear only once.
            idempotency_key: If given and already used in this namespace, nothing is
                written and the first result is returned with ``duplicate=True``.

        Returns:
            Where each stream's records landed.

        Raises:
            InvalidBatch: The batch is malformed; nothing was written.
            EncodingError: A record cannot be encoded canonically; nothing was written.
            ConflictError: An ``expected_next`` did not match; nothing was written.
            IdempotencyKeyReused: The key was used before for a different batch.
            BackendUnavailable: The backend failed; the batch is all or nothing.
        """
        self._check_open()
        batch = prepare_batch(
            namespace, [writes] if isinstance(writes, StreamWrite) else writes, idempotency_key
        )
        return await self._append(batch)

    async def read(
        self, namespace: str, stream: str, *, start: int = 1, limit: int | None = None
    ) -> list[StoredRecord]:
        """Read a stream in order, from sequence number ``start``.

        Args:
            namespace: The namespace.
            stream: The stream; an unknown stream reads as empty.
            start: The first sequence number to return.
            limit: The most records to return; all when ``None``.

        Raises:
            CorruptionError: Stored data is damaged; the error names where.
        """
        self._check_open()
        check_name(namespace, "namespace")
        check_name(stream, "stream name")
        if start < 1:
            raise InvalidBatch(f"start must be >= 1, got {start}")
        if limit is not None and limit < 0:
            raise InvalidBatch(f"limit must be >= 0, got {limit}")
        if limit == 0:
            return []
        return await self._read(namespace, stream, start, limit)

    async def head(self, namespace: str, stream: str) -> int:
        """Return the last sequence number of a stream (0 when it is empty)."""
        self._check_open()
        check_name(namespace, "namespace")
        check_name(stream, "stream name")
        return await self._head(namespace, stream)

    async def streams(self, namespace: str) -> list[str]:
        """List the non-empty streams of a namespace, sorted by code point."""
        self._check_open()
        check_name(namespace, "namespace")
        return sorted(await self._streams(namespace))

    async def namespaces(self) -> list[str]:
        """List the namespaces that hold at least one stream, sorted by code point."""
        self._check_open()
        return sorted(await self._namespaces())

    async def delete_stream(self, namespace: str, stream: str) -> None:
        """Delete a stream and its records. Deleting an unknown stream does nothing.

        Idempotency keys are kept: resubmitting a key whose batch touched the deleted
        stream still returns the first result and writes nothing.
        """
        self._check_open()
        check_name(namespace, "namespace")
        check_name(stream, "stream name")
        await self._delete_stream(namespace, stream)

    async def delete_namespace(self, namespace: str) -> None:
        """Delete every stream and idempotency key of a namespace."""
        self._check_open()
        check_name(namespace, "namespace")
        await self._delete_namespace(namespace)

    async def idempotency_keys(self, namespace: str) -> list[StoredKey]:
        """List the idempotency keys of a namespace, sorted by key.

        Raises:
            JournalError: The backend cannot list its keys.
        """
        self._check_open()
        check_name(namespace, "namespace")
        return sorted(await self._idempotency_keys(namespace), key=lambda k: k.key)

    async def restore_key(self, namespace: str, key: StoredKey) -> bool:
        """Store an idempotency key without its batch (the batch's records are copied apart).

        Resubmitting the key afterwards writes nothing and returns ``key.positions``
        (empty when they are unknown) with ``duplicate=True``.

        Returns:
            True if the key was stored, False if the same key with the same digest was
            already there.

        Raises:
            IdempotencyKeyReused: The key is there with a different digest.
            JournalError: The backend cannot store keys this way.
        """
        self._check_open()
        check_name(namespace, "namespace")
        check_name(key.key, "idempotency key")
        existing = {k.key: k for k in await self._idempotency_keys(namespace)}.get(key.key)
        if existing is not None:
            if existing.digest != key.digest:
                raise IdempotencyKeyReused(namespace, key.key)
            return False
        await self._restore_key(namespace, key)
        return True

    async def reclaim_space(self) -> str:
        """Give back the space that deleted streams still take, where the backend can.

        SQLite rebuilds its file (``VACUUM``) and empties its write-ahead log; JSONL
        rewrites each namespace file with only what it still holds. Server backends
        leave it to their operator (PostgreSQL ``VACUUM``, MySQL ``OPTIMIZE TABLE``);
        Redis and memory free deleted keys at once.

        Returns:
            One line saying what was done.
        """
        self._check_open()
        return await self._reclaim_space()

    async def close(self) -> None:
        """Release connections, files and locks. Closing twice is harmless."""
        if self._closed:
            return
        self._closed = True
        await self._close()

    @property
    def closed(self) -> bool:
        """Whether [`close`][steadyloop.journal.Journal.close] was called."""
        return self._closed

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosed(f"journal {self.url} is closed")

    # -- backend hooks --------------------------------------------------------------

    @abstractmethod
    async def _append(self, batch: PreparedBatch) -> AppendResult:
        """Write a validated batch atomically, honouring its checks and key."""

    @abstractmethod
    async def _read(
        self, namespace: str, stream: str, start: int, limit: int | None
    ) -> list[StoredRecord]:
        """Return records of a stream from ``start``."""

    @abstractmethod
    async def _head(self, namespace: str, stream: str) -> int:
        """Return the last sequence number of a stream, 0 when empty."""

    @abstractmethod
    async def _streams(self, namespace: str) -> list[str]:
        """Return the non-empty streams of a namespace, in any order."""

    @abstractmethod
    async def _namespaces(self) -> list[str]:
        """Return the namespaces that hold streams, in any order."""

    @abstractmethod
    async def _delete_stream(self, namespace: str, stream: str) -> None:
        """Delete a stream's records."""

    @abstractmethod
    async def _delete_namespace(self, namespace: str) -> None:
        """Delete a namespace's streams and idempotency keys."""

    @abstractmethod
    async def _close(self) -> None:
        """Release resources."""

    async def _reclaim_space(self) -> str:
        """Reclaim the space of deleted records (backends override; by default nothing)."""
        return f"{type(self).__name__}: nothing to reclaim (deleted data is freed at once)"

    async def _idempotency_keys(self, namespace: str) -> list[StoredKey]:
        """Return a namespace's idempotency keys (backends override; the default cannot)."""
        raise JournalError(f"{type(self).__name__} ({self.url}) cannot list its idempotency keys")

    async def _restore_key(self, namespace: str, key: StoredKey) -> None:
        """Store a key that is not there yet (backends override; the default cannot)."""
        raise JournalError(f"{type(self).__name__} ({self.url}) cannot store a key on its own")
