"""The hostile pack and the events-only probes on every openai-agents store: the report validates, and the SDK's real divergences are found and located.

Each divergence asserted here has a minimal reproduction in plain SDK code in
`repro/test_openai_agents_repro.py`, which proves it is the SDK's behaviour and not the
adapter's.
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

BIG_TEXT_START = "0123456789abcdef" * 4


async def run(stores: list[str], names: list[str], tmp_path: Path) -> dict[str, Any]:
    cases = load_cases([pack_cases("hostile"), EVENTS_ONLY])
    report = await replay(cases, stores, workdir=tmp_path / "work")
    body = report.to_dict()
    jsonschema.validate(body, report_schema())
    assert body["references"]["openai-agents"] == "openai-agents+memory"
    runs = {(case["case_id"], r["backend"]): r for case in body["cases"] for r in case["runs"]}
    assert {store for _, store in runs} == set(names)
    # The SDK keeps no state: state probes are not applicable there, naming the capability.
    nul = runs[("hostile_nul", "openai-agents+memory")]
    assert nul["status"] == "not_applicable"
    assert {m["capability"] for m in nul["missing"]} >= {"state"}
    # Every events-only probe ran on every store, but those needing memory or explicit times.
    for path in EVENTS_ONLY.glob("*.jsonl"):
        for store in names:
            needs_more = path.stem in {"events_memory_words", "events_tied_times"}
            status = "not_applicable" if needs_more else "ran"
            assert runs[(path.stem, store)]["status"] == status, (path.stem, store)
    return body


async def test_events_only_probes_agree_on_embedded_stores(tmp_path: Path) -> None:
    """SQLiteSession (memory and file) and SQLAlchemySession on SQLite agree on every events-only probe."""
    stores = ["openai-agents+memory", "openai-agents+sqlite", "openai-agents+sqlalchemy+sqlite"]
    body = await run(stores, stores, tmp_path)
    assert [
        (d["backend"], d["case_id"], d["pointer"])
        for case in body["cases"]
        for d in case["differences"]
    ] == []


@pytest.mark.server
async def test_pack_on_openai_agents_servers(tmp_path: Path) -> None:
    """On PostgreSQL, MariaDB (as shipped and with the SDK's tables made by hand) and Redis the probes find NUL-id refusal, the missing tables, merged ids, the 64 KiB limit and Redis key collisions, each located."""
    async with AsyncExitStack() as stack:

        async def url(backend: str, **options: str) -> str:
            return str(
                await stack.enter_async_context(
                    framework_store_url("openai-agents", backend, tmp_path, **options)
                )
            )

        stores = [
            "openai-agents+memory",
            await url("postgresql"),
            await url("mysql"),
            await url("mysql", tables="adapter"),
            await url("redis"),
        ]
        names = [
            "openai-agents+memory",
            "openai-agents+postgresql",
            "openai-agents+mysql",
            "openai-agents+mysql+tables",
            "openai-agents+redis",
        ]
        body = await run(stores, names, tmp_path)
    found = located(body)
    # PostgreSQL refuses a session id holding NUL, on write and on read.
    nul_append = {"error": "DataError", "op": "append_event"}
    assert_found(found, ("openai-agents+postgresql", "events_nul", "/errors/6"), ABSENT, nul_append)
    assert_found(
        found,
        ("openai-agents+postgresql", "events_nul", "/sessions/nul_id/read_error"),
        ABSENT,
        "DataError",
        "nul_id",
    )
    # MariaDB as shipped: the SDK cannot create its tables, so every operation fails.
    for case, session in [
        ("hostile_events_id_case", "lower"),
        ("hostile_events_big_text", "s1"),
        ("hostile_empty_parts", "s1"),
    ]:
        assert_found(
            found,
            ("openai-agents+mysql", case, f"/sessions/{session}/read_error"),
            ABSENT,
            "CompileError",
            session,
        )
    # MariaDB with the SDK's tables: 's1' and 'S1' (and 's1 ') are one conversation ...
    merged = found[
        ("openai-agents+mysql+tables", "hostile_events_id_case", "/sessions/upper/events/2")
    ]
    assert (merged["reference_present"], merged["backend_present"]) == (False, True)
    assert_found(
        found,
        (
            "openai-agents+mysql+tables",
            "hostile_events_id_trailing_space",
            "/sessions/trailing/events/0/parts/0/text",
        ),
        "trailing",
        "plain",
        "trailing",
    )
    # ... and a 100 KiB item is refused, so the conversation loses it.
    assert_found(
        found,
        ("openai-agents+mysql+tables", "hostile_events_big_text", "/errors/3"),
        ABSENT,
        {"error": "DataError", "op": "append_event"},
    )
    assert_found(
        found,
        ("openai-agents+mysql+tables", "hostile_events_big_text", "/sessions/s1/events/0/id"),
        "e1",
        "e2",
        "s1",
    )
    # Redis: 'a:messages' collides with session 'a''s keys, 'b' with 'b:messages''s, 'd' with 'd:counter''s.
    redis = "openai-agents+redis"
    assert_found(
        found,
        (redis, "events_id_separators", "/errors/5"),
        ABSENT,
        {"error": "ResponseError", "op": "append_event"},
    )
    assert_found(
        found,
        (redis, "events_id_separators", "/sessions/b/read_error"),
        ABSENT,
        "ResponseError",
        "b",
    )
    assert_found(
        found,
        (redis, "events_id_separators", "/errors/14"),
        ABSENT,
        {"error": "ResponseError", "op": "delete_session"},
    )
