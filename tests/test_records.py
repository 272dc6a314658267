"""Records and their canonical encoding."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyloop import EncodingError, Record, RecordFactory, SequentialIds, StepClock
from steadyloop.records import canonical_json, check_canonical, decode, encode

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_canonical_encoding_round_trips_and_is_stable(value: object) -> None:
    """Decoding canonical JSON and encoding it again gives the same bytes."""
    first = encode(value)
    again = encode(decode(first))
    assert first == again
    assert decode(first) == value or _has_negative_zero(value)


def _has_negative_zero(value: object) -> bool:
    if isinstance(value, float):
        return value == 0 and math.copysign(1, value) < 0
    if isinstance(value, list):
        return any(_has_negative_zero(v) for v in value)
    if isinstance(value, dict):
        return any(_has_negative_zero(v) for v in value.values())
    return False


@given(st.dictionaries(st.text(max_size=6), st.integers(), max_size=8))
def test_key_order_does_not_change_the_bytes(mapping: dict[str, int]) -> None:
    """Two mappings with the same items encode identically whatever their insertion order."""
    reversed_mapping = dict(reversed(list(mapping.items())))
    assert encode(mapping) == encode(reversed_mapping)


def test_canonical_form_is_compact_sorted_and_exact() -> None:
    """Canonical JSON sorts keys, drops whitespace, keeps big integers and non-ASCII text."""
    assert canonical_json({"b": 1, "a": [2**64, "é😀"], "c": {"z": None, "y": True}}) == (
        '{"a":[18446744073709551616,"é😀"],"b":1,"c":{"y":true,"z":null}}'
    )
    assert canonical_json("nul\x00") == '"nul\\u0000"'


@pytest.mark.parametrize(
    ("value", "path", "message"),
    [
        ({"a": [1, float("nan")]}, "/a/1", "not a finite number"),
        ({"a": float("-inf")}, "/a", "not a finite number"),
        ({"x": b"bytes"}, "/x", "bytes has no canonical JSON form"),
        ({"x": {1: "one"}}, "/x", "not a string"),
        ({"a/b~c": {"d": {1, 2}}}, "/a~1b~0c/d", "set has no canonical JSON form"),
        ({"s": "\ud800"}, "/s", "lone surrogate"),
    ],
)
def test_unencodable_values_name_their_json_pointer(value: object, path: str, message: str) -> None:
    """A value with no canonical form raises EncodingError with its JSON Pointer."""
    with pytest.raises(EncodingError, match=message) as info:
        check_canonical(value)
    assert info.value.path == path


def test_decode_refuses_nan_and_infinity() -> None:
    """Decoding rejects the non-standard NaN and Infinity tokens."""
    for text in ("NaN", "[Infinity]", '{"a":-Infinity}'):
        with pytest.raises(ValueError, match="not allowed"):
            decode(text)


def test_record_validates_its_fields() -> None:
    """A record refuses an empty kind or id, a non-integer time and a bad payload."""
    with pytest.raises(EncodingError, match="kind"):
        Record(kind="", payload={}, id="x", time=0)
    with pytest.raises(EncodingError, match="id"):
        Record(kind="k", payload={}, id="", time=0)
    with pytest.raises(EncodingError, match="microseconds"):
        Record(kind="k", payload={}, id="x", time=1.5)  # type: ignore[arg-type]
    with pytest.raises(EncodingError, match="/payload/v"):
        Record(kind="k", payload={"v": float("nan")}, id="x", time=0)


def test_record_json_round_trip() -> None:
    """A record's canonical JSON rebuilds an equal record."""
    make = RecordFactory(StepClock(start=5, step=10), SequentialIds("t"))
    rec = make("kind", {"z": 1, "a": [1, 2]})
    assert rec.to_json() == '{"id":"t-000001","kind":"kind","payload":{"a":[1,2],"z":1},"time":5}'
    assert Record.from_json(rec.to_json()) == rec
    assert json.loads(rec.to_json())["time"] == 5
    with pytest.raises(EncodingError, match="'kind' is missing"):
        Record.from_dict({"id": "x", "payload": {}, "time": 0})


def test_injected_clock_and_ids_make_runs_deterministic() -> None:
    """Two factories with the same clock and id settings make identical records."""
    one = RecordFactory(StepClock(), SequentialIds("r"))
    two = RecordFactory(StepClock(), SequentialIds("r"))
    assert [one("k", {"i": i}) for i in range(3)] == [two("k", {"i": i}) for i in range(3)]


@given(json_values)
def test_canonical_json_is_what_json_dumps_gives(value: object) -> None:
    """The prebuilt encoder gives exactly the text of json.dumps with the canonical options."""
    expected = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    assert canonical_json(value) == expected


def test_random_ids_are_uuid4_hex() -> None:
    """RandomIds gives 32 hex digits of a version-4, RFC 4122 UUID, never twice."""
    import uuid

    from steadyloop.records import RandomIds

    ids = [RandomIds().new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(hex=text)
        assert parsed.hex == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_random_ids_differ_between_a_forked_child_and_its_parent() -> None:
    """A child forked after its parent drew ids gets other ids than the parent's next ones."""
    import os

    from steadyloop.records import RandomIds

    ids = RandomIds()
    ids.new_id()  # the pool now holds bytes the parent will hand out next
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, "".join(ids.new_id() for _ in range(8)).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 1024).decode()
    os.close(read)
    os.waitpid(pid, 0)
    parent = "".join(ids.new_id() for _ in range(8))
    assert len(child) == len(parent) == 8 * 32
    assert {child[i : i + 32] for i in range(0, 256, 32)}.isdisjoint(
        parent[i : i + 32] for i in range(0, 256, 32)
    )


def test_unchecked_records_still_check_their_fields() -> None:
    """A record made for the journal to validate still refuses a bad kind, id or time."""
    from steadyloop.records import _make_unchecked

    class BadIds:
        def new_id(self) -> str:
            return ""

    make = RecordFactory(StepClock(start=5), SequentialIds("t"))
    checked = RecordFactory(StepClock(start=5), SequentialIds("t"))("k", {"a": [1]})
    assert _make_unchecked(make, "k", {"a": [1]}) == checked
    with pytest.raises(EncodingError, match="kind"):
        _make_unchecked(make, "", {})
    with pytest.raises(EncodingError, match="id"):
        _make_unchecked(RecordFactory(ids=BadIds()), "k", {})


def test_an_overridden_factory_is_still_called() -> None:
    """A RecordFactory subclass that changes how records are made keeps doing so."""
    from steadyloop.records import _make_unchecked

    class Tagging(RecordFactory):
        def __call__(self, kind: str, payload: object = None) -> Record:  # type: ignore[override]
            return super().__call__(kind, {"tagged": True, **dict(payload or {})})  # type: ignore[call-overload]

    rec = _make_unchecked(Tagging(), "k", {"a": 1})
    assert dict(rec.payload) == {"tagged": True, "a": 1}
    with pytest.raises(EncodingError, match="/payload/a"):
        _make_unchecked(Tagging(), "k", {"a": math.nan})


def test_limits_refuse_cycles_deep_nesting_and_huge_integers() -> None:
    """A cycle, nesting past MAX_DEPTH or an integer past MAX_INT_DIGITS is an EncodingError, not a hang."""
    from steadyloop.records import MAX_DEPTH, MAX_INT_DIGITS

    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    deep: list[object] = []
    node = deep
    for _ in range(MAX_DEPTH + 5):
        child: list[object] = []
        node.append(child)
        node = child
    for value, message in (
        (cyclic, "nested more than"),
        (deep, "nested more than"),
        ({"n": 10**MAX_INT_DIGITS * 10}, "decimal digits"),
    ):
        with pytest.raises(EncodingError, match=message):
            canonical_json(value)
        with pytest.raises(EncodingError, match=message):
            Record(kind="k", payload={"v": value}, id="x", time=0)
    assert canonical_json({"n": 10 ** (MAX_INT_DIGITS - 1)}).startswith('{"n":1000')


def test_read_only_mappings_encode_as_the_dicts_they_hold() -> None:
    """A Mapping that is not a dict (a MappingProxyType) encodes like the equal dict."""
    from types import MappingProxyType

    assert canonical_json({"m": MappingProxyType({"b": 1, "a": 2})}) == '{"m":{"a":2,"b":1}}'


def test_record_text_is_pinned_byte_for_byte() -> None:
    """A record's canonical text, assembled from its fields, is exactly these bytes."""
    rec = Record(
        kind="session.event",
        payload={
            "event": {
                "id": "运行/1:reply",
                "parts": [{"type": "text", "text": 'tab\t"q" é😀 \x00 \u2028'}],
                "state_delta": {"z": -0.0, "a": 1e16, "m": [2**70, True, None, 1.5]},
            }
        },
        id="id-é",
        time=1_700_000_000_000_001,
    )
    expected = (
        '{"id":"id-é","kind":"session.event","payload":{"event":{"id":"运行/1:reply",'
        '"parts":[{"text":"tab\\t\\"q\\" é😀 \\u0000 \u2028","type":"text"}],'
        '"state_delta":{"a":1e+16,"m":[1180591620717411303424,true,null,1.5],"z":-0.0}}},'
        '"time":1700000000000001}'
    )
    assert rec.to_json() == expected
    assert rec.to_json() == canonical_json(rec.to_dict())


def test_the_seal_is_pinned_byte_for_byte() -> None:
    """A snapshot's seal is SHA-256 of its body and CRC-32 of [kind, payload] before it."""
    from steadyloop._seal import seal_problem, sealed

    covered = ("effect.result", {"intent_id": "i-1", "status": "ok"})
    payload = sealed({"head": 2, "state": {"steps": 1, "é": [True, None]}}, 2, covered)
    assert canonical_json(payload) == (
        '{"head":2,"seal":{"crc":"50900bb8","digest":"sha256:'
        "300e4bc71f8ca9cdf216e871197d34351336d83f279d2b47984c26f601217efa"
        '","seq":2},"state":{"steps":1,"é":[true,null]}}'
    )
    assert seal_problem(payload, 3, covered) is None
    assert seal_problem({**payload, "head": 3}, 3, covered) == (
        "its digest does not match its payload"
    )
    assert seal_problem(payload, 3, ("effect.result", {"intent_id": "i-2"})) == (
        "the record it covers (seq 2) has changed since"
    )


@given(
    json_values,
    st.text(min_size=1, max_size=6),
    st.text(min_size=1, max_size=6),
    st.integers(),
)
def test_record_text_is_the_canonical_json_of_its_dict(
    value: object, kind: str, record_id: str, time: int
) -> None:
    """Record.to_json gives what canonical_json of the record's dict gives, for any record."""
    try:
        rec = Record(kind=kind, payload={"v": value}, id=record_id, time=time)
    except EncodingError:
        return  # a lone surrogate in the kind or id: refused, as it must be
    assert rec.to_json() == canonical_json(rec.to_dict())


def test_unchecked_records_with_bad_fields_are_refused_with_their_place() -> None:
    """A record built around its checks still fails to encode, naming the field."""
    from steadyloop.journal._protocol import StreamWrite, prepare_batch

    rec = object.__new__(Record)
    for name, value in (("kind", "k"), ("payload", {}), ("id", "\ud800"), ("time", 0)):
        object.__setattr__(rec, name, value)
    with pytest.raises(EncodingError, match=r"record 0 of stream 's'.*lone surrogate") as info:
        prepare_batch("ns", [StreamWrite("s", [rec])], None)
    assert info.value.path == "/id"
    object.__setattr__(rec, "id", "x")
    object.__setattr__(rec, "payload", {"v": {1: 2}})
    with pytest.raises(EncodingError, match="not a string") as info:
        prepare_batch("ns", [StreamWrite("s", [rec])], None)
    assert info.value.path == "/payload/v"


def test_batch_digest_is_pinned_and_ignores_ids_and_times() -> None:
    """A keyed batch's digest is the SHA-256 of [[stream, [[kind, payload], ...]], ...]."""
    import hashlib

    from steadyloop.journal._protocol import StreamWrite, prepare_batch

    def batch(make: RecordFactory) -> list[StreamWrite]:
        return [
            StreamWrite("run/é", [make("a", {"x": [1, "ü"]}), make("b", {})]),
            StreamWrite("s", [make("c", {"n": None})], expected_next=3),
        ]

    one = prepare_batch("ns", batch(RecordFactory(StepClock(1), SequentialIds("p"))), "key")
    two = prepare_batch("ns", batch(RecordFactory(StepClock(9), SequentialIds("q"))), "key")
    parts = [["run/é", [["a", {"x": [1, "ü"]}], ["b", {}]]], ["s", [["c", {"n": None}]]]]
    expected = hashlib.sha256(canonical_json(parts).encode("utf-8")).hexdigest()
    assert one.digest == two.digest == expected
    assert (
        one.digest
        == hashlib.sha256(
            '[["run/é",[["a",{"x":[1,"ü"]}],["b",{}]]],["s",[["c",{"n":null}]]]]'.encode()
        ).hexdigest()
    )
    assert prepare_batch("ns", batch(RecordFactory()), None).digest == ""


def test_checked_payloads_encode_to_the_same_bytes_and_still_refuse_bad_values() -> None:
    """A payload marked checked encodes exactly as a plain one, and a bad value still fails."""
    from steadyloop.journal._protocol import StreamWrite, prepare_batch
    from steadyloop.records import _Checked

    payload = {"z": [1, {"b": "é", "a": None}], "a": 1.5}
    plain = Record(kind="k", payload=payload, id="x", time=1)
    checked = Record(kind="k", payload=_Checked(payload), id="x", time=1)
    assert checked.to_json() == plain.to_json() == canonical_json(plain.to_dict())
    assert checked == plain
    for bad, path, message in (
        ({"v": [math.nan]}, "/payload/v/0", "not a finite number"),
        ({"v": {1, 2}}, "/payload/v", "set has no canonical JSON form"),
        ({"v": "\ud800"}, "/payload/v", "lone surrogate"),
    ):
        rec = object.__new__(Record)
        for name, value in (("kind", "k"), ("payload", _Checked(bad)), ("id", "x"), ("time", 0)):
            object.__setattr__(rec, name, value)
        with pytest.raises(EncodingError, match=message) as info:
            prepare_batch("ns", [StreamWrite("s", [rec])], None)
        assert info.value.path == path


class _Int(int):
    pass


@dataclasses.dataclass
class _Dated:
    day: int


class _Str(str):
    __slots__ = ()


_fast_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**62, max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.text(alphabet=st.characters(max_codepoint=0x7F)).map(_Str)
    | st.integers(min_value=-5, max_value=5).map(_Int),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    ),
    max_leaves=25,
)


@given(_fast_values)
def test_orjson_text_is_the_standard_encoders_or_is_not_used(value: object) -> None:
    """The orjson text is taken only where it is, byte for byte, the standard encoder's.

    And it is taken whenever the value holds no float and no integer past 64 bits, so
    the shortcut is used, not just safe.
    """
    from steadyloop.records import _fast_text

    reference = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    fast = _fast_text(value)
    assert fast is None or fast == reference
    text = canonical_json(value)
    assert text == reference
    if not re.search(r"[0-9][.eE]", reference) and not _has_big_int(value):
        assert fast == reference


def _has_big_int(value: object) -> bool:
    if isinstance(value, dict):
        return any(_has_big_int(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_big_int(v) for v in value)
    return type(value) is not bool and isinstance(value, int) and not -(2**63) <= value < 2**64


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (math.nan, "not a finite number"),
        (math.inf, "not a finite number"),
        (-math.inf, "not a finite number"),
        (datetime.date(2026, 1, 1), "date has no canonical JSON form"),
        (_Dated(1), "_Dated has no canonical JSON form"),
    ],
)
def test_what_orjson_would_write_is_still_refused_in_a_checked_payload(
    bad: object, message: str
) -> None:
    """A NaN (orjson's null, beside a real one), a date or a dataclass is refused when checked."""
    from steadyloop.journal._protocol import StreamWrite, prepare_batch
    from steadyloop.records import _Checked

    rec = object.__new__(Record)
    payload = _Checked({"a": None, "v": [1, {"w": bad}]})
    for name, value in (("kind", "k"), ("payload", payload), ("id", "x"), ("time", 0)):
        object.__setattr__(rec, name, value)
    with pytest.raises(EncodingError, match=message) as info:
        prepare_batch("ns", [StreamWrite("s", [rec])], None)
    assert info.value.path == "/payload/v/1/w"


def test_orjson_refusals_fall_back_to_the_standard_encoder() -> None:
    """What orjson refuses or writes otherwise is left to the standard encoder's checks."""
    from steadyloop.records import _fast_text

    deep: object = 1
    for _ in range(300):  # past orjson's nesting limit, within the canonical one
        deep = [deep]
    for value in ({"a": "\ud800"}, {1: "x"}, {"v": 2**64}, {"f": 1e-05}, deep):
        assert _fast_text(value) is None
    assert canonical_json(deep) == "[" * 300 + "1" + "]" * 300
