"""The LangGraph graph the crash tests use: lookup → charge → done, each a counted effect."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from steadyloop.loop import ReplayPolicy
from steadyloop.testing import GraphProcess


class Order(TypedDict, total=False):
    order: str
    price: str
    receipt: str
    done: str


def shop(p: GraphProcess) -> StateGraph[Order]:
    """Three nodes, three effects: a safe lookup, a never-repeat charge, a safe notice."""

    @p.guarded(ReplayPolicy.SAFE)
    def lookup(order: str) -> str:
        return p.effect("lookup", "safe", f"lookup/{order}")

    @p.guarded(ReplayPolicy.NEVER)
    def charge(order: str, price: str) -> str:
        return p.effect("charge", "never", f"charge/{order}")

    @p.guarded(ReplayPolicy.SAFE)
    def notify(order: str) -> str:
        return p.effect("notify", "safe", f"notify/{order}")

    builder: StateGraph[Order] = StateGraph(Order)
    builder.add_node("lookup", lambda s: {"price": lookup(s["order"])})
    builder.add_node("charge", lambda s: {"receipt": charge(s["order"], s["price"])})
    builder.add_node("done", lambda s: {"done": notify(s["order"])})
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", "charge")
    builder.add_edge("charge", "done")
    builder.add_edge("done", END)
    return builder


def sqlite_saver(folder: Path) -> SqliteSaver:
    """A fresh SqliteSaver on the store in ``folder``."""
    return SqliteSaver(sqlite3.connect(folder / "checkpoints.db", check_same_thread=False))
