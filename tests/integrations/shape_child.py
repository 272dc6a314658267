"""A zygote for real SIGKILLs of any crash-test shape, guarded or not.

It imports the frameworks once; for every line on stdin it forks a child that opens the
store (and the guard, when guarded) afresh and drives one thread of the named shape to
its end: a LangGraph shape of ``lg_graphs.SHAPES``, or an OpenAI Agents SDK shape
(``agents-together``: lookup and charge asked in one response; ``agents-handoff``: a
triage agent hands off first). An unknown effect is answered with what the fsynced
effect sink holds for its intent, as a person checking the provider would. Unguarded,
an attempt resumes the framework's own way and repeats what the framework repeats.

Commands (JSON): ``{"shape": NAME, "store": "sqlite:PATH" | "postgresql://...",
"guard": URL | null, "sink": PATH, "thread": ID, "pause": seconds}``. Effects are
recorded as ``THREAD/ACTION`` so that threads sharing a sink are told apart.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

from agents import Runner, SQLiteSession, function_tool
from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
from agents.run import RunConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from lg_graphs import SHAPES
from oa_agents import next_calls_together, shop_agent, triage_agent
from sigkill_helpers import serve

from steadyloop.integrations import current_intent
from steadyloop.integrations.langgraph import LangGraphGuard
from steadyloop.integrations.openai_agents import AgentsGuard
from steadyloop.loop import ReplayPolicy
from steadyloop.testing import EffectSink
from steadyloop.testing._agents_crash import _truth as agents_truth
from steadyloop.testing._langgraph_crash import _truth as langgraph_truth

AGENTS = {
    "agents-together": lambda p: shop_agent(p, next_calls_together),
    "agents-handoff": lambda p: triage_agent(p, next_calls_together),
}
"""The Agents SDK shapes: two calls per response, alone or after a handoff."""
QUIET = RunConfig(tracing_disabled=True)


class RealProcess:
    """A real process's stand-in for the crash kit's process: its sink, its guard."""

    def __init__(self, guard: Any, sink: EffectSink, thread: str, pause: float) -> None:
        self.guard = guard
        self.sink = sink
        self.thread = thread
        self.pause = pause

    def guarded(self, policy: ReplayPolicy) -> Any:
        """Guard a LangGraph effect (no guard in an unguarded run)."""
        return (lambda fn: fn) if self.guard is None else self.guard.effect(policy)

    def tool(self, policy: ReplayPolicy) -> Any:
        """Make an Agents SDK function tool, guarded when there is a guard."""
        return function_tool if self.guard is None else self.guard.function_tool(policy)

    def effect(self, tool: str, policy: str, action: str) -> str:
        """Make one fsynced, counted effect, named by the thread, between two pauses."""
        value = f"done:{action}"
        time.sleep(self.pause)  # widen the windows a kill can land in
        self.sink.record(
            tool, policy, f"{self.thread}/{action}", value=value, intent_id=current_intent()
        )
        time.sleep(self.pause)
        return value


def _saver(store: str) -> Any:
    if store.startswith("sqlite:"):
        return SqliteSaver(sqlite3.connect(store[len("sqlite:") :], check_same_thread=False))
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    saver = PostgresSaver(
        psycopg.connect(store, autocommit=True, prepare_threshold=0, connect_timeout=30)
    )
    saver.setup()
    return saver


def langgraph(shape: str, store: str, guard: Any, p: RealProcess) -> int:
    """Drive a LangGraph shape's thread to its end; 0 when it ended."""
    spec = SHAPES[shape]
    app = spec.build(p).compile(checkpointer=_saver(store))
    config: Any = {"configurable": {"thread_id": p.thread}}
    command: Any = None if app.get_state(config).created_at else spec.graph_input()
    for _ in range(20):
        app.invoke(command, config, durability=spec.durability)
        state = app.get_state(config)
        pending = [i for t in state.tasks for i in t.interrupts]
        if not pending:
            return 0 if not state.next else 3
        command = Command(resume={i.id: langgraph_truth(i.value, p.sink) for i in pending})
    return 4


def _session(store: str, thread: str) -> Any:
    if store.startswith("sqlite:"):
        return SQLiteSession(thread, store[len("sqlite:") :])
    return SQLAlchemySession.from_url(thread, url=store, create_tables=True)


async def agents(shape: str, store: str, guard: AgentsGuard | None, p: RealProcess) -> int:
    """Drive an Agents SDK shape's conversation to its answer; 0 when it answered."""
    agent = AGENTS[shape](p)
    session = _session(store, p.thread)
    if guard is None:  # the SDK's own way: go on from the saved items unless answered
        items = await session.get_items()
        last = items[-1] if items else {}
        if last.get("role") != "assistant" or last.get("type", "message") != "message":
            await Runner.run(agent, [] if items else "buy o-1", session=session, run_config=QUIET)
        return 0
    result = await guard.continue_run(agent, "buy o-1", session=session, run_config=QUIET)
    for _ in range(20):
        if result is None or not result.interruptions:
            return 0
        state = result.to_state()
        for item in result.interruptions:
            unknown = await guard.unknown(item)
            assert unknown is not None, item
            await guard.decide(state, item, agents_truth(unknown.intent_id, p.sink))
        result = await guard.run(agent, state, session=session, run_config=QUIET)
    return 4


def attempt(
    *, shape: str, store: str, guard: str | None, sink: str, thread: str, pause: float
) -> int:
    effects = EffectSink(sink)
    if shape in AGENTS:
        g: Any = None if guard is None else AgentsGuard(guard)
        try:
            return asyncio.run(agents(shape, store, g, RealProcess(g, effects, thread, pause)))
        finally:
            if g is not None:
                g.close()
    g = None if guard is None else LangGraphGuard(guard)
    try:
        return langgraph(shape, store, g, RealProcess(g, effects, thread, pause))
    finally:
        if g is not None:
            g.close()


if __name__ == "__main__":
    serve(attempt)
