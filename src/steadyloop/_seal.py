"""The seal of a snapshot record: proof that it is the payload that was written, where.

A snapshot (``run.snapshot``, ``session.snapshot``, ``state.snapshot``) lets a reader
skip the records before it, so a wrong one would be believed. Each carries a ``seal``
field beside its other fields::

    "seal": {"digest": "sha256:<hex>", "seq": <n>, "crc": "<8 hex digits>"}

``digest``
    SHA-256 of the canonical JSON of the payload without its ``seal``.
``seq``
    The sequence number of the last record the snapshot covers (its own seq - 1).
``crc``
    The CRC-32 of that record's ``[kind, payload]`` in canonical JSON: the journal keeps
    no checksum per record on every backend, so the seal keeps its own.

A reader checks the seal (see [`seal_problem`][steadyloop._seal.seal_problem]) before it
trusts the snapshot, and folds the whole stream when it fails. This guards against
corruption (a flipped bit, an edited value, a record changed under it), not against
someone who recomputes the seal. A snapshot written before seals has none and is not
trusted either: the reader folds the whole stream, once, until a sealed snapshot follows.

A snapshot record whose stored text no longer parses as JSON can be passed over in the
same way, since everything it holds is in the records before it:
[`damaged_snapshot`][steadyloop._seal.damaged_snapshot] turns it into a record a reader
refuses, instead of an error that stops every read of the stream.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Mapping
from typing import Any

from steadyloop.records import JSONValue, Record, canonical_json

__all__ = [
    "DAMAGED",
    "SEAL",
    "SKIPPABLE_SUFFIX",
    "SNAPSHOT_KINDS",
    "damaged_snapshot",
    "first_report",
    "record_crc",
    "seal_problem",
    "sealed",
    "skippable",
    "unsealed",
]

SEAL = "seal"
"""The payload field that holds the seal."""

SNAPSHOT_KINDS = ("run.snapshot", "session.snapshot", "state.snapshot")
"""The record kinds that carry a seal, and that a reader may pass over when damaged."""

SKIPPABLE_SUFFIX = ".snapshot"
"""How a record kind says a reader may pass over it: its name ends so.

Such a record is *derived*: it holds nothing the records before it do not (a snapshot
is a shortcut to their fold). A reader that meets a kind it does not know passes over
it when the kind is skippable, and refuses any other unknown kind as corruption. So a
later release may add a derived kind (a new snapshot) without an earlier reader, in
a fleet mid-upgrade, reporting it as damage; a kind that carries facts of its own must
never end so.
"""


def skippable(kind: str) -> bool:
    """Whether a reader that does not know the record kind ``kind`` may pass over it."""
    return kind.endswith(SKIPPABLE_SUFFIX)


_REPORTED: set[tuple[str, ...]] = set()
_REPORTED_MAX = 4096

DAMAGED = "unreadable"
"""The only field of a snapshot payload standing in for stored text that did not parse."""


def record_crc(kind: str, payload: Mapping[str, Any]) -> str:
    """The CRC-32 (8 hex digits) of a record's ``[kind, payload]`` in canonical JSON."""
    data = canonical_json([kind, payload]).encode("utf-8")
    return f"{zlib.crc32(data):08x}"


def _digest(body: Mapping[str, Any]) -> str:
    text = canonical_json(body).encode("utf-8")
    return "sha256:" + hashlib.sha256(text).hexdigest()


def unsealed(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The payload without its seal."""
    return {k: v for k, v in payload.items() if k != SEAL}


def sealed(
    body: Mapping[str, JSONValue], seq: int, covered: tuple[str, Mapping[str, Any]] | None
) -> dict[str, JSONValue]:
    """``body`` with its seal: its digest, and the seq and CRC of the record it follows.

    Args:
        body: The snapshot payload, without a seal.
        seq: The seq of the last record the snapshot covers.
        covered: That record's kind and payload (``None`` only when ``seq`` is 0).
    """
    crc = None if covered is None else record_crc(*covered)
    return {**body, SEAL: {"digest": _digest(body), "seq": seq, "crc": crc}}


def seal_problem(
    payload: Mapping[str, Any], seq: int, covered: tuple[str, Mapping[str, Any]] | None
) -> str | None:
    """Why a snapshot stored at ``seq`` must not be trusted, or ``None`` when its seal holds.

    Args:
        payload: The snapshot's payload.
        seq: Its seq.
        covered: The kind and payload of the record stored before it (``None`` when it
            is not at hand, which fails the check).
    """
    if DAMAGED in payload:
        return f"its stored text is damaged ({payload[DAMAGED]})"
    seal = payload.get(SEAL)
    if seal is None:
        return "it has no seal (written before seals)"
    if not isinstance(seal, Mapping):
        return "its seal is not an object"
    if seal.get("digest") != _digest(unsealed(payload)):
        return "its digest does not match its payload"
    if seal.get("seq") != seq - 1:
        return f"its seal covers seq {seal.get('seq')!r}, not {seq - 1}"
    if covered is None:
        return f"the record it covers (seq {seq - 1}) was not read"
    if seal.get("crc") != record_crc(*covered):
        return f"the record it covers (seq {seq - 1}) has changed since"
    return None


_DAMAGED_TEXT = re.compile(
    r'\A\{"id":("(?:[^"\\]|\\.)*"),"kind":"(' + "|".join(map(re.escape, SNAPSHOT_KINDS)) + ')",'
    r'"payload":.*,"time":(-?\d+)\}\Z',
    re.DOTALL,
)


def damaged_snapshot(text: str, error: str) -> Record | None:
    """A stand-in for a snapshot record whose stored text does not parse, or ``None``.

    Only a record whose canonical frame (id, kind, the start of the payload, time) is
    intact and whose kind is a snapshot kind gets one: its payload is ``{"unreadable":
    error}``, which every reader refuses as a snapshot and a full fold passes over.
    Anything else stays the caller's corruption.
    """
    match = _DAMAGED_TEXT.match(text)
    if match is None:
        return None
    try:
        record_id = json.loads(match.group(1))
        return Record(
            kind=match.group(2), payload={DAMAGED: error}, id=record_id, time=int(match.group(3))
        )
    except (ValueError, TypeError):
        return None


def first_report(*where: str) -> bool:
    """Whether a snapshot that failed its check, named by ``where``, is reported first here.

    One process reads a damaged session snapshot again and again (each read of the
    session during a run) and folds the whole session each time; it warns the first
    time only, so a resume past a damaged snapshot logs one warning.
    """
    if where in _REPORTED:
        return False
    if len(_REPORTED) >= _REPORTED_MAX:
        _REPORTED.clear()
    _REPORTED.add(where)
    return True
