"""The hostile-values pack: shipped, runnable by name, and agreed on by Steadyloop's six journals."""

from __future__ import annotations

from pathlib import Path

import jsonschema
from replay_helpers import backend_at, replay_cli

from steadyloop.replay import load_cases, pack_cases, pack_names, replay, report_schema

PROBES = {
    "hostile_id_case",
    "hostile_id_trailing_space",
    "hostile_id_unicode_forms",
    "hostile_id_separators",
    "hostile_shared_scopes",
    "hostile_big_integers",
    "hostile_int_vs_float",
    "hostile_nul",
    "hostile_empty_parts",
    "hostile_big_text",
    "hostile_equal_times",
    "hostile_non_utc_tz",
    "hostile_dst_fold",
    "hostile_create_twice",
    "hostile_caller_edit",
    "hostile_append_twice",
    "hostile_old_memory",
    "hostile_list_delete",
    # events-only variants, for stores that keep no state and list nothing
    "hostile_events_id_case",
    "hostile_events_id_trailing_space",
    "hostile_events_id_unicode_forms",
    "hostile_events_id_separators",
    "hostile_events_nul",
    "hostile_events_big_text",
    "hostile_events_append_twice",
    "hostile_events_caller_edit",
}


def test_the_pack_is_shipped_with_every_probe_and_a_description_of_it() -> None:
    """The hostile pack holds every probe the issue lists, each reference-only and describing what it probes."""
    assert "hostile" in pack_names()
    cases = load_cases([pack_cases("hostile")])
    assert {c.case_id for c in cases} == PROBES
    for case in cases:
        assert case.reference_only, case.case_id
        assert case.description.startswith("Probes "), case.case_id
    assert next(c for c in cases if c.case_id == "hostile_non_utc_tz").tz == "Asia/Kathmandu"
    assert next(c for c in cases if c.case_id == "hostile_dst_fold").tz == "America/New_York"


async def test_the_events_only_probes_need_nothing_but_events() -> None:
    """The hostile_events_* cases run on a store that keeps events only (no state, no listing, no memory)."""
    from dict_store import DictStore

    from steadyloop.replay import Capability

    events_only = frozenset(
        {
            Capability.EVENTS,
            Capability.EXPLICIT_SESSION_ID,
            Capability.EXPLICIT_EVENT_ID,
            Capability.TOOL_PARTS,
            Capability.CALLER_EDIT,
        }
    )
    cases = [
        c for c in load_cases([pack_cases("hostile")]) if c.case_id.startswith("hostile_events_")
    ]
    assert len(cases) == 8
    report = await replay(cases, [DictStore("dict+memory", events_only)])
    assert report.counts()["not_applicable"] == 0


async def test_steadyloop_agrees_on_the_whole_pack(
    backend: str, journal_url: str, tmp_path: Path
) -> None:
    """Steadyloop's session service on the journal under test agrees with SQLite on every hostile case."""
    cases = load_cases([pack_cases("hostile")])
    under_test = backend_at(journal_url, backend)
    selection = [under_test] if backend == "sqlite" else [under_test, "sqlite"]
    report = await replay(cases, selection, reference="sqlite", workdir=tmp_path)
    unexpected = [
        (d.case_id, d.pointer, d.reference_value, d.backend_value) for d in report.unexpected
    ]
    assert unexpected == []
    assert report.counts()["not_applicable"] == 0
    body = report.to_dict()
    jsonschema.validate(body, report_schema())
    if backend != "sqlite":
        assert body["counts"]["comparisons"] == len(cases)


def test_the_pack_runs_by_name_from_the_cli(tmp_path: Path) -> None:
    """`steadyloop replay run --pack hostile` runs the pack and exits 0 on Steadyloop's embedded stores."""
    report = tmp_path / "r.json"
    out = replay_cli("run", "--pack", "hostile", "-b", "memory,sqlite", "--report", str(report))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(PROBES)}/{len(PROBES)} cases agree" in out.stdout


def test_an_unknown_pack_is_refused_naming_the_packs() -> None:
    """An unknown pack name exits 2 and lists the packs there are."""
    out = replay_cli("check", "--pack", "nosuch")
    assert out.returncode == 2
    assert "hostile" in out.stderr
