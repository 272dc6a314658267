"""The fault layer's file layer: disk errors and crashes fire at the file operation configured."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from steadyloop import BackendUnavailable
from steadyloop.faults import Fault, FaultPlan, FaultyFiles, FaultyJournal, SimulatedCrash
from steadyloop.journal import JSONLJournal, StreamWrite
from steadyloop.records import RecordFactory

NS = "ns"


async def test_enospc_on_a_write_fails_that_append_alone_and_stores_none_of_it(
    tmp_path: Path,
) -> None:
    """A full disk at the second file write fails that append; the journal keeps the rest, whole."""
    layer = FaultyFiles()
    make = RecordFactory()
    async with await JSONLJournal.open(tmp_path, files=layer) as journal:
        await journal.append(NS, StreamWrite("s", [make("first")]))
        writes = sum(1 for b in layer.plan.boundaries if b == "files.write")
        layer.arm(Fault(at=writes + 1, label="files.write", how="enospc"))
        with pytest.raises(BackendUnavailable) as raised:
            await journal.append(NS, StreamWrite("s", [make("lost")]))
        assert isinstance(raised.value.__cause__, OSError)
        assert raised.value.__cause__.errno == errno.ENOSPC
        await journal.append(NS, StreamWrite("s", [make("third")]))
    layer.power_loss()
    async with await JSONLJournal.open(tmp_path) as journal:
        assert [r.kind for r in await journal.read(NS, "s")] == ["first", "third"]
    assert [f.label for f in layer.plan.fired] == ["files.write"]


async def test_an_eio_fault_on_a_sync_is_an_fsync_failure_that_drops_its_bytes(
    tmp_path: Path,
) -> None:
    """``Fault(how="eio", label="files.sync")`` behaves as ``fail_syncs``: the append fails, nothing of it survives power loss."""
    layer = FaultyFiles()
    make = RecordFactory()
    async with await JSONLJournal.open(tmp_path, files=layer) as journal:
        await journal.append(NS, StreamWrite("s", [make("first")]))
        layer.arm(Fault(at=1, label="files.sync", how="eio"))
        with pytest.raises(BackendUnavailable, match="fsync failure"):
            await journal.append(NS, StreamWrite("s", [make("unsynced")]))
    layer.power_loss()
    async with await JSONLJournal.open(tmp_path) as journal:
        assert [r.kind for r in await journal.read(NS, "s")] == ["first"]


async def test_a_journal_and_its_files_on_one_plan_die_together(tmp_path: Path) -> None:
    """A crash at a file sync kills the journal wrapper of the same process too."""
    plan = FaultPlan()
    layer = FaultyFiles(plan)
    make = RecordFactory()
    inner = await JSONLJournal.open(tmp_path, files=layer)
    journal = FaultyJournal(inner, plan)
    await journal.append(NS, StreamWrite("s", [make("first")]))
    syncs = sum(1 for b in plan.boundaries if b == "files.sync")
    plan.arm(Fault(at=syncs + 1, label="files.sync"))
    with pytest.raises(SimulatedCrash, match=r"files\.sync"):
        await journal.append(NS, StreamWrite("s", [make("second")]))
    with pytest.raises(SimulatedCrash):
        await journal.read(NS, "s")
    assert layer.crashed and journal.crashed
    assert plan.boundaries.count("journal.append") == 2
    layer.power_loss()  # the machine reboots: every descriptor, and so the lock, is gone
    async with await JSONLJournal.open(tmp_path) as reopened:
        assert [r.kind for r in await reopened.read(NS, "s")] == ["first"]


def test_crash_before_counts_the_layers_own_operations_only() -> None:
    """``crash_before(n)`` on a shared plan counts file operations, not the journal's appends."""
    plan = FaultPlan()
    layer = FaultyFiles(plan)
    plan.point("journal.append")
    layer.crash_before(1)
    with pytest.raises(SimulatedCrash, match=r"files\.remove"):
        layer.remove("/nonexistent/never-touched")
    assert layer.operations == 1
