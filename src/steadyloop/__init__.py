"""Steadyloop: keep LLM-agent runs trustworthy.

A write-ahead journal (intent before every external effect, result after), resumable
agent runs, an audit loop, and a replay-diff harness that holds every storage backend
to the same canonical snapshot.

The names here are the ones most programs need. Each layer has its own package with
the full API: [`steadyloop.records`][steadyloop.records],
[`steadyloop.journal`][steadyloop.journal], [`steadyloop.sessions`][steadyloop.sessions],
[`steadyloop.loop`][steadyloop.loop], [`steadyloop.audit`][steadyloop.audit],
[`steadyloop.replay`][steadyloop.replay], and the test kits in
[`steadyloop.testing`][steadyloop.testing].
"""

import sys
import types
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from steadyloop._errors import (
        AgentLoadError,
        AuditError,
        BackendUnavailable,
        CaseError,
        ConflictError,
        CopyRefused,
        CorruptionError,
        EffectBusy,
        EffectFailed,
        EncodingError,
        ExecutorUnavailable,
        GuardError,
        IdempotencyKeyReused,
        IllegalTransition,
        InvalidBatch,
        JournalClosed,
        JournalError,
        JournalLocked,
        LeaseLost,
        LoopError,
        MissingExtra,
        ModelError,
        RunBusy,
        RunFinished,
        RunNotFound,
        SessionError,
        SessionExists,
        SessionNotFound,
        SteadyloopError,
        StoreNotFound,
        TaskCancelled,
        TaskNotFound,
        TaskSpecError,
        ToolTimeout,
        UnknownBackend,
    )
    from steadyloop.audit import (
        Auditor,
        GoalSpec,
        TaskBoard,
        TaskSpec,
        TaskStatus,
        VerifySpec,
        Worker,
    )
    from steadyloop.journal import AppendResult, Journal, StreamWrite, open_journal
    from steadyloop.loop import (
        Agent,
        Budgets,
        Happened,
        ModelReply,
        NotHappened,
        OpenAIChatModel,
        ReplayPolicy,
        RunResult,
        ScriptedModel,
        StopReason,
        ToolRegistry,
        resolve,
        resume,
        run,
    )
    from steadyloop.records import (
        Record,
        RecordFactory,
        SequentialIds,
        StepClock,
        StoredRecord,
        SystemClock,
        canonical_json,
    )
    from steadyloop.replay import load_cases, replay
    from steadyloop.sessions import (
        Event,
        Session,
        SessionService,
        TextPart,
        ToolCallPart,
        ToolResultPart,
    )

_HOME: dict[str, str] = {
    "Agent": "steadyloop.loop",
    "AgentLoadError": "steadyloop._errors",
    "AppendResult": "steadyloop.journal",
    "AuditError": "steadyloop._errors",
    "Auditor": "steadyloop.audit",
    "BackendUnavailable": "steadyloop._errors",
    "Budgets": "steadyloop.loop",
    "CaseError": "steadyloop._errors",
    "ConflictError": "steadyloop._errors",
    "CopyRefused": "steadyloop._errors",
    "CorruptionError": "steadyloop._errors",
    "EncodingError": "steadyloop._errors",
    "ExecutorUnavailable": "steadyloop._errors",
    "Event": "steadyloop.sessions",
    "GoalSpec": "steadyloop.audit",
    "Happened": "steadyloop.loop",
    "IdempotencyKeyReused": "steadyloop._errors",
    "IllegalTransition": "steadyloop._errors",
    "InvalidBatch": "steadyloop._errors",
    "Journal": "steadyloop.journal",
    "JournalClosed": "steadyloop._errors",
    "JournalError": "steadyloop._errors",
    "JournalLocked": "steadyloop._errors",
    "LeaseLost": "steadyloop._errors",
    "LoopError": "steadyloop._errors",
    "MissingExtra": "steadyloop._errors",
    "ModelError": "steadyloop._errors",
    "ModelReply": "steadyloop.loop",
    "NotHappened": "steadyloop.loop",
    "OpenAIChatModel": "steadyloop.loop",
    "Record": "steadyloop.records",
    "RecordFactory": "steadyloop.records",
    "ReplayPolicy": "steadyloop.loop",
    "RunBusy": "steadyloop._errors",
    "RunFinished": "steadyloop._errors",
    "RunNotFound": "steadyloop._errors",
    "RunResult": "steadyloop.loop",
    "ScriptedModel": "steadyloop.loop",
    "SequentialIds": "steadyloop.records",
    "Session": "steadyloop.sessions",
    "SessionError": "steadyloop._errors",
    "SessionExists": "steadyloop._errors",
    "SessionNotFound": "steadyloop._errors",
    "SessionService": "steadyloop.sessions",
    "SteadyloopError": "steadyloop._errors",
    "StoreNotFound": "steadyloop._errors",
    "TaskCancelled": "steadyloop._errors",
    "StepClock": "steadyloop.records",
    "StopReason": "steadyloop.loop",
    "StoredRecord": "steadyloop.records",
    "StreamWrite": "steadyloop.journal",
    "SystemClock": "steadyloop.records",
    "TaskBoard": "steadyloop.audit",
    "TaskNotFound": "steadyloop._errors",
    "TaskSpec": "steadyloop.audit",
    "TaskSpecError": "steadyloop._errors",
    "ToolTimeout": "steadyloop._errors",
    "EffectBusy": "steadyloop._errors",
    "EffectFailed": "steadyloop._errors",
    "GuardError": "steadyloop._errors",
    "TaskStatus": "steadyloop.audit",
    "TextPart": "steadyloop.sessions",
    "ToolCallPart": "steadyloop.sessions",
    "ToolRegistry": "steadyloop.loop",
    "ToolResultPart": "steadyloop.sessions",
    "UnknownBackend": "steadyloop._errors",
    "VerifySpec": "steadyloop.audit",
    "Worker": "steadyloop.audit",
    "canonical_json": "steadyloop.records",
    "load_cases": "steadyloop.replay",
    "open_journal": "steadyloop.journal",
    "replay": "steadyloop.replay",
    "resolve": "steadyloop.loop",
    "resume": "steadyloop.loop",
    "run": "steadyloop.loop",
}
"""Where each public name lives: imported on first use, so ``import steadyloop`` (and
every command of the CLI) loads only the layers it touches."""

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentLoadError",
    "AppendResult",
    "AuditError",
    "Auditor",
    "BackendUnavailable",
    "Budgets",
    "CaseError",
    "ConflictError",
    "CopyRefused",
    "CorruptionError",
    "EffectBusy",
    "EffectFailed",
    "EncodingError",
    "Event",
    "ExecutorUnavailable",
    "GoalSpec",
    "GuardError",
    "Happened",
    "IdempotencyKeyReused",
    "IllegalTransition",
    "InvalidBatch",
    "Journal",
    "JournalClosed",
    "JournalError",
    "JournalLocked",
    "LeaseLost",
    "LoopError",
    "MissingExtra",
    "ModelError",
    "ModelReply",
    "NotHappened",
    "OpenAIChatModel",
    "Record",
    "RecordFactory",
    "ReplayPolicy",
    "RunBusy",
    "RunFinished",
    "RunNotFound",
    "RunResult",
    "ScriptedModel",
    "SequentialIds",
    "Session",
    "SessionError",
    "SessionExists",
    "SessionNotFound",
    "SessionService",
    "SteadyloopError",
    "StepClock",
    "StopReason",
    "StoreNotFound",
    "StoredRecord",
    "StreamWrite",
    "SystemClock",
    "TaskBoard",
    "TaskCancelled",
    "TaskNotFound",
    "TaskSpec",
    "TaskSpecError",
    "TaskStatus",
    "TextPart",
    "ToolCallPart",
    "ToolRegistry",
    "ToolResultPart",
    "ToolTimeout",
    "UnknownBackend",
    "VerifySpec",
    "Worker",
    "__version__",
    "canonical_json",
    "load_cases",
    "open_journal",
    "replay",
    "resolve",
    "resume",
    "run",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its layer on first use."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'steadyloop' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """The ``steadyloop`` module, keeping ``steadyloop.replay`` the function.

    Importing the subpackage ``steadyloop.replay`` sets the attribute of that name on
    this package to the subpackage; the public name is the function
    [replay][steadyloop.replay.replay], as it was when every layer was imported
    eagerly, so the subpackage is not bound here (it stays in ``sys.modules``).
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "replay" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
