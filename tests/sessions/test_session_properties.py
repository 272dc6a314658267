"""Properties: the fold of any event sequence equals a plain model of the state."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from session_helpers import all_records

from steadyloop import Journal
from steadyloop.records import RecordFactory, SequentialIds, StepClock, canonical_json, decode
from steadyloop.sessions import Event, SessionService, TextPart, key_scope

_apps = itertools.count()

_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=5,
)
_keys = st.sampled_from(["a", "b", "user:a", "user:b", "app:a", "app:b", "temp:a", "temp:b"])
_steps = st.lists(
    st.tuples(
        st.sampled_from([("u1", "s1"), ("u1", "s2"), ("u2", "s1")]),
        st.dictionaries(_keys, _values, max_size=4),
        st.text(max_size=8),
    ),
    max_size=12,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=_steps)
async def test_fold_equals_model(journal: Journal, steps: list[Any]) -> None:
    """After any sequence of appends over three sessions, each reload equals a dict model."""
    app = f"prop-{next(_apps)}"
    service = SessionService(journal, app, records=RecordFactory(StepClock(), SequentialIds("r")))
    sessions = {
        key: await service.create_session(*key)
        for key in [("u1", "s1"), ("u1", "s2"), ("u2", "s1")]
    }
    session_state: dict[tuple[str, str], dict[str, Any]] = {k: {} for k in sessions}
    user_state: dict[str, dict[str, Any]] = {"u1": {}, "u2": {}}
    app_state: dict[str, Any] = {}
    texts: dict[tuple[str, str], list[str]] = {k: [] for k in sessions}
    for i, (key, delta, text) in enumerate(steps):
        event = Event(f"e{i}", "user", [TextPart(text)], delta, time=i)
        returned = await service.append_event(sessions[key], event)
        expected_local = {**sessions[key].state, **delta}
        assert returned.state == expected_local
        sessions[key] = returned
        texts[key].append(text)
        for k, v in delta.items():
            scope = key_scope(k)
            if scope == "session":
                session_state[key][k] = v
            elif scope == "user":
                user_state[key[0]][k] = v
            elif scope == "app":
                app_state[k] = v
    for key, last in sessions.items():
        reloaded = await service.get_session(*key)
        assert reloaded.state == {**session_state[key], **user_state[key[0]], **app_state}
        assert [e.text for e in reloaded.events] == texts[key]
        assert reloaded.version == len(texts[key]) + 1
        assert reloaded.events == last.events
    for rec in await all_records(journal, app):  # no temp: key is stored (texts may say it)
        event = rec.payload.get("event")
        stored = event.get("state_delta", {}) if isinstance(event, dict) else {}
        delta = rec.payload.get("delta")
        keys = [*stored, *(delta if isinstance(delta, dict) else {})]
        assert not [k for k in keys if k.startswith("temp:")]


_json_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)


@given(
    text=_json_text,
    author=_json_text.filter(bool),
    delta=st.dictionaries(_keys, _values, max_size=4),
    time=st.integers(min_value=0, max_value=2**63),
)
def test_event_round_trip(text: str, author: str, delta: dict[str, Any], time: int) -> None:
    """Any valid event equals itself rebuilt from its canonical JSON."""
    event = Event("e", author, [TextPart(text)], delta, time=time)
    assert Event.from_dict(decode(canonical_json(event.to_dict()))) == event
