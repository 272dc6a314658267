"""The planted faulty store around the ADK adapter: every kind of fault is caught, so the adapter cannot hide one."""

from __future__ import annotations

from pathlib import Path

from steadyloop.replay import FAULTS, FaultyStore, load_cases, pack_cases, replay
from steadyloop.replay._store import parse_store_url, store_opener

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
    "trim_ids": ("hostile_id_trailing_space", {"events", "state", "lists"}),
}


def adk_store(url: str, workdir: Path) -> object:
    spec = parse_store_url(url, workdir)
    assert spec is not None
    return store_opener("adk")(spec)


async def test_every_planted_fault_is_caught_around_the_adk_adapter(tmp_path: Path) -> None:
    """Wrapping DatabaseSessionService/SQLite in each planted fault, next to an honest one, the pack reports every fault in its case and domain, and nothing else differs."""
    assert set(CAUGHT_BY) == set(FAULTS)
    wanted = {case for case, _ in CAUGHT_BY.values()}
    cases = [c for c in load_cases([pack_cases("hostile")]) if c.case_id in wanted]
    # DatabaseSessionService keeps ids as given, so trimming them is a fault there (InMemory
    # and SqliteSessionService trim ids themselves).
    honest = adk_store("adk+database+sqlite", tmp_path / "honest")
    faulty = {
        fault: FaultyStore(adk_store("adk+database+sqlite", tmp_path / fault), fault)  # type: ignore[arg-type]
        for fault in FAULTS
    }
    report = await replay(
        cases,
        [honest, *faulty.values()],  # type: ignore[list-item]
        workdir=tmp_path / "work",
        reference="adk+database+sqlite",
    )
    assert report.references["adk"] == "adk+database+sqlite"
    assert report.counts()["not_applicable"] == 0
    for fault, store in faulty.items():
        case_id, domains = CAUGHT_BY[fault]
        found = [d for d in report.unexpected if d.backend == store.name]
        in_case = [d for d in found if d.case_id == case_id]
        assert in_case, (
            f"{fault} not caught by {case_id}: {[(d.case_id, d.pointer) for d in found]}"
        )
        assert {d.domain for d in in_case} & domains, [(d.pointer, d.domain) for d in in_case]
        assert all(d.reference == "adk+database+sqlite" for d in found)
    assert {d.backend for d in report.unexpected} == {s.name for s in faulty.values()}
