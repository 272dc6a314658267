"""Power loss on the JSONL backend: an acknowledged step is never lost."""

from __future__ import annotations

import random
from pathlib import Path

from loop_helpers import APP, RecordingJournal, counting_agent

from steadyloop._errors import RunNotFound
from steadyloop.journal import AppendResult, JSONLJournal
from steadyloop.journal._protocol import PreparedBatch
from steadyloop.loop import ReplayPolicy, StopReason, resume, run, run_stream
from steadyloop.testing import FaultyFiles, SimulatedCrash

STEPS = 4


class AckJournal(RecordingJournal):
    """Remembers the ids of run-stream records whose append returned (was acknowledged)."""

    def __init__(self, inner: JSONLJournal) -> None:
        super().__init__(inner)
        self.acked: list[str] = []

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        result = await super()._append(batch)
        for w in batch.writes:
            if w.stream == run_stream("r"):
                self.acked.extend(r.id for r in w.records)
        return result


async def run_until_crash(directory: Path, crash_op: int) -> tuple[list[str], bool]:
    layer = FaultyFiles()
    layer.crash_before(crash_op)
    journal = AckJournal(JSONLJournal(directory, files=layer))
    crashed = False
    try:
        await run(
            counting_agent(STEPS, policy=ReplayPolicy.SAFE), journal, APP, "u", "s", "r", "go"
        )
    except SimulatedCrash:
        crashed = True
    finally:
        await journal.close()
    layer.power_loss(random.Random(crash_op))
    return journal.acked, crashed


async def test_power_loss_at_every_file_operation_keeps_every_acknowledged_step(
    tmp_path: Path,
) -> None:
    """Cutting power before any write or sync keeps all acknowledged records; resume completes."""
    crash_op = 1
    cases = 0
    while True:
        directory = tmp_path / f"op-{crash_op}"
        directory.mkdir()
        acked, crashed = await run_until_crash(directory, crash_op)
        if not crashed:
            break
        cases += 1
        async with await JSONLJournal.open(directory) as journal:
            stored = [r.record.id for r in await journal.read(APP, run_stream("r"))]
            assert stored[: len(acked)] == acked, (
                f"power loss before op {crash_op} lost acked records"
            )
            try:
                result = await resume(
                    counting_agent(STEPS, policy=ReplayPolicy.SAFE), journal, APP, "r"
                )
            except RunNotFound:  # the run's first batch was never durable
                assert not acked
                result = await run(
                    counting_agent(STEPS, policy=ReplayPolicy.SAFE),
                    journal,
                    APP,
                    "u",
                    "s",
                    "r",
                    "go",
                )
            assert (result.stop_reason, result.actions) == (StopReason.COMPLETED, STEPS)
        crash_op += 1
    assert cases > 20
