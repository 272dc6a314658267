"""The agent loop: run and resume agents with an intent durable before every effect.

A step is model call → decision → action → observation. Before each external effect
(a model call, a tool call) an intent record is durable; after it, its result. Resume
folds the journal: completed effects are never repeated, a safe effect left without a
result is done again, and a never-repeat one stops the run with
``RESUME_STATE_UNKNOWN`` until the caller [`resolve`][steadyloop.loop.resolve]s it.

Examples:
    >>> import asyncio
    >>> from steadyloop.journal import open_journal
    >>> from steadyloop.loop import (
    ...     Agent, ModelReply, ReplayPolicy, ScriptedModel, ToolRegistry, run)
    >>> tools = ToolRegistry()
    >>> @tools.tool(policy=ReplayPolicy.SAFE)
    ... def add(a: int, b: int) -> int:
    ...     return a + b
    >>> model = ScriptedModel([ModelReply.call("add", {"a": 2, "b": 3}), "5"])
    >>> agent = Agent("calc", model, tools)
    >>> async def demo():
    ...     async with await open_journal("memory://") as journal:
    ...         return await run(agent, journal, "demo", "ada", "s1", "r1", "2 + 3?")
    >>> result = asyncio.run(demo())
    >>> result.stop_reason.value, result.output, result.steps, result.actions
    ('completed', '5', 2, 1)
"""

from steadyloop.effects import Happened, NotHappened, Owner
from steadyloop.loop._agent import Agent, DecisionParser, ToolCallParser, load_agent
from steadyloop.loop._check import Mismatch, check_session_copies
from steadyloop.loop._messages import (
    LOOP_AUTHOR,
    TOOL_AUTHOR,
    USER_AUTHOR,
    event_messages,
    session_messages,
)
from steadyloop.loop._models import OpenAIChatModel, ScriptedModel
from steadyloop.loop._retention import RemovalReport, Removed, erase_user, prune_runs
from steadyloop.loop._run import (
    RunInfo,
    list_runs,
    load_run,
    request_cancel,
    resolve,
    resume,
    run,
    run_keys,
)
from steadyloop.loop._state import (
    RUN_CANCEL_REQUESTED,
    RUN_CLAIMED,
    RUN_ENDED,
    RUN_RECORD_KINDS,
    RUN_SNAPSHOT,
    RUN_STARTED,
    RUN_STOPPED,
    RUN_SUSPENDED,
    RunState,
    parse_run_stream,
    run_stream,
)
from steadyloop.loop._stop import SignalStop
from steadyloop.loop._tools import Tool, ToolContext, ToolRegistry
from steadyloop.loop._types import (
    Budgets,
    Decision,
    FinalAnswer,
    Message,
    ModelClient,
    ModelReply,
    ParseFailure,
    ReplayPolicy,
    RunResult,
    StopReason,
    ToolCall,
    ToolCalls,
    ToolSpec,
)

__all__ = [
    "LOOP_AUTHOR",
    "RUN_CANCEL_REQUESTED",
    "RUN_CLAIMED",
    "RUN_ENDED",
    "RUN_RECORD_KINDS",
    "RUN_SNAPSHOT",
    "RUN_STARTED",
    "RUN_STOPPED",
    "RUN_SUSPENDED",
    "TOOL_AUTHOR",
    "USER_AUTHOR",
    "Agent",
    "Budgets",
    "Decision",
    "DecisionParser",
    "FinalAnswer",
    "Happened",
    "Message",
    "Mismatch",
    "ModelClient",
    "ModelReply",
    "NotHappened",
    "OpenAIChatModel",
    "Owner",
    "ParseFailure",
    "RemovalReport",
    "Removed",
    "ReplayPolicy",
    "RunInfo",
    "RunResult",
    "RunState",
    "ScriptedModel",
    "SignalStop",
    "StopReason",
    "Tool",
    "ToolCall",
    "ToolCallParser",
    "ToolCalls",
    "ToolContext",
    "ToolRegistry",
    "ToolSpec",
    "check_session_copies",
    "erase_user",
    "event_messages",
    "list_runs",
    "load_agent",
    "load_run",
    "parse_run_stream",
    "prune_runs",
    "request_cancel",
    "resolve",
    "resume",
    "run",
    "run_keys",
    "run_stream",
    "session_messages",
]
