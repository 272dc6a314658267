"""The audit loop: tasks that are checked, pushed back with evidence, capped, and resumed.

A [`TaskBoard`][steadyloop.audit.TaskBoard] holds tasks: a queue with leases, heartbeats, priority,
dependencies and idempotency keys (SQLite by default, PostgreSQL with
``FOR UPDATE SKIP LOCKED`` for workers on several machines), and each task's trail in
the journal (stream ``["task", task_id]``), where every transition is recorded.

A [`Worker`][steadyloop.audit.Worker] claims a task and runs one round as a loop run; in goal mode a
[`Verifier`][steadyloop.audit.Verifier] runs the verify command; the
[`Auditor`][steadyloop.audit.Auditor] turns the gates (execution, verification, judgement) into
[`Finding`][steadyloop.audit.Finding]s; and the task is completed, pushed back with a
[`Packet`][steadyloop.audit.Packet], or handed to a person after the cap. A worker that dies
leaves its round open; another one resumes it from the journal.

Examples:
    >>> import asyncio, tempfile
    >>> from steadyloop.audit import TaskBoard, TaskSpec, Worker
    >>> from steadyloop.loop import Agent, ScriptedModel
    >>> async def demo(folder):
    ...     async with await TaskBoard.open(f"sqlite:///{folder}/audit.db") as board:
    ...         sub = await board.submit(TaskSpec(prompt="Say hello.", task_id="hello"))
    ...         agent = Agent("greeter", ScriptedModel(["hello"]))
    ...         await Worker(board, agent, scratch_root=folder).run()
    ...         return (await board.get(sub.task_id)).status.value
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     asyncio.run(demo(folder))
    'completed'
"""

from steadyloop._errors import (
    AuditError,
    ExecutorUnavailable,
    IllegalTransition,
    LeaseLost,
    TaskNotFound,
    TaskSpecError,
)
from steadyloop.audit._auditor import (
    AuditContext,
    Auditor,
    AuditReport,
    Finding,
    FindingKind,
    Gate,
    Judge,
    ModelJudge,
    Rule,
    RulesJudge,
    Severity,
)
from steadyloop.audit._board import DEFAULT_APP, TaskBoard
from steadyloop.audit._executors import (
    DEFAULT_ENV_ALLOW,
    DEFAULT_MAX_OUTPUT,
    BubblewrapExecutor,
    CommandResult,
    Executor,
    InProcessExecutor,
    SubprocessExecutor,
    cap_text,
)
from steadyloop.audit._packets import (
    PREAMBLE_CLOSE,
    PREAMBLE_OPEN,
    Packet,
    PreambleModel,
    apply_preamble,
    apply_to_messages,
    compose_preamble,
    count_preambles,
)
from steadyloop.audit._queue import (
    Claim,
    MySQLQueue,
    PostgresQueue,
    QueuedTask,
    SQLiteQueue,
    SubmitResult,
    TaskQueue,
    UnreadableTask,
    open_queue,
)
from steadyloop.audit._tasks import (
    DEFAULT_AUDIT_ROUNDS,
    DEFAULT_ROUND_BUDGET,
    TERMINAL,
    TRANSITIONS,
    GoalSpec,
    TaskEvent,
    TaskSpec,
    TaskState,
    TaskStatus,
    VerifySpec,
    check_dependencies,
    task_stream,
)
from steadyloop.audit._verify import DEFAULT_EVIDENCE_LIMIT, Verification, Verifier
from steadyloop.audit._worker import (
    DEFAULT_GRACE,
    DEFAULT_ROUND_TIME,
    AgentFactory,
    TaskContext,
    Worker,
    WorkerEvent,
    decide,
)

__all__ = [
    "DEFAULT_APP",
    "DEFAULT_AUDIT_ROUNDS",
    "DEFAULT_ENV_ALLOW",
    "DEFAULT_EVIDENCE_LIMIT",
    "DEFAULT_GRACE",
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_ROUND_BUDGET",
    "DEFAULT_ROUND_TIME",
    "PREAMBLE_CLOSE",
    "PREAMBLE_OPEN",
    "TERMINAL",
    "TRANSITIONS",
    "AgentFactory",
    "AuditContext",
    "AuditError",
    "AuditReport",
    "Auditor",
    "BubblewrapExecutor",
    "Claim",
    "CommandResult",
    "Executor",
    "ExecutorUnavailable",
    "Finding",
    "FindingKind",
    "Gate",
    "GoalSpec",
    "IllegalTransition",
    "InProcessExecutor",
    "Judge",
    "LeaseLost",
    "ModelJudge",
    "MySQLQueue",
    "Packet",
    "PostgresQueue",
    "PreambleModel",
    "QueuedTask",
    "Rule",
    "RulesJudge",
    "SQLiteQueue",
    "Severity",
    "SubmitResult",
    "SubprocessExecutor",
    "TaskBoard",
    "TaskContext",
    "TaskEvent",
    "TaskNotFound",
    "TaskQueue",
    "TaskSpec",
    "TaskSpecError",
    "TaskState",
    "TaskStatus",
    "UnreadableTask",
    "Verification",
    "Verifier",
    "VerifySpec",
    "Worker",
    "WorkerEvent",
    "apply_preamble",
    "apply_to_messages",
    "cap_text",
    "check_dependencies",
    "compose_preamble",
    "count_preambles",
    "decide",
    "open_queue",
    "task_stream",
]
