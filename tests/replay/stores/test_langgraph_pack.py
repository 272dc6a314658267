"""The hostile pack on every LangGraph checkpointer and store: the report validates, and LangGraph's real divergences are found and located.

Each divergence asserted here has a minimal reproduction in plain LangGraph code in
`repro/test_langgraph_repro.py`, which proves it is LangGraph's behaviour and not the
adapter's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
from store_helpers import ABSENT, assert_found, located

from backends import with_options
from framework_dbs import postgres_schema
from steadyloop._errors import UnknownBackend
from steadyloop.replay import load_cases, pack_cases, replay, report_schema
from steadyloop.replay._store import parse_store_url
from steadyloop.replay.stores._langgraph import CheckpointerStore
from steadyloop.replay.stores._langgraph_store import LangGraphStore

PG_SAVERS = ("langgraph+postgresql", "langgraph+async+postgresql")


async def run_pack(stores: list[str], framework: str, tmp_path: Path) -> dict[str, Any]:
    """Run the hostile pack; the report validates, names the in-memory reference, and every store compared."""
    report = await replay(load_cases([pack_cases("hostile")]), stores, workdir=tmp_path / "w")
    body = report.to_dict()
    jsonschema.validate(body, report_schema())
    assert body["references"][framework] == f"{framework}+memory"
    ran = {c["backend"] for case in body["cases"] for c in case["comparisons"]}
    assert ran == {f"{framework}+memory", *(s.split(":", 1)[0] for s in stores)}
    return body


@pytest.mark.server
async def test_pack_on_every_langgraph_checkpointer(tmp_path: Path) -> None:
    """Named alone the savers get InMemorySaver as reference; SQLite savers agree with it, the PostgreSQL savers change 1e300 and -0.0 and refuse a NUL string."""
    async with postgres_schema() as (url, schema):
        target = with_options(url, options=f"-csearch_path={schema}")
        stores = [
            "langgraph+sqlite",
            "langgraph+async+sqlite",
            f"langgraph+{target}",
            f"langgraph+async+{target}",
        ]
        body = await run_pack(stores, "langgraph", tmp_path)
    found = located(body)
    assert {s for s, _, _ in found} == set(PG_SAVERS), sorted({(s, c) for s, c, _ in found})
    assert body["counts"]["not_applicable"] == 5  # hostile_old_memory: no memory
    for store in PG_SAVERS:
        case = "hostile_int_vs_float"
        assert_found(found, (store, case, "/sessions/s1/state/session/huge"), 1e300, 10**300)
        assert_found(found, (store, case, "/sessions/s1/state/session/neg_zero"), -0.0, 0.0)
        nul = found[(store, "hostile_nul", "/errors/2")]
        assert nul["backend_value"] == {"error": "UntranslatableCharacter", "op": "create_session"}
        assert_found(
            found, (store, "hostile_nul", "/sessions/s1/read_error"), ABSENT, "SessionNotFound"
        )
        # In the messages list (a msgpack blob) the same values survive.
        assert not [p for s, c, p in found if s == store and "/events" in p and c == case]


@pytest.mark.server
async def test_pack_on_every_langgraph_store(tmp_path: Path) -> None:
    """SqliteStore agrees with InMemoryStore but for the caller's dict (and a search page when its writes cross a second); PostgresStore also changes floats, refuses NUL and pages a search newest first."""
    async with postgres_schema() as (url, schema):
        target = with_options(url, options=f"-csearch_path={schema}")
        body = await run_pack(
            ["langgraph-store+sqlite", f"langgraph-store+{target}"], "langgraph-store", tmp_path
        )
    found = located(body)
    pg = "langgraph-store+postgresql"
    for store in ("langgraph-store+sqlite", pg):
        # InMemoryStore keeps the caller's dict: the edit after the put is read back.
        assert_found(
            found,
            (store, "hostile_caller_edit", "/sessions/s1/events/0/parts/0/text"),
            "edited after append",
            "original text",
            "s1",
        )
    sqlite_cases = {c for s, c, _ in found if s == "langgraph-store+sqlite"}
    # SqliteStore pages a search newest first by the second an item was written in
    # (`test_sqlite_store_search_pages_by_the_second_items_were_put`): when the memory
    # batch crosses a second, the page of the `new` query holds other items.
    crossed = {
        p for s, c, p in found if s == "langgraph-store+sqlite" and c == "hostile_old_memory"
    }
    assert all(p.startswith("/queries/new/hits/") for p in crossed), crossed
    assert sqlite_cases - {"hostile_old_memory"} == {
        "hostile_caller_edit",
        "hostile_events_caller_edit",
    }
    case = "hostile_int_vs_float"
    assert_found(found, (pg, case, "/sessions/s1/state/session/huge"), 1e300, 10**300, "s1")
    assert_found(found, (pg, case, "/sessions/s1/events/0/state_delta/neg_zero"), -0.0, 0.0)
    assert found[(pg, "hostile_nul", "/errors/2")]["backend_value"]["error"] == (
        "UntranslatableCharacter"
    )
    assert_found(found, (pg, "hostile_old_memory", "/queries/new/hits/0/event_id"), "m0", "m12")


def test_store_names_follow_the_other_frameworks(tmp_path: Path) -> None:
    """`langgraph+…` and `langgraph-store+…` name their backends as adk and trpc do; a wrong one is one clear error."""

    def spec(url: str) -> Any:
        parsed = parse_store_url(url, tmp_path)
        assert parsed is not None
        return parsed

    assert CheckpointerStore(spec("langgraph+memory")).backend == "memory"
    store = CheckpointerStore(spec(f"langgraph+async+sqlite://{tmp_path}/x.db"))
    assert (store.name, store.location) == ("langgraph+async+sqlite", f"{tmp_path}/x.db")
    pg = CheckpointerStore(spec("langgraph+async+postgres://u@h/db"))
    assert (pg.kind, pg.location) == ("async+postgresql", "postgresql://u@h/db")
    assert LangGraphStore(spec("langgraph-store+sqlite")).location.startswith(str(tmp_path))
    with pytest.raises(UnknownBackend, match="langgraph\\+async\\+sqlite"):
        CheckpointerStore(spec("langgraph+redis://h"))
    with pytest.raises(UnknownBackend, match="needs a URL"):
        LangGraphStore(spec("langgraph-store+postgresql"))
