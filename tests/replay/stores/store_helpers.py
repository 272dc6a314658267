"""Shared by the adapter tests: the events-only probes and locating a report's differences."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EVENTS_ONLY = Path(__file__).parent / "events_only"

Located = dict[tuple[str, str, str], dict[str, Any]]


def located(body: dict[str, Any]) -> Located:
    """Every difference of a report by `(store, case, JSON Pointer)`."""
    return {
        (d["backend"], d["case_id"], d["pointer"]): d
        for case in body["cases"]
        for d in case["differences"]
    }


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()
"""Stands for a value one side does not have."""


def assert_found(
    found: Located,
    where: tuple[str, str, str],
    reference: Any,
    backend: Any,
    session: str | None = None,
) -> None:
    """The report holds this difference: store, case, session, pointer and both values."""
    store, case, pointer = where
    d = found.get(where)
    assert d is not None, (
        store,
        case,
        pointer,
        sorted(p for s, c, p in found if (s, c) == (store, case)),
    )
    assert (d["reference_value"] if d["reference_present"] else ABSENT) == reference, d
    assert (d["backend_value"] if d["backend_present"] else ABSENT) == backend, d
    if session is not None:
        assert d["session"] == session, d
    assert d["reference"] == store.split("+", 1)[0] + "+memory", d
    assert not d["allowed"], d
