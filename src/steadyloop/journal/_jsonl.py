r"""The JSONL backend: one append-only, human-readable file per namespace.

File format (every line is canonical JSON, terminated by ``\n``)::

    {"format":"steadyloop-jsonl","namespace":"demo","version":1}          header
    {"batch":1,"index":0,"size":2,"seq":1,"stream":"a","record":{...},
     "key":"k1","digest":"..."}                                           member 0 (+ key)
    {"batch":1,"index":1,"size":2,"seq":1,"stream":"b","record":{...}}    member 1
    {"batch":2,"delete":"a","index":0,"size":1}                           stream deleted

Rules (DESIGN.md, "Journal"):

* A batch counts once its last line's newline is written and synced. An unterminated
  last line, or an incomplete last batch, is a *torn tail*: ignored on read and cut
  (then synced) before the next append.
* A terminated line that does not parse, a batch with a member missing before the
  end of the file, a skipped batch number or sequence number is corruption:
  [`CorruptionError`][steadyloop.CorruptionError] names the file and line. Nothing is skipped.
* A new file is followed by an ``fsync`` of its directory.
* One writer per namespace file: the first write takes an exclusive ``flock`` that is
  held until `close`. A second writer, in this process or another, gets
  [`JournalLocked`][steadyloop.JournalLocked] at once. Readers never lock.

Durability: a returned ``append`` survives a process kill and power loss (the batch is
written with one ``write`` and made durable with one ``fsync``).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steadyloop._errors import (
    BackendUnavailable,
    ConflictError,
    CorruptionError,
    IdempotencyKeyReused,
    SteadyloopError,
)
from steadyloop.journal._files import FileLock, Files
from steadyloop.journal._protocol import AppendResult, Journal, PreparedBatch
from steadyloop.records import Record, StoredRecord, _trusted_record, canonical_json, decode

__all__ = ["JSONLJournal", "namespace_filename"]

FORMAT = "steadyloop-jsonl"
VERSION = 1
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


def namespace_filename(namespace: str) -> str:
    """Map a namespace to a file name that is safe on any file system.

    Only lowercase ASCII letters, digits, ``_`` and ``-`` are kept; everything else,
    uppercase letters included, is percent-encoded, so names differing only by case
    stay apart on case-insensitive file systems. Long names are shortened with a hash.
    """
    out = "".join(
        ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8")) for ch in namespace
    )
    if len(out) > 180:
        out = out[:100] + "~" + hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:40]
    return out + ".jsonl"


def _check_directory(path: Path) -> None:
    if not path.exists():
        raise BackendUnavailable(f"jsonl://{path}: directory does not exist")
    if not path.is_dir():
        raise BackendUnavailable(f"jsonl://{path}: not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise BackendUnavailable(f"jsonl://{path}: directory is not writable")


@dataclass
class _Namespace:
    """What one namespace file holds, parsed."""

    path: str
    # Each stream's records as canonical JSON text; reads decode fresh copies, so no
    # caller can change the view by mutating a payload it wrote or read.
    streams: dict[str, list[str]] = field(default_factory=dict)
    keys: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    last_batch: int = 0
    valid_length: int = 0  # bytes up to the end of the last complete batch
    file_length: int = 0  # bytes in the file, torn tail included
    has_header: bool = False
    stamp: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) when parsed
    torn: str | None = None  # description of the torn tail, if any


class JSONLJournal(Journal):
    """A journal kept as JSON Lines files in one directory.

    Durability: survives process kill and power loss (``fsync`` per batch, directory
    ``fsync`` after creating a file).

    Args:
        directory: An existing, writable directory.
        files: The file layer; tests pass a fault-injecting one.
    """

    def __init__(self, directory: str | os.PathLike[str], *, files: Files | None = None) -> None:
        super().__init__()
        self.directory = str(directory)
        self.url = f"jsonl://{self.directory}"
        self.files = files or Files()
        self._cache: dict[str, _Namespace] = {}
        self._locks: dict[str, FileLock] = {}
        self._fds: dict[str, int] = {}
        self._mutex: dict[str, asyncio.Lock] = {}
        self._broken: set[str] = set()
        self._poisoned: dict[str, str] = {}

    @classmethod
    async def open(
        cls, directory: str | os.PathLike[str], *, files: Files | None = None
    ) -> JSONLJournal:
        """Open a JSONL journal in an existing directory.

        Raises:
            BackendUnavailable: The directory is missing, not a directory, or not
                writable.
        """
        await asyncio.to_thread(_check_directory, Path(directory))
        return cls(directory, files=files)

    # -- paths and parsing ----------------------------------------------------------

    def _path(self, namespace: str) -> str:
        return os.path.join(self.directory, namespace_filename(namespace))

    def _state(self, namespace: str) -> _Namespace:
        """Return the parsed state of a namespace, re-reading the file if it changed."""
        path = self._path(namespace)
        held = namespace in self._locks and namespace not in self._broken
        cached = self._cache.get(namespace)
        if held and cached is not None:
            return cached
        try:
            st = os.stat(path)
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            stamp = None
        if cached is not None and cached.stamp == stamp and stamp is not None:
            return cached
        state = self._parse(namespace, path, self.files.read(path) or b"")
        state.stamp = stamp
        self._cache[namespace] = state
        self._broken.discard(namespace)
        return state

    def _parse(self, namespace: str, path: str, data: bytes) -> _Namespace:
        state = _Namespace(path=path, file_length=len(data))
        pending: list[tuple[int, dict[str, Any]]] = []  # (line number, obj) of open batch
        pending_start = 0
        offset = 0
        line_no = 0
        while offset < len(data):
            end = data.find(b"\n", offset)
            line_no += 1
            if end < 0:
                state.torn = f"line {line_no} is not terminated ({len(data) - offset} bytes)"
                break
            raw = data[offset:end]
            where = f"{path}:{line_no}"
            try:
                obj = decode(raw)
                if not isinstance(obj, dict):
                    raise ValueError("a line must be a JSON object")
            except (ValueError, UnicodeDecodeError) as exc:
                raise CorruptionError(f"line does not parse: {exc}", location=where) from None
            if line_no == 1:
                self._check_header(obj, namespace, where)
                state.has_header = True
                offset = end + 1
                state.valid_length = offset
                continue
            if obj.get("index") == 0 and pending:
                first_line = pending[0][0]
                raise CorruptionError(
                    f"batch {pending[0][1].get('batch')} that starts at line {first_line} "
                    f"has {len(pending)} of {pending[0][1].get('size')} members",
                    location=where,
                )
            if not pending:
                pending_start = offset
            pending.append((line_no, obj))
            self._check_member(obj, pending, state, where)
            offset = end + 1
            if len(pending) == obj["size"]:
                self._apply(state, pending)
                pending = []
                state.valid_length = offset
        if pending:
            missing = pending[0][1]["size"] - len(pending)
            state.torn = (
                f"batch {pending[0][1]['batch']} at line {pending[0][0]} is missing its last "
                f"{missing} member(s)"
            )
        if state.torn is not None:
            state.valid_length = pending_start if pending else offset
        return state

    def _check_header(self, obj: dict[str, Any], namespace: str, where: str) -> None:
        if obj.get("format") != FORMAT or obj.get("version") != VERSION:
            raise CorruptionError(
                f"not a {FORMAT} version {VERSION} file (header {obj!r})", location=where
            )
        if obj.get("namespace") != namespace:
            raise CorruptionError(
                f"file belongs to namespace {obj.get('namespace')!r}, not {namespace!r}",
                location=where,
            )

    @staticmethod
    def _check_member(
        obj: dict[str, Any],
        pending: list[tuple[int, dict[str, Any]]],
        state: _Namespace,
        where: str,
    ) -> None:
        index, size, batch = obj.get("index"), obj.get("size"), obj.get("batch")
        for name, value in (("batch", batch), ("index", index), ("size", size)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise CorruptionError(
                    f"field {name!r} is missing or not an integer", location=where
                )
        assert isinstance(size, int) and isinstance(index, int)
        if size < 1:
            raise CorruptionError(f"batch size {size} is not positive", location=where)
        head = pending[0][1]
        if index != len(pending) - 1 or size != head["size"] or batch != head["batch"]:
            raise CorruptionError(
                f"expected member {len(pending) - 1} of batch {head['batch']} "
                f"(size {head['size']}), found member {index} of batch {batch} (size {size})",
                location=where,
            )
        if index == 0 and batch != state.last_batch + 1:
            raise CorruptionError(
                f"batch number {batch} follows batch {state.last_batch}: a batch is missing",
                location=where,
            )
        if "delete" in obj:
            if size != 1 or not isinstance(obj["delete"], str):
                raise CorruptionError("malformed delete line", location=where)
            return
        stream, seq = obj.get("stream"), obj.get("seq")
        if not isinstance(stream, str) or isinstance(seq, bool) or not isinstance(seq, int):
            raise CorruptionError("field 'stream' or 'seq' is missing or wrong", location=where)
        records = state.streams.get(stream, [])
        earlier = sum(1 for _, o in pending[:-1] if o.get("stream") == stream)
        if seq != len(records) + earlier + 1:
            raise CorruptionError(
                f"stream {stream!r} jumps to sequence {seq}; expected {len(records) + earlier + 1}",
                location=where,
            )
        try:
            obj["text"] = Record.from_dict(obj["record"]).to_json()
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptionError(f"record does not decode: {exc}", location=where) from None

    @staticmethod
    def _apply(state: _Namespace, members: list[tuple[int, dict[str, Any]]]) -> None:
        head = members[0][1]
        state.last_batch = head["batch"]
        if "delete" in head:
            state.streams.pop(head["delete"], None)
            return
        positions: dict[str, tuple[int, int]] = {}
        for _, obj in members:
            stream, seq = obj["stream"], obj["seq"]
            state.streams.setdefault(stream, []).append(obj["text"])
            first = positions.get(stream, (seq, seq))[0]
            positions[stream] = (first, seq)
        if "key" in head:
            result = AppendResult(namespace="", positions=positions).to_dict()
            state.keys[head["key"]] = (head.get("digest", ""), result)

    # -- writing ------------------------------------------------------------------------

    def _mutex_for(self, namespace: str) -> asyncio.Lock:
        lock = self._mutex.get(namespace)
        if lock is None:
            lock = self._mutex[namespace] = asyncio.Lock()
        return lock

    def _writable(self, namespace: str) -> tuple[_Namespace, int]:
        """Take the namespace's lock, load it, cut a torn tail; return state and fd."""
        poisoned = self._poisoned.get(namespace)
        if poisoned is not None:
            raise BackendUnavailable(poisoned)
        if namespace not in self._locks:
            lock = FileLock(self._path(namespace)[: -len(".jsonl")] + ".lock")
            lock.acquire(f"{self.url} namespace {namespace!r}")
            self._locks[namespace] = lock
            self._cache.pop(namespace, None)
        if namespace in self._broken:
            self._cache.pop(namespace, None)
            self._broken.discard(namespace)
            fd = self._fds.pop(namespace, None)
            if fd is not None:
                self.files.close(fd)
        state = self._cache.get(namespace)
        if state is None:
            state = self._parse(
                namespace, self._path(namespace), self.files.read(self._path(namespace)) or b""
            )
            self._cache[namespace] = state
        fd = self._fds.get(namespace)
        if fd is None:
            fd, created = self.files.open_append(state.path)
            self._fds[namespace] = fd
            if created:
                self.files.sync_directory(self.directory)
        if state.file_length > state.valid_length:
            # A torn tail: cut it, and make the cut durable before anything follows it.
            self.files.truncate(fd, state.valid_length)
            self.files.sync(fd)
            state.file_length = state.valid_length
            state.torn = None
        if not state.has_header:
            header = canonical_json({"format": FORMAT, "namespace": namespace, "version": VERSION})
            self.files.write(fd, header.encode("utf-8") + b"\n")
            self.files.sync(fd)
            state.has_header = True
            state.valid_length = state.file_length = len(header.encode("utf-8")) + 1
        return state, fd

    def _write_lines(self, namespace: str, lines: list[dict[str, Any]]) -> _Namespace:
        state, fd = self._writable(namespace)
        payload = "".join(canonical_json(obj) + "\n" for obj in lines).encode("utf-8")
        try:
            self.files.write(fd, payload)
            self.files.sync(fd)
        except OSError as exc:
            self._take_back(namespace, fd, state.file_length, exc)
            raise
        state.file_length += len(payload)
        state.valid_length = state.file_length
        return state

    def _take_back(self, namespace: str, fd: int, length: int, exc: OSError) -> None:
        """Cut a batch whose write or ``fsync`` failed back out of the file, durably.

        After a failed ``fsync`` the page cache may still show the batch while the
        disk never gets it (Linux marks the pages clean), so it must not be read back
        as written: a retry with its idempotency key would be told it is durable. If
        even the cut cannot be made durable, the namespace refuses every later write
        in this journal: what the disk holds is unknown.
        """
        try:
            self.files.truncate(fd, length)
            self.files.sync(fd)
        except OSError as again:
            self._poisoned[namespace] = (
                f"{self.url} namespace {namespace!r}: a write failed ({exc}) and the "
                f"batch could not be cut back out ({again}); the file may hold a batch "
                "that is not durable. Check the disk, then open the journal again"
            )
            raise BackendUnavailable(self._poisoned[namespace]) from again

    def _append_sync(self, batch: PreparedBatch) -> AppendResult:
        ns = batch.namespace
        state, _ = self._writable(ns)
        key = batch.idempotency_key
        if key is not None and key in state.keys:
            digest, result = state.keys[key]
            if digest != batch.digest:
                raise IdempotencyKeyReused(ns, key)
            return AppendResult.from_dict({**result, "namespace": ns}, duplicate=True)
        heads = {w.stream: len(state.streams.get(w.stream, [])) for w in batch.writes}
        for w in batch.writes:
            if w.expected_next is not None and w.expected_next != heads[w.stream] + 1:
                raise ConflictError(ns, w.stream, w.expected_next, heads[w.stream] + 1)
        number = state.last_batch + 1
        lines: list[dict[str, Any]] = []
        positions: dict[str, tuple[int, int]] = {}
        texts_in_order: list[str] = []
        for w, texts in zip(batch.writes, batch.encoded, strict=True):
            first = heads[w.stream] + 1
            positions[w.stream] = (first, first + len(texts) - 1)
            for k, text in enumerate(texts):
                lines.append(
                    {"batch": number, "stream": w.stream, "seq": first + k, "record": decode(text)}
                )
                texts_in_order.append(text)
        for index, obj in enumerate(lines):
            obj["index"], obj["size"] = index, len(lines)
        if key is not None:
            lines[0]["key"], lines[0]["digest"] = key, batch.digest
        self._write_lines(ns, lines)
        # Only now, with the batch durable, does the in-memory view change.
        for obj, text in zip(lines, texts_in_order, strict=True):
            obj["text"] = text
        self._apply(state, [(0, obj) for obj in lines])
        return AppendResult(namespace=ns, positions=positions)

    async def _guarded(self, namespace: str, fn: Any, *args: Any) -> Any:
        """Run ``fn`` in a thread while holding the namespace, even if we are cancelled.

        A cancelled caller cannot stop a thread that is writing: the namespace stays
        held until the thread is done, so the next operation never overlaps it, and
        the in-memory view (which the thread updates) matches the file.
        """
        async with self._mutex_for(namespace):
            work = asyncio.ensure_future(asyncio.to_thread(fn, *args))
            try:
                return await self._finish(work)
            except SteadyloopError:
                raise  # refused before anything was written
            except OSError as exc:
                # The file may now hold part of a batch: re-read it before the next use.
                self._broken.add(namespace)
                raise BackendUnavailable(f"{self.url} namespace {namespace!r}: {exc}") from exc
            except BaseException:
                self._broken.add(namespace)
                raise

    @staticmethod
    async def _finish(work: asyncio.Future[Any]) -> Any:
        """Await ``work``; if cancelled meanwhile, still wait for it, then re-raise."""
        cancelled: asyncio.CancelledError | None = None
        while True:
            try:
                result = await asyncio.shield(work)
            except asyncio.CancelledError as exc:
                if work.done():
                    raise  # the work itself was cancelled (cannot happen to a thread)
                cancelled = exc
                continue
            if cancelled is not None:
                raise cancelled
            return result

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        result: AppendResult = await self._guarded(batch.namespace, self._append_sync, batch)
        return result

    def _delete_stream_sync(self, namespace: str, stream: str) -> None:
        state = self._state_for_write(namespace)
        if stream not in state.streams:
            return
        self._write_lines(
            namespace,
            [{"batch": state.last_batch + 1, "delete": stream, "index": 0, "size": 1}],
        )
        state.last_batch += 1
        state.streams.pop(stream, None)

    def _state_for_write(self, namespace: str) -> _Namespace:
        state, _ = self._writable(namespace)
        return state

    async def _delete_stream(self, namespace: str, stream: str) -> None:
        await self._guarded(namespace, self._delete_stream_sync, namespace, stream)

    def _delete_namespace_sync(self, namespace: str) -> None:
        path = self._path(namespace)
        if not os.path.exists(path):
            return
        self._state_for_write(namespace)
        fd = self._fds.pop(namespace, None)
        if fd is not None:
            self.files.close(fd)
        self.files.remove(path)
        self.files.sync_directory(self.directory)
        self._cache.pop(namespace, None)

    async def _delete_namespace(self, namespace: str) -> None:
        await self._guarded(namespace, self._delete_namespace_sync, namespace)

    # -- reading --------------------------------------------------------------------

    async def _read(
        self, namespace: str, stream: str, start: int, limit: int | None
    ) -> list[StoredRecord]:
        state = await self._guarded(namespace, self._state, namespace)
        texts: list[str] = state.streams.get(stream, [])
        end = None if limit is None else start - 1 + limit
        out: list[StoredRecord] = []
        for offset, text in enumerate(texts[start - 1 : end]):
            data = decode(text)  # checked when parsed or appended
            record = _trusted_record(data["kind"], data["payload"], data["id"], data["time"])
            out.append(StoredRecord(stream=stream, seq=start + offset, record=record))
        return out

    async def _head(self, namespace: str, stream: str) -> int:
        state = await self._guarded(namespace, self._state, namespace)
        return len(state.streams.get(stream, []))

    async def _streams(self, namespace: str) -> list[str]:
        state = await self._guarded(namespace, self._state, namespace)
        return [s for s, recs in state.streams.items() if recs]

    async def _namespaces(self) -> list[str]:
        names: list[str] = []
        for namespace in await asyncio.to_thread(self._header_namespaces):
            # Parsing a namespace goes through its lock, like every other operation on
            # it, so a parse here can never race (and overwrite) an append's view.
            try:
                state = await self._guarded(namespace, self._state, namespace)
            except CorruptionError:
                names.append(namespace)  # damaged, but it holds something: list it
                continue
            if any(state.streams.values()):
                names.append(namespace)
        return names

    def _header_namespaces(self) -> list[str]:
        """The namespaces named by the header lines of the directory's files."""
        names: list[str] = []
        for entry in self.files.listdir(self.directory):
            if not entry.endswith(".jsonl"):
                continue
            data = self.files.read(os.path.join(self.directory, entry)) or b""
            first, sep, _ = data.partition(b"\n")
            if not sep:
                continue  # a file whose header never became durable holds nothing
            try:
                header = decode(first)
            except ValueError:
                raise CorruptionError(
                    "header does not parse", location=f"{self.directory}/{entry}:1"
                ) from None
            namespace = header.get("namespace") if isinstance(header, dict) else None
            if isinstance(namespace, str):
                names.append(namespace)
        return names

    def torn_tail(self, namespace: str) -> str | None:
        """Describe the torn tail of a namespace file, if it has one (for ``doctor``)."""
        state = self._parse(
            namespace, self._path(namespace), self.files.read(self._path(namespace)) or b""
        )
        return None if state.torn is None else f"{state.path}: {state.torn}"

    async def _close(self) -> None:
        for fd in self._fds.values():
            self.files.close(fd)
        self._fds.clear()
        for lock in self._locks.values():
            lock.release()
        self._locks.clear()
        self._cache.clear()
