from __future__ import annotations

from pathlib import Path

import pytest
from pa_agents import PROMPT, shop_agent

from steadyloop.testing import pydantic_aimed_kills, pydantic_crash_matrix

# DBOS starts and recovers a workflow in every process: minutes per matrix.
MODES = pytest.mark.parametrize(
    "mode", ["alone", pytest.param("dbos", marks=[pytest.mark.slow, pytest.mark.chaos])]
)


@MODES
def test_unguarded_agent_charges_twice(mode: str, tmp_path: Path) -> None:
    """Without the guard, a kill after a charge and before its return is kept makes the run charge again."""
    report = pydantic_crash_matrix(shop_agent, PROMPT, workdir=tmp_path, mode=mode, guarded=False)
    print(report.summary())
    assert report.repeated_points("never"), report.summary()


@pytest.mark.slow
@MODES
def test_guarded_agent_never_charges_twice(mode: str, tmp_path: Path) -> None:
    """With the guard, no charge repeats and none is lost at any write boundary, and every run finishes."""
    report = pydantic_crash_matrix(shop_agent, PROMPT, workdir=tmp_path, mode=mode, guarded=True)
    print(report.summary())
    # DBOS's count of writes varies by one or two between runs (its own bookkeeping), so
    # a crash aimed at the reference run's last writes may find a run that ended before:
    # untested, and said so; everything reached must be clean.
    untested = [p for p in report.points if (p.error or "").startswith("the run ended before")]
    bad = [
        p
        for p in report.points
        if p.repeated_never or p.lost or not p.final_equal or (p.error and p not in untested)
    ]
    assert not bad, [p.to_json() for p in bad]
    assert len(untested) <= 4, [p.to_json() for p in untested]
    assert report.summary()["interrupts"] > 0  # some kills left a charge unknown: it was asked


@pytest.mark.slow
@MODES
def test_aimed_kills_after_a_charge(mode: str, tmp_path: Path) -> None:
    """Kills landing right after a charge: unguarded runs charge twice, guarded ones never do."""
    plain = pydantic_aimed_kills(
        shop_agent,
        PROMPT,
        workdir=tmp_path / "plain",
        aim="charge/o-1",
        kills=5,
        mode=mode,
        guarded=False,
    )
    guarded = pydantic_aimed_kills(
        shop_agent,
        PROMPT,
        workdir=tmp_path / "guarded",
        aim="charge/o-1",
        kills=5,
        mode=mode,
        guarded=True,
    )
    print(plain, guarded)
    assert plain.kills == 5 and guarded.kills == 5
    assert plain.runs_with_never_repeats > 0
    assert guarded.never_repeats == 0 and guarded.runs_with_losses == 0
    assert guarded.unfinished == 0
