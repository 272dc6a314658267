"""A JSONL member line is the canonical JSON of the line with its record decoded into it.

The writer splices the record's canonical text into the line instead of decoding and
encoding the record again; the bytes must be those of ``canonical_json`` of the line, for
any record (any payload text, nesting and number) and any stream name and key.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyloop._errors import EncodingError
from steadyloop.journal._jsonl import _member_text
from steadyloop.records import MAX_DEPTH, Record, canonical_json, decode

texts = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12
)  # any Unicode, quotes, backslashes and control characters included
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=20,
)
names = st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc"]), min_size=1, max_size=10)


@settings(max_examples=300, deadline=None)
@given(
    payload=st.dictionaries(texts, values, max_size=5),
    stream=names,
    key=st.one_of(st.none(), names),
    batch=st.integers(1, 10**9),
    index=st.integers(0, 5),
    seq=st.integers(1, 10**12),
)
def test_a_spliced_line_is_the_canonical_line(
    *, payload: dict[str, Any], stream: str, key: str | None, batch: int, index: int, seq: int
) -> None:
    """For any record, stream, key and numbers, the spliced line equals canonical_json of the line."""
    text = Record(kind="test.item", payload=payload, id="r-1", time=7).to_json()
    obj: dict[str, Any] = {"batch": batch, "stream": stream, "seq": seq, "index": index}
    obj["size"] = index + 1
    if key is not None:
        obj["key"], obj["digest"] = key, "ab" * 32
    assert _member_text(obj, text) == canonical_json({**obj, "record": decode(text)})


@pytest.mark.parametrize("depth", range(MAX_DEPTH - 6, MAX_DEPTH + 1))
def test_near_the_depth_limit_a_line_is_refused_exactly_when_its_canonical_form_is(
    depth: int,
) -> None:
    """Around the nesting limit, a line is refused exactly when canonical_json of it refuses it, and is the same bytes otherwise."""
    deep: Any = 0
    for _ in range(depth):
        deep = [deep]
    try:
        text = Record(kind="test.item", payload={"d": deep}, id="r-1", time=7).to_json()
    except EncodingError:
        return  # too deep for a record at all: no line is ever made of it
    obj = {"batch": 1, "stream": "s", "seq": 1, "index": 0, "size": 1}
    try:
        want = canonical_json({**obj, "record": decode(text)})
    except EncodingError:
        with pytest.raises(EncodingError):
            _member_text(obj, text)
    else:
        assert _member_text(obj, text) == want


async def test_every_line_a_journal_writes_is_canonical_json(tmp_path: Any) -> None:
    """Each line of a JSONL file written by groups, keys and several streams is the canonical JSON of itself."""
    from steadyloop.journal import JSONLJournal, StreamWrite

    journal = await JSONLJournal.open(tmp_path)
    try:
        for i in range(5):
            writes = [
                StreamWrite(
                    'ünï "q"',
                    [Record(kind="t.a", payload={"i": i, "s": "\\\n"}, id=f"a{i}", time=i)],
                ),
                StreamWrite(
                    "b",
                    [Record(kind="t.b", payload={"f": 1.5e300, "l": [i, None]}, id=f"b{i}", time=i)]
                    * 2,
                ),
            ]
            await journal.append("ns", writes, idempotency_key=f"k{i}" if i % 2 else None)
    finally:
        await journal.close()
    (path,) = [p for p in tmp_path.iterdir() if p.suffix == ".jsonl"]
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + 5 * 3
    for line in lines:
        assert canonical_json(decode(line)) == line
