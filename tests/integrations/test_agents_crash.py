from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from oa_agents import next_call, next_calls_together, shop_agent, sqlite_session

from steadyloop.testing import agents_crash_matrix


def test_unguarded_agent_repeats_effects(tmp_path: Path) -> None:
    """Without the guard, a crash between a tool and the session's save makes the re-run charge twice."""
    report = agents_crash_matrix(
        shop_agent, sqlite_session, "buy o-1", workdir=tmp_path, guarded=False
    )
    print(report.summary())
    assert report.repeated_points("never"), report.summary()


def test_guarded_agent_never_repeats(tmp_path: Path) -> None:
    """With the guard and a model that issues fresh call ids, no never-repeat tool runs twice at any crash point."""
    report = agents_crash_matrix(
        shop_agent, sqlite_session, "buy o-1", workdir=tmp_path, guarded=True
    )
    print(report.summary())
    report.assert_guarded()
    assert report.summary()["interrupts"] > 0


@pytest.mark.slow
@pytest.mark.chaos(smoke=["one"])
@pytest.mark.parametrize("respond", [next_call, next_calls_together], ids=["one", "together"])
def test_guarded_agent_never_repeats_when_the_restart_crashes_too(
    respond: Any, tmp_path: Path
) -> None:
    """A second crash at any write of the first restart (a decision, a session save) repeats no never-repeat tool."""
    report = agents_crash_matrix(
        lambda p: shop_agent(p, respond),
        sqlite_session,
        "buy o-1",
        workdir=tmp_path,
        guarded=True,
        recovery_crashes=True,
    )
    print(report.summary())
    report.assert_guarded()
    summary = report.summary()
    assert summary["recovery_points"] > 2 * len(report.boundaries)
    if respond is next_call:  # one call per response: every run writes in the same order
        assert summary["recovery_unreached"] == 0
    # The points that matter: a crash after an unknown charge was decided, before
    # the session saved its output (the SDK saved the waiting call when it stopped).
    assert any(p.recovery_label == "add_items" and p.interrupts for p in report.points), (
        report.summary()
    )
