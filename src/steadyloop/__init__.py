"""Steadyloop: keep LLM-agent runs trustworthy.

A write-ahead journal (intent before every external effect, result after), resumable
agent runs, an audit loop, and a replay-diff harness that holds every storage backend
to the same canonical snapshot.
"""

from steadyloop._errors import (
    BackendUnavailable,
    ConflictError,
    CorruptionError,
    EncodingError,
    IdempotencyKeyReused,
    InvalidBatch,
    JournalClosed,
    JournalError,
    JournalLocked,
    SteadyloopError,
    UnknownBackend,
)
from steadyloop.journal import AppendResult, Journal, StreamWrite, open_journal
from steadyloop.records import (
    Record,
    RecordFactory,
    SequentialIds,
    StepClock,
    StoredRecord,
    SystemClock,
    canonical_json,
)

__version__ = "0.1.0"

__all__ = [
    "AppendResult",
    "BackendUnavailable",
    "ConflictError",
    "CorruptionError",
    "EncodingError",
    "IdempotencyKeyReused",
    "InvalidBatch",
    "Journal",
    "JournalClosed",
    "JournalError",
    "JournalLocked",
    "Record",
    "RecordFactory",
    "SequentialIds",
    "SteadyloopError",
    "StepClock",
    "StoredRecord",
    "StreamWrite",
    "SystemClock",
    "UnknownBackend",
    "__version__",
    "canonical_json",
    "open_journal",
]
