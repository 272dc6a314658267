"""Where a fault happens and how: faults armed at the write boundaries of one process.

A [`FaultPlan`][steadyloop.faults.FaultPlan] is the life of one simulated process. Every
write that process makes passes a **write boundary** (a labelled call of
[`write`][steadyloop.faults.FaultPlan.write], [`awrite`][steadyloop.faults.FaultPlan.awrite],
or [`point`][steadyloop.faults.FaultPlan.point] for a named point with no write of its
own); a [`Fault`][steadyloop.faults.Fault] says at which boundary it fires, on which
side of the write, and how:

* ``"crash"``: the process dies by raising
  [`SimulatedCrash`][steadyloop.faults.SimulatedCrash]; from then on every boundary and
  every [`check`][steadyloop.faults.FaultPlan.check] of that process raises it too, from
  any thread or task, so nothing after the death reaches a store;
* ``"sigkill"``: the process really dies, by ``SIGKILL`` to itself (for a child
  process: nothing runs after it, not even ``finally``);
* ``"enospc"`` / ``"eio"``: the write fails with ``OSError`` (``ENOSPC``, ``EIO``),
  as a full or failing disk makes it fail; the process lives on;
* ``"disconnect"``: the connection drops, with
  [`SimulatedDisconnect`][steadyloop.faults.SimulatedDisconnect] (a
  [`BackendUnavailable`][steadyloop.BackendUnavailable]): before the write, nothing
  was sent; after it, the write committed and only its reply was lost. The process
  lives on and may retry.

The journal wrapper, the file layer and the framework kits all pass their writes
through a plan, so one plan shared by all of them is one process: its journal, its
files and its framework store die together.

Examples:
    >>> plan = FaultPlan(Fault(at=2, side="after"))
    >>> plan.write("append", lambda: "first")
    'first'
    >>> plan.write("append", lambda: "second")
    Traceback (most recent call last):
    ...
    steadyloop.faults._plan.SimulatedCrash: crash after write 2 (append)
    >>> plan.dead, plan.boundaries
    (True, ['append', 'append'])
"""

from __future__ import annotations

import errno
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, NoReturn, TypeVar, get_args

from steadyloop._errors import BackendUnavailable

__all__ = ["Fault", "FaultPlan", "Fired", "How", "Side", "SimulatedCrash", "SimulatedDisconnect"]

T = TypeVar("T")
Side = Literal["before", "after"]
"""Which side of a write a fault fires on: before it reaches its store, or once it is durable."""
How = Literal["crash", "sigkill", "enospc", "eio", "disconnect"]
"""How a fault fires: a simulated death, a real ``SIGKILL``, a disk error, a dropped connection."""

_ERRNO = {"enospc": errno.ENOSPC, "eio": errno.EIO}


class SimulatedCrash(BaseException):
    """The simulated process died here.

    It derives from `BaseException`, like `KeyboardInterrupt`, so code
    under test that catches `Exception` cannot swallow a crash.
    """


class SimulatedDisconnect(BackendUnavailable):
    """A connection drop a [`Fault`][steadyloop.faults.Fault] made (``how="disconnect"``).

    A [`BackendUnavailable`][steadyloop.BackendUnavailable], as a real drop is; its own
    class lets a kit tell it from a real one (and treat it as transient).
    """


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: at which write boundary it fires, on which side, and how.

    Attributes:
        at: The 1-based boundary it fires at, counting only the boundaries that
            ``label`` selects. Armed later than that boundary, it fires at the next
            one it selects.
        side: ``"before"`` the write happens, or ``"after"`` it returned (a write that
            raised is a boundary reached too: the fault fires instead of the error).
        how: ``"crash"``, ``"sigkill"``, ``"enospc"``, ``"eio"`` or ``"disconnect"``
            (see the module).
        label: Count only boundaries with this label or under it (``"files"`` selects
            ``"files.write"`` and ``"files.sync"``); None counts every boundary.

    Raises:
        ValueError: ``at`` is below 1, or ``side`` or ``how`` is not one of the above.
    """

    at: int
    side: Side = "before"
    how: How = "crash"
    label: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.at, bool) or not isinstance(self.at, int) or self.at < 1:
            raise ValueError(f"Fault(at={self.at!r}): the boundary is counted from 1")
        if self.side not in get_args(Side):
            raise ValueError(f"Fault(side={self.side!r}): expected 'before' or 'after'")
        if self.how not in get_args(How):
            expected = ", ".join(repr(h) for h in get_args(How))
            raise ValueError(f"Fault(how={self.how!r}): expected one of {expected}")

    def selects(self, label: str) -> bool:
        """Whether a boundary with ``label`` counts towards this fault."""
        return self.label is None or label == self.label or label.startswith(self.label + ".")


@dataclass(frozen=True, slots=True)
class Fired:
    """A fault that fired: which, at which boundary (1-based, of all boundaries), and its label."""

    fault: Fault
    boundary: int
    label: str


class FaultPlan:
    """The life of one simulated process: its write boundaries, the faults armed at them, its death.

    Thread-safe: a runtime that writes from background threads or tasks passes its
    boundaries through the same plan.

    Args:
        *faults: The faults to arm (more with [`arm`][steadyloop.faults.FaultPlan.arm]).

    Attributes:
        boundaries: The labels of the write boundaries passed so far, in order.
        dead: Whether the process has died.
        fired: The faults that fired, in order.
    """

    def __init__(self, *faults: Fault) -> None:
        self.boundaries: list[str] = []
        self.dead = False
        self.fired: list[Fired] = []
        self._lock = threading.Lock()
        self._armed: list[tuple[Fault, int]] = []  # (fault, boundaries it selected so far)
        for fault in faults:
            self.arm(fault)

    @property
    def armed(self) -> tuple[Fault, ...]:
        """The faults armed and not yet fired."""
        return tuple(f for f, _ in self._armed)

    def arm(self, fault: Fault) -> None:
        """Arm one more fault; it counts the boundaries already passed that it selects."""
        with self._lock:
            seen = sum(1 for label in self.boundaries if fault.selects(label))
            self._armed.append((fault, seen))

    def disarm(self) -> None:
        """Disarm every fault not yet fired."""
        with self._lock:
            self._armed.clear()

    def revive(self) -> None:
        """Boot the process again (after a power loss): alive, nothing armed, boundaries kept."""
        with self._lock:
            self._armed.clear()
            self.dead = False

    def die(self, why: str) -> NoReturn:
        """Die here, whatever is armed: for a layer that decides where on its own (a torn write)."""
        with self._lock:
            self.dead = True
        raise SimulatedCrash(why)

    def check(self) -> None:
        """Raise [`SimulatedCrash`][steadyloop.faults.SimulatedCrash] if the process has died."""
        if self.dead:
            raise SimulatedCrash("the process already died")

    def write(self, label: str, write: Callable[[], T]) -> T:
        """Pass a write boundary: do ``write`` unless a fault fires before or after it."""
        after = self._enter(label)
        try:
            result = write()
        except Exception:
            if after is not None:
                self._leave(after, label)
            raise
        self._leave(after, label)
        return result

    async def awrite(self, label: str, write: Callable[[], Awaitable[T]]) -> T:
        """The same as [`write`][steadyloop.faults.FaultPlan.write], for a coroutine."""
        after = self._enter(label)
        try:
            result = await write()
        except Exception:
            if after is not None:
                self._leave(after, label)
            raise
        self._leave(after, label)
        return result

    def point(self, label: str) -> None:
        """Pass a named point with no write of its own: a fault armed there fires (either side)."""
        self._leave(self._enter(label), label)

    def guarded(self, act: Callable[[], T]) -> T:
        """Do ``act`` (an effect outside every store) unless the process has died, atomically."""
        with self._lock:
            self.check()
            return act()

    def _enter(self, label: str) -> Fired | None:
        """Count the boundary; fire a ``before`` fault, or return the ``after`` one it hit."""
        with self._lock:
            self.check()
            self.boundaries.append(label)
            hits: list[Fault] = []
            for i, (fault, seen) in enumerate(self._armed):
                if fault.selects(label):
                    self._armed[i] = (fault, seen + 1)
                    if seen + 1 >= fault.at:
                        hits.append(fault)
            if not hits:
                return None
            # A fault before the write comes first; the others stay armed for the next one.
            first = next((f for f in hits if f.side == "before"), hits[0])
            hit = Fired(first, len(self.boundaries), label)
            if first.side == "before":
                self._fire(hit, "before")
            return hit

    def _leave(self, after: Fired | None, label: str) -> None:
        with self._lock:
            if after is not None and any(f is after.fault for f, _ in self._armed):
                self._fire(after, "after")
            self.check()

    def _fire(self, hit: Fired, side: Side) -> None:
        """Fire the armed fault ``hit`` names (the lock is held); always raises."""
        index = next(i for i, (f, _) in enumerate(self._armed) if f is hit.fault)
        del self._armed[index]
        self.fired.append(hit)
        where = f"{side} write {hit.boundary} ({hit.label})"
        how = hit.fault.how
        if how in _ERRNO:
            code = _ERRNO[how]
            raise OSError(code, f"{os.strerror(code)} (a simulated fault {where})")
        if how == "disconnect":
            lost = "nothing was sent" if side == "before" else "the write committed, its reply lost"
            raise SimulatedDisconnect(f"simulated: the connection dropped {where}; {lost}")
        self.dead = True
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise SimulatedCrash(f"crash {where}")
