"""The store protocol's shared rules: the time conversion, store URLs and openers."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyloop import JournalError, SteadyloopError, UnknownBackend
from steadyloop.replay import (
    CLOCK_START,
    CLOCK_STEP,
    MAX_CASE_TIME_US,
    Capability,
    MissingExtra,
    SessionRef,
    SessionStore,
    StoreEvent,
    missing_extra,
    parse_store_url,
    scope_of,
    seconds_to_us,
    store_opener,
    us_to_seconds,
)


def test_time_round_trips_every_step_clock_reading() -> None:
    """Every reading of the step clock in a 200,000-operation case survives float seconds."""
    for k in range(200_000):
        us = CLOCK_START + k * CLOCK_STEP
        assert seconds_to_us(us_to_seconds(us)) == us


def test_time_round_trips_at_the_edges_and_at_random() -> None:
    """Times at the range's edges, and a million random ones below it, round-trip exactly."""
    edges = [0, 1, 999_999, 1_000_000, MAX_CASE_TIME_US - 1, MAX_CASE_TIME_US - 999_999]
    rng = random.Random(20261201)
    samples = [rng.randrange(MAX_CASE_TIME_US) for _ in range(1_000_000)]
    for us in edges + samples:
        assert seconds_to_us(us_to_seconds(us)) == us, us


@given(st.integers(min_value=0, max_value=MAX_CASE_TIME_US - 1))
def test_time_round_trips_for_any_case_time(us: int) -> None:
    """Any integer microsecond a case may hold converts to seconds and back unchanged."""
    assert seconds_to_us(us_to_seconds(us)) == us


def test_a_lost_microsecond_shows() -> None:
    """A store that keeps only milliseconds gives back a different integer."""
    us = CLOCK_START
    seconds = round(us_to_seconds(us), 3)
    assert seconds_to_us(seconds) != us


def test_store_urls_parse_into_framework_backend_and_target(tmp_path: Path) -> None:
    """FRAMEWORK+BACKEND URLs split into their parts; journal URLs are not store URLs."""
    spec = parse_store_url("adk+sqlite:///tmp/a.db", tmp_path)
    assert spec is not None
    assert (spec.framework, spec.backend, spec.target, spec.name) == (
        "adk",
        "sqlite",
        "sqlite:///tmp/a.db",
        "adk+sqlite",
    )
    bare = parse_store_url("openai-agents+memory", tmp_path)
    assert bare is not None
    assert (bare.framework, bare.backend, bare.target) == ("openai-agents", "memory", "")
    empty = parse_store_url("trpc+memory://", tmp_path)
    assert empty is not None
    assert empty.target == ""
    secret = parse_store_url("adk+postgresql://u:hunter2@db/x", tmp_path)
    assert secret is not None
    assert "hunter2" not in secret.redacted
    assert secret.target == "postgresql://u:hunter2@db/x"
    nested = parse_store_url("adk+database+sqlite:///f.db", tmp_path)
    assert nested is not None
    assert (nested.framework, nested.backend, nested.target) == (
        "adk",
        "database+sqlite",
        "database+sqlite:///f.db",
    )
    for journal_url in ("sqlite:///tmp/a.db", "memory://", "postgres", "redis://h"):
        assert parse_store_url(journal_url, tmp_path) is None


def test_unknown_framework_is_refused_naming_it() -> None:
    """A framework no entry point registers is an UnknownBackend naming it."""
    with pytest.raises(UnknownBackend, match="'nosuchframework'"):
        store_opener("nosuchframework")


def test_missing_extra_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    """The missing-extra error names the extra and how to install it, on one line."""
    spec = parse_store_url("adk+postgresql://u:pw@db/x", tmp_path)
    assert spec is not None
    exc = missing_extra(spec, "adk", "google-adk")
    assert exc.extra == "adk"
    assert "\n" not in str(exc)
    assert "pip install 'steadyloop[adk]'" in str(exc)
    assert "pw@" not in str(exc)
    assert isinstance(exc, MissingExtra)


def test_missing_extra_is_an_import_error_and_no_journal_error(tmp_path: Path) -> None:
    """A missing extra is a SteadyloopError and an ImportError, not a journal error: stores raise it too."""
    spec = parse_store_url("adk+memory", tmp_path)
    assert spec is not None
    exc = missing_extra(spec, "adk", "google-adk")
    assert isinstance(exc, SteadyloopError) and isinstance(exc, ImportError)
    assert not isinstance(exc, JournalError | ValueError)
    assert str(exc) == exc.msg


@pytest.mark.parametrize(
    ("key", "scope"),
    [
        ("k", "session"),
        ("user:k", "user"),
        ("app:k", "app"),
        ("temp:k", "temp"),
        ("a:b", "session"),
    ],
)
def test_scope_of_reads_the_prefix(key: str, scope: str) -> None:
    """A key's scope is its prefix; any other key is session state."""
    assert scope_of(key) == scope


async def test_journal_store_implements_the_protocol_and_survives_restarts(tmp_path: Path) -> None:
    """Steadyloop's store creates, appends, lists, searches and deletes, and reads back after a restart."""
    spec = parse_store_url("steadyloop+sqlite", tmp_path)
    assert spec is not None
    store = store_opener("steadyloop")(spec)
    assert isinstance(store, SessionStore)
    assert store.framework == "steadyloop"
    assert Capability.CALLER_EDIT in store.capabilities
    await store.open()
    try:
        app = "replay.protocol.1"
        sid = await store.create_session(app, "ada", "s1", {"k": 1, "user:city": "Lyon"})
        ref = SessionRef(app, "ada", sid)
        for i in range(3):
            await store.append_event(
                ref,
                StoreEvent(
                    id=f"e{i}",
                    author="user",
                    parts=({"type": "text", "text": f"café {i}"},),
                    state_delta={"k": i, "temp:t": i},
                    time=CLOCK_START + i,
                ),
            )
        await store.add_session_to_memory(ref)
        await store.close()
        await store.open()
        read = await store.get_session(ref)
        assert read is not None
        assert [e["id"] for e in read.events] == ["e0", "e1", "e2"]
        assert read.events[2]["time"] == CLOCK_START + 2
        assert read.to_dict()["state"] == {
            "session": {"k": 2},
            "user": {"user:city": "Lyon"},
            "app": {},
            "temp": {},
        }
        assert await store.list_sessions(app, "ada") == ["s1"]
        hits = await store.search_memory(app, "ada", "CAFÉ", 10)
        assert [h["text"] for h in hits] == ["café 0", "café 1", "café 2"]
        await store.delete_session(ref)
        assert await store.get_session(ref) is None
        await store.cleanup(app)
        assert await store.list_sessions(app, "ada") == []
    finally:
        await store.close()
        await store.dispose()
