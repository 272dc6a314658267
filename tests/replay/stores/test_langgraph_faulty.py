"""A planted faulty LangGraph checkpointer, wrapping a real SqliteSaver: the hostile and checkpointer packs catch every kind of fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from steadyloop.replay import load_cases, pack_cases, replay
from steadyloop.replay._store import parse_store_url
from steadyloop.replay.stores._langgraph import CheckpointerStore
from steadyloop.replay.stores._langgraph_faults import SAVER_FAULTS, faulty_checkpointer

# Each fault, a case of a pack that must catch it, and the report domains it shows in.
CAUGHT_BY = {
    "drop_writes": ("hostile", "hostile_empty_parts", {"events"}),
    "repeat_writes": ("hostile", "hostile_equal_times", {"events"}),
    "oldest_as_latest": ("hostile", "hostile_big_text", {"events"}),
    "forget_unchanged": ("hostile", "hostile_create_twice", {"state"}),
    "ignore_filter": ("hostile", "hostile_list_delete", {"lists"}),
    "fold_case": ("hostile", "hostile_id_case", {"events", "sessions"}),
    "keep_deleted": ("hostile", "hostile_list_delete", {"lists", "sessions"}),
    "ints_as_floats": ("hostile", "hostile_int_vs_float", {"state"}),
    "cut_at_nul": ("hostile", "hostile_nul", {"events", "state"}),
    "drop_user": ("hostile", "hostile_id_case", {"sessions"}),
    # Reached only by the checkpointer ops: namespaces, before, limit, special writes.
    "merge_namespaces": ("checkpointer", "saver_nested_namespaces", {"threads"}),
    "before_inclusive": ("checkpointer", "saver_steps", {"threads"}),
    "ignore_limit": ("checkpointer", "saver_list_filter", {"threads"}),
    "drop_special_writes": ("checkpointer", "saver_special_writes", {"threads"}),
}


def _spec(url: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    spec = parse_store_url(url, tmp_path)
    assert spec is not None
    return spec


def test_every_fault_has_a_case_that_catches_it() -> None:
    """There are at least eight kinds of checkpointer fault, and each is assigned a case of the pack."""
    assert len(SAVER_FAULTS) >= 8
    assert set(CAUGHT_BY) == set(SAVER_FAULTS)


@pytest.mark.parametrize("fault", sorted(SAVER_FAULTS))
async def test_the_harness_catches_the_planted_checkpointer_fault(
    fault: str, tmp_path: Path
) -> None:
    """Replaying the pack on a faulty SqliteSaver next to InMemorySaver reports the fault, located in its case and domain."""
    pack, case_id, domains = CAUGHT_BY[fault]
    cases = [c for c in load_cases([pack_cases(pack)]) if c.case_id == case_id]
    reference = CheckpointerStore(_spec("langgraph+memory", tmp_path))
    faulty = faulty_checkpointer(_spec("langgraph+sqlite", tmp_path), fault)
    report = await replay(cases, [reference, faulty], workdir=tmp_path)
    found = [d for d in report.unexpected if d.backend == faulty.name and d.reference != "expected"]
    assert found, f"{fault} went unnoticed"
    assert all(d.reference == "langgraph+memory" for d in found)
    in_case = [d for d in found if d.case_id == case_id]
    assert in_case, f"{fault} not caught by {case_id}: {[(d.case_id, d.pointer) for d in found]}"
    assert {d.domain for d in in_case} & domains, [(d.pointer, d.domain) for d in in_case]


async def test_an_honest_wrapper_is_not_flagged(tmp_path: Path) -> None:
    """The same wrapper with a fault the case never triggers agrees with InMemorySaver."""
    cases = [c for c in load_cases([pack_cases("hostile")]) if c.case_id == "hostile_big_text"]
    reference = CheckpointerStore(_spec("langgraph+memory", tmp_path))
    faulty = faulty_checkpointer(_spec("langgraph+sqlite", tmp_path), "cut_at_nul")
    report = await replay(cases, [reference, faulty], workdir=tmp_path)
    assert report.ok, [(d.case_id, d.pointer) for d in report.unexpected]


def test_an_unknown_fault_is_refused(tmp_path: Path) -> None:
    """Asking for a fault that does not exist is a ValueError listing the faults."""
    with pytest.raises(ValueError, match="drop_writes"):
        faulty_checkpointer(_spec("langgraph+sqlite", tmp_path), "nope")


@pytest.mark.parametrize(
    "fault", ["merge_namespaces", "before_inclusive", "ignore_limit", "drop_special_writes"]
)
async def test_the_checkpointer_faults_are_invisible_to_the_session_pack(
    fault: str, tmp_path: Path
) -> None:
    """The faults only the checkpointer ops reach pass the hostile (session) pack: that pack alone would miss them."""
    cases = load_cases([pack_cases("hostile")])
    reference = CheckpointerStore(_spec("langgraph+memory", tmp_path))
    faulty = faulty_checkpointer(_spec("langgraph+sqlite", tmp_path), fault)
    report = await replay(cases, [reference, faulty], workdir=tmp_path)
    assert not [d for d in report.unexpected if d.backend == faulty.name]
