"""A journal whose appends are write boundaries of a simulated process.

[`FaultyJournal`][steadyloop.faults.FaultyJournal] wraps any journal. Each append passes
one write boundary of its [`FaultPlan`][steadyloop.faults.FaultPlan], so a
[`Fault`][steadyloop.faults.Fault] fires just before the batch reaches the inner journal
or just after it is durable; once the plan's process has died, every read and write of
the wrapper raises [`SimulatedCrash`][steadyloop.faults.SimulatedCrash] and closing it
closes nothing (a killed process closes nothing).

Examples:
    >>> from steadyloop.faults import Fault
    >>> from steadyloop.journal import MemoryJournal
    >>> journal = FaultyJournal(MemoryJournal(), FaultPlan(Fault(at=3, side="after")))
"""

from __future__ import annotations

from steadyloop.faults._plan import FaultPlan
from steadyloop.journal import AppendResult, ForwardingJournal, Journal, PreparedBatch

__all__ = ["FaultyJournal"]


class FaultyJournal(ForwardingJournal):
    """A journal wrapper whose appends pass the write boundaries of one process.

    A batch the inner journal refuses (another writer came first) is a boundary
    reached too: a fault armed after it fires instead of the error, as the process
    would have died before the code after it ran.

    Args:
        inner: The journal that stores the records.
        plan: The process it belongs to; a plan of its own (no faults) by default.
        label: How its write boundaries are named (``"journal.append"``).

    Attributes:
        plan: The process's [`FaultPlan`][steadyloop.faults.FaultPlan].
        label: The label of its boundaries.
        appends: Appends attempted through it while its process lived.
    """

    def __init__(
        self, inner: Journal, plan: FaultPlan | None = None, label: str = "journal.append"
    ) -> None:
        super().__init__(inner)
        self.plan = plan if plan is not None else FaultPlan()
        self.label = label
        self.appends = 0

    @property
    def crashed(self) -> bool:
        """Whether its process has died."""
        return self.plan.dead

    def check(self) -> None:
        """A dead process reads and writes nothing."""
        self.plan.check()

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        self.plan.check()
        self.appends += 1
        return await self.plan.awrite(self.label, lambda: super(FaultyJournal, self)._append(batch))

    async def _close(self) -> None:
        """A dead process closes nothing: only a live one closes the journal it wraps."""
        if not self.plan.dead:
            await super()._close()
