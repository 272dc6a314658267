r"""The JSONL backend: one append-only, human-readable file per namespace.

File format (every line is canonical JSON, terminated by ``\n``)::

    {"format":"steadyloop-jsonl","namespace":"demo","version":2}          header
    {"batch":1,"index":0,"size":2,"seq":1,"stream":"a","record":{...},
     "key":"k1","digest":"..."}                                           member 0 (+ key)
    {"batch":1,"check":"9f2c…","index":1,"size":2,"seq":1,"stream":"b",
     "record":{...}}                                                      member 1 (last)
    {"batch":2,"check":"…","delete":"a","index":0,"size":1}               stream deleted

The last line of every batch carries ``check``: the CRC-32 (8 hex digits) of the
batch's bytes as written, that last line taken without its ``,"check":"…"`` field.
Reading verifies it, so an edit that keeps every line valid JSON (``"sent":0`` made
``"sent":9``) is corruption too. A batch holding a snapshot record (``run.snapshot``,
``session.snapshot``) also carries ``frame`` on its last line: the CRC-32 of its other
lines as written, the last without ``check`` and ``frame``. When such a batch fails its
check (or a snapshot line of it does not parse) but its frame holds, only snapshot
lines changed: they are read as stand-ins that every reader refuses as a snapshot
(`steadyloop._seal.damaged_snapshot`), so resume folds the records before them. Older
readers ignore ``frame``. Files of version 1 were written before checksums:
they still read; their batches without a check are counted as unchecked
([JSONLJournal.unchecked_batches][steadyloop.journal.JSONLJournal.unchecked_batches]),
and batches appended to them now carry one. In a version 2 file every batch must.

Rules (DESIGN.md, "Journal"):

* A batch counts once its last line's newline is written and synced. An unterminated
  last line, or an incomplete last batch, is a *torn tail*: ignored on read and cut
  (then synced) before the next append.
* A terminated line that does not parse, a batch with a member missing before the end
  of the file, a batch that does not match its check (damage to snapshot lines alone
  aside, see above), a skipped batch number or sequence number is corruption:
  [`CorruptionError`][steadyloop.CorruptionError] names the file and line. Nothing is
  skipped.
* A new file is followed by an ``fsync`` of its directory.
* One writer per namespace file: the first write takes an exclusive ``flock`` that is
  held until `close`. A second writer, in this process or another, gets
  [`JournalLocked`][steadyloop.JournalLocked] at once. Readers never lock.

Durability: a returned ``append`` survives a process kill and power loss (the batch is
written with one ``write`` and made durable with one ``fsync``). Group commit: the
appends queued for one namespace by the time its writer is free share that ``write`` and
``fsync``, each batch with its own number and check, each checked and refused on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from steadyloop._errors import (
    BackendUnavailable,
    ConflictError,
    CorruptionError,
    EncodingError,
    IdempotencyKeyReused,
    SteadyloopError,
)
from steadyloop._seal import DAMAGED, SNAPSHOT_KINDS, damaged_snapshot
from steadyloop.journal._files import FileLock, Files
from steadyloop.journal._protocol import AppendResult, Journal, PreparedBatch, StoredKey
from steadyloop.records import (
    MAX_DEPTH,
    Record,
    StoredRecord,
    _encode_str,
    _trusted_record,
    canonical_json,
    decode,
)

__all__ = ["JSONLJournal", "namespace_filename"]

FORMAT = "steadyloop-jsonl"
VERSION = 2
"""The version new files get: 2 adds a check to every batch."""
READABLE_VERSIONS = (1, 2)
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_Outcome: TypeAlias = tuple[AppendResult | None, BaseException | None]
"""One batch's outcome in a group: its result, or the error that refused it alone."""
_Queued: TypeAlias = tuple[PreparedBatch | None, Any]
"""An append waiting for its namespace with its caller's future, or ``(None, marker)``:
an other operation's place in the queue."""


def _drop(waiting: list[_Queued], entry: _Queued) -> None:
    """Remove ``entry`` (by identity) from a namespace's queue, if it is still there."""
    for k, queued in enumerate(waiting):
        if queued is entry:
            del waiting[k]
            return


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


def _url(path: str | os.PathLike[str]) -> str:
    """The documented URL of a directory: ``jsonl:///`` and its absolute path."""
    return "jsonl://" + os.path.abspath(path)


def _check_directory(path: Path, create: bool) -> None:
    """Make sure ``path`` is a writable directory, creating it (and parents) if asked.

    Each directory created is followed by an ``fsync`` of its parent, so it survives
    power loss before the first file in it does.
    """
    if not path.exists():
        if not create:
            raise BackendUnavailable(f"{_url(path)}: no journal here (no such directory)")
        missing = [p for p in (path, *path.parents) if not p.exists()]
        try:
            path.mkdir(parents=True, exist_ok=True)
            for created in reversed(missing):
                Files().sync_directory(str(created.parent))
        except OSError as exc:
            raise BackendUnavailable(
                f"{_url(path)}: the directory cannot be created: {exc.strerror or exc}"
            ) from None
    if not path.is_dir():
        raise BackendUnavailable(f"{_url(path)}: not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise BackendUnavailable(f"{_url(path)}: directory is not writable")


def _is_snapshot(line: dict[str, Any]) -> bool:
    record = line.get("record")
    return isinstance(record, dict) and record.get("kind") in SNAPSHOT_KINDS


def _with_check(texts: list[str], snapshot: list[bool]) -> bytes:
    """The bytes of a batch's lines, its last line carrying the batch's check.

    Args:
        texts: Each member line's canonical JSON (see `_member_text`).
        snapshot: For each line, whether its record is a snapshot.

    A batch holding a snapshot record also carries ``frame`` on its last line: the
    CRC-32 of its other lines as written (the last taken without ``check`` and
    ``frame``). It lets a reader tell a batch whose only damage is in a snapshot line,
    which it may pass over (see the module doc), from any other damage.
    """
    if any(snapshot):
        framed = [t for t, s in zip(texts[:-1], snapshot[:-1], strict=True) if not s]
        if not snapshot[-1]:
            framed.append(texts[-1])
        crc = zlib.crc32("".join(t + "\n" for t in framed).encode("utf-8"))
        # Canonical JSON sorts keys: "frame" comes right before "index", the first
        # field after "batch" and the hex "digest" that can hold no quote.
        texts = [*texts[:-1], texts[-1].replace(',"index":', f',"frame":"{crc:08x}","index":', 1)]
    data = "".join(t + "\n" for t in texts).encode("utf-8")
    check = f"{zlib.crc32(data):08x}"
    # Canonical JSON sorts keys, and every member line starts with "batch": the check
    # is always the second field, so a reader finds and removes it textually.
    head, sep, rest_text = texts[-1].partition(",")
    last = f'{head}{sep}"check":"{check}",{rest_text}' if sep else texts[-1]
    return "".join(t + "\n" for t in [*texts[:-1], last]).encode("utf-8")


def _lines_with_check(lines: list[dict[str, Any]]) -> bytes:
    """``_with_check`` of lines given as objects (their records decoded into them)."""
    return _with_check([canonical_json(o) for o in lines], [_is_snapshot(o) for o in lines])


_SPLICE_BRACKETS = MAX_DEPTH - 8
"""A record text with fewer brackets than this cannot make its line too deep."""


def _member_text(obj: dict[str, Any], text: str) -> str:
    """``canonical_json`` of a member line holding the record whose canonical text is ``text``.

    The record's text is canonical JSON already, and canonical JSON sorts keys: the line
    is its fields before ``record``, the text, and its fields after, the same bytes as
    encoding the line with the record decoded into it, without decoding and encoding the
    record again. Only a record of many brackets could nest too deep once inside its
    line; it is encoded the long way, which refuses it.
    """
    if text.count("[") + text.count("{") >= _SPLICE_BRACKETS:
        return canonical_json({**obj, "record": decode(text)})
    parts = ['{"batch":', str(obj["batch"])]
    if "digest" in obj:
        parts += [',"digest":', _encode_str(obj["digest"])]
    parts += [',"index":', str(obj["index"])]
    if "key" in obj:
        parts += [',"key":', _encode_str(obj["key"])]
    parts += [',"record":', text, ',"seq":', str(obj["seq"]), ',"size":', str(obj["size"])]
    parts += [',"stream":', _encode_str(obj["stream"]), "}"]
    return "".join(parts)


_SNAPSHOT_LINE = re.compile(
    rb'\A\{"batch":(\d+),(?:"check":"([0-9a-f]{8})",)?(?:"digest":("(?:[^"\\]|\\.)*"),)?'
    rb'(?:"frame":"([0-9a-f]{8})",)?"index":(\d+),(?:"key":("(?:[^"\\]|\\.)*"),)?'
    rb'"record":(\{"id":.*\}),"seq":(\d+),"size":(\d+),"stream":("(?:[^"\\]|\\.)*")\}\Z',
    re.DOTALL,
)
"""A batch member line holding a record, read by its canonical frame alone."""


def _unparsed_snapshot(raw: bytes, error: str) -> dict[str, Any] | None:
    """A member line that does not parse, if its frame is intact and it holds a snapshot.

    Returns the line's fields, its record replaced by the stand-in every reader
    refuses as a snapshot (`steadyloop._seal.damaged_snapshot`), or ``None``: then the
    line is corruption. The caller still checks the batch's ``frame``.
    """
    match = _SNAPSHOT_LINE.match(raw)
    if match is None:
        return None
    try:
        stand_in = damaged_snapshot(match.group(7).decode("utf-8"), error)
        texts = {"digest": match.group(3), "key": match.group(6), "stream": match.group(10)}
        strings = {k: decode(v) for k, v in texts.items() if v is not None}
    except (UnicodeDecodeError, ValueError):
        return None
    if stand_in is None or not all(isinstance(v, str) for v in strings.values()):
        return None
    obj: dict[str, Any] = {
        "batch": int(match.group(1)),
        "index": int(match.group(5)),
        "record": stand_in.to_dict(),
        "seq": int(match.group(8)),
        "size": int(match.group(9)),
        **strings,
        "unparsed": True,
    }
    for name, group in (("check", 2), ("frame", 4)):
        if match.group(group) is not None:
            obj[name] = match.group(group).decode("ascii")
    return obj


def _pass_over(members: list[tuple[int, dict[str, Any]]], batch: int, why: str) -> None:
    """Read the snapshot lines of a damaged batch as stand-ins a reader refuses."""
    for _, obj in members:
        if _is_snapshot(obj) and not obj.get("unparsed"):
            record = obj["record"]
            stand_in = Record(
                kind=record["kind"],
                payload={DAMAGED: f"batch {batch} {why}"},
                id=record["id"],
                time=record["time"],
            )
            obj["text"] = stand_in.to_json()


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
    version: int = VERSION  # of the file's header
    unchecked: int = 0  # batches without a check (written before version 2)


class JSONLJournal(Journal):
    """A journal kept as JSON Lines files in one directory.

    Durability: survives process kill and power loss (``fsync`` per batch, or per group of
    batches queued together; directory ``fsync`` after creating a file).

    Args:
        directory: An existing, writable directory
            ([`open`][steadyloop.journal.JSONLJournal.open] creates a missing one).
        files: The file layer; tests pass a fault-injecting one.
    """

    def __init__(self, directory: str | os.PathLike[str], *, files: Files | None = None) -> None:
        super().__init__()
        self.directory = str(directory)
        self.url = _url(self.directory)
        self.files = files or Files()
        self._cache: dict[str, _Namespace] = {}
        self._locks: dict[str, FileLock] = {}
        self._fds: dict[str, int] = {}
        self._mutex: dict[str, asyncio.Lock] = {}
        self._broken: set[str] = set()
        self._poisoned: dict[str, str] = {}
        # Per namespace, the appends waiting for it, with their callers' futures.
        # An operation other than an append queues a barrier ``(None, marker)``.
        self._waiting: dict[str, list[_Queued]] = {}

    @classmethod
    async def open(
        cls, directory: str | os.PathLike[str], *, files: Files | None = None, create: bool = True
    ) -> JSONLJournal:
        """Open a JSONL journal in a directory.

        Args:
            directory: The directory; with ``create`` it is made if missing, parents
                included (``mkdir -p``), durably.
            files: The file layer; tests pass a fault-injecting one.
            create: Whether a missing directory is created. Tools that only inspect
                a journal pass ``False``: a mistyped path is then an error, not a new
                empty journal.

        Raises:
            BackendUnavailable: The directory is missing (with ``create=False``) or
                cannot be created, is not a directory, or is not writable.
        """
        await asyncio.to_thread(_check_directory, Path(directory), create)
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
        crc = 0  # of the open batch's lines so far
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
                unparsed = None if line_no == 1 else _unparsed_snapshot(raw, str(exc))
                if unparsed is None:
                    raise CorruptionError(f"line does not parse: {exc}", location=where) from None
                obj = unparsed
            if line_no == 1:
                state.version = self._check_header(obj, namespace, where)
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
                crc = framed = 0
            pending.append((line_no, obj))
            self._check_member(obj, pending, state, where)
            offset = end + 1
            check = obj.get("check")
            if len(pending) < obj["size"]:
                if check is not None or "frame" in obj:
                    raise CorruptionError("a check on a line inside its batch", location=where)
                crc = zlib.crc32(raw + b"\n", crc)
                if not _is_snapshot(obj):
                    framed = zlib.crc32(raw + b"\n", framed)
                continue
            if check is None:
                if state.version >= 2:
                    raise CorruptionError(
                        f"batch {obj['batch']} has no check (a version 2 file checks every batch)",
                        location=where,
                    )
                state.unchecked += 1
            else:
                field = f',"check":"{check}"'.encode() if isinstance(check, str) else b""
                if not field or field not in raw:
                    raise CorruptionError("malformed check field", location=where)
                unchecked = raw.replace(field, b"", 1)
                crc = zlib.crc32(unchecked + b"\n", crc)
                damaged = [n for n, o in pending if o.get("unparsed")]
                if f"{crc:08x}" != check or damaged:
                    first = pending[0][0]
                    lines = f"line {first}" if first == line_no else f"lines {first}-{line_no}"
                    why = f"({lines}) does not match its check ({crc:08x}, stored {check})"
                    if not _is_snapshot(obj):
                        frame = f',"frame":"{obj.get("frame")}"'.encode()
                        framed = zlib.crc32(unchecked.replace(frame, b"", 1) + b"\n", framed)
                    if obj.get("frame") != f"{framed:08x}":  # not only snapshot lines changed
                        if damaged:
                            raise CorruptionError(
                                "line does not parse", location=f"{path}:{damaged[0]}"
                            )
                        raise CorruptionError(
                            f"batch {obj['batch']} {why}: a line of it was changed",
                            location=f"{path}:{first}",
                        )
                    _pass_over(pending, obj["batch"], f"{why}; only its snapshot lines differ")
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

    def _check_header(self, obj: dict[str, Any], namespace: str, where: str) -> int:
        """Check a header line; return the file's version."""
        version = obj.get("version")
        if obj.get("format") != FORMAT or version not in READABLE_VERSIONS:
            raise CorruptionError(
                f"not a {FORMAT} file of version 1 or 2 (header {obj!r})", location=where
            )
        if obj.get("namespace") != namespace:
            raise CorruptionError(
                f"file belongs to namespace {obj.get('namespace')!r}, not {namespace!r}",
                location=where,
            )
        assert isinstance(version, int)
        return version

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
        if "restore" in obj:  # an idempotency key copied from another journal
            positions = obj.get("positions")
            if (
                size != 1
                or not isinstance(obj["restore"], str)
                or not isinstance(obj.get("digest"), str)
                or not isinstance(positions, dict)
                or not all(
                    isinstance(v, list) and len(v) == 2 and all(type(n) is int for n in v)
                    for v in positions.values()
                )
            ):
                raise CorruptionError("malformed restored-key line", location=where)
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
        if "restore" in head:
            result = {"namespace": "", "positions": head["positions"]}
            state.keys.setdefault(head["restore"], (head["digest"], result))
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
            state.version = VERSION
            header = canonical_json({"format": FORMAT, "namespace": namespace, "version": VERSION})
            self.files.write(fd, header.encode("utf-8") + b"\n")
            self.files.sync(fd)
            state.has_header = True
            state.valid_length = state.file_length = len(header.encode("utf-8")) + 1
        return state, fd

    def _write_lines(self, namespace: str, lines: list[dict[str, Any]]) -> _Namespace:
        state, fd = self._writable(namespace)
        self._write_payload(namespace, fd, state, _lines_with_check(lines))
        return state

    def _write_payload(self, namespace: str, fd: int, state: _Namespace, payload: bytes) -> None:
        """Write whole batches with one ``write`` and make them durable with one ``fsync``."""
        try:
            self.files.write(fd, payload)
            self.files.sync(fd)
        except OSError as exc:
            self._take_back(namespace, fd, state.file_length, exc)
            raise
        state.file_length += len(payload)
        state.valid_length = state.file_length

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

    def _append_group_sync(self, batches: list[PreparedBatch]) -> list[_Outcome]:
        """Write the batches of one namespace with one ``write`` and one ``fsync``.

        Each batch is checked (its key, its ``expected_next``) against the file as the
        batches before it in the group leave it, gets its own batch number and its own
        check, and is refused alone: a refused batch writes nothing and the others go
        on. A batch whose key an earlier batch of the group wrote is that batch's
        duplicate. If the write or the sync fails, the whole group is cut back out and
        the error is raised for all of them: none is reported durable.
        """
        ns = batches[0].namespace
        state, fd = self._writable(ns)
        heads: dict[str, int] = {}  # each touched stream's head, the group's batches included
        keys: dict[str, tuple[str, dict[str, Any]]] = {}  # the keys the group writes
        number = state.last_batch
        outcomes: list[_Outcome] = []
        planned: list[tuple[list[dict[str, Any]], list[str]]] = []
        payloads: list[bytes] = []
        for batch in batches:
            key = batch.idempotency_key
            if key is not None and (key in keys or key in state.keys):
                digest, stored = keys[key] if key in keys else state.keys[key]
                if digest != batch.digest:
                    outcomes.append((None, IdempotencyKeyReused(ns, key)))
                else:
                    result = AppendResult.from_dict({**stored, "namespace": ns}, duplicate=True)
                    outcomes.append((result, None))
                continue
            for w in batch.writes:
                if w.stream not in heads:
                    heads[w.stream] = len(state.streams.get(w.stream, []))
            refused = next(
                (
                    ConflictError(ns, w.stream, w.expected_next, heads[w.stream] + 1)
                    for w in batch.writes
                    if w.expected_next is not None and w.expected_next != heads[w.stream] + 1
                ),
                None,
            )
            if refused is not None:
                outcomes.append((None, refused))
                continue
            number += 1
            before = {w.stream: heads[w.stream] for w in batch.writes}
            lines: list[dict[str, Any]] = []
            positions: dict[str, tuple[int, int]] = {}
            texts_in_order: list[str] = []
            snapshot: list[bool] = []
            for w, texts in zip(batch.writes, batch.encoded, strict=True):
                first = heads[w.stream] + 1
                positions[w.stream] = (first, first + len(texts) - 1)
                heads[w.stream] += len(texts)
                for k, text in enumerate(texts):
                    lines.append({"batch": number, "stream": w.stream, "seq": first + k})
                    texts_in_order.append(text)
                    snapshot.append(w.records[k].kind in SNAPSHOT_KINDS)
            for index, obj in enumerate(lines):
                obj["index"], obj["size"] = index, len(lines)
            if key is not None:
                lines[0]["key"], lines[0]["digest"] = key, batch.digest
            try:
                payload = _with_check(
                    [
                        _member_text(obj, text)
                        for obj, text in zip(lines, texts_in_order, strict=True)
                    ],
                    snapshot,
                )
            except EncodingError as exc:
                # A line nests its record one level deeper than the record's own check
                # counts: such a batch is refused here, alone, and takes no number.
                number -= 1
                heads.update(before)
                outcomes.append((None, exc))
                continue
            if key is not None:
                keys[key] = (
                    batch.digest,
                    AppendResult(namespace="", positions=positions).to_dict(),
                )
            payloads.append(payload)
            planned.append((lines, texts_in_order))
            outcomes.append((AppendResult(namespace=ns, positions=positions), None))
        if payloads:
            self._write_payload(ns, fd, state, b"".join(payloads))
        # Only now, with the batches durable, does the in-memory view change.
        for lines, texts_in_order in planned:
            for obj, text in zip(lines, texts_in_order, strict=True):
                obj["text"] = text
            self._apply(state, [(0, obj) for obj in lines])
        return outcomes

    async def _guarded(self, namespace: str, fn: Any, *args: Any) -> Any:
        """Run ``fn`` in a thread while holding the namespace, even if we are cancelled.

        A cancelled caller cannot stop a thread that is writing: the namespace stays
        held until the thread is done, so the next operation never overlaps it, and
        the in-memory view (which the thread updates) matches the file.
        """
        # A place in the namespace's queue: appends queued after this operation are
        # not grouped with appends queued before it, so it sees exactly the earlier ones.
        barrier: _Queued = (None, object())
        waiting = self._waiting.setdefault(namespace, [])
        waiting.append(barrier)
        try:
            async with self._mutex_for(namespace):
                _drop(waiting, barrier)
                work = asyncio.ensure_future(asyncio.to_thread(fn, *args))
                return await self._work(namespace, work)
        finally:
            _drop(waiting, barrier)

    async def _work(self, namespace: str, work: asyncio.Future[Any]) -> Any:
        """Await a thread's work for `_guarded`, mapping its failure."""
        try:
            return await self._finish(work)
        except BaseException as exc:
            failure = self._failure(namespace, exc)
            if failure is exc:
                raise
            raise failure from exc

    def _failure(self, namespace: str, exc: BaseException) -> BaseException:
        """The error a caller sees for ``exc``; marks the namespace to be re-read if needed."""
        if isinstance(exc, SteadyloopError):
            return exc  # refused before anything was written
        # The file may now hold part of a batch: re-read it before the next use.
        self._broken.add(namespace)
        if isinstance(exc, OSError):
            failure = BackendUnavailable(f"{self.url} namespace {namespace!r}: {exc}")
            failure.__cause__ = exc
            return failure
        return exc

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
        """Append; the batches that queue for the namespace meanwhile share one sync.

        The caller that takes the namespace writes every batch queued for it by then
        (its own among them) as one group; the others find theirs settled when their
        turn comes. A caller alone writes alone, at once.
        """
        ns = batch.namespace
        mine: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(ns, []).append((batch, mine))
        try:
            async with self._mutex_for(ns):
                if not mine.done():
                    queued = self._waiting.get(ns, [])
                    cut = next((k for k, (b, _) in enumerate(queued) if b is None), len(queued))
                    group = [(b, f) for b, f in queued[:cut] if b is not None and not f.done()]
                    del queued[:cut]
                    assert any(f is mine for _, f in group)
                    batches = [b for b, _ in group]
                    work = asyncio.ensure_future(
                        asyncio.to_thread(self._append_group_sync, batches)
                    )
                    try:
                        with contextlib.suppress(Exception):  # each caller gets its own below
                            await self._finish(work)
                    finally:
                        self._settle(namespace=ns, group=group, work=work)
                        # Marked as read: a caller leaving by a crash (a BaseException
                        # from the write) or a cancel never reads its own future.
                        mine.exception()
            return mine.result()
        except asyncio.CancelledError:
            mine.cancel()  # not yet taken: no group writes it; taken: it runs to its end
            raise

    def _settle(
        self,
        *,
        namespace: str,
        group: list[tuple[PreparedBatch, asyncio.Future[AppendResult]]],
        work: asyncio.Future[list[_Outcome]],
    ) -> None:
        """Give each caller of a finished group its own outcome (or the group's error)."""
        error = work.exception()
        outcomes: list[_Outcome] = (
            [(None, self._failure(namespace, error))] * len(group)
            if error is not None
            else work.result()
        )
        for (_, future), (result, refused) in zip(group, outcomes, strict=True):
            if future.done():
                continue
            if refused is not None:
                future.set_exception(refused)
            else:
                assert result is not None
                future.set_result(result)

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

    def _restore_key_sync(self, namespace: str, key: StoredKey) -> None:
        state = self._state_for_write(namespace)
        if key.key in state.keys:
            return
        positions = {s: [a, b] for s, (a, b) in sorted((key.positions or {}).items())}
        line = {
            "batch": state.last_batch + 1,
            "restore": key.key,
            "digest": key.digest,
            "positions": positions,
            "index": 0,
            "size": 1,
        }
        self._write_lines(namespace, [line])
        state.last_batch += 1
        state.keys[key.key] = (key.digest, {"namespace": "", "positions": positions})

    async def _restore_key(self, namespace: str, key: StoredKey) -> None:
        await self._guarded(namespace, self._restore_key_sync, namespace, key)

    def _compact_sync(self, namespace: str) -> int:
        """Rewrite a namespace file with only the records and keys it holds; return bytes saved.

        The new file (one batch per stream, then one line per key) is written beside the
        old one, synced, and renamed over it, so a crash leaves the old file or the new
        one, never a mix. Deleted streams and superseded lines are gone from the disk.
        """
        path = self._path(namespace)
        if not os.path.exists(path):
            return 0
        state, fd = self._writable(namespace)
        header = canonical_json({"format": FORMAT, "namespace": namespace, "version": VERSION})
        chunks = [header.encode("utf-8") + b"\n"]
        number = 0
        for stream, texts in state.streams.items():
            if not texts:
                continue
            number += 1
            lines = [
                {
                    "batch": number,
                    "index": k,
                    "record": decode(text),
                    "seq": k + 1,
                    "size": len(texts),
                    "stream": stream,
                }
                for k, text in enumerate(texts)
            ]
            chunks.append(_lines_with_check(lines))
        for key, (digest, result) in state.keys.items():
            number += 1
            line = {
                "batch": number,
                "digest": digest,
                "index": 0,
                "positions": result["positions"],
                "restore": key,
                "size": 1,
            }
            chunks.append(_lines_with_check([line]))
        data = b"".join(chunks)
        temporary = path + ".compact"
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        new_fd, _ = self.files.open_append(temporary)
        try:
            self.files.write(new_fd, data)
            self.files.sync(new_fd)
        finally:
            self.files.close(new_fd)
        os.replace(temporary, path)
        self.files.sync_directory(self.directory)
        saved = state.file_length - len(data)
        self.files.close(fd)
        self._fds.pop(namespace, None)
        self._cache.pop(namespace, None)
        return saved

    async def _reclaim_space(self) -> str:
        saved = 0
        names = await asyncio.to_thread(self._header_namespaces)
        for namespace in names:
            saved += await self._guarded(namespace, self._compact_sync, namespace)
        return f"{self.url}: rewrote {len(names)} namespace file(s), {saved} bytes freed"

    async def _idempotency_keys(self, namespace: str) -> list[StoredKey]:
        state = await self._guarded(namespace, self._state, namespace)
        out: list[StoredKey] = []
        for key, (digest, result) in state.keys.items():
            stored = AppendResult.from_dict({**result, "namespace": namespace}, duplicate=True)
            out.append(StoredKey(key, digest, dict(stored.positions)))
        return out

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

    def namespace_path(self, namespace: str) -> str:
        """The file a namespace lives in."""
        return self._path(namespace)

    def unchecked_batches(self, namespace: str) -> int:
        """How many batches of a namespace file carry no check (for ``doctor``).

        Only files written before checksums (version 1) may hold such batches.

        Raises:
            CorruptionError: The file is damaged.
        """
        path = self._path(namespace)
        return self._parse(namespace, path, self.files.read(path) or b"").unchecked

    def torn_tail(self, namespace: str) -> str | None:
        """Describe the torn tail of a namespace file, if it has one (for ``doctor``)."""
        state = self._parse(
            namespace, self._path(namespace), self.files.read(self._path(namespace)) or b""
        )
        return None if state.torn is None else f"{state.path}: {state.torn}"

    def _release_after_death(self) -> None:
        """Free what the kernel frees when a process dies: descriptors, hence locks.

        Writes nothing (nothing is held back: every append is durable when it
        returns). For crash kits (see [abandon][steadyloop.testing.abandon]).
        """
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        for lock in self._locks.values():
            lock.release()
        self._locks.clear()
        self._cache.clear()

    async def _close(self) -> None:
        for fd in self._fds.values():
            self.files.close(fd)
        self._fds.clear()
        for lock in self._locks.values():
            lock.release()
        self._locks.clear()
        self._cache.clear()
