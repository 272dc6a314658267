"""Public test kits: use them on your own backends and agents.

* [`JournalConformance`][steadyloop.testing.JournalConformance] — the journal contract as pytest
  tests; subclass it and supply a [`JournalFactory`][steadyloop.testing.JournalFactory].
* [`QueueConformance`][steadyloop.testing.QueueConformance] — the audit task queue contract as
  pytest tests; subclass it and supply a [`QueueFactory`][steadyloop.testing.QueueFactory].
* [`FaultyFiles`][steadyloop.testing.FaultyFiles] — a file layer that cuts writes at any byte
  and simulates power loss, for file-based backends.
* Every kit here configures the one fault layer, [`steadyloop.faults`][steadyloop.faults]:
  where a crash happens, how, and the network faults of a TCP proxy.
* [`crash_matrix`][steadyloop.testing.crash_matrix] — crash an agent run at every write
  boundary, resume, compare.
* [`pydantic_crash_matrix`][steadyloop.testing.pydantic_crash_matrix] and
  [`pydantic_aimed_kills`][steadyloop.testing.pydantic_aimed_kills] — kill a Pydantic AI
  agent's process (alone or on DBOS) at every write, or right after an effect, and count
  its effects.
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

from steadyloop.faults import FaultyFiles, SimulatedCrash
from steadyloop.testing._crash_matrix import (
    CrashCase,
    CrashingJournal,
    CrashMatrixReport,
    crash_matrix,
)
from steadyloop.testing._death import (
    CrashPoint,
    FrameworkCrashReport,
    KitProcess,
    ProcessDeath,
    ProcessJournal,
)
from steadyloop.testing._effects import EffectSink, Repeat, abandon

if TYPE_CHECKING:
    from steadyloop.testing._agents_crash import AgentProcess, agents_crash_matrix
    from steadyloop.testing._conformance import (
        ADVERSARIAL_PAYLOADS,
        JournalConformance,
        JournalFactory,
    )
    from steadyloop.testing._langgraph_crash import (
        GraphProcess,
        ProcessCheckpointer,
        langgraph_crash_matrix,
    )
    from steadyloop.testing._pydantic_crash import (
        AimedKills,
        PydanticProcess,
        pydantic_aimed_kills,
        pydantic_crash_matrix,
    )
    from steadyloop.testing._queue_conformance import QueueConformance, QueueFactory

__all__ = [
    "ADVERSARIAL_PAYLOADS",
    "AgentProcess",
    "AimedKills",
    "CrashCase",
    "CrashMatrixReport",
    "CrashPoint",
    "CrashingJournal",
    "EffectSink",
    "FaultyFiles",
    "FrameworkCrashReport",
    "GraphProcess",
    "JournalConformance",
    "JournalFactory",
    "KitProcess",
    "ProcessCheckpointer",
    "ProcessDeath",
    "ProcessJournal",
    "PydanticProcess",
    "QueueConformance",
    "QueueFactory",
    "Repeat",
    "SimulatedCrash",
    "abandon",
    "agents_crash_matrix",
    "crash_matrix",
    "langgraph_crash_matrix",
    "pydantic_aimed_kills",
    "pydantic_crash_matrix",
]

_LAZY = {
    "ADVERSARIAL_PAYLOADS": "steadyloop.testing._conformance",
    "JournalConformance": "steadyloop.testing._conformance",
    "JournalFactory": "steadyloop.testing._conformance",
    "AgentProcess": "steadyloop.testing._agents_crash",
    "agents_crash_matrix": "steadyloop.testing._agents_crash",
    "GraphProcess": "steadyloop.testing._langgraph_crash",
    "ProcessCheckpointer": "steadyloop.testing._langgraph_crash",
    "langgraph_crash_matrix": "steadyloop.testing._langgraph_crash",
    "AimedKills": "steadyloop.testing._pydantic_crash",
    "PydanticProcess": "steadyloop.testing._pydantic_crash",
    "pydantic_aimed_kills": "steadyloop.testing._pydantic_crash",
    "pydantic_crash_matrix": "steadyloop.testing._pydantic_crash",
    "QueueConformance": "steadyloop.testing._queue_conformance",
    "QueueFactory": "steadyloop.testing._queue_conformance",
}
"""What is imported on first use: the pytest suite, and the kits that need a framework."""


def __getattr__(name: str) -> Any:
    """Import the pytest-based suite and the framework kits on first use."""
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'steadyloop.testing' has no attribute {name!r}")
