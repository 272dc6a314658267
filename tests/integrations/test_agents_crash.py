from __future__ import annotations

from pathlib import Path

from oa_agents import shop_agent, sqlite_session

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
