"""Public test kits: use them on your own backends and agents.

* [`JournalConformance`][steadyloop.testing.JournalConformance] — the journal contract as pytest
  tests; subclass it and supply a [`JournalFactory`][steadyloop.testing.JournalFactory].
* [`QueueConformance`][steadyloop.testing.QueueConformance] — the audit task queue contract as
  pytest tests; subclass it and supply a [`QueueFactory`][steadyloop.testing.QueueFactory].
* [`FaultyFiles`][steadyloop.testing.FaultyFiles] — a file layer that cuts writes at any byte
  and simulates power loss, for file-based backends.
* [`crash_matrix`][steadyloop.testing.crash_matrix] — crash an agent run at every write
  boundary, resume, compare.
* [`EffectSink`][steadyloop.testing.EffectSink] and [`abandon`][steadyloop.testing.abandon]
  — the pieces of any crash kit: effects counted outside the store (fsynced, across
  processes), and the crash model (process death: nothing closed, nothing more
  written).

The conformance suites need ``pytest`` and ``pytest-asyncio`` (the
``steadyloop[testing]`` extra); it is imported only when first used, so the other kits
work without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from steadyloop.testing._crash_matrix import (
    CrashCase,
    CrashingJournal,
    CrashMatrixReport,
    crash_matrix,
)
from steadyloop.testing._effects import EffectSink, Repeat, abandon
from steadyloop.testing._faults import FaultyFiles, SimulatedCrash

if TYPE_CHECKING:
    from steadyloop.testing._conformance import (
        ADVERSARIAL_PAYLOADS,
        JournalConformance,
        JournalFactory,
    )
    from steadyloop.testing._queue_conformance import QueueConformance, QueueFactory

__all__ = [
    "ADVERSARIAL_PAYLOADS",
    "CrashCase",
    "CrashMatrixReport",
    "CrashingJournal",
    "EffectSink",
    "FaultyFiles",
    "JournalConformance",
    "JournalFactory",
    "QueueConformance",
    "QueueFactory",
    "Repeat",
    "SimulatedCrash",
    "abandon",
    "crash_matrix",
]

_NEEDS_PYTEST = {
    "ADVERSARIAL_PAYLOADS": "steadyloop.testing._conformance",
    "JournalConformance": "steadyloop.testing._conformance",
    "JournalFactory": "steadyloop.testing._conformance",
    "QueueConformance": "steadyloop.testing._queue_conformance",
    "QueueFactory": "steadyloop.testing._queue_conformance",
}


def __getattr__(name: str) -> Any:
    """Import the pytest-based conformance suites on first use."""
    if name in _NEEDS_PYTEST:
        module = importlib.import_module(_NEEDS_PYTEST[name])
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'steadyloop.testing' has no attribute {name!r}")
