"""The hostile-values pack on every trpc-agent-py backend, against trpc's in-memory store.

Each run must produce a report that validates against the shipped schema, compare every
trpc store with ``trpc+memory`` (the framework's reference), and find — located by store,
case, session, JSON Pointer and both values — the divergences the plain-framework
reproductions in ``repro/`` prove are trpc-agent-py's own.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from steadyloop.replay import load_cases, pack_cases, replay, report_schema
from trpc_stores import trpc_url

pytest.importorskip("trpc_agent_sdk", reason="the trpc extra is not installed")

# SQLAlchemy warns before it raises IntegrityError on a repeated event; as an error the
# warning would replace the framework's own result.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")]

ANY = object()
"""A reference or backend value the test does not pin."""

SQL_FINDINGS = [
    # An earlier event comes back first, and equal-time ones reversed (SQLite, PostgreSQL;
    # MariaDB orders them by event id descending, which these rising ids make the same).
    ("hostile_equal_times", "s1", "/sessions/s1/events/0/id", "e1", "e4"),
    # An event whose only text part is "" comes back with no parts.
    (
        "hostile_empty_parts",
        "s1",
        "/sessions/s1/events/0/parts/0",
        {"type": "text", "text": ""},
        None,
    ),
    # Memory search sees only the ten newest entries.
    ("hostile_old_memory", None, "/queries/old/hits/0", ANY, None),
    # The same event twice: refused with IntegrityError (memory keeps two copies).
    ("hostile_append_twice", None, "/outcomes/4/error", None, "IntegrityError"),
    # A second create keeps the first session's event (memory silently drops it).
    ("hostile_create_twice", "s1", "/sessions/s1/events/0/id", "e2", "e1"),
    # A time in the repeated hour of a DST fold comes back an hour earlier (naive local
    # time, read back as the fold's first occurrence).
    ("hostile_dst_fold", "s1", "/sessions/s1/events/1/time", 1699166400123457, 1699162800123457),
]
FINDINGS: dict[str, list[tuple[str, str | None, str, Any, Any]]] = {
    "sqlite": SQL_FINDINGS,
    "postgres": [
        *SQL_FINDINGS,
        ("hostile_nul", None, "/errors/2", None, {"op": "create_session", "error": "DataError"}),
        ("hostile_int_vs_float", "s1", "/sessions/s1/state/session/huge", 1e300, 10**300),
    ],
    "mysql": [
        *SQL_FINDINGS,
        # Session ids that differ by case are one session; so are user ids.
        ("hostile_id_case", "lower", "/sessions/lower/session_id", "s1", "S1"),
        ("hostile_id_case", "other_user", "/sessions/other_user/user_id", "Ada", "ada"),
    ],
    "redis": [
        # User "u:1" session "a:b" and user "u" session "1:a:b" share one key.
        ("hostile_id_separators", "s0", "/sessions/s0/user_id", "u:1", "u"),
        # A bool in user:/app: state is refused; any scoped state makes reads crash.
        (
            "hostile_shared_scopes",
            None,
            "/errors/2",
            None,
            {"op": "create_session", "error": "DataError"},
        ),
        ("hostile_shared_scopes", "b1", "/sessions/b1/read_error", None, "TypeError"),
    ],
}
EVERY_STORE = [
    # Only the in-memory service keeps the caller's event object.
    ("hostile_caller_edit", None, "/outcomes/4/outcome", "accepted", "merged"),
]


@pytest.fixture(autouse=True)
def quiet_framework() -> Iterator[None]:
    """trpc-agent-py logs a warning per append whose case time is in the past."""
    logger = logging.getLogger("trpc_agent_sdk")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@pytest.mark.parametrize(
    "backend",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.server),
        pytest.param("mysql", marks=pytest.mark.server),
        pytest.param("redis", marks=pytest.mark.server),
    ],
)
async def test_hostile_pack_finds_trpcs_divergences(backend: str, tmp_path: Path) -> None:
    """The pack runs on the backend, the report validates, and trpc's divergences are located."""
    async with trpc_url(backend, tmp_path) as url:
        report = await replay(
            load_cases([pack_cases("hostile")]),
            ["trpc+memory", url],
            workdir=tmp_path / "work",
        )
    data = json.loads(json.dumps(report.to_dict()))
    jsonschema.validate(data, report_schema())
    store = next(b for b in data["backends"] if b != "trpc+memory")
    found = {}
    for case in data["cases"]:
        assert [r["status"] for r in case["runs"]] == ["ran", "ran"], case["case_id"]
        compared = {c["backend"]: c for c in case["comparisons"]}
        assert compared[store]["reference"] == "trpc+memory"
        for d in case["differences"]:
            assert (d["backend"], d["reference"], d["case_id"]) == (
                store,
                "trpc+memory",
                case["case_id"],
            )
            found[(d["case_id"], d["pointer"])] = d
    for case_id, session, pointer, reference, got in [*FINDINGS[backend], *EVERY_STORE]:
        d = found.get((case_id, pointer))
        assert d is not None, f"{store}: no difference at {case_id} {pointer}"
        assert d["session"] == session
        if reference is not ANY:
            assert d["reference_value"] == reference, (case_id, pointer)
        assert d["backend_value"] == got, (case_id, pointer)
    assert not report.ok
