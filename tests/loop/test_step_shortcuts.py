"""The agent step's shortcuts decide exactly what the long way decides."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from steadyloop.loop import ModelReply
from steadyloop.loop._state import _same_json
from steadyloop.records import canonical_json

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
)
_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=12,
)


@given(_values, _values)
def test_same_json_agrees_with_comparing_canonical_texts(a: object, b: object) -> None:
    """Two values are the same to `_same_json` exactly when their canonical texts are."""
    assert _same_json(a, b) == (canonical_json(a) == canonical_json(b))
    assert _same_json(a, a)


@given(st.lists(_scalars, max_size=3), st.lists(_scalars, max_size=3))
def test_same_json_tells_lists_of_look_alike_scalars_apart(
    a: list[object], b: list[object]
) -> None:
    """``[1]`` and ``[True]`` or ``[1.0]`` (equal in Python) are different intents."""
    assert _same_json(a, b) == (canonical_json(a) == canonical_json(b))
    assert not _same_json([1], [True]) and not _same_json([1], [1.0])


@given(
    st.dictionaries(
        st.text(max_size=4),
        st.recursive(
            _scalars | st.floats() | st.text(),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
            max_leaves=8,
        ),
        max_size=4,
    )
)
def test_a_scripted_calls_argument_text_is_what_json_dumps_gives(
    arguments: dict[str, object],
) -> None:
    """`ModelReply.call` writes a mapping's arguments exactly as ``json.dumps`` does."""
    reply = ModelReply.call("t", arguments)
    assert reply.tool_calls[0].arguments == json.dumps(arguments)
