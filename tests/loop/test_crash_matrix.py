"""The crash matrix on every backend: crash at each write boundary, resume, compare."""

from __future__ import annotations

import time

import pytest
from loop_helpers import Effects, standard_agent

from steadyloop.journal import Journal, open_journal
from steadyloop.testing import crash_matrix


async def test_crash_matrix_passes_on_every_backend(journal_url: str) -> None:
    """Crashing before or after any append, then again in the resume, changes nothing."""
    effects = Effects()

    async def journal() -> Journal:
        return await open_journal(journal_url)

    started = time.monotonic()
    report = await crash_matrix(lambda: standard_agent(effects), journal)
    report.assert_ok()
    assert report.baseline.stop_reason.value == "completed"
    assert report.boundaries == 11  # session + 9 effects' batches + the end
    # every boundary, both sides, with and without a second crash in the resume
    assert len(report.cases) == report.boundaries * 2 * 2
    # the never-repeat e-mail was stopped and resolved where the crash hit it
    assert any(c.resolutions for c in report.cases)
    assert {c.stop_reason for c in report.cases} == {"completed"}
    assert time.monotonic() - started < 120


async def test_crash_matrix_reports_a_nondeterministic_agent(tmp_path: object) -> None:
    """An agent that answers differently after a restart is caught by the comparison."""
    from steadyloop.loop import Agent, ScriptedModel

    calls = {"n": 0}

    def factory() -> Agent:
        calls["n"] += 1
        return Agent("flaky", ScriptedModel([f"answer {calls['n']}"]))

    report = await crash_matrix(factory, lambda: open_journal("memory://flaky-matrix"))
    assert report.failures
    with pytest.raises(AssertionError, match="crash cases differ"):
        report.assert_ok()


async def test_crash_matrix_exhaustive_second_crashes_on_sqlite(tmp_path: object) -> None:
    """A resumed log survives a second crash at any of the resume's appends."""
    url = f"sqlite:///{tmp_path}/second.db"
    report = await crash_matrix(
        standard_agent,
        lambda: open_journal(url),
        boundaries=[3, 6],
        second_crash="all",
    )
    report.assert_ok()
    assert {c.second for c in report.cases} >= set(range(1, report.boundaries + 1))


async def test_crash_matrix_resolves_a_never_model_call_with_its_reply() -> None:
    """With a never-repeat model, the matrix answers with the model's recorded reply: one call."""
    from collections.abc import Sequence

    from steadyloop.journal import ForwardingJournal, MemoryJournal
    from steadyloop.loop import Agent, Message, ModelReply, ReplayPolicy, ScriptedModel, ToolSpec

    calls: list[int] = []

    class Counting(ScriptedModel):
        async def complete(
            self, messages: Sequence[Message], tools: Sequence[ToolSpec]
        ) -> ModelReply:
            calls.append(len(messages))
            return await super().complete(messages, tools)

    class Kept(ForwardingJournal):
        async def _close(self) -> None:
            pass

    memory = MemoryJournal()

    async def journal() -> Journal:
        return Kept(memory)

    def factory() -> Agent:
        return Agent("a", Counting(["final answer"]), model_policy=ReplayPolicy.NEVER)

    report = await crash_matrix(factory, journal, second_crash="none", sides=["before", "after"])
    report.assert_ok()
    assert any(c.resolutions for c in report.cases)
    # The baseline calls the model once, and so does every case: none calls it again.
    assert len(calls) == 1 + len(report.cases)
