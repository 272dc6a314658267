"""Minimal reproductions of google-adk session and memory store divergences (google-adk 2.13.0).

Plain framework code, no Steadyloop. Each test asserts what the framework really does at
the pinned version; the docstring says what a careful user would expect instead. When
one starts failing, the framework changed: update the divergence list in the notes and
the replay docs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

APP = "repro"
SERVER_BACKENDS = {"postgresql", "mysql"}


def adk_params(*backends: str) -> list[Any]:
    """Parametrise over ADK backends, marking the server ones `server`."""
    return [
        pytest.param(b, id=b, marks=[pytest.mark.server] if b in SERVER_BACKENDS else [])
        for b in backends
    ]


def event(text: str | None, eid: str, ts: float, delta: dict[str, Any] | None = None) -> Any:
    from google.adk.events import Event, EventActions
    from google.genai import types

    return Event(
        id=eid,
        invocation_id="inv",
        author="user",
        timestamp=ts,
        content=types.Content(role="user", parts=[types.Part(text=text)])
        if text is not None
        else None,
        actions=EventActions(state_delta=delta or {}),
    )


def texts(session: Any) -> list[str]:
    return [e.content.parts[0].text for e in session.events]


T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


# --- ids -------------------------------------------------------------------------------


@pytest.mark.server
async def test_mariadb_merges_session_ids_differing_only_by_case(adk_factory: Any) -> None:
    """DatabaseSessionService on MariaDB: `SESS` is refused as a duplicate of `sess`, and reading `SESS` returns `sess` (its events and state)."""
    from google.adk.errors.already_exists_error import AlreadyExistsError

    svc = await adk_factory("mysql")
    s = await svc.create_session(app_name=APP, user_id="u", session_id="sess")
    await svc.append_event(s, event("lower", "e1", T0, {"k": "lower"}))
    with pytest.raises(AlreadyExistsError):
        await svc.create_session(app_name=APP, user_id="u", session_id="SESS")
    got = await (await adk_factory("mysql")).get_session(
        app_name=APP, user_id="u", session_id="SESS"
    )
    assert got is not None
    assert (got.id, texts(got), got.state["k"]) == ("sess", ["lower"], "lower")


@pytest.mark.server
async def test_mariadb_lists_and_shares_state_across_user_ids_differing_by_case(
    adk_factory: Any,
) -> None:
    """DatabaseSessionService on MariaDB: `alice` is listed `ALICE`'s session and reads the `user:` value `ALICE` wrote over hers."""
    svc = await adk_factory("mysql")
    a = await svc.create_session(app_name=APP, user_id="alice", session_id="a1")
    b = await svc.create_session(app_name=APP, user_id="ALICE", session_id="b1")
    await svc.append_event(a, event("a", "ea", T0, {"user:color": "red"}))
    await svc.append_event(b, event("b", "eb", T0 + 1, {"user:color": "blue"}))
    svc = await adk_factory("mysql")
    listed = await svc.list_sessions(app_name=APP, user_id="alice")
    assert sorted((s.user_id, s.id) for s in listed.sessions) == [("ALICE", "b1"), ("alice", "a1")]
    got = await svc.get_session(app_name=APP, user_id="alice", session_id="a1")
    assert got.state["user:color"] == "blue"


@pytest.mark.parametrize(
    ("backend", "merged"),
    [
        ("memory", True),
        ("sqlite", True),
        ("database+sqlite", False),
        pytest.param("postgresql", False, marks=pytest.mark.server),
        pytest.param("mysql", True, marks=pytest.mark.server),
    ],
)
async def test_trailing_space_session_id(adk_factory: Any, backend: str, merged: bool) -> None:
    """`sess ` is a session of its own on DatabaseSessionService (SQLite, PostgreSQL), but InMemory and SqliteSessionService strip it and MariaDB pads it: there `sess ` is `sess`."""
    from google.adk.errors.already_exists_error import AlreadyExistsError

    svc = await adk_factory(backend)
    s = await svc.create_session(app_name=APP, user_id="u", session_id="sess")
    await svc.append_event(s, event("plain", "e1", T0))
    if merged:
        with pytest.raises(AlreadyExistsError):
            await svc.create_session(app_name=APP, user_id="u", session_id="sess ")
    else:
        padded = await svc.create_session(app_name=APP, user_id="u", session_id="sess ")
        await svc.append_event(padded, event("padded", "e2", T0 + 1))
    got = await (await adk_factory(backend)).get_session(
        app_name=APP, user_id="u", session_id="sess "
    )
    assert texts(got) == (["plain"] if merged else ["padded"])


# --- values ----------------------------------------------------------------------------


async def test_sqlite_session_service_truncates_state_strings_at_nul(adk_factory: Any) -> None:
    """SqliteSessionService: a state string `a<NUL>b` reads back as `a`, silently — session state at once, `user:`/`app:` state as soon as a later delta touches any other key of that scope."""
    svc = await adk_factory("sqlite")
    s = await svc.create_session(app_name=APP, user_id="u", session_id="s")
    await svc.append_event(
        s, event("x", "e1", T0, {"k": "a\x00b", "user:k": "a\x00b", "app:k": "a\x00b"})
    )
    got = await (await adk_factory("sqlite")).get_session(app_name=APP, user_id="u", session_id="s")
    assert (got.state["k"], got.state["user:k"], got.state["app:k"]) == ("a", "a\x00b", "a\x00b")
    await svc.append_event(s, event("y", "e2", T0 + 1, {"user:other": 1, "app:other": 1}))
    got = await (await adk_factory("sqlite")).get_session(app_name=APP, user_id="u", session_id="s")
    assert (got.state["k"], got.state["user:k"], got.state["app:k"]) == ("a", "a", "a")
    assert got.events[0].actions.state_delta["k"] == "a\x00b"  # the event itself keeps it


@pytest.mark.server
@pytest.mark.parametrize("where", ["text", "state"])
async def test_postgresql_refuses_nul(adk_factory: Any, where: str) -> None:
    """DatabaseSessionService on PostgreSQL: an event with NUL in its text or state is refused (JSONB), and the event is lost."""
    from sqlalchemy.exc import DataError

    svc = await adk_factory("postgresql")
    s = await svc.create_session(app_name=APP, user_id="u", session_id="s")
    bad = event("x\x00y", "e1", T0) if where == "text" else event("x", "e1", T0, {"k": "a\x00b"})
    with pytest.raises(DataError, match="unsupported Unicode escape sequence"):
        await svc.append_event(s, bad)
    got = await (await adk_factory("postgresql")).get_session(
        app_name=APP, user_id="u", session_id="s"
    )
    assert got.events == []


@pytest.mark.parametrize(
    ("backend", "signed"),
    [
        ("memory", True),
        ("sqlite", False),
        ("database+sqlite", True),
        pytest.param("postgresql", False, marks=pytest.mark.server),
        pytest.param("mysql", True, marks=pytest.mark.server),
    ],
)
async def test_negative_zero_in_state(adk_factory: Any, backend: str, signed: bool) -> None:
    """State `-0.0` keeps its sign in memory, on DatabaseSessionService/SQLite and MariaDB, but reads back `0.0` from SqliteSessionService (whenever it merges a delta into the row) and PostgreSQL (JSONB)."""
    import math

    svc = await adk_factory(backend)
    s = await svc.create_session(app_name=APP, user_id="u", session_id="s")
    await svc.append_event(s, event("x", "e1", T0, {"z": -0.0}))
    got = await (await adk_factory(backend)).get_session(app_name=APP, user_id="u", session_id="s")
    assert math.copysign(1.0, got.state["z"]) == (-1.0 if signed else 1.0)


@pytest.mark.parametrize(
    ("backend", "kept"),
    [
        ("memory", True),
        ("sqlite", True),
        ("database+sqlite", True),
        pytest.param("postgresql", False, marks=pytest.mark.server),
        pytest.param("mysql", True, marks=pytest.mark.server),
    ],
)
async def test_huge_float_in_state(adk_factory: Any, backend: str, kept: bool) -> None:
    """State `1e300` reads back as the float it was everywhere but on PostgreSQL (JSONB), which returns the integer 10**300 (the value's type is lost)."""
    svc = await adk_factory(backend)
    s = await svc.create_session(app_name=APP, user_id="u", session_id="s")
    await svc.append_event(s, event("x", "e1", T0, {"huge": 1e300}))
    got = await (await adk_factory(backend)).get_session(app_name=APP, user_id="u", session_id="s")
    value = got.state["huge"]
    if kept:
        assert type(value) is float and value == 1e300
    else:
        assert type(value) is int and value == 10**300


# --- order -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        ("memory", ["e-c", "e-b", "e-a", "e-early"]),
        ("sqlite", ["e-early", "e-c", "e-b", "e-a"]),
        ("database+sqlite", ["e-early", "e-a", "e-b", "e-c"]),
        pytest.param("postgresql", ["e-early", "e-a", "e-b", "e-c"], marks=pytest.mark.server),
        pytest.param("mysql", ["e-early", "e-a", "e-b", "e-c"], marks=pytest.mark.server),
    ],
)
async def test_event_order_after_reload(
    adk_factory: Any, backend: str, expected: list[str]
) -> None:
    """Events appended as c, b, a (equal times) then one stamped earlier: only InMemory keeps append order; SqliteSessionService moves the earlier one first; DatabaseSessionService also sorts the tied ones by event id."""
    svc = await adk_factory(backend)
    s = await svc.create_session(app_name=APP, user_id="u", session_id="s")
    for eid, ts in [("e-c", T0 + 10), ("e-b", T0 + 10), ("e-a", T0 + 10), ("e-early", T0 + 1)]:
        await svc.append_event(s, event(eid, eid, ts))
    got = await (await adk_factory(backend)).get_session(app_name=APP, user_id="u", session_id="s")
    assert [e.id for e in got.events] == expected


# --- the caller's event object ----------------------------------------------------------


@pytest.mark.parametrize(
    "backend", adk_params(*["memory", "sqlite", "database+sqlite", "postgresql", "mysql"])
)
async def test_caller_edits_event_after_append(adk_factory: Any, backend: str) -> None:
    """Editing an event after `append_event` rewrites InMemorySessionService's stored history (text and state delta), while the session state and every persistent store keep the original."""
    svc = await adk_factory(backend)
    s = await svc.create_session(app_name=APP, user_id="u", session_id="s")
    e = event("original", "e1", T0, {"k": "original"})
    await svc.append_event(s, e)
    e.content.parts[0].text = "edited"
    e.actions.state_delta["k"] = "edited"
    got = await (await adk_factory(backend)).get_session(app_name=APP, user_id="u", session_id="s")
    seen = "edited" if backend == "memory" else "original"
    assert texts(got) == [seen]
    assert got.events[0].actions.state_delta["k"] == seen
    assert got.state["k"] == "original"


@pytest.mark.parametrize(
    "backend", adk_params(*["memory", "sqlite", "database+sqlite", "postgresql", "mysql"])
)
async def test_same_event_appended_twice(adk_factory: Any, backend: str) -> None:
    """Appending the same event again is silently dropped by InMemorySessionService but raises a raw database IntegrityError (no ADK error type) on every persistent store."""
    import sqlite3

    from sqlalchemy.exc import IntegrityError

    svc = await adk_factory(backend)
    s = await svc.create_session(app_name=APP, user_id="u", session_id="s")
    e = event("once", "e1", T0, {"n": 1})
    await svc.append_event(s, e)
    if backend == "memory":
        await svc.append_event(s, e)
    else:
        with pytest.raises((IntegrityError, sqlite3.IntegrityError)):
            await svc.append_event(s, e)
    got = await (await adk_factory(backend)).get_session(app_name=APP, user_id="u", session_id="s")
    assert texts(got) == ["once"]


# --- memory ----------------------------------------------------------------------------


async def _memory_with(service: Any, events: list[Any], user: str = "u") -> None:
    from google.adk.sessions import Session

    await service.add_session_to_memory(
        Session(app_name=APP, user_id=user, id="s", events=events, last_update_time=T0)
    )


async def test_in_memory_memory_drops_the_newest_of_many_matches(tmp_path: Path) -> None:
    """InMemoryMemoryService returns at most ten hits and, among equal scores, the oldest ten: the three newest matches are lost; SqliteMemoryService returns all thirteen, newest first."""
    from google.adk.memory import InMemoryMemoryService, SqliteMemoryService

    events = [event(f"needle {i}", f"n{i:02}", T0 + i) for i in range(13)]
    mem = InMemoryMemoryService()
    await _memory_with(mem, events)
    hits = (await mem.search_memory(app_name=APP, user_id="u", query="needle")).memories
    assert [h.id for h in hits] == [f"n{i:02}" for i in range(10)]

    sql = SqliteMemoryService(str(tmp_path / "mem.db"))
    try:
        await _memory_with(sql, events)
        hits = (await sql.search_memory(app_name=APP, user_id="u", query="needle")).memories
        assert [h.custom_metadata["event_id"] for h in hits] == [
            f"n{i:02}" for i in reversed(range(13))
        ]
    finally:
        await sql.close()


async def test_sqlite_memory_ids_are_row_numbers(tmp_path: Path) -> None:
    """A memory's `id` is the event id on InMemoryMemoryService but SqliteMemoryService's own row number (the event id moves to `custom_metadata`)."""
    from google.adk.memory import InMemoryMemoryService, SqliteMemoryService

    events = [event("the old needle", "old-event", T0)]
    mem = InMemoryMemoryService()
    await _memory_with(mem, events)
    assert [
        h.id for h in (await mem.search_memory(app_name=APP, user_id="u", query="needle")).memories
    ] == ["old-event"]
    sql = SqliteMemoryService(str(tmp_path / "mem.db"))
    try:
        await _memory_with(sql, events)
        hits = (await sql.search_memory(app_name=APP, user_id="u", query="needle")).memories
        assert [(h.id, h.custom_metadata["event_id"]) for h in hits] == [("1", "old-event")]
    finally:
        await sql.close()


@pytest.mark.parametrize(
    ("fts", "text", "query", "found"),
    [
        (None, "café x_y", "cafe", False),
        ("auto", "café x_y", "cafe", True),
        ("off", "café x_y", "cafe", False),
        (None, "café x_y", "x", False),
        ("auto", "café x_y", "x", True),
        ("off", "café x_y", "x", True),
        (None, "今天天气很好。", "天气", True),
        ("auto", "今天天气很好。", "天气", False),
        ("off", "今天天气很好。", "天气", True),
    ],
)
async def test_memory_matching_rules(
    tmp_path: Path, fts: str | None, text: str, query: str, found: bool
) -> None:
    """The three ADK keyword memories disagree on what matches: FTS5 SqliteMemoryService folds accents (`cafe` finds `café`) and splits `x_y` but cannot find a Chinese word inside a sentence; its LIKE fallback matches any substring; InMemoryMemoryService matches whole words (and substrings for non-ASCII queries)."""
    from google.adk.memory import InMemoryMemoryService, SqliteMemoryService

    events = [event(text, "e1", T0)]
    service: Any = (
        InMemoryMemoryService()
        if fts is None
        else SqliteMemoryService(str(tmp_path / "m.db"), fts=fts)  # type: ignore[arg-type]
    )
    try:
        await _memory_with(service, events)
        hits = (await service.search_memory(app_name=APP, user_id="u", query=query)).memories
        assert bool(hits) is found
    finally:
        if fts is not None:
            await service.close()


async def test_in_memory_service_aliases_the_callers_state_values(adk_factory: Any) -> None:
    """InMemorySessionService stores the caller's own state objects: mutating the initial state or an appended delta afterwards changes the stored session and user state (persistent stores keep what was written)."""
    svc = await adk_factory("memory")
    initial: dict[str, Any] = {"k": [1], "user:u": {"a": 1}}
    s = await svc.create_session(app_name=APP, user_id="u", session_id="s", state=initial)
    delta: dict[str, Any] = {"n": [1], "user:m": [1]}
    await svc.append_event(s, event("x", "e1", T0, delta))
    initial["k"].append(2)
    initial["user:u"]["b"] = 2
    delta["n"].append(2)
    delta["user:m"].append(2)
    got = await svc.get_session(app_name=APP, user_id="u", session_id="s")
    assert got.state == {"k": [1, 2], "n": [1, 2], "user:u": {"a": 1, "b": 2}, "user:m": [1, 2]}


@pytest.mark.server
@pytest.mark.parametrize("other", ["E1", "e1 "])
async def test_mariadb_refuses_event_ids_differing_by_case_or_trailing_space(
    adk_factory: Any, other: str
) -> None:
    """DatabaseSessionService on MariaDB: in one session, an event `E1` (or `e1 `) after `e1` is refused as a duplicate key, and the event is lost."""
    from sqlalchemy.exc import IntegrityError

    svc = await adk_factory("mysql")
    s = await svc.create_session(app_name=APP, user_id="u", session_id="s")
    await svc.append_event(s, event("first", "e1", T0))
    with pytest.raises(IntegrityError, match="Duplicate entry"):
        await svc.append_event(s, event("second", other, T0 + 1))
    got = await (await adk_factory("mysql")).get_session(app_name=APP, user_id="u", session_id="s")
    assert texts(got) == ["first"]


@pytest.mark.parametrize(
    ("backend", "deleted"),
    [
        ("memory", True),
        ("sqlite", True),
        ("database+sqlite", False),
        pytest.param("postgresql", False, marks=pytest.mark.server),
        pytest.param("mysql", True, marks=pytest.mark.server),
    ],
)
async def test_deleting_a_padded_id_deletes_the_unpadded_session(
    adk_factory: Any, backend: str, deleted: bool
) -> None:
    """`delete_session("s1 ")` deletes the session `s1` and its events on InMemory and SqliteSessionService (they strip the id) and on MariaDB (PAD SPACE), not on DatabaseSessionService over SQLite or PostgreSQL."""
    svc = await adk_factory(backend)
    s = await svc.create_session(app_name=APP, user_id="u", session_id="s1")
    await svc.append_event(s, event("keep me", "e1", T0))
    await svc.delete_session(app_name=APP, user_id="u", session_id="s1 ")
    got = await (await adk_factory(backend)).get_session(app_name=APP, user_id="u", session_id="s1")
    assert (got is None) is deleted
