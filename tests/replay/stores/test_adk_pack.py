"""The hostile pack on every google-adk store: the report validates, and ADK's real divergences are found and located.

Each divergence asserted here has a minimal reproduction in plain ADK code in
`repro/test_adk_repro.py`, which proves it is ADK's behaviour and not the adapter's.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from store_helpers import ABSENT, EVENTS_ONLY, assert_found, located

from framework_dbs import framework_store_url
from steadyloop.replay import load_cases, pack_cases, replay, report_schema


async def run_pack(stores: list[str], names: list[str], tmp_path: Path) -> dict[str, Any]:
    cases = load_cases([pack_cases("hostile"), EVENTS_ONLY])
    report = await replay(cases, stores, workdir=tmp_path / "work")
    body = report.to_dict()
    jsonschema.validate(body, report_schema())
    assert body["references"]["adk"] == "adk+memory"
    ran = {c["backend"] for case in body["cases"] for c in case["comparisons"]}
    assert ran == set(names)
    return body


async def test_pack_on_adk_embedded_stores(tmp_path: Path) -> None:
    """On InMemory, SqliteSessionService and DatabaseSessionService/SQLite the pack finds ADK's order, NUL, duplicate, caller-edit, trailing-space and memory divergences, each located."""
    stores = ["adk+memory", "adk+sqlite", "adk+database+sqlite"]
    body = await run_pack(stores, stores, tmp_path)
    found = located(body)
    # SqliteSessionService truncates state values and keys at NUL.
    assert_found(
        found, ("adk+sqlite", "hostile_nul", "/sessions/s1/state/session/nul"), "a\x00b", "a", "s1"
    )
    assert_found(
        found, ("adk+sqlite", "hostile_nul", "/sessions/s1/state/session/key"), ABSENT, 1, "s1"
    )
    # Persistent stores sort by time (and DatabaseSessionService ties by id); InMemory keeps append order.
    for store in ("adk+sqlite", "adk+database+sqlite"):
        assert_found(
            found, (store, "hostile_equal_times", "/sessions/s1/events/0/id"), "e1", "e4", "s1"
        )
        assert_found(
            found, (store, "hostile_non_utc_tz", "/sessions/s1/events/0/id"), "e1", "e4", "s1"
        )
        # Tied times: only DatabaseSessionService sorts them by event id.
        tied = found.get((store, "events_tied_times", "/sessions/s1/events/0/id"))
        assert (tied is not None) == (store == "adk+database+sqlite"), tied
        # The same event again: InMemory merges it, the databases raise IntegrityError.
        assert_found(
            found, (store, "hostile_append_twice", "/outcomes/4/outcome"), "merged", "refused"
        )
        assert_found(
            found, (store, "hostile_append_twice", "/outcomes/4/error"), None, "IntegrityError"
        )
        # InMemory keeps the caller's object: its edit rewrites history there only.
        assert_found(
            found,
            (store, "hostile_caller_edit", "/sessions/s1/events/0/parts/0/text"),
            "edited after append",
            "original text",
            "s1",
        )
    # InMemory (and SqliteSessionService) strip ids; DatabaseSessionService keeps 's1 ' apart.
    assert_found(
        found,
        ("adk+database+sqlite", "hostile_id_trailing_space", "/lists/bob/sessions/2"),
        ABSENT,
        "s1 ",
    )
    # ... and so InMemory files the events written to 's1 ' under 's1'.
    assert_found(
        found,
        (
            "adk+database+sqlite",
            "hostile_events_id_trailing_space",
            "/sessions/trailing/session_id",
        ),
        "s1",
        "s1 ",
        "trailing",
    )
    # ... and deleting 's1 ' deletes 's1' there (DatabaseSessionService keeps 's1').
    assert_found(
        found,
        ("adk+database+sqlite", "events_delete_padded", "/sessions/plain/read_error"),
        "SessionNotFound",
        ABSENT,
        "plain",
    )
    moved = found[
        ("adk+database+sqlite", "hostile_events_id_trailing_space", "/sessions/plain/events/1")
    ]
    assert (moved["reference_value"]["parts"][0]["text"], moved["backend_present"]) == (
        "trailing",
        False,
    )
    # FTS5 SqliteMemoryService cannot find a Chinese word inside a sentence; InMemory can.
    weather = found[("adk+sqlite", "events_memory_words", "/queries/weather/hits/0")]
    assert (weather["reference_value"]["event_id"], weather["backend_present"]) == ("m1", False)
    # InMemoryMemoryService keeps the ten oldest of many matches; SqliteMemoryService the newest, with row-number ids.
    assert_found(
        found, ("adk+sqlite", "hostile_old_memory", "/queries/new/hits/0/event_id"), "m1", "m12"
    )
    assert_found(
        found, ("adk+sqlite", "hostile_old_memory", "/queries/old/hits/0/memory_id"), "m0", "1"
    )


@pytest.mark.server
async def test_pack_on_adk_database_servers(tmp_path: Path) -> None:
    """On DatabaseSessionService over PostgreSQL and MariaDB the pack finds JSONB's NUL refusal and float-to-int, and MariaDB's case-insensitive ids, each located."""
    async with AsyncExitStack() as stack:
        pg = await stack.enter_async_context(framework_store_url("adk", "postgresql", tmp_path))
        maria = await stack.enter_async_context(framework_store_url("adk", "mysql", tmp_path))
        body = await run_pack(
            ["adk+memory", pg, maria], ["adk+memory", "adk+postgresql", "adk+mysql"], tmp_path
        )
    found = located(body)
    # PostgreSQL: JSONB refuses NUL, so the events are lost; 1e300 comes back an int.
    assert_found(
        found,
        ("adk+postgresql", "events_nul", "/errors/3"),
        ABSENT,
        {"error": "DataError", "op": "append_event"},
    )
    assert not found[("adk+postgresql", "events_nul", "/sessions/s1/events/0")]["backend_present"]
    huge = found[("adk+postgresql", "hostile_int_vs_float", "/sessions/s1/state/session/huge")]
    assert huge["reference_value"] == 1e300
    assert isinstance(huge["reference_value"], float)
    assert huge["backend_value"] == 10**300
    assert isinstance(huge["backend_value"], int)
    # MariaDB: 'S1' after 's1' is refused as existing, and 'ADA' is listed Ada's session.
    assert_found(
        found,
        ("adk+mysql", "hostile_events_id_case", "/errors/3"),
        ABSENT,
        {"error": "AlreadyExistsError", "op": "create_session"},
    )
    assert_found(found, ("adk+mysql", "hostile_id_case", "/lists/ADA/sessions/0"), ABSENT, "S1")
    # MariaDB: event ids differing by case or a trailing space collide, and the event is lost.
    assert_found(
        found,
        ("adk+mysql", "events_event_ids", "/errors/4"),
        ABSENT,
        {"error": "IntegrityError", "op": "append_event"},
    )
    assert_found(
        found, ("adk+mysql", "events_event_ids", "/sessions/s1/events/1/id"), "E1", "\u00e9", "s1"
    )
    for store in ("adk+postgresql", "adk+mysql"):
        assert_found(
            found, (store, "events_tied_times", "/sessions/s1/events/0/id"), "e3", "e1", "s1"
        )
        assert_found(
            found, (store, "hostile_equal_times", "/sessions/s1/events/0/id"), "e1", "e4", "s1"
        )
        assert_found(
            found, (store, "hostile_append_twice", "/outcomes/4/outcome"), "merged", "refused"
        )
