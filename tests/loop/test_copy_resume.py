"""A run started on SQLite, interrupted, copied to PostgreSQL, resumes there without repeating an effect."""

from __future__ import annotations

from pathlib import Path

import pytest
from loop_helpers import APP, counting_agent

from backends import store_url
from steadyloop.cli._journal import diagnose
from steadyloop.journal import AppendResult, ForwardingJournal, copy_journal, open_journal
from steadyloop.journal._protocol import PreparedBatch
from steadyloop.loop import StopReason, resume, run
from steadyloop.records import INTENT_KIND, RESULT_KIND


class Crash(BaseException):
    """The process dies here."""


class CrashAt(ForwardingJournal):
    """Dies before writing the batch that holds the third send's intent or its result."""

    def __init__(self, inner: object, at: str) -> None:
        super().__init__(inner)  # type: ignore[arg-type]
        self.at = at

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        for w in batch.writes:
            for r in w.records:
                if (
                    self.at == "intent"
                    and r.kind == INTENT_KIND
                    and r.payload.get("call_id") == "c3"
                ):
                    raise Crash
                if (
                    self.at == "result"
                    and r.kind == RESULT_KIND
                    and r.payload.get("value") == {"sent": 3}
                ):
                    raise Crash
        return await super()._append(batch)


def sent(sink: Path) -> list[int]:
    """The numbers the tool sent, in order, as its irreversible sink holds them."""
    return [int(line.split()[1]) for line in sink.read_text().splitlines()]


@pytest.mark.parametrize("at", ["intent", "result"])
async def test_a_run_moved_to_postgres_resumes_without_repeating(at: str, tmp_path: Path) -> None:
    """Before the third send's intent, resume sends it once; after its effect, resume stops and asks."""
    sink = tmp_path / "sink"
    async with store_url("sqlite", tmp_path) as lite, store_url("postgres", tmp_path) as pg:
        async with await open_journal(lite) as source:
            with pytest.raises(Crash):
                await run(
                    counting_agent(4, str(sink)), CrashAt(source, at), APP, "ada", "s1", "r1", "go"
                )
        before = sent(sink)
        assert before == ([1, 2] if at == "intent" else [1, 2, 3])
        async with await open_journal(lite) as source, await open_journal(pg) as target:
            report = await copy_journal(source, target)
            assert report.differences == []
        async with await open_journal(pg) as target:
            result = await resume(counting_agent(4, str(sink)), target, APP, "r1", takeover=True)
            if at == "intent":
                assert result.stop_reason is StopReason.COMPLETED
                assert sent(sink) == [1, 2, 3, 4]
            else:
                assert result.stop_reason is StopReason.RESUME_STATE_UNKNOWN
                assert sent(sink) == [1, 2, 3]
            assert [f for f in await diagnose(target) if f.severity == "error"] == []
