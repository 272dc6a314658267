"""The bundled suite agrees on every backend, deterministically, and cleans up after itself."""

from __future__ import annotations

from pathlib import Path

import jsonschema
from replay_helpers import backend_at

from steadyloop.journal import open_journal
from steadyloop.replay import Case, bundled_cases, load_cases, replay, report_schema


def test_bundled_suite_has_the_required_cases(suite: list[Case]) -> None:
    """The bundled suite holds at least the fourteen kinds of case the design asks for."""
    ids = {c.case_id for c in suite}
    assert len(suite) >= 14
    assert {
        "single_turn",
        "multi_turn",
        "tool_call",
        "state_scopes",
        "memory_search",
        "summary_chain",
        "summary_truncation",
        "failed_summary",
        "duplicate_submission",
        "crash_mid_batch",
        "unicode_normalisation",
        "storage_hostile",
        "loop_crash_resume",
        "shared_user_state",
    } <= ids


async def test_bundled_suite_agrees_on_backend(
    backend: str, journal_url: str, suite: list[Case], tmp_path: Path
) -> None:
    """Every bundled case matches its expectation on the backend under test and agrees with SQLite."""
    under_test = backend_at(journal_url, backend)
    selection = [under_test] if backend == "sqlite" else [under_test, "sqlite"]
    report = await replay(suite, selection, reference="sqlite", workdir=tmp_path)
    unexpected = [(d.case_id, d.backend, d.reference, d.pointer) for d in report.unexpected]
    assert unexpected == []
    assert report.ok
    jsonschema.validate(report.to_dict(), report_schema())


async def test_harness_removes_only_its_namespaces(
    backend: str, journal_url: str, cases_by_id: dict[str, Case], tmp_path: Path
) -> None:
    """A replay deletes the namespaces it created and leaves everything else in the store."""
    async with await open_journal(journal_url) as journal:
        from steadyloop.journal import StreamWrite
        from steadyloop.records import RecordFactory

        await journal.append("keep-me", [StreamWrite("s", [RecordFactory()("note", {})])])
    case = cases_by_id["summary_chain"]
    await replay([case], [backend_at(journal_url, backend)], workdir=tmp_path)
    async with await open_journal(journal_url) as journal:
        assert await journal.namespaces() == ["keep-me"]
    await replay([case], [backend_at(journal_url, backend)], keep=True, workdir=tmp_path)
    async with await open_journal(journal_url) as journal:
        kept = await journal.namespaces()
        assert "keep-me" in kept
        assert [n for n in kept if n.startswith("replay.summary_chain.")]
        for ns in kept:
            await journal.delete_namespace(ns)


async def test_report_is_deterministic(suite: list[Case]) -> None:
    """The same cases on the same backends give the same report bytes, timings left out."""
    first = await replay(suite, ["memory", "sqlite", "jsonl"])
    second = await replay(suite, ["memory", "sqlite", "jsonl"])
    assert first.to_json(timings=False) == second.to_json(timings=False)
    assert first.to_dict()["hash"] == second.to_dict()["hash"]
    assert "timings" in first.to_dict() and "timings" not in first.to_dict(timings=False)


async def test_random_ids_and_wall_clock_normalise_to_the_same_report(suite: list[Case]) -> None:
    """Random ids and wall-clock times become the same aliases and tokens as deterministic ones."""
    sequential = await replay(suite, ["memory", "jsonl"], ids="sequential")
    randomised = await replay(suite, ["memory", "jsonl"], ids="random")
    assert randomised.ok
    assert sequential.to_json(timings=False) == randomised.to_json(timings=False)


async def test_default_backends_include_servers_named_by_environment() -> None:
    """The default selection is the embedded trio plus each server whose variable is set."""
    from steadyloop.replay import default_backends

    assert default_backends({}) == ["memory", "sqlite", "jsonl"]
    env = {"STEADYLOOP_REDIS_URL": "redis://x", "STEADYLOOP_MYSQL_URL": ""}
    assert default_backends(env) == ["memory", "sqlite", "jsonl", "redis"]


def test_bundled_cases_are_package_data() -> None:
    """The suite and both schemas load through importlib.resources from the installed package."""
    from importlib import resources

    root = resources.files("steadyloop.replay")
    assert root.joinpath("schemas", "case.schema.json").is_file()
    assert root.joinpath("schemas", "report.schema.json").is_file()
    assert len(load_cases([bundled_cases()])) == len(list(bundled_cases().glob("*.jsonl")))


async def test_a_backend_lost_mid_run_raises_and_cleans_up(cases_by_id: dict[str, Case]) -> None:
    """A backend that stops answering mid-run raises BackendUnavailable, not a reported difference, after removing what the case wrote."""
    import pytest
    from replay_helpers import vanishing_at

    from steadyloop._errors import BackendUnavailable
    from steadyloop.journal import MemoryJournal

    store = "replay-vanishing-test"
    try:
        with pytest.raises(BackendUnavailable, match="'flaky' became unreachable"):
            await replay(
                [cases_by_id["single_turn"]],
                ["sqlite", vanishing_at(f"memory://{store}", "flaky", writes=1)],
            )
        async with await open_journal(f"memory://{store}") as journal:
            assert await journal.namespaces() == []
    finally:
        MemoryJournal.forget(store)
