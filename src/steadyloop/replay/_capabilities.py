"""What a case needs of a store: each capability, with the first line that needs it.

The harness runs a case only on a store that declares every capability this finds;
elsewhere the run is `not_applicable`, naming what is missing. A new kind of operation
(a case domain) adds its branch here: the operations it needs, mapped to the
[`Capability`][steadyloop.replay.Capability] each one requires.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from steadyloop.replay._cases import (
    AppendEvent,
    Case,
    CreateSession,
    DeleteSession,
    EditEvent,
    FailSummary,
    InjectFailure,
    ListSessions,
    RepeatEvent,
    ResumeLoop,
    RunLoop,
    SearchMemory,
    StoreMemory,
    Summarize,
    TextPartSpec,
)
from steadyloop.replay._saver_cases import SAVER_OPS
from steadyloop.replay._store import Capability, scope_of

__all__ = ["required_capabilities"]


def required_capabilities(case: Case) -> dict[Capability, int]:
    """Return each capability the case needs, with the first line that needs it."""
    need: dict[Capability, int] = {}

    def add(cap: Capability, line: int) -> None:
        need.setdefault(cap, line)

    def state(keys: Mapping[str, Any], line: int) -> None:
        for key in keys:
            scope = scope_of(key)
            add(
                {
                    "session": Capability.STATE,
                    "user": Capability.USER_STATE,
                    "app": Capability.APP_STATE,
                    "temp": Capability.TEMP_STATE,
                }[scope],
                line,
            )

    for line, op in case.operations:
        if isinstance(op, CreateSession):
            add(Capability.EVENTS, line)
            add(
                Capability.GENERATED_SESSION_ID
                if op.session_id is None
                else Capability.EXPLICIT_SESSION_ID,
                line,
            )
            state(op.state, line)
        elif isinstance(op, AppendEvent):
            if any(not isinstance(p, TextPartSpec) for p in op.parts or ()):
                add(Capability.TOOL_PARTS, line)
            if op.idempotency_key is not None:
                add(Capability.IDEMPOTENCY, line)
            if op.time is not None:
                add(Capability.EXPLICIT_TIME, line)
            state(op.state_delta, line)
        elif isinstance(op, RepeatEvent):
            add(Capability.EXPLICIT_EVENT_ID, line)
        elif isinstance(op, EditEvent):
            add(Capability.CALLER_EDIT, line)
            add(Capability.EXPLICIT_EVENT_ID, line)
        elif isinstance(op, ListSessions):
            add(Capability.LIST_SESSIONS, line)
        elif isinstance(op, DeleteSession):
            add(Capability.DELETE_SESSION, line)
        elif isinstance(op, StoreMemory | SearchMemory):
            add(Capability.MEMORY, line)
        elif isinstance(op, Summarize | FailSummary):
            add(Capability.SUMMARIES, line)
        elif isinstance(op, InjectFailure):
            add(Capability.CRASH_INJECTION, line)
        elif isinstance(op, RunLoop | ResumeLoop):
            add(Capability.LOOP, line)
        elif op.op in SAVER_OPS:
            add(Capability.CHECKPOINTER, line)
    return need
