"""The three-node shop graph that ``bench_guard.py`` times, and a child that times it.

Kept apart from ``bench_guard.py`` so that it imports nothing of Steadyloop but the
guard and the policy, whose names have not changed since the guard first shipped: the
same child can then time an earlier commit's guard (``bench_guard.py --before REV``
puts that commit's ``src`` first on ``PYTHONPATH``) next to today's, in one run.

Run as a child: ``python _guard_graph.py FOLDER RUNS`` prints one JSON line, the
seconds of each graph run per durability mode, without and with the guard.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from steadyloop.integrations.langgraph import LangGraphGuard
from steadyloop.loop import ReplayPolicy

EFFECTS_PER_RUN = 3


class Order(TypedDict, total=False):
    """The graph's state."""

    order: str
    price: str
    receipt: str
    done: str


def build(guard: LangGraphGuard | None) -> StateGraph[Order]:
    def guarded(policy: ReplayPolicy) -> Any:
        return (lambda fn: fn) if guard is None else guard.effect(policy)

    @guarded(ReplayPolicy.SAFE)
    def lookup(order: str) -> str:
        return f"price/{order}"

    @guarded(ReplayPolicy.NEVER)
    def charge(order: str, price: str) -> str:
        return f"receipt/{order}"

    @guarded(ReplayPolicy.SAFE)
    def notify(order: str) -> str:
        return f"notified/{order}"

    builder: StateGraph[Order] = StateGraph(Order)
    builder.add_node("lookup", lambda s: {"price": lookup(s["order"])})
    builder.add_node("charge", lambda s: {"receipt": charge(s["order"], s["price"])})
    builder.add_node("done", lambda s: {"done": notify(s["order"])})
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", "charge")
    builder.add_edge("charge", "done")
    builder.add_edge("done", END)
    return builder


def timed_runs(
    folder: Path,
    n: int,
    durability: str,
    guarded: bool,
    *,
    wrap: Callable[[Any], Any] | None = None,
    warmed_up: Callable[[], None] = lambda: None,
) -> list[float]:
    """Seconds per graph run over ``n`` fresh threads (after one warm-up run).

    Args:
        folder: Where the checkpoints and the guard's journal (SQLite, FULL) live.
        n: How many runs to time.
        durability: LangGraph's ``durability`` for every run.
        guarded: Whether the graph's effects run under the guard.
        wrap: Passed to the guard, to wrap (for example count) its journal.
        warmed_up: Called after the warm-up run, before the first timed one.
    """
    options = {} if wrap is None else {"wrap": wrap}
    guard = LangGraphGuard(f"sqlite:///{folder / 'guard.db'}", **options) if guarded else None
    saver = SqliteSaver(sqlite3.connect(folder / "checkpoints.db", check_same_thread=False))
    graph = build(guard).compile(checkpointer=saver)
    samples = []
    try:
        graph.invoke({"order": "warm-up"}, {"configurable": {"thread_id": "warm-up"}})
        warmed_up()
        for i in range(n):
            config: Any = {"configurable": {"thread_id": f"t{i}"}}
            t = time.perf_counter()
            graph.invoke({"order": f"o{i}"}, config, durability=durability)  # type: ignore[arg-type]
            samples.append(time.perf_counter() - t)
    finally:
        if guard is not None:
            guard.close()
    return samples


def main() -> None:
    """Time the graph in ``sys.argv[1]`` for ``sys.argv[2]`` runs; print one JSON line."""
    folder, n = Path(sys.argv[1]), int(sys.argv[2])
    import steadyloop

    out: dict[str, Any] = {"steadyloop": str(Path(steadyloop.__file__).parent)}
    for durability in ("sync", "async"):
        for guarded in (False, True):
            sub = folder / f"{durability}-{guarded}"
            sub.mkdir()
            key = "guarded" if guarded else "unguarded"
            out.setdefault(durability, {})[key] = timed_runs(sub, n, durability, guarded)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
