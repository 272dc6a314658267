"""The crash matrix on every backend: crash at each write boundary, resume, compare."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from loop_helpers import Effects, standard_agent

from steadyloop.journal import (
    AppendResult,
    ForwardingJournal,
    Journal,
    MemoryJournal,
    StreamWrite,
    open_journal,
)
from steadyloop.journal._protocol import PreparedBatch
from steadyloop.loop import (
    Agent,
    ModelReply,
    ReplayPolicy,
    ScriptedModel,
    ToolContext,
    ToolRegistry,
)
from steadyloop.records import StoredRecord
from steadyloop.testing import EffectSink, Repeat, crash_matrix


async def test_crash_matrix_passes_on_every_backend(journal_url: str) -> None:
    """Crashing before or after any append, then again in the resume, changes nothing."""
    effects = Effects()

    async def journal() -> Journal:
        return await open_journal(journal_url)

    report = await crash_matrix(lambda: standard_agent(effects), journal)
    report.assert_ok()
    assert report.baseline.stop_reason.value == "completed"
    assert report.boundaries == 11  # session + 9 effects' batches + the end
    # every boundary, both sides, with and without a second crash in the resume
    assert len(report.cases) == report.boundaries * 2 * 2
    # the never-repeat e-mail was stopped and resolved where the crash hit it
    assert any(c.resolutions for c in report.cases)
    assert {c.stop_reason for c in report.cases} == {"completed"}


@pytest.mark.parametrize("fresh", ["memory://", "MemoryJournal()"])
async def test_a_factory_that_opens_a_new_store_each_time_is_refused_clearly(fresh: str) -> None:
    """Plain memory:// as the journal factory: a ValueError that says so, not SessionNotFound."""

    async def factory() -> Journal:
        return await open_journal("memory://") if fresh == "memory://" else MemoryJournal()

    with pytest.raises(ValueError, match=r"same store on every call.*use memory://NAME"):
        await crash_matrix(lambda: standard_agent(Effects()), factory)


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


@pytest.mark.chaos
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
    from steadyloop.loop import Agent, Message, ReplayPolicy, ScriptedModel, ToolSpec

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


class DeferringJournal(ForwardingJournal):
    """A buggy journal: appends are held in memory and reach the store only on close()."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.held: list[PreparedBatch] = []
        self.view = MemoryJournal()

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        self.held.append(batch)
        return await self.view.append(batch.namespace, batch.writes)

    async def _read(
        self, namespace: str, stream: str, start: int, limit: int | None
    ) -> list[StoredRecord]:
        if not self.held:
            return await self.inner.read(namespace, stream, start=start, limit=limit)
        return await self.view.read(namespace, stream, start=start, limit=limit)

    async def _head(self, namespace: str, stream: str) -> int:
        return await (self.view if self.held else self.inner).head(namespace, stream)

    async def _close(self) -> None:
        for batch in self.held:
            await self.inner.append(batch.namespace, batch.writes)


async def test_a_journal_that_defers_writes_until_close_fails_the_matrix() -> None:
    """A crash is process death: a journal writing only on close() loses everything, and shows."""
    store = MemoryJournal()

    async def journal() -> Journal:
        inner = ForwardingJournal(store)
        deferring = DeferringJournal(inner)
        # Start from what the store holds, as a fresh process would.
        for ns in await store.namespaces():
            for name in await store.streams(ns):
                records = await store.read(ns, name)
                await deferring.view.append(ns, StreamWrite(name, [r.record for r in records]))
        deferring.held.clear()
        return deferring

    report = await crash_matrix(
        lambda: standard_agent(Effects()), journal, second_crash="none", boundaries=[7]
    )
    # Before append 7 the e-mail was sent; its intent never reached the store, so the
    # restarted run sends it again: a never-repeat effect twice.
    assert report.failures
    assert any(
        "never-repeat tool 'send_email' ran 2 times" in p for c in report.cases for p in c.problems
    )
    with pytest.raises(AssertionError, match="crash cases differ"):
        report.assert_ok()


def irreversible_agent(sink_path: Path, policy: ReplayPolicy) -> Agent:
    """Charges a card (an effect outside, counted in its own sink) and answers."""
    tools = ToolRegistry()
    own = EffectSink(sink_path)

    @tools.tool(policy=policy)
    def charge(amount: int, context: ToolContext) -> str:
        own.record("charge", policy.value, context.idempotency_key)
        return f"charged {amount}"

    return Agent("shop", ScriptedModel([ModelReply.call("charge", {"amount": 5}), "paid"]), tools)


async def test_an_irreversible_tool_declared_safe_shows_its_repeats(tmp_path: Path) -> None:
    """The kit counts every tool's effects: a SAFE charge repeated after a crash is reported."""
    own = tmp_path / "own.log"
    report = await crash_matrix(
        lambda: irreversible_agent(own, ReplayPolicy.SAFE),
        lambda: open_journal("memory://safe-charge"),
        second_crash="none",
    )
    report.assert_ok()  # SAFE allows repeats: the comparison passes ...
    repeated = report.repeated_tools()  # ... but the repeats are there, with the policy
    assert list(repeated) == [("charge", "safe")] and repeated["charge", "safe"] >= 1
    case = next(c for c in report.cases if c.repeats)
    assert (
        case.repeats[0].count == 2
        and "charge (safe) ×2" in report.rows()[report.cases.index(case)]["repeats"]
    )
    with pytest.raises(AssertionError, match=r"tool 'charge' \(declared safe\)"):
        report.assert_no_repeats()
    # The tool's own sink agrees with the kit's count.
    assert len(EffectSink(own).repeats()) == sum(len(c.repeats) for c in report.cases)


async def test_never_repeat_tools_are_never_repeated_by_the_kits_count(tmp_path: Path) -> None:
    """The same charge declared NEVER: no case shows a repeat, and assert_no_repeats passes."""
    report = await crash_matrix(
        lambda: irreversible_agent(tmp_path / "own.log", ReplayPolicy.NEVER),
        lambda: open_journal("memory://never-charge"),
        second_crash="none",
    )
    report.assert_ok()
    report.assert_no_repeats()


def test_the_effect_sink_is_exact_across_processes(tmp_path: Path) -> None:
    """Two processes appending at once lose nothing; a torn last line is ignored."""
    path = tmp_path / "effects.log"
    code = (
        "import sys; from steadyloop.testing import EffectSink; s = EffectSink(sys.argv[1]);"
        "[s.record('t', 'never', f'{sys.argv[2]}/{i}') for i in range(200)]"
    )
    children = [
        subprocess.Popen([sys.executable, "-c", code, str(path), name]) for name in ("a", "b")
    ]
    assert [c.wait(timeout=120) for c in children] == [0, 0]
    with path.open("ab") as fh:
        fh.write(b'{"action": "a/0", "pol')  # a kill in the middle of a line
    sink = EffectSink(path)
    assert len(sink.effects()) == 400 and sink.repeats() == []
    sink.record("t", "never", "a/0")
    assert sink.repeats() == [Repeat("t", "never", "a/0", 2)]
