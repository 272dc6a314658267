"""Handoffs: a run continued after a crash starts at the first agent, which hands off again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import Agent
from oa_agents import next_call, next_calls_together, sqlite_session, triage_agent

from steadyloop.integrations._openai_agents import handoff_names, without_handoffs
from steadyloop.testing import agents_crash_matrix


@pytest.mark.parametrize("respond", [next_call, next_calls_together], ids=["one", "together"])
def test_guarded_handoff_never_repeats(respond: Any, tmp_path: Path) -> None:
    """With a handoff before the charging agent, no never-repeat tool runs twice at any crash point, and no effect is lost."""
    report = agents_crash_matrix(
        lambda p: triage_agent(p, respond),
        sqlite_session,
        "buy o-1",
        workdir=tmp_path,
        guarded=True,
    )
    print(report.summary())
    report.assert_guarded()


def test_unguarded_handoff_repeats(tmp_path: Path) -> None:
    """Without the guard, the handoff agent's charge repeats at some crash point (the kit tells them apart)."""
    report = agents_crash_matrix(
        triage_agent, sqlite_session, "buy o-1", workdir=tmp_path, guarded=False
    )
    assert report.repeated_points("never"), report.summary()


def test_handoff_names_follow_the_chain() -> None:
    """The handoff tool names of an agent include those of the agents it hands to, and a cycle ends."""
    billing = Agent(name="billing")
    shop = Agent(name="shop", handoffs=[billing])
    triage = Agent(name="triage", handoffs=[shop])
    billing.handoffs = [triage]
    assert handoff_names(triage) == {
        "transfer_to_shop",
        "transfer_to_billing",
        "transfer_to_triage",
    }


def test_positions_leave_handoffs_out() -> None:
    """Handoff calls and their outputs are left out of a session's items; other calls and messages stay."""
    items = [
        {"role": "user", "content": "buy"},
        {"type": "function_call", "name": "transfer_to_shop", "call_id": "h1", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "h1", "output": "{}"},
        {"type": "function_call", "name": "charge", "call_id": "c1", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    kept = without_handoffs(items, frozenset({"transfer_to_shop"}))
    assert [r.get("call_id") for r in kept] == [None, "c1", "c1"]
