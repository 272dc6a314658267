"""Public test kits: use them on your own backends and agents.

* [`JournalConformance`][steadyloop.testing.JournalConformance] — the journal contract as pytest
  tests; subclass it and supply a [`JournalFactory`][steadyloop.testing.JournalFactory].
* [`FaultyFiles`][steadyloop.testing.FaultyFiles] — a file layer that cuts writes at any byte
  and simulates power loss, for file-based backends.
* [`crash_matrix`][steadyloop.testing.crash_matrix] — crash an agent run at every write
  boundary, resume, compare.

The conformance suite needs ``pytest`` and ``pytest-asyncio`` (the
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
from steadyloop.testing._faults import FaultyFiles, SimulatedCrash

if TYPE_CHECKING:
    from steadyloop.testing._conformance import (
        ADVERSARIAL_PAYLOADS,
        JournalConformance,
        JournalFactory,
    )

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

_NEEDS_PYTEST = {"ADVERSARIAL_PAYLOADS", "JournalConformance", "JournalFactory"}


def __getattr__(name: str) -> Any:
    """Import the pytest-based conformance suite on first use."""
    if name in _NEEDS_PYTEST:
        module = importlib.import_module("steadyloop.testing._conformance")
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'steadyloop.testing' has no attribute {name!r}")
