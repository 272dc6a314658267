"""Public test kits: use them on your own backends and agents.

* :class:`JournalConformance` — the journal contract as pytest tests; subclass it and
  supply a :class:`JournalFactory`.
* :class:`FaultyFiles` — a file layer that cuts writes at any byte and simulates power
  loss, for file-based backends.
* :func:`crash_matrix` — crash an agent run at every write boundary, resume, compare.

These need ``pytest`` and ``pytest-asyncio`` (the ``steadyloop[testing]`` extra).
"""

from steadyloop.testing._conformance import (
    ADVERSARIAL_PAYLOADS,
    JournalConformance,
    JournalFactory,
)
from steadyloop.testing._crash_matrix import (
    CrashCase,
    CrashingJournal,
    CrashMatrixReport,
    crash_matrix,
)
from steadyloop.testing._faults import FaultyFiles, SimulatedCrash

__all__ = [
    "ADVERSARIAL_PAYLOADS",
    "CrashCase",
    "CrashMatrixReport",
    "CrashingJournal",
    "FaultyFiles",
    "JournalConformance",
    "JournalFactory",
    "SimulatedCrash",
    "crash_matrix",
]
