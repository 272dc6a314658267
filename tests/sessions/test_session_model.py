"""The session model validates itself and round-trips through canonical JSON."""

from __future__ import annotations

import pytest

from steadyloop.records import canonical_json, decode
from steadyloop.sessions import (
    Event,
    Session,
    SessionError,
    Summary,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    key_scope,
    part_from_dict,
)


def _event() -> Event:
    return Event(
        id="e1",
        author="agent",
        parts=[
            TextPart("héllo 🌍"),
            ToolCallPart("c1", "search", {"q": "x", "n": 2**60}),
            ToolResultPart("c1", "search", {"hits": [1.5, None]}, error=None),
        ],
        state_delta={"a": 1, "user:b": [1, 2], "app:c": {"d": None}, "temp:t": "x"},
        time=7,
        invocation_id="run-1",
    )


def test_event_round_trips_through_canonical_json() -> None:
    """An event rebuilt from its canonical JSON equals the original."""
    event = _event()
    assert Event.from_dict(decode(canonical_json(event.to_dict()))) == event


def test_session_round_trips_through_canonical_json() -> None:
    """A session rebuilt from its canonical JSON equals the original."""
    summary = Summary("s1", 1, None, "sess", "e1", "short", time=3)
    session = Session(
        app="a",
        user_id="u",
        id="sess",
        events=(),
        historical_events=(_event(),),
        state={"a": 1, "user:b": [1, 2]},
        summaries=(summary,),
        version=4,
    )
    assert Session.from_dict(decode(canonical_json(session.to_dict()))) == session


def test_tuples_are_copied_to_lists() -> None:
    """JSON values are copied canonically, so a tuple reads back equal as a list."""
    event = Event("e", "u", state_delta={"k": (1, 2)})
    assert event.state_delta == {"k": [1, 2]}


def test_key_scopes() -> None:
    """Keys without prefix are session scope, and user:, app:, temp: name their scope."""
    assert [key_scope(k) for k in ("x", "user:x", "app:x", "temp:x", "user:a:b")] == [
        "session",
        "user",
        "app",
        "temp",
        "user",
    ]


@pytest.mark.parametrize("key", ["foo:bar", "User:x", "user:", "", ":x"])
def test_bad_state_key_is_refused_with_its_name(key: str) -> None:
    """A state key with an unknown or empty scope prefix is refused, naming the key."""
    with pytest.raises(SessionError, match="state key") as info:
        Event("e", "u", state_delta={key: 1})
    if key:
        assert repr(key) in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"author": ""}, "author"),
        ({"id": ""}, "event id"),
        ({"parts": ["text"]}, "part 0"),
        ({"parts": [{"type": "text", "text": "x"}]}, "part 0"),
        ({"state_delta": {"x": float("nan")}}, "not a JSON value"),
        ({"state_delta": {"x": object()}}, "not a JSON value"),
        ({"state_delta": {"x": {1: 2}}}, "not a JSON value"),
        ({"time": 1.5}, "time"),
        ({"time": True}, "time"),
        ({"invocation_id": ""}, "invocation_id"),
    ],
)
def test_bad_event_is_refused(kwargs: dict[str, object], message: str) -> None:
    """An event with an empty author or id, a foreign part, or a non-JSON value is refused."""
    fields: dict[str, object] = {"id": "e", "author": "u", **kwargs}
    with pytest.raises(SessionError, match=message):
        Event(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"type": "image", "url": "x"}, "unknown type 'image'"),
        ({"type": "text"}, "lacks the field 'text'"),
        ({"type": "text", "text": "x", "extra": 1}, "unknown field 'extra'"),
        ({"type": "tool_call", "call_id": "", "name": "f"}, "call_id"),
        ({"type": "tool_call", "call_id": "c", "name": "f", "arguments": [1]}, "arguments"),
        ({"type": "tool_result", "call_id": "c", "name": "f", "error": 3}, "error"),
        ("text", "JSON object"),
    ],
)
def test_bad_part_data_is_refused(data: object, message: str) -> None:
    """Part data of an unknown type or with missing, unknown or bad fields is refused."""
    with pytest.raises(SessionError, match=message):
        part_from_dict(data)


def test_event_from_dict_refuses_unknown_fields() -> None:
    """Event data with a field the model does not know is refused, naming the field."""
    with pytest.raises(SessionError, match="unknown field 'colour'"):
        Event.from_dict({"id": "e", "author": "u", "colour": "red"})


def test_event_text_joins_text_parts() -> None:
    """An event's text is its text parts joined by newlines, tool parts left out."""
    assert _event().text == "héllo 🌍"
    assert Event("e", "u", [TextPart("a"), TextPart("b")]).text == "a\nb"


def test_without_temp_drops_only_temp_keys() -> None:
    """The stored form of an event keeps every key but the temp: ones."""
    assert _event().without_temp().state_delta == {
        "a": 1,
        "user:b": [1, 2],
        "app:c": {"d": None},
    }


def test_bad_summary_is_refused() -> None:
    """A summary with version 0 or an empty text is refused."""
    with pytest.raises(SessionError, match="version"):
        Summary("s", 0, None, "sess", "e", "t")
    with pytest.raises(SessionError, match="text"):
        Summary("s", 1, None, "sess", "e", "")


def test_public_names_are_complete() -> None:
    """Every public name of steadyloop.sessions is in __all__, and every listed name exists."""
    from steadyloop import sessions

    public = {
        name
        for name, value in vars(sessions).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("steadyloop")
    }
    assert public <= set(sessions.__all__)
    assert all(hasattr(sessions, name) for name in sessions.__all__)


def test_has_event_across_successors() -> None:
    """Two successors of one session sharing its id index each see only their own events."""
    base = Session("a", "u", "s", events=(Event("e1", "u"),), version=2)
    assert base.has_event("e1")
    left = base._share_index(
        Session("a", "u", "s", events=(*base.events, Event("x", "u")), version=3),
        [Event("x", "u")],
    )
    right = base._share_index(
        Session("a", "u", "s", events=(*base.events, Event("y", "u")), version=3),
        [Event("y", "u")],
    )
    right2 = right._share_index(
        Session("a", "u", "s", events=(*right.events, Event("x", "u")), version=4),
        [Event("x", "u")],
    )
    assert left.has_event("x")
    assert not left.has_event("y")
    assert right.has_event("y")
    assert not right.has_event("x")
    assert right2.has_event("x")
    assert not base.has_event("x")
    assert not base.has_event("y")
    assert left.event_ids == {"e1", "x"}


def test_read_only_mappings_in_parts_are_copied_as_their_dicts() -> None:
    """A part's JSON value may hold a MappingProxyType: it is copied as the equal dict."""
    from types import MappingProxyType

    part = ToolCallPart("c", "t", {"m": MappingProxyType({"b": [1], "a": 2})})  # type: ignore[dict-item]
    assert part.arguments == {"m": {"b": [1], "a": 2}}
    assert type(part.arguments["m"]) is dict
    assert list(part.arguments["m"]) == ["b", "a"]  # type: ignore[arg-type]


def test_json_copy_of_a_flat_object_is_what_encoding_and_decoding_give() -> None:
    """A flat object's JSON copy equals its decoded encoding, key order and types kept, as a new dict."""
    from steadyloop.sessions._model import json_copy

    value = {"b": 1, "a": "x", "c": -0.0, "d": True, "e": None, "f": 10**40, "g": 1e16}
    copy = json_copy(value, "test value")
    expected = decode(canonical_json(value))
    assert copy == expected and copy is not value
    assert list(copy) == list(value)
    assert [type(v) for v in copy.values()] == [type(v) for v in value.values()]
    assert str(copy["c"]) == "-0.0"
