"""A planted faulty store: the harness catches every kind of fault, on Steadyloop's own store."""

from __future__ import annotations

from pathlib import Path

import pytest

from steadyloop.replay import (
    FAULTS,
    FaultyStore,
    JournalStore,
    load_cases,
    pack_cases,
    replay,
    temporary_backend,
)

# Each fault, the hostile case that must catch it, and the report domains it shows in.
CAUGHT_BY = {
    "drop_event": ("hostile_empty_parts", {"events"}),
    "reorder_events": ("hostile_equal_times", {"events"}),
    "shift_time": ("hostile_equal_times", {"events"}),
    "change_type": ("hostile_int_vs_float", {"state"}),
    "merge_sessions": ("hostile_id_case", {"events", "state"}),
    "leak_list": ("hostile_id_case", {"lists"}),
    "lose_user_scope": ("hostile_shared_scopes", {"state"}),
    "truncate_text": ("hostile_big_text", {"events"}),
    "keep_temp": ("hostile_shared_scopes", {"state"}),
    "cut_at_nul": ("hostile_nul", {"events", "state"}),
    "trim_ids": ("hostile_id_trailing_space", {"events", "state"}),
}


def test_every_fault_has_a_case_that_catches_it() -> None:
    """There are at least eight kinds of fault, and each is assigned a case of the pack."""
    assert len(FAULTS) >= 8
    assert set(CAUGHT_BY) == set(FAULTS)


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_the_harness_catches_the_planted_fault(fault: str, tmp_path: Path) -> None:
    """Replaying the pack on a faulty Steadyloop store next to an honest one reports the fault, located in its case and domain."""
    case_id, domains = CAUGHT_BY[fault]
    cases = load_cases([pack_cases("hostile")])
    faulty = FaultyStore(JournalStore(temporary_backend("memory", tmp_path)), fault)
    report = await replay(cases, ["sqlite", faulty], workdir=tmp_path)
    found = [d for d in report.unexpected if d.backend == faulty.name]
    assert found, f"{fault} went unnoticed"
    assert all(d.reference == "sqlite" for d in found)
    in_case = [d for d in found if d.case_id == case_id]
    assert in_case, f"{fault} not caught by {case_id}: {[(d.case_id, d.pointer) for d in found]}"
    assert {d.domain for d in in_case} & domains, [(d.pointer, d.domain) for d in in_case]
    assert report.counts()["not_applicable"] == 0


async def test_an_honest_wrapper_is_not_flagged(tmp_path: Path) -> None:
    """A fault that the pack never triggers leaves the wrapped store agreeing on the cases it does not touch."""
    cases = [c for c in load_cases([pack_cases("hostile")]) if c.case_id == "hostile_old_memory"]
    faulty = FaultyStore(JournalStore(temporary_backend("memory", tmp_path)), "truncate_text")
    report = await replay(cases, ["sqlite", faulty], workdir=tmp_path)
    assert report.ok


def test_an_unknown_fault_is_refused() -> None:
    """Asking for a fault that does not exist is a ValueError listing the faults."""
    with pytest.raises(ValueError, match="drop_event"):
        FaultyStore(JournalStore(temporary_backend("memory", Path("."))), "nope")
