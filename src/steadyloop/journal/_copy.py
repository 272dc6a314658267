"""Copy a journal to another backend, resumably, and prove that both sides hold the same.

A copy goes namespace by namespace, stream by stream (in code-point order), each stream
in sequence order and in chunks, each chunk one append that says which sequence number
it expects next. Records keep their ids, times, kinds and payloads, so they keep their
canonical text and their sequence numbers. Idempotency keys follow each namespace's
streams, with their digests and first results.

Resuming: nothing marks a copy as started. A destination stream that holds exactly the
first records of the source stream (an interrupted copy left it so) is continued after
its last record; one that holds anything else collides, and the copy is refused before
it writes anything. So a copy killed at any point is finished by running it again, and
nothing is written twice.

A batch that spanned several streams in the source arrives in the destination as one
append per stream: until the copy is finished, the destination may hold part of such a
batch. Open the destination only when the copy has ended with no difference.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from steadyloop._errors import CopyRefused
from steadyloop.journal._factory import redact_url
from steadyloop.journal._protocol import Journal, StoredKey, StreamWrite

__all__ = ["CopyReport", "Progress", "compare_journals", "copy_journal", "journal_digests"]

CHUNK = 500
"""Records per append while copying a stream."""

Progress = Callable[[str, str, int], Awaitable[None] | None]
"""Called after each chunk is durable in the destination: namespace, stream, and the
destination stream's last sequence number."""


@dataclass
class CopyReport:
    """What a copy did.

    Attributes:
        namespaces: Namespaces of the source.
        streams: Streams of the source.
        records_copied: Records this run wrote to the destination.
        records_present: Records an earlier, interrupted run had already written.
        keys_copied: Idempotency keys this run stored.
        keys_present: Keys that were already there.
        differences: What still differs after the copy (empty when both sides agree).
    """

    namespaces: int = 0
    streams: int = 0
    records_copied: int = 0
    records_present: int = 0
    keys_copied: int = 0
    keys_present: int = 0
    differences: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        """A JSON form (the CLI's ``--json``)."""
        return {
            "namespaces": self.namespaces,
            "streams": self.streams,
            "records_copied": self.records_copied,
            "records_present": self.records_present,
            "keys_copied": self.keys_copied,
            "keys_present": self.keys_present,
            "differences": list(self.differences),
        }


async def _stream_texts(journal: Journal, ns: str, stream: str) -> list[str]:
    return [r.record.to_json() for r in await journal.read(ns, stream)]


async def _plan(source: Journal, destination: Journal, merge: bool) -> dict[tuple[str, str], int]:
    """Check the destination against the source; return each stream's head there.

    Raises:
        CopyRefused: The destination holds streams the source lacks (without ``merge``),
            a stream that is not a beginning of the source's, or a key with another digest.
    """
    where = redact_url(destination.url)
    heads: dict[tuple[str, str], int] = {}
    source_streams: dict[str, set[str]] = {}
    for ns in await source.namespaces():
        source_streams[ns] = set(await source.streams(ns))
    for ns in await destination.namespaces():
        for stream in await destination.streams(ns):
            if stream not in source_streams.get(ns, set()):
                if not merge:
                    raise CopyRefused(
                        f"{where}: the destination is not empty: it holds {ns}/{stream}, which "
                        "the source does not; pass --merge to add the source's streams to it"
                    )
                continue
            theirs = await _stream_texts(destination, ns, stream)
            ours = await _stream_texts(source, ns, stream)
            if theirs != ours[: len(theirs)]:
                at = next(
                    (i + 1 for i, (a, b) in enumerate(zip(theirs, ours, strict=False)) if a != b),
                    len(ours) + 1,
                )
                raise CopyRefused(
                    f"{where}: stream {ns}/{stream} collides: record {at} differs from the "
                    "source's (or the source has no such record); nothing was copied"
                )
            heads[(ns, stream)] = len(theirs)
    for ns in source_streams:
        theirs_keys = {k.key: k for k in await destination.idempotency_keys(ns)}
        for key in await source.idempotency_keys(ns):
            found = theirs_keys.get(key.key)
            if found is not None and found.digest != key.digest:
                raise CopyRefused(
                    f"{where}: idempotency key {key.key!r} of namespace {ns!r} is there for "
                    "another batch; nothing was copied"
                )
    return heads


async def copy_journal(
    source: Journal,
    destination: Journal,
    *,
    merge: bool = False,
    chunk: int = CHUNK,
    on_progress: Progress | None = None,
) -> CopyReport:
    """Copy every stream, record and idempotency key of ``source`` into ``destination``.

    Ends by comparing both sides with [`compare_journals`][steadyloop.journal.compare_journals];
    the report's ``differences`` lists what differs (empty when the copy is exact).

    Args:
        source: The journal to copy; only read.
        destination: Where to copy to: empty, or left by an interrupted copy of the same
            source, or (with ``merge``) holding other streams too.
        merge: Allow the destination to hold streams the source does not have; they
            stay, and are left out of the comparison.
        chunk: Records per append.
        on_progress: Called after each chunk is durable.

    Raises:
        CopyRefused: The destination holds something that collides with the source;
            nothing was written.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    heads = await _plan(source, destination, merge)
    report = CopyReport()
    for ns in await source.namespaces():
        report.namespaces += 1
        for stream in await source.streams(ns):
            report.streams += 1
            head = heads.get((ns, stream), 0)
            report.records_present += head
            while True:
                records = await source.read(ns, stream, start=head + 1, limit=chunk)
                if not records:
                    break
                write = StreamWrite(stream, [r.record for r in records], expected_next=head + 1)
                await destination.append(ns, [write])
                head += len(records)
                report.records_copied += len(records)
                if on_progress is not None:
                    waiting = on_progress(ns, stream, head)
                    if waiting is not None:
                        await waiting
        for key in await source.idempotency_keys(ns):
            if await destination.restore_key(ns, key):
                report.keys_copied += 1
            else:
                report.keys_present += 1
    report.differences = await compare_journals(source, destination, only_source_streams=merge)
    return report


async def journal_digests(
    journal: Journal, *, streams: dict[str, set[str]] | None = None
) -> dict[str, dict[str, object]]:
    """A canonical digest of a journal: per namespace, per stream, and its keys.

    Each stream is summed up by its length and the SHA-256 of its records' canonical JSON
    (kind, payload, id and time), one per line, in sequence order, so two journals with
    the same digests hold the same records under the same sequence numbers. Keys are
    listed with their digests (and positions, where the backend keeps them).

    Args:
        journal: The journal.
        streams: Only these streams of these namespaces (all when ``None``).
    """
    out: dict[str, dict[str, object]] = {}
    names = sorted(streams) if streams is not None else await journal.namespaces()
    for ns in names:
        listed = await journal.streams(ns)
        wanted = [s for s in listed if streams is None or s in streams[ns]]
        per_stream: dict[str, object] = {}
        for stream in wanted:
            sha = hashlib.sha256()
            count = 0
            start = 1
            while True:
                records = await journal.read(ns, stream, start=start, limit=CHUNK)
                if not records:
                    break
                for r in records:
                    sha.update(r.record.to_json().encode("utf-8") + b"\n")
                count += len(records)
                start += len(records)
            per_stream[stream] = [count, sha.hexdigest()]
        keys = await journal.idempotency_keys(ns)
        out[ns] = {"streams": per_stream, "keys": {k.key: _key_form(k) for k in keys}}
    return out


def _key_form(key: StoredKey) -> object:
    if key.positions is None:
        return [key.digest, None]
    return [key.digest, {s: [a, b] for s, (a, b) in sorted(key.positions.items())}]


async def compare_journals(
    source: Journal, destination: Journal, *, only_source_streams: bool = False
) -> list[str]:
    """Return every difference between two journals' digests, one line each.

    Args:
        source: One side.
        destination: The other.
        only_source_streams: Compare only the streams (and keys) the source holds, for a
            destination that holds others too (a merge).
    """
    mine = await journal_digests(source)
    selection = {ns: set(v["streams"]) for ns, v in mine.items()}  # type: ignore[call-overload]
    theirs = await journal_digests(destination, streams=selection if only_source_streams else None)
    problems: list[str] = []
    for ns in sorted(set(mine) | set(theirs)):
        if ns not in theirs:
            problems.append(f"namespace {ns!r}: only in the source")
            continue
        if ns not in mine:
            problems.append(f"namespace {ns!r}: only in the destination")
            continue
        a, b = mine[ns]["streams"], theirs[ns]["streams"]
        assert isinstance(a, dict) and isinstance(b, dict)
        for stream in sorted(set(a) | set(b)):
            if a.get(stream) != b.get(stream):
                problems.append(
                    f"{ns}/{stream}: source {_describe(a.get(stream))}, "
                    f"destination {_describe(b.get(stream))}"
                )
        ka, kb = mine[ns]["keys"], theirs[ns]["keys"]
        assert isinstance(ka, dict) and isinstance(kb, dict)
        for key in sorted(set(ka) | set(kb)):
            if key not in kb:
                problems.append(f"{ns}: idempotency key {key!r} only in the source")
            elif key not in ka:
                if not only_source_streams:
                    problems.append(f"{ns}: idempotency key {key!r} only in the destination")
            elif not _same_key(ka[key], kb[key]):
                problems.append(f"{ns}: idempotency key {key!r} differs")
    return problems


def _same_key(a: object, b: object) -> bool:
    assert isinstance(a, list) and isinstance(b, list)
    if a[0] != b[0]:
        return False
    # A backend that keeps no stream names with a key (Redis, for keys it wrote itself)
    # cannot be compared on positions; the digest still has to match.
    return a[1] is None or b[1] is None or a[1] == b[1]


def _describe(value: object) -> str:
    if value is None:
        return "missing"
    assert isinstance(value, list)
    return f"{value[0]} records, sha256 {str(value[1])[:12]}"
