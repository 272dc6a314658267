"""The fault layer's plan: each fault kind fires where it is configured, and only there."""

from __future__ import annotations

import contextlib
import errno
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from steadyloop import BackendUnavailable
from steadyloop.faults import Fault, FaultPlan, FaultyJournal, SimulatedCrash, SimulatedDisconnect
from steadyloop.journal import MemoryJournal, StreamWrite, open_journal
from steadyloop.records import RecordFactory


def test_a_crash_before_a_boundary_stops_its_write_and_every_later_one() -> None:
    """Die before boundary 2: write 1 runs, write 2 never does, and the dead process does nothing more."""
    plan = FaultPlan(Fault(at=2))
    done: list[int] = []
    plan.write("a", lambda: done.append(1))
    with pytest.raises(SimulatedCrash, match=r"crash before write 2 \(b\)"):
        plan.write("b", lambda: done.append(2))
    with pytest.raises(SimulatedCrash, match="already died"):
        plan.write("c", lambda: done.append(3))
    with pytest.raises(SimulatedCrash):
        plan.check()
    assert done == [1]
    assert plan.dead and plan.boundaries == ["a", "b"]
    assert [(f.boundary, f.label) for f in plan.fired] == [(2, "b")]


def test_a_crash_after_a_boundary_lets_its_write_happen_first() -> None:
    """Die after boundary 1: its write is done, its result never reaches the caller."""
    plan = FaultPlan(Fault(at=1, side="after"))
    done: list[int] = []
    with pytest.raises(SimulatedCrash, match="crash after write 1"):
        plan.write("a", lambda: done.append(1))
    assert done == [1] and plan.dead


def test_a_label_counts_only_its_own_boundaries_and_those_under_it() -> None:
    """``label="files"`` counts ``files.write`` and ``files.sync``, not ``journal.append``; ``files.sync`` not ``files.sync_directory``."""
    plan = FaultPlan(Fault(at=2, label="files"), Fault(at=1, label="files.sync", how="eio"))
    plan.write("journal.append", lambda: None)
    plan.write("files.sync_directory", lambda: None)  # the first "files" boundary
    with pytest.raises(SimulatedCrash, match=r"before write 3 \(files.write\)"):
        plan.write("files.write", lambda: None)
    assert [f.fault.label for f in plan.fired] == ["files"]
    assert plan.armed == (Fault(at=1, label="files.sync", how="eio"),)


def test_a_fault_armed_after_its_boundary_fires_at_the_next_one() -> None:
    """Arming ``at=1`` once three boundaries passed fires at the fourth."""
    plan = FaultPlan()
    for _ in range(3):
        plan.write("w", lambda: None)
    plan.arm(Fault(at=1))
    with pytest.raises(SimulatedCrash, match="before write 4"):
        plan.write("w", lambda: None)


@pytest.mark.parametrize(("how", "code"), [("enospc", errno.ENOSPC), ("eio", errno.EIO)])
def test_a_disk_error_fails_one_write_and_the_process_lives_on(how: str, code: int) -> None:
    """``enospc``/``eio`` raise ``OSError`` with that errno once, before the write; the next write runs."""
    plan = FaultPlan(Fault(at=2, how=how))  # type: ignore[arg-type]
    done: list[int] = []
    plan.write("w", lambda: done.append(1))
    with pytest.raises(OSError, match="a simulated fault before write 2") as raised:
        plan.write("w", lambda: done.append(2))
    assert raised.value.errno == code
    plan.write("w", lambda: done.append(3))
    assert done == [1, 3] and not plan.dead and not plan.armed


def test_a_write_that_raised_at_an_after_fault_is_a_boundary_reached() -> None:
    """A refused write at the planned boundary dies there, instead of handing back its error."""
    plan = FaultPlan(Fault(at=1, side="after"))

    def refuse() -> None:
        raise ValueError("another writer came first")

    with pytest.raises(SimulatedCrash):
        plan.write("w", refuse)
    assert plan.dead


def test_a_named_point_fires_a_fault_armed_at_it() -> None:
    """``point`` is a boundary with no write: a fault on its label fires there."""
    plan = FaultPlan(Fault(at=2, label="between-statements", side="after"))
    plan.point("between-statements")
    plan.write("other", lambda: None)
    with pytest.raises(SimulatedCrash, match="between-statements"):
        plan.point("between-statements")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"at": 0}, "counted from 1"),
        ({"at": 1, "side": "during"}, "'before' or 'after'"),
        ({"at": 1, "how": "segfault"}, "'crash', 'sigkill', 'enospc', 'eio'"),
    ],
)
def test_a_fault_configured_wrongly_says_which_field(
    kwargs: dict[str, object], message: str
) -> None:
    """A bad boundary, side or kind is a ValueError naming it."""
    with pytest.raises(ValueError, match=message):
        Fault(**kwargs)  # type: ignore[arg-type]


def test_a_death_in_one_thread_stops_the_effects_of_every_other() -> None:
    """Once a background thread's write killed the process, no effect of it happens any more."""
    plan = FaultPlan(Fault(at=1, label="background"))
    effects: list[str] = []
    plan.guarded(lambda: effects.append("before"))
    worker = threading.Thread(target=lambda: _swallow(plan))
    worker.start()
    worker.join()
    with pytest.raises(SimulatedCrash):
        plan.guarded(lambda: effects.append("after"))
    assert effects == ["before"]


def _swallow(plan: FaultPlan) -> None:
    with contextlib.suppress(SimulatedCrash):
        plan.write("background", lambda: None)


async def test_a_faulty_journal_dies_after_the_planned_append_is_durable() -> None:
    """Appends are boundaries: after the second is durable the wrapper dies, and closes nothing."""
    inner = MemoryJournal()
    journal = FaultyJournal(inner, FaultPlan(Fault(at=2, side="after")))
    make = RecordFactory()
    await journal.append("ns", StreamWrite("s", [make("one")]))
    with pytest.raises(SimulatedCrash):
        await journal.append("ns", StreamWrite("s", [make("two")]))
    with pytest.raises(SimulatedCrash):
        await journal.read("ns", "s")
    await journal.close()  # a dead process closes nothing: the inner journal stays open
    assert [r.kind for r in await inner.read("ns", "s")] == ["one", "two"]
    assert journal.appends == 2 and journal.crashed


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from steadyloop.faults import Fault, FaultPlan, FaultyJournal
    from steadyloop.journal import StreamWrite, open_journal
    from steadyloop.records import RecordFactory

    async def main():
        inner = await open_journal(sys.argv[1])
        journal = FaultyJournal(inner, FaultPlan(Fault(at=3, side="after", how="sigkill")))
        make = RecordFactory()
        try:
            for i in range(5):
                await journal.append("ns", StreamWrite("s", [make(f"r{i}")]))
        finally:
            print("finally ran", flush=True)

    asyncio.run(main())
    """
)


async def test_a_sigkill_fault_really_kills_the_process_after_its_write(tmp_path: Path) -> None:
    """``how="sigkill"`` ends a child by SIGKILL once append 3 is durable: no ``finally``, no append 4."""
    url = f"sqlite:///{tmp_path / 'j.db'}"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, url],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr
    assert "finally ran" not in child.stdout
    async with await open_journal(url) as journal:
        assert [r.kind for r in await journal.read("ns", "s")] == ["r0", "r1", "r2"]


@pytest.mark.parametrize("side", ["before", "after"])
def test_a_disconnect_drops_the_connection_before_the_write_or_after_it_committed(
    side: str,
) -> None:
    """``how="disconnect"`` raises a BackendUnavailable once; before, nothing was written, after, it was."""
    plan = FaultPlan(Fault(at=1, side=side, how="disconnect", label="queue.write"))  # type: ignore[arg-type]
    done: list[int] = []
    with pytest.raises(SimulatedDisconnect, match="connection dropped") as raised:
        plan.write("queue.write", lambda: done.append(1))
    assert isinstance(raised.value, BackendUnavailable)
    assert done == ([] if side == "before" else [1])
    plan.write("queue.write", lambda: done.append(2))  # the retry goes through
    assert not plan.dead and done[-1] == 2
