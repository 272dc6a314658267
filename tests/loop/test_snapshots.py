"""Run and session snapshots: resume folds the latest snapshot and the tail, and falls back."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

import pytest
from loop_helpers import APP, Effects, counting_agent, standard_agent

from steadyloop.cli._journal import diagnose
from steadyloop.journal import Journal, MemoryJournal, StreamWrite, open_journal
from steadyloop.loop import (
    RUN_SNAPSHOT,
    Agent,
    ReplayPolicy,
    RunState,
    StopReason,
    load_run,
    resume,
    run,
    run_stream,
)
from steadyloop.loop import _run as run_module
from steadyloop.loop._run import _read_state
from steadyloop.records import RecordFactory
from steadyloop.sessions import session_stream
from steadyloop.sessions._fold import SessionFold, snapshot_problems
from steadyloop.sessions._streams import KIND_SNAPSHOT
from steadyloop.testing import CrashingJournal, SimulatedCrash, crash_matrix


@pytest.fixture
def every(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(run_module, "SNAPSHOT_EVERY", 10)
    return 10


def agent(steps: int) -> Agent:
    return counting_agent(steps, policy=ReplayPolicy.SAFE)


async def crashed(journal: Journal, steps: int, at: int) -> None:
    with pytest.raises(SimulatedCrash):
        await run(agent(steps), CrashingJournal(journal, at), APP, "u", "s", "r", "go")


async def test_snapshots_ride_in_batches_and_resume_starts_from_the_latest(every: int) -> None:
    """A 40-step run holds snapshots; resume folds from the last one and ends as a clean run."""
    journal = MemoryJournal()
    clean = await run(agent(40), journal, APP, "u", "s0", "clean", "go")
    await crashed(journal, 40, 70)
    records = (await load_run(journal, APP, "r")).records
    snaps = [r.seq for r in records if r.kind == RUN_SNAPSHOT]
    assert len(snaps) >= 10 and all(b - a >= every for a, b in itertools.pairwise(snaps))
    state = await _read_state(journal, APP, "r", None)
    assert state.folded_from == f"the snapshot at seq {snaps[-1]} and the records after it"
    full = (await load_run(journal, APP, "r")).state
    assert (state.steps, state.actions, state.head, state.open_intent) == (
        full.steps,
        full.actions,
        full.head,
        full.open_intent,
    )
    result = await resume(agent(40), journal, APP, "r")
    assert result.stop_reason is StopReason.COMPLETED
    assert (result.output, result.steps, result.actions) == (
        clean.output,
        clean.steps,
        clean.actions,
    )


async def test_a_damaged_snapshot_falls_back_to_the_full_fold_and_says_so(
    every: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot that is not where it says it is: resume folds everything and logs why."""
    journal = MemoryJournal()
    await crashed(journal, 40, 70)
    info = await load_run(journal, APP, "r")
    stream = run_stream("r")
    # Forge a snapshot claiming another place, as the latest record of the run.
    forged = RecordFactory()(RUN_SNAPSHOT, {**info.state.snapshot(), "head": 3})
    await journal.append(APP, StreamWrite(stream, [forged], info.state.head + 1))
    with caplog.at_level(logging.WARNING, logger="steadyloop.loop"):
        state = await _read_state(journal, APP, "r", None)
    assert "is damaged" in state.folded_from and "folding the whole run" in caplog.text
    (problem,) = (await load_run(journal, APP, "r")).state.snapshot_problems
    assert problem.endswith("the snapshot does not match the fold of the records before it")
    findings = await diagnose(journal)
    assert [f.what for f in findings if f.severity == "error"] == ["snapshot-mismatch"]
    result = await resume(agent(40), journal, APP, "r")
    assert result.output == "sent 40"


async def test_a_long_run_without_snapshots_is_folded_whole_saying_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A run written without snapshots (as before them) still resumes, by the full fold."""
    journal = MemoryJournal()
    monkeypatch.setattr(run_module, "SNAPSHOT_EVERY", 10**9)
    await crashed(journal, 40, 70)
    monkeypatch.setattr(run_module, "SNAPSHOT_EVERY", 10)
    with caplog.at_level(logging.WARNING, logger="steadyloop.loop"):
        result = await resume(agent(40), journal, APP, "r")
    assert result.output == "sent 40"
    assert "no snapshot among its last" in caplog.text


async def test_the_crash_matrix_passes_with_crashes_around_snapshot_writes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Snapshots every 3 records put one in most batches: every crash case still matches."""
    monkeypatch.setattr(run_module, "SNAPSHOT_EVERY", 3)
    url = f"sqlite:///{tmp_path}/snap.db"
    report = await crash_matrix(lambda: standard_agent(Effects()), lambda: open_journal(url))
    report.assert_ok()
    async with await open_journal(url) as journal:
        info = await load_run(journal, "crash-matrix", "baseline")
    assert sum(r.kind == RUN_SNAPSHOT for r in info.records) >= 4


async def test_resumes_in_the_crash_matrix_start_from_snapshots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A longer run, snapshots every 3 records: most resumes fold from one, all cases pass."""
    monkeypatch.setattr(run_module, "SNAPSHOT_EVERY", 3)
    used: list[int] = []
    original = RunState.from_snapshot

    def spy(*args: Any, **kwargs: Any) -> RunState:
        state = original(*args, **kwargs)
        used.append(state.head)
        return state

    monkeypatch.setattr(RunState, "from_snapshot", spy)
    report = await crash_matrix(
        lambda: counting_agent(8), lambda: open_journal("memory://snap-matrix"), second_crash="none"
    )
    report.assert_ok()
    assert report.boundaries >= 10 and len(used) >= report.boundaries


async def test_the_crash_matrix_passes_with_crashes_around_session_snapshot_writes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Summaries (each carrying a session snapshot) every 2 steps: every crash case matches."""
    monkeypatch.setattr(run_module, "SNAPSHOT_EVERY", 3)
    used: list[int] = []
    original = SessionFold.from_snapshot

    def spy(*args: Any, **kwargs: Any) -> SessionFold:
        fold = original(*args, **kwargs)
        used.append(fold.head)
        return fold

    monkeypatch.setattr(SessionFold, "from_snapshot", spy)
    url = f"sqlite:///{tmp_path}/session-snap.db"
    report = await crash_matrix(
        lambda: counting_agent(6), lambda: open_journal(url), summarize_every=2
    )
    report.assert_ok()
    async with await open_journal(url) as journal:
        records = await journal.read("crash-matrix", session_stream("user", "session-baseline"))
    kinds = [r.kind for r in records]
    assert kinds.count(KIND_SNAPSHOT) >= 3
    assert snapshot_problems("crash-matrix", "user", "session-baseline", records) == []
    assert report.boundaries >= 20 and len(used) >= report.boundaries
