"""A zygote for real SIGKILLs of a guarded LangGraph graph.

It imports LangGraph once, then for every line on stdin forks a child that opens the
checkpointer and the guard afresh and drives one thread of the shop graph towards its
end (resuming it the LangGraph way, and answering an unknown effect's interrupt with
what the effect sink says happened, as a person checking the payment provider would).
It prints the child's pid, waits for it and prints its exit status. The test kills the
child with SIGKILL at random moments; the effect sink is fsynced, so it is exact.

Commands (JSON): ``{"store": "sqlite:PATH" | "postgresql://...", "guard": URL,
"sink": PATH, "thread": ID, "durability": "sync" | "async", "pause": seconds}``.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from sigkill_helpers import serve

from steadyloop.integrations.langgraph import LangGraphGuard
from steadyloop.loop import ReplayPolicy
from steadyloop.testing import EffectSink


class Order(TypedDict, total=False):
    order: str
    price: str
    receipt: str
    done: str


def graph(guard: LangGraphGuard, sink: EffectSink, pause: float) -> StateGraph[Order]:
    def act(tool: str, policy: str, action: str) -> str:
        time.sleep(pause)  # widen the windows a kill can land in
        sink.record(tool, policy, action)
        time.sleep(pause)
        return f"done:{action}"

    @guard.effect(ReplayPolicy.SAFE)
    def lookup(order: str) -> str:
        return act("lookup", "safe", f"lookup/{order}")

    @guard.effect(ReplayPolicy.NEVER)
    def charge(order: str, price: str) -> str:
        return act("charge", "never", f"charge/{order}")

    @guard.effect(ReplayPolicy.SAFE)
    def notify(order: str) -> str:
        return act("notify", "safe", f"notify/{order}")

    builder: StateGraph[Order] = StateGraph(Order)
    builder.add_node("lookup", lambda s: {"price": lookup(s["order"])})
    builder.add_node("charge", lambda s: {"receipt": charge(s["order"], s["price"])})
    builder.add_node("done", lambda s: {"done": notify(s["order"])})
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", "charge")
    builder.add_edge("charge", "done")
    builder.add_edge("done", END)
    return builder


def truth(value: Any, sink: EffectSink) -> dict[str, Any]:
    """What really happened to an unknown charge: the sink knows (an effect per order)."""
    if value.get("steadyloop") == "effect_already_decided":
        return {}  # its decision is recorded; the guard drops this answer
    action = f"charge/{value['arguments']['order']}"
    if any(e["action"] == action for e in sink.effects()):
        return {
            value["intent_id"]: {
                "happened": True,
                "value": f"done:{action}",
                "note": "found in the sink",
            }
        }
    return {value["intent_id"]: {"happened": False, "note": "not in the sink"}}


def attempt(
    *, store: str, guard: str, sink: str, thread: str, durability: str, pause: float
) -> int:
    effects = EffectSink(sink)
    if store.startswith("sqlite:"):
        saver: Any = SqliteSaver(sqlite3.connect(store[len("sqlite:") :], check_same_thread=False))
    else:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver

        conn = psycopg.connect(store, autocommit=True, prepare_threshold=0, connect_timeout=30)
        saver = PostgresSaver(conn)
        saver.setup()
    with LangGraphGuard(guard) as g:
        app = graph(g, effects, pause).compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": thread}}
        state = app.get_state(config)
        command: Any = None if state.created_at else {"order": thread}
        for _ in range(10):
            app.invoke(command, config, durability=durability)  # type: ignore[arg-type]
            state = app.get_state(config)
            pending = [i for t in state.tasks for i in t.interrupts]
            if not pending:
                return 0 if state.values.get("done") == f"done:notify/{thread}" else 3
            command = Command(resume={i.id: truth(i.value, effects) for i in pending})
    return 4


if __name__ == "__main__":
    serve(attempt)
