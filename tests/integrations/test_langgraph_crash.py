from __future__ import annotations

from pathlib import Path

import pytest
from lg_graphs import shop, sqlite_saver

from steadyloop.testing import langgraph_crash_matrix


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_unguarded_graph_repeats_effects(durability: str, tmp_path: Path) -> None:
    """Without the guard, crashes at LangGraph's checkpoint writes make some effect run twice."""
    report = langgraph_crash_matrix(
        shop, sqlite_saver, {"order": "o-1"}, workdir=tmp_path, durability=durability, guarded=False
    )
    print(report.summary())
    assert len(report.boundaries) == 9
    assert report.repeated_points("never"), report.summary()
    assert all(p.final_equal for p in report.points)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_guarded_graph_never_repeats(durability: str, tmp_path: Path) -> None:
    """With the guard, no never-repeat effect runs twice at any crash point, and every run ends right."""
    report = langgraph_crash_matrix(
        shop, sqlite_saver, {"order": "o-1"}, workdir=tmp_path, durability=durability, guarded=True
    )
    print(report.summary())
    report.assert_guarded()
    assert report.summary()["interrupts"] > 0


@pytest.mark.slow
@pytest.mark.chaos(smoke=["sync"])
@pytest.mark.parametrize("durability", ["sync", "async"])
def test_guarded_graph_never_repeats_when_the_restart_crashes_too(
    durability: str, tmp_path: Path
) -> None:
    """A second crash at any write of the first restart repeats no never-repeat effect, and every run ends right."""
    report = langgraph_crash_matrix(
        shop,
        sqlite_saver,
        {"order": "o-1"},
        workdir=tmp_path,
        durability=durability,
        guarded=True,
        recovery_crashes=True,
    )
    print(report.summary())
    report.assert_guarded()
    assert report.summary()["recovery_points"] > 2 * len(report.boundaries)
