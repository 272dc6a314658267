"""The one error hierarchy of Steadyloop.

Every error the library raises on purpose derives from
[`SteadyloopError`][steadyloop.SteadyloopError], so a caller can catch the whole family in one
place. Journal errors are shared by every backend: a caller never needs to know which driver
raised.
"""

from __future__ import annotations

__all__ = [
    "AgentLoadError",
    "AuditError",
    "BackendUnavailable",
    "CaseError",
    "ConflictError",
    "CopyRefused",
    "CorruptionError",
    "EffectBusy",
    "EffectFailed",
    "EncodingError",
    "ExecutorUnavailable",
    "GuardError",
    "IdempotencyKeyReused",
    "IllegalTransition",
    "InvalidBatch",
    "JournalClosed",
    "JournalError",
    "JournalLocked",
    "LeaseLost",
    "LoopError",
    "MissingExtra",
    "ModelError",
    "RunBusy",
    "RunFinished",
    "RunNotFound",
    "SessionError",
    "SessionExists",
    "SessionNotFound",
    "SteadyloopError",
    "StoreNotFound",
    "TaskCancelled",
    "TaskNotFound",
    "TaskSpecError",
    "ToolTimeout",
    "UnknownBackend",
]


class SteadyloopError(Exception):
    """Base class of every error Steadyloop raises on purpose."""


class EncodingError(SteadyloopError, ValueError):
    """A value cannot be encoded canonically.

    Attributes:
        path: Where in the value the problem is, as a JSON Pointer (``""`` is the root).
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        self.path = path
        where = path or "/"
        super().__init__(f"{message} (at {where})")


class MissingExtra(SteadyloopError, ImportError):
    """A backend or store needs an optional extra that is not installed.

    Not a journal error: replay stores and guards need extras too. It is an
    `ImportError` as well, so code that already catches a failed import catches it.

    Attributes:
        extra: The extra's name, as in ``pip install 'steadyloop[EXTRA]'``.
    """

    def __init__(self, message: str, *, extra: str) -> None:
        self.extra = extra
        super().__init__(message)


class JournalError(SteadyloopError):
    """Base class of every journal error, whichever backend raised it."""


class UnknownBackend(JournalError, ValueError):
    """A journal URL names a scheme no backend handles, or is malformed."""


class InvalidBatch(JournalError, ValueError):
    """A batch is malformed (empty, a stream twice, a bad name); nothing was written."""


class ConflictError(JournalError):
    """A stream's next sequence number was not the one the caller expected.

    Nothing of the batch was written.

    Attributes:
        namespace: The namespace of the batch.
        stream: The stream whose check failed.
        expected: The sequence number the caller expected next.
        actual: The sequence number the stream would actually give next.
    """

    def __init__(self, namespace: str, stream: str, expected: int, actual: int) -> None:
        self.namespace = namespace
        self.stream = stream
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stream {stream!r} in namespace {namespace!r}: expected next sequence "
            f"{expected}, but the stream is at {actual}; nothing was written"
        )


class IdempotencyKeyReused(ConflictError):
    """An idempotency key was submitted again with a different batch."""

    def __init__(self, namespace: str, key: str) -> None:
        self.key = key
        JournalError.__init__(
            self,
            f"idempotency key {key!r} in namespace {namespace!r} was already used for a "
            "different batch; nothing was written",
        )
        self.namespace = namespace
        self.stream = ""
        self.expected = -1
        self.actual = -1


class CorruptionError(JournalError):
    """Stored data is damaged: a garbled line, a missing batch member, a bad row.

    Attributes:
        location: Where the damage is: ``file:line`` or ``table[key]``.
    """

    def __init__(self, message: str, *, location: str) -> None:
        self.location = location
        self.detail = message
        super().__init__(f"{location}: {message}")


class CopyRefused(JournalError):
    """A journal copy would overwrite or mix with what the destination already holds.

    Nothing was written by the refused step; what an earlier, interrupted copy wrote
    stays and a rerun goes on from there.
    """


class BackendUnavailable(JournalError):
    """The backend cannot be reached or failed mid-operation.

    When raised by ``append``, the batch was either written whole or not at all;
    resubmitting it with the same idempotency key is safe.
    """


class StoreNotFound(BackendUnavailable):
    """Opened only to inspect (``create=False``), the URL holds no store; nothing was created."""


class JournalLocked(BackendUnavailable):
    """Another writer holds the stream (or the file it lives in)."""


class JournalClosed(JournalError):
    """The journal was used after `close`."""


class SessionError(SteadyloopError):
    """Base class of session errors (bad events, bad state keys, failed summaries)."""


class SessionNotFound(SessionError, LookupError):
    """No session with the given app, user and id exists."""


class SessionExists(SessionError):
    """A session with the given app, user and id already exists; nothing was written."""


class CaseError(SteadyloopError, ValueError):
    """A replay case file is invalid; nothing of it was run.

    Attributes:
        file: The case file.
        line: The line (from 1) of the offending record; 0 when the file as a whole is
            at fault (empty, unreadable).
        field: Where in the record, as a JSON Pointer (``""`` for the whole record).
        detail: What is wrong.
        problems: Every problem found in the files checked, this one first, each as
            ``(file, line, field, detail)``.
    """

    def __init__(
        self,
        file: str,
        line: int,
        field: str,
        detail: str,
        *,
        problems: list[tuple[str, int, str, str]] | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.detail = detail
        self.problems = problems or [(file, line, field, detail)]
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: field {field or '/'}: {detail}")


class LoopError(SteadyloopError):
    """Base class of errors from running or resuming an agent loop."""


class RunNotFound(LoopError, LookupError):
    """No run with the given id exists in the journal."""


class RunFinished(LoopError):
    """The run already ended (its end-of-run record is written); it cannot be resumed."""


class RunBusy(LoopError):
    """Another process (or task) is driving this run right now."""


class ToolTimeout(LoopError, TimeoutError):
    """A tool call took longer than the tool's ``timeout`` and was given up."""


class ModelError(LoopError):
    """A model call failed: the API refused it, kept failing, or answered nonsense."""


class AgentLoadError(LoopError, ImportError):
    """An agent given as ``module:attribute`` could not be imported or is not an agent."""


class GuardError(SteadyloopError):
    """A guard for another runtime's tools was misused or given a malformed decision."""


class EffectBusy(GuardError):
    """Another live execution of the same guarded effect wrote its intent first."""


class EffectFailed(GuardError):
    """A guarded `NEVER` effect already ran and failed; its recorded error is raised again."""


class AuditError(SteadyloopError):
    """Base class of audit-loop errors (task specs, the task state machine, leases, judges)."""


class TaskSpecError(AuditError, ValueError):
    """A task spec is invalid, or clashes with what the queue holds; nothing was submitted.

    Attributes:
        field: The offending field of the spec (``""`` for the spec as a whole).
    """

    def __init__(self, message: str, *, field: str = "") -> None:
        self.field = field
        super().__init__(message)


class TaskNotFound(AuditError, LookupError):
    """No task with the given id is in the queue."""


class IllegalTransition(AuditError):
    """A task event does not fit the task's state; nothing was written.

    Attributes:
        task_id: The task.
        state: The state the task was in.
        event: The event that was refused.
    """

    def __init__(self, task_id: str, state: str, event: str, reason: str) -> None:
        self.task_id = task_id
        self.state = state
        self.event = event
        super().__init__(f"task {task_id!r}: cannot apply {event!r} in state {state!r}: {reason}")


class ExecutorUnavailable(AuditError):
    """An executor cannot run here (bubblewrap is missing, or namespaces are forbidden).

    The message names what to install or allow; no command was run unisolated instead.
    """


class LeaseLost(AuditError):
    """A worker's lease on a task expired or was taken over; it must stop working on it."""


class TaskCancelled(AuditError):
    """Someone asked for a running task to be cancelled (``audit cancel``).

    Raised by the queue's heartbeat to the worker holding the task, whose lease that
    heartbeat still renewed: the worker stops at the next write boundary, records the
    task cancelled and settles it.

    Attributes:
        task_id: The task.
        reason: Why, as the person cancelling it said.
    """

    def __init__(self, task_id: str, reason: str) -> None:
        self.task_id = task_id
        self.reason = reason
        super().__init__(f"task {task_id!r} was cancelled: {reason}")
