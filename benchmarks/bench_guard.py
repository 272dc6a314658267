"""What the LangGraph guard costs: durable writes and time per guarded effect, in one run.

Runs the three-node shop graph (``lookup → charge → done``, one effect per node) on
LangGraph's ``SqliteSaver`` many times, without the guard and with it (its journal on
SQLite, ``synchronous=FULL``), under ``durability="sync"`` and ``"async"``, next to the
write+fsync floor measured in the same run:

* ``appends_per_guarded_effect``: journal appends the guard makes per effect, counted
  (the goal is at most two: the intent before, the result after);
* ``guard_us_per_effect``: (guarded − unguarded) time per graph run, per effect, and
  that as a multiple of one write+fsync.

Writes ``benchmarks/results/guard.json`` and prints a table.
Run: ``uv run python benchmarks/bench_guard.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from bench_loop import CountingJournal, floor
from steadyloop.integrations.langgraph import LangGraphGuard
from steadyloop.loop import ReplayPolicy

RESULTS = Path(__file__).parent / "results" / "guard.json"
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


def runs(folder: Path, n: int, durability: str, guarded: bool) -> tuple[list[float], float]:
    """Seconds per graph run over ``n`` threads, and guard appends per effect."""
    counters: list[CountingJournal] = []

    def wrap(journal: Any) -> Any:
        counters.append(CountingJournal(journal))
        return counters[-1]

    guard = LangGraphGuard(f"sqlite:///{folder / 'guard.db'}", wrap=wrap) if guarded else None
    saver = SqliteSaver(sqlite3.connect(folder / "checkpoints.db", check_same_thread=False))
    graph = build(guard).compile(checkpointer=saver)
    samples = []
    try:
        graph.invoke({"order": "warm-up"}, {"configurable": {"thread_id": "warm-up"}})
        start = sum(c.appends for c in counters)
        for i in range(n):
            config: Any = {"configurable": {"thread_id": f"t{i}"}}
            t = time.perf_counter()
            graph.invoke({"order": f"o{i}"}, config, durability=durability)  # type: ignore[arg-type]
            samples.append(time.perf_counter() - t)
        appends = (sum(c.appends for c in counters) - start) / (n * EFFECTS_PER_RUN)
    finally:
        if guard is not None:
            guard.close()
    return samples, appends


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_us": statistics.median(ordered) * 1e6,
        "p95_us": ordered[int(0.95 * (len(ordered) - 1))] * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    data: dict[str, Any] = {
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "runs": args.runs,
        "effects_per_run": EFFECTS_PER_RUN,
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        fl = stats(floor(folder, 300))
        data["floor_fsync"] = fl
        for durability in ("sync", "async"):
            row: dict[str, Any] = {}
            for guarded in (False, True):
                sub = folder / f"{durability}-{guarded}"
                sub.mkdir()
                samples, appends = runs(sub, args.runs, durability, guarded)
                row["guarded" if guarded else "unguarded"] = stats(samples)
                if guarded:
                    row["appends_per_guarded_effect"] = appends
            extra = row["guarded"]["median_us"] - row["unguarded"]["median_us"]
            row["guard_us_per_effect"] = extra / EFFECTS_PER_RUN
            row["guard_per_effect_x_floor"] = extra / EFFECTS_PER_RUN / fl["median_us"]
            data[durability] = row
    print(f"floor write+fsync: {data['floor_fsync']['median_us']:.0f} us median")
    for durability in ("sync", "async"):
        row = data[durability]
        print(
            f"{durability:5}  unguarded {row['unguarded']['median_us']:7.0f} us/run  "
            f"guarded {row['guarded']['median_us']:7.0f} us/run  "
            f"guard {row['guard_us_per_effect']:6.0f} us/effect "
            f"({row['guard_per_effect_x_floor']:.1f}x floor), "
            f"{row['appends_per_guarded_effect']:.2f} appends/effect"
        )
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
