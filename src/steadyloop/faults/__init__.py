"""One fault layer: where a test's faults happen, how they happen, and the network ones.

Every crash kit of [`steadyloop.testing`][steadyloop.testing] configures this layer
instead of carrying a mechanism of its own:

* **where**: a [`FaultPlan`][steadyloop.faults.FaultPlan] is one simulated process; every
  write it makes passes a labelled write boundary (a journal append, a checkpoint
  ``put``, a file ``fsync``, or a named point), and a [`Fault`][steadyloop.faults.Fault]
  fires at the *n*-th boundary (of one label, or of all), before or after its write;
* **how**: the process dies ([`SimulatedCrash`][steadyloop.faults.SimulatedCrash], after
  which nothing of it reaches any store), really dies (``SIGKILL`` to itself, in a child
  process), the write fails with ``ENOSPC`` or ``EIO``, or the connection drops before
  the write or after it committed;
* **through what**: [`FaultyJournal`][steadyloop.faults.FaultyJournal] (each append a
  boundary) and [`FaultyFiles`][steadyloop.faults.FaultyFiles] (each file operation a
  boundary; also torn writes, fsync failures that drop bytes, power loss). A framework
  kit passes its store's writes through the same plan;
* **the network**: [`FaultProxy`][steadyloop.faults.FaultProxy], a TCP proxy on loopback
  that stalls, adds [`Latency`][steadyloop.faults.Latency] to every round trip, or resets
  every connection; and [`Blackhole`][steadyloop.faults.Blackhole], a network namespace
  on a veth pair whose route goes dark (packets dropped, no reset), which a proxy
  cannot make.

Examples:
    >>> from steadyloop.journal import MemoryJournal
    >>> plan = FaultPlan(Fault(at=2, side="after"))           # die once append 2 is durable
    >>> journal = FaultyJournal(MemoryJournal(), plan)
    >>> files = FaultyFiles(plan)                              # the same process's files
"""

from __future__ import annotations

from steadyloop.faults._files import FaultyFiles
from steadyloop.faults._journal import FaultyJournal
from steadyloop.faults._net import FaultProxy, Latency
from steadyloop.faults._netns import Blackhole
from steadyloop.faults._plan import (
    Fault,
    FaultPlan,
    Fired,
    How,
    Side,
    SimulatedCrash,
    SimulatedDisconnect,
)

__all__ = [
    "Blackhole",
    "Fault",
    "FaultPlan",
    "FaultProxy",
    "FaultyFiles",
    "FaultyJournal",
    "Fired",
    "How",
    "Latency",
    "Side",
    "SimulatedCrash",
    "SimulatedDisconnect",
]
