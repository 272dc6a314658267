"""Record kinds a reader may skip: a derived kind of a later release is passed over."""

from __future__ import annotations

from pathlib import Path

import pytest
from loop_helpers import APP, counting_agent

from steadyloop.cli._journal import diagnose
from steadyloop.journal import StreamWrite, open_journal
from steadyloop.loop import ReplayPolicy, resume, run, run_stream
from steadyloop.records import RecordFactory
from steadyloop.sessions import SessionService, session_stream, user_stream
from steadyloop.testing import CrashingJournal, SimulatedCrash


async def _written_by_a_later_release(url: str, kind: str) -> None:
    """A 4-step run crashed half-way, then a record of ``kind`` in each stream it uses."""
    async with await open_journal(url) as journal:
        with pytest.raises(SimulatedCrash):
            await run(
                counting_agent(4, policy=ReplayPolicy.SAFE),
                CrashingJournal(journal, 8),
                APP,
                "ada",
                "s1",
                "r1",
                "go",
            )
        await SessionService(journal, APP).create_session("ada", "s2", state={"user:lang": "en"})
        make = RecordFactory()
        for stream in (run_stream("r1"), session_stream("ada", "s1"), user_stream("ada")):
            await journal.append(APP, [StreamWrite(stream, [make(kind, {"later": True})])])


@pytest.mark.parametrize("backend", ["sqlite", "jsonl"])
async def test_a_derived_kind_of_a_later_release_is_passed_over(
    backend: str, tmp_path: Path
) -> None:
    """An unknown kind ending in .snapshot: doctor finds no error and resume ends as usual."""
    url = f"sqlite:///{tmp_path}/j.db" if backend == "sqlite" else f"jsonl://{tmp_path}/j"
    await _written_by_a_later_release(url, "later.snapshot")
    async with await open_journal(url) as journal:
        assert [f for f in await diagnose(journal) if f.severity == "error"] == []
        session = await SessionService(journal, APP).get_session("ada", "s2")
        assert session.state == {"user:lang": "en"}
        result = await resume(counting_agent(4, policy=ReplayPolicy.SAFE), journal, APP, "r1")
    assert result.stop_reason.value == "completed" and result.actions == 4


async def test_an_unknown_kind_that_is_not_derived_is_corruption(tmp_path: Path) -> None:
    """An unknown kind that does not end in .snapshot may carry facts: doctor reports it."""
    url = f"sqlite:///{tmp_path}/j.db"
    await _written_by_a_later_release(url, "state.fact")
    async with await open_journal(url) as journal:
        errors = [f for f in await diagnose(journal) if f.severity == "error"]
    assert {f.what for f in errors} == {"corruption"}
    assert len(errors) == 3
    assert all("state.fact" in f.detail for f in errors)
