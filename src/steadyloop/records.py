"""Typed records, their canonical encoding, and injectable clocks and id sources.

A [`Record`][steadyloop.records.Record] is what a writer hands to the journal: a ``kind``, a
JSON payload, and the metadata the writer sets (its id and its time). The journal adds the
stream and the sequence number ([`StoredRecord`][steadyloop.records.StoredRecord]).

The canonical encoding is UTF-8 JSON with sorted keys, no insignificant whitespace, no
NaN or Infinity, integers kept exact and times as integer microseconds since the epoch.
The same record encodes to the same bytes on every backend, which is what makes
snapshots comparable byte for byte.

Examples:
    >>> from steadyloop.records import RecordFactory, SequentialIds, StepClock
    >>> make = RecordFactory(clock=StepClock(start=1_000_000), ids=SequentialIds("r"))
    >>> rec = make("note", {"b": 1, "a": "x"})
    >>> rec.to_json()
    '{"id":"r-000001","kind":"note","payload":{"a":"x","b":1},"time":1000000}'
"""

from __future__ import annotations

import itertools
import json
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, runtime_checkable

import orjson

from steadyloop._errors import EncodingError

__all__ = [
    "INTENT_KIND",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "RESULT_KIND",
    "Clock",
    "IdSource",
    "JSONValue",
    "RandomIds",
    "Record",
    "RecordFactory",
    "SequentialIds",
    "StepClock",
    "StoredRecord",
    "SystemClock",
    "canonical_json",
    "check_canonical",
    "decode",
    "encode",
]

INTENT_KIND = "effect.intent"
"""Kind of the record written, and made durable, before an external effect.

Its payload carries ``intent_id`` (unique in the namespace) and ``policy``."""

RESULT_KIND = "effect.result"
"""Kind of the record written after an external effect; payload carries ``intent_id``."""

MAX_DEPTH = 512
"""Deepest nesting of lists and objects a canonical value may have (a cycle is refused)."""

MAX_INT_DIGITS = 4300
"""Longest integer, in decimal digits, a canonical value may hold (Python's own limit
for turning integers into text; every backend can then read back what it stored)."""

_MAX_INT_BITS = int(MAX_INT_DIGITS / 0.30103)  # bits of the largest such integer, roughly

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None
"""A value the canonical encoding accepts."""


def _escape_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def check_canonical(value: object, path: str = "") -> None:
    """Check that ``value`` can be encoded canonically.

    Args:
        value: The value to check.
        path: JSON Pointer of ``value`` inside the enclosing document, used in errors.

    Raises:
        EncodingError: If the value (or anything inside it) is not a JSON string, finite
            number, boolean, null, list or string-keyed mapping, or holds a string that
            is not valid Unicode (a lone surrogate). The error names the JSON Pointer.
    """
    if _plain_structure(value, texts=True):
        return
    # The slow pass runs only when the fast one found something unusual: it names the
    # JSON Pointer of the problem, or accepts what the fast pass does not know (a
    # Mapping that is not a dict, a subclass of str or int).
    # An explicit stack keeps deep documents from hitting the recursion limit.
    stack: list[tuple[object, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise EncodingError(
                f"the value is nested more than {MAX_DEPTH} levels deep (or holds itself)",
                path=where,
            )
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if item.bit_length() > _MAX_INT_BITS:
                raise EncodingError(
                    f"an integer of {item.bit_length()} bits has more than "
                    f"{MAX_INT_DIGITS} decimal digits",
                    path=where,
                )
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise EncodingError(f"{item!r} is not a finite number", path=where)
            continue
        if isinstance(item, str):
            _check_text(item, where)
            continue
        if isinstance(item, list | tuple):
            stack.extend((v, f"{where}/{i}", depth + 1) for i, v in enumerate(item))
            continue
        if isinstance(item, Mapping):
            for key, v in item.items():
                if not isinstance(key, str):
                    raise EncodingError(
                        f"mapping key {key!r} is a {type(key).__name__}, not a string",
                        path=where,
                    )
                _check_text(key, where)
                stack.append((v, f"{where}/{_escape_pointer(key)}", depth + 1))
            continue
        raise EncodingError(
            f"a value of type {type(item).__name__} has no canonical JSON form", path=where
        )


def _utf8_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodingError(
            f"text holds a lone surrogate at index {exc.start}, which is not valid Unicode",
            path=where,
        ) from None


def canonical_json(value: object) -> str:
    """Encode ``value`` as canonical JSON text.

    Args:
        value: A JSON-compatible value.

    Returns:
        Sorted keys, no whitespace between tokens, non-ASCII text kept as is, control
            characters escaped.

    Raises:
        EncodingError: If the value cannot be encoded canonically.
    """
    return _canonical(value, "")


def _canonical(value: object, path: str) -> str:
    """[`canonical_json`][steadyloop.records.canonical_json], naming ``path`` in its errors.

    ``path`` is where ``value`` sits in the document it is part of (``"/payload"`` for a
    record's payload).
    """
    if _c_encode is None:  # pragma: no cover - CPython always has the C encoder
        check_canonical(value, path)
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    if _plain_structure(value):
        # Only exact JSON types, string keys, finite numbers: what is left to check is
        # the text itself, and a lone surrogate anywhere in it survives into the output
        # (nothing is escaped to ASCII), so one check of the whole text covers them all.
        fast = _fast_text(value)
        if fast is not None:
            return fast
        text: str = "".join(_c_encode(value, 0))
        if text.isascii() or _utf8_ok(text):
            return text
    check_canonical(value, path)  # raises with the JSON Pointer, or accepts a rarer shape
    return "".join(_c_encode(value, 0))


def _plain_structure(value: object, *, texts: bool = False) -> bool:
    """Whether ``value`` holds only exact dicts, lists, strs, ints, floats, bools, None.

    Keys must be strings and floats finite. Strings themselves are looked into only
    with ``texts`` (each must be valid Unicode); ``canonical_json`` checks its whole
    output at once instead.

    Nesting depth is not tracked while the value holds fewer containers than
    ``MAX_DEPTH`` (it cannot be deeper than that); past that, the walk starts again
    with depths (`_plain_structure_deep`), which also ends any cycle.
    """
    kind = type(value)
    if kind is str:
        return not texts or value.isascii() or _utf8_ok(value)  # type: ignore[attr-defined,arg-type]
    if kind is int:
        return value.bit_length() <= _MAX_INT_BITS  # type: ignore[attr-defined,no-any-return]
    if kind is not dict and kind is not list:
        return kind in _SCALARS or (kind is float and _isfinite(value))  # type: ignore[arg-type]
    stack: list[Any] = [value]
    pop, push = stack.pop, stack.append
    containers = 1
    while stack:
        item = pop()
        if type(item) is dict:
            for key in item:
                if type(key) is not str or (texts and not key.isascii() and not _utf8_ok(key)):
                    return False
            values = item.values()
        else:
            values = item
        for v in values:
            kind = type(v)
            if kind is str:
                if texts and not v.isascii() and not _utf8_ok(v):
                    return False
            elif kind is int:
                if v.bit_length() > _MAX_INT_BITS:
                    return False
            elif kind is dict or kind is list:
                containers += 1
                if containers >= MAX_DEPTH:
                    return _plain_structure_deep(value, texts)
                push(v)
            elif kind is not bool and v is not None and (kind is not float or not _isfinite(v)):
                return False
    return True


def _plain_structure_deep(value: object, texts: bool) -> bool:
    """`_plain_structure` for a value of many containers: tracks depth, so ends cycles."""
    stack: list[Any] = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if depth >= MAX_DEPTH:
            return False
        if type(item) is dict:
            for key in item:
                if type(key) is not str or (texts and not key.isascii() and not _utf8_ok(key)):
                    return False
            values = item.values()
        else:
            values = item
        for v in values:
            kind = type(v)
            if kind is str:
                if texts and not v.isascii() and not _utf8_ok(v):
                    return False
            elif kind is int:
                if v.bit_length() > _MAX_INT_BITS:
                    return False
            elif kind is dict or kind is list:
                push((v, depth + 1))
            elif kind is not bool and v is not None and (kind is not float or not _isfinite(v)):
                return False
    return True


_SCALARS = frozenset({bool, type(None)})
_isfinite = math.isfinite

_orjson_dumps = orjson.dumps
_orjson_loads = orjson.loads
_SORT_KEYS = (
    orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
)
"""Sorted keys; dataclasses and dates, which orjson would write, are refused as unknown."""
_NUMBER_MARKS = bytes.maketrans(b"123456789.E", b"000000000ee")
"""Digits to ``0``, and a fraction's or exponent's mark to ``e``: a float shows as ``0e``."""


def _fast_text(value: object) -> str | None:
    """The canonical text of ``value`` by orjson, or None where orjson's could differ.

    orjson writes strings, integers, booleans, null, lists and sorted objects exactly
    as the canonical encoder does (``tests/test_records.py`` proves it on arbitrary
    values), in a fraction of the instructions; its floats it writes in its own way
    (``1e-05`` as ``0.00001``), NaN and Infinity as ``null``. So its text is taken
    only when it holds no number with a fraction or an exponent (a digit followed by
    ``.``, ``e`` or ``E``; text that only looks like one falls back too, harmlessly),
    and None (the standard encoder's turn) otherwise, or when orjson refuses the value
    (an integer past 64 bits, a lone surrogate, a key that is not a string, nesting
    past 255, a type it does not know). A NaN or Infinity, which orjson writes as
    ``null``, must be refused by the caller: `_canonical` walks the value first, and
    `_payload_json` reads a text holding ``null`` back and compares.
    """
    try:
        out: bytes = _orjson_dumps(value, None, _SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError
        return None
    # One search for a digit followed by ``.``, ``e`` or ``E``. ``find``, not ``in``:
    # ``bytes.__contains__`` tries its argument as an integer first, and the error it
    # makes and drops costs more than the search.
    if out.translate(_NUMBER_MARKS).find(b"0e") >= 0:
        return None
    return out.decode("utf-8")


def _make_c_encoder() -> Any:
    """The C encoder ``json.dumps`` would build for the canonical options, built once.

    ``json.dumps`` builds a new encoder on every call, which costs as much as encoding
    a small record. This one takes the same options (sorted keys, ``,`` and ``:``, no
    ASCII escaping, NaN refused), so it gives the same text. It has no cycle check
    (``markers=None``): [`check_canonical`][steadyloop.records.check_canonical] runs first and
    never lets a value through to it that ``json.dumps`` would have refused for a cycle.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    encode_str = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or encode_str is None:  # pragma: no cover - not CPython
        return None
    return make(None, _as_json, encode_str, None, ":", ",", True, False, False)


def _as_json(value: object) -> object:
    """Encode a Mapping that is not a dict as the dict it holds.

    check_canonical accepts such mappings; anything else was refused before.
    """
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_c_encode = _make_c_encoder()
_encode_str: Any = (
    getattr(json.encoder, "c_encode_basestring", None) or json.encoder.py_encode_basestring
)
"""Encodes one string as the canonical encoder does (``ensure_ascii=False``)."""


def encode(value: object) -> bytes:
    """Encode ``value`` as canonical UTF-8 JSON bytes (see `canonical_json`)."""
    return canonical_json(value).encode("utf-8")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in canonical JSON")


def decode(data: bytes | str) -> Any:
    """Decode canonical JSON, refusing NaN and Infinity.

    Raises:
        ValueError: If the text is not JSON, or holds NaN or Infinity.
    """
    if type(data) is str and not data.startswith("\ufeff"):
        return _DECODER.decode(data)  # what json.loads does, without a new decoder per call
    return json.loads(data, parse_constant=_reject_constant)


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _check_fields(kind: object, payload: object, id: object, time: object) -> None:
    """Check a record's fields, all but the payload's content."""
    if (
        type(kind) is str
        and type(id) is str
        and type(time) is int
        and (type(payload) is dict or type(payload) is _Checked)
        and kind
        and id
        and kind.isascii()
        and id.isascii()
    ):
        return  # the common case, decided without the checks below
    if not isinstance(kind, str) or not kind:
        raise EncodingError(f"record kind must be a non-empty string, got {kind!r}")
    if not isinstance(id, str) or not id:
        raise EncodingError(f"record id must be a non-empty string, got {id!r}")
    if isinstance(time, bool) or not isinstance(time, int):
        raise EncodingError(
            f"record time must be integer microseconds, got {type(time).__name__}",
            path="/time",
        )
    if not isinstance(payload, Mapping):
        raise EncodingError("record payload must be a mapping", path="/payload")
    if not kind.isascii():
        _check_text(kind, "/kind")
    if not id.isascii():
        _check_text(id, "/id")


@dataclass(frozen=True, slots=True)
class Record:
    """One immutable journal record, as the writer made it.

    Attributes:
        kind: What the record means, for example ``"loop.intent"``.
        payload: The record's content; must be canonically encodable.
        id: A writer-chosen id, unique within the record's stream.
        time: When the writer made it, in integer microseconds since the epoch.
    """

    kind: str
    payload: Mapping[str, JSONValue]
    id: str
    time: int

    def __post_init__(self) -> None:
        _check_fields(self.kind, self.payload, self.id, self.time)
        check_canonical(self.payload, "/payload")

    def to_dict(self) -> dict[str, JSONValue]:
        """Return the record as a plain JSON object."""
        return {"id": self.id, "kind": self.kind, "payload": dict(self.payload), "time": self.time}

    def to_json(self) -> str:
        """Return the record's canonical JSON text."""
        return _record_json(self, _payload_json(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record:
        """Rebuild a record from [`to_dict`][steadyloop.records.Record.to_dict] output.

        Raises:
            EncodingError: If a field is missing or has the wrong type.
        """
        try:
            return cls(kind=data["kind"], payload=data["payload"], id=data["id"], time=data["time"])
        except KeyError as exc:
            raise EncodingError(f"record field {exc.args[0]!r} is missing") from None

    @classmethod
    def from_json(cls, text: bytes | str) -> Record:
        """Rebuild a record from its canonical JSON text."""
        data = decode(text)
        if not isinstance(data, dict):
            raise EncodingError("a record must be a JSON object")
        return cls.from_dict(data)


class _Checked(dict[str, JSONValue]):
    """A record payload steadyloop built only from values it has checked already.

    Its own writers (the agent loop, the session service) make one for a record they
    append right away; [`prepare_batch`][steadyloop.journal.PreparedBatch] then encodes
    it without walking it first (`_payload_json`). The encoder still refuses a value
    with no JSON form and the text is still checked, so what is stored is canonical
    JSON either way; only a value changed in place after it was checked would not be
    refused as it would be in a plain payload: a key that is not a string is written as
    text, a ``UUID`` or an ``Enum`` member as orjson writes them (`_fast_text`). A NaN,
    an infinity, a set or any other value is still refused.
    """

    __slots__ = ()


def _payload_json(rec: Record) -> str:
    """The canonical JSON text of a record's payload (errors name ``/payload/...``)."""
    payload = rec.payload
    text: str | None = None
    if type(payload) is _Checked:
        text = _fast_text(payload)
        if text is not None and "null" in text and _orjson_loads(text) != payload:
            # A NaN or Infinity put in after the check, which orjson writes as null
            # (it reads back as None, which no float equals): refused below.
            text = None
        if text is None and _c_encode is not None:
            try:
                text = "".join(_c_encode(payload, 0))
            except (ValueError, TypeError, RecursionError):
                pass  # the full check below names the problem
            else:
                if not text.isascii() and not _utf8_ok(text):
                    text = None
    if text is None:
        text = _canonical(payload if type(payload) is dict else dict(payload), "/payload")
    if len(text) >= MAX_DEPTH and text.count("[") + text.count("{") >= MAX_DEPTH:
        # Depth counts from the record, as in ``canonical_json(rec.to_dict())``: the
        # payload itself is one level down (and a checked payload was not walked at all).
        # Only a payload of this many brackets (so of at least this many characters)
        # can be that deep.
        check_canonical({"payload": payload})
    return text


def _record_json(rec: Record, payload: str) -> str:
    """A record's canonical JSON text, given its payload's (from `_payload_json`).

    The same text as ``canonical_json(rec.to_dict())``, put together from its fields:
    the keys in their sorted order, each string as the canonical encoder writes it. So
    a payload encoded once serves both the record and the batch digest.
    """
    kind, id, time = rec.kind, rec.id, rec.time
    if (
        type(kind) is str
        and type(id) is str
        and type(time) is int
        and (kind.isascii() or _utf8_ok(kind))
        and (id.isascii() or _utf8_ok(id))
    ):
        return (
            f'{{"id":{_encode_str(id)},"kind":{_encode_str(kind)},'
            f'"payload":{payload},"time":{time}}}'
        )
    # A record made around its checks (object.__new__): the long way, which refuses
    # what it must and names where.
    return canonical_json({"id": id, "kind": kind, "payload": decode(payload), "time": time})


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record as the journal holds it: with its stream and sequence number.

    Attributes:
        stream: The stream the record belongs to.
        seq: Its position in the stream, counting from 1 without gaps.
        record: The record itself.
    """

    stream: str
    seq: int
    record: Record

    @property
    def kind(self) -> str:
        """The record's kind."""
        return self.record.kind

    @property
    def payload(self) -> Mapping[str, JSONValue]:
        """The record's payload."""
        return self.record.payload


@runtime_checkable
class Clock(Protocol):
    """A source of time in integer microseconds since the epoch."""

    def now_us(self) -> int:
        """Return the current time in microseconds."""
        ...


@runtime_checkable
class IdSource(Protocol):
    """A source of unique ids."""

    def new_id(self) -> str:
        """Return an id never returned before by this source."""
        ...


class SystemClock:
    """The wall clock, in microseconds."""

    def now_us(self) -> int:
        """Return the wall-clock time in microseconds since the epoch."""
        return time.time_ns() // 1000


class StepClock:
    """A deterministic clock that advances by a fixed step on every reading.

    Args:
        start: The first reading, in microseconds.
        step: How much each reading adds, in microseconds.
    """

    def __init__(self, start: int = 1_700_000_000_000_000, step: int = 1_000) -> None:
        self._next = start
        self._step = step
        self._lock = threading.Lock()

    def now_us(self) -> int:
        """Return the next reading."""
        with self._lock:
            value = self._next
            self._next += self._step
            return value


# The bits ``uuid.uuid4()`` fixes: version 4 (bits 76-79) and the RFC 4122 variant
# (bits 62-63). Setting them on 16 random bytes gives the same ids as
# ``uuid.uuid4().hex`` without building a ``UUID`` object (a few microseconds per id,
# and an agent step makes several).
_UUID4_CLEAR = ~((0xF << 76) | (0x3 << 62))
_UUID4_SET = (0x4 << 76) | (0x2 << 62)


class _RandomPool:
    """Random UUID4 ids made 256 at a time from one ``os.urandom`` call, handed out one by one.

    One ``getrandom`` call per 256 ids instead of one per id. Each call releases the
    GIL, and taking it back waits for whichever thread holds it (a journal's SQLite
    thread, for one): with many runs in one process, that wait showed as the largest
    single line of the event loop's profile. The ids are made when the pool is filled,
    so handing one out is a ``list.pop``, which is atomic: no lock is needed. Two
    threads that find the pool empty at once both fill it, with different bytes. A
    forked child starts with an empty pool, so parent and child never hand out the
    same ids.
    """

    SIZE = 4096

    def __init__(self) -> None:
        self._ids: list[str] = []

    def _fill(self) -> None:
        data = os.urandom(self.SIZE)
        self._ids.extend(
            "%032x" % ((int.from_bytes(data[at : at + 16], "big") & _UUID4_CLEAR) | _UUID4_SET)
            for at in range(0, self.SIZE, 16)
        )

    def take(self) -> str:
        """Return a fresh id."""
        ids = self._ids
        while True:
            try:
                return ids.pop()
            except IndexError:
                self._fill()

    def forget(self) -> None:
        """Drop what is left (in a forked child: the parent hands out the same ids)."""
        self._ids = []


_POOL = _RandomPool()
os.register_at_fork(after_in_child=_POOL.forget)


class RandomIds:
    """Random ids (UUID4, hex), for production use."""

    def new_id(self) -> str:
        """Return a fresh random id."""
        return _POOL.take()


class SequentialIds:
    """Deterministic ids ``{prefix}-000001``, ``{prefix}-000002``, … for tests and notebooks.

    Args:
        prefix: The text before the counter.
        start: The first counter value.
    """

    def __init__(self, prefix: str = "id", start: int = 1) -> None:
        self._prefix = prefix
        self._counter = itertools.count(start)
        self._lock = threading.Lock()

    def new_id(self) -> str:
        """Return the next id."""
        with self._lock:
            return f"{self._prefix}-{next(self._counter):06d}"


class RecordFactory:
    """Makes records with an injected clock and id source.

    Args:
        clock: Where times come from; the wall clock by default.
        ids: Where ids come from; random UUIDs by default.
    """

    def __init__(self, clock: Clock | None = None, ids: IdSource | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.ids: IdSource = ids or RandomIds()

    def __call__(self, kind: str, payload: Mapping[str, JSONValue] | None = None) -> Record:
        """Make a record of ``kind`` with ``payload``, stamped with a new id and time."""
        return Record(
            kind=kind, payload=dict(payload or {}), id=self.ids.new_id(), time=self.clock.now_us()
        )

    def _unchecked(self, kind: str, payload: dict[str, JSONValue]) -> Record:
        """Make a record like ``__call__``, but without validating the payload now.

        For steadyloop's own writers, which hand every record to
        [`append`][steadyloop.journal.Journal.append] right away: the journal validates and
        encodes each payload there, once, before anything is written, so walking it
        here as well only doubles the work. The other fields are checked here as usual.
        ``payload`` is taken as is (not copied): the caller builds it for this record
        and does not keep it.
        """
        record_id, time = self.ids.new_id(), self.clock.now_us()
        _check_fields(kind, payload, record_id, time)
        return _trusted_record(kind, payload, record_id, time)


def _make_unchecked(factory: RecordFactory, kind: str, payload: dict[str, JSONValue]) -> Record:
    """``factory(kind, payload)`` for a record about to be appended (see ``_unchecked``).

    A factory whose ``__call__`` is overridden is called as usual, so a subclass that
    changes how records are made keeps doing so.
    """
    if type(factory).__call__ is RecordFactory.__call__:
        return factory._unchecked(kind, payload)
    return factory(kind, payload)


def _trusted_record(kind: str, payload: Mapping[str, JSONValue], id: str, time: int) -> Record:
    """Build a [`Record`][steadyloop.records.Record] without running its checks.

    Only for values that are known to be valid, such as a record just decoded from its
    own canonical encoding, or one the journal will validate before writing it.
    """
    rec = _new_record(Record)
    _set_kind(rec, kind)
    _set_payload(rec, payload)
    _set_id(rec, id)
    _set_time(rec, time)
    return rec


_new_record = object.__new__
# The slots' own setters: what ``object.__setattr__`` ends up calling, without the lookup.
_set_kind, _set_payload, _set_id, _set_time = (
    Record.__dict__[name].__set__ for name in ("kind", "payload", "id", "time")
)
