"""What the guards prevent and what they cost: crash matrices and time per guarded effect.

**Crash matrices.** The LangGraph shop graph (``durability="sync"`` and ``"async"``) and
the OpenAI Agents SDK shop agent (a scripted model issuing fresh call ids), each crashed
before and after every write of its framework's store, with and without the guard
(``steadyloop.testing.langgraph_crash_matrix`` / ``agents_crash_matrix``). ``rows``
``matrix`` has one row per framework, mode and crash point of the framework's store:
effects repeated without the guard and with it (all, and `NEVER` ones);
``guard_points`` sums the crash points the guard's own writes add.

**Cost.**

Runs the three-node shop graph (``lookup → charge → done``, one effect per node) on
LangGraph's ``SqliteSaver`` many times, without the guard and with it (its journal on
SQLite, ``synchronous=FULL``), under ``durability="sync"`` and ``"async"``, next to the
write+fsync floor measured in the same run:

* ``appends_per_guarded_effect``: journal appends the guard makes per effect, counted
  (the goal is at most two: the intent before, the result after);
* ``reads_per_guarded_effect``: journal reads (``read`` and ``head``) per effect, when
  nothing is open (the goal is at most one);
* ``guard_us_per_effect``: (guarded − unguarded) time per graph run, per effect, and
  that as a multiple of one write+fsync.

Writes ``benchmarks/results/guard.json`` and prints both.
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

import _measured
from bench_loop import CountingJournal, floor
from steadyloop.integrations.langgraph import LangGraphGuard
from steadyloop.loop import ReplayPolicy

# The crash matrices run the very graph and agent the tests check.
sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "integrations"))
from lg_graphs import shop, sqlite_saver
from oa_agents import shop_agent, sqlite_session

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


def runs(folder: Path, n: int, durability: str, guarded: bool) -> tuple[list[float], float, float]:
    """Seconds per graph run over ``n`` threads, and guard appends and reads per effect."""
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
        read = sum(c.reads for c in counters)
        for i in range(n):
            config: Any = {"configurable": {"thread_id": f"t{i}"}}
            t = time.perf_counter()
            graph.invoke({"order": f"o{i}"}, config, durability=durability)  # type: ignore[arg-type]
            samples.append(time.perf_counter() - t)
        appends = (sum(c.appends for c in counters) - start) / (n * EFFECTS_PER_RUN)
        reads = (sum(c.reads for c in counters) - read) / (n * EFFECTS_PER_RUN)
    finally:
        if guard is not None:
            guard.close()
    return samples, appends, reads


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_us": statistics.median(ordered) * 1e6,
        "p95_us": ordered[int(0.95 * (len(ordered) - 1))] * 1e6,
    }


def matrices(folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run every crash matrix; return (a row per framework crash point, guard-point sums)."""
    from steadyloop.testing import agents_crash_matrix, langgraph_crash_matrix

    kits: list[tuple[str, str, Any]] = [
        (
            "langgraph",
            mode,
            lambda w, g, mode=mode: langgraph_crash_matrix(
                shop, sqlite_saver, {"order": "o-1"}, workdir=w, durability=mode, guarded=g
            ),
        )
        for mode in ("sync", "async")
    ]
    kits.append(
        (
            "openai-agents",
            "session",
            lambda w, g: agents_crash_matrix(
                shop_agent, sqlite_session, "buy o-1", workdir=w, guarded=g
            ),
        )
    )
    matrix: list[dict[str, Any]] = []
    guard_points: list[dict[str, Any]] = []
    for framework, mode, kit in kits:
        rows: dict[tuple[int, str], dict[str, Any]] = {}
        sums = {
            "framework": framework,
            "mode": mode,
            "points": 0,
            "never_repeated": 0,
            "repeated": 0,
            "interrupts": 0,
        }
        for guarded in (False, True):
            report = kit(folder / f"{framework}-{mode}-{guarded}", guarded)
            write = 0
            for point in report.points:
                never = sum(r.count - 1 for r in point.repeated if r.policy == "never")
                every = sum(r.count - 1 for r in point.repeated)
                if point.label.startswith("guard."):
                    sums["points"] += 1
                    sums["never_repeated"] += never
                    sums["repeated"] += every
                    sums["interrupts"] += point.interrupts
                    continue
                if point.side == "before":
                    write += 1
                row = rows.setdefault(
                    (write, point.side),
                    {"framework": framework, "mode": mode, "write": write, "side": point.side},
                )
                tag = "with_guard" if guarded else "without_guard"
                row[f"label_{tag}"] = point.label
                row[f"repeated_{tag}"] = every
                row[f"never_repeated_{tag}"] = never
                row[f"final_state_ok_{tag}"] = point.final_equal
        matrix.extend(rows[k] for k in sorted(rows, key=lambda k: (k[0], k[1] == "after")))
        guard_points.append(sums)
    return matrix, guard_points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument(
        "--dir", help="measure in this folder (a tmpfs such as /dev/shm: fsync nearly free)"
    )
    args = parser.parse_args()
    measured = _measured.start()
    data: dict[str, Any] = {
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "runs": args.runs,
        "effects_per_run": EFFECTS_PER_RUN,
    }
    data["folder"] = args.dir or tempfile.gettempdir()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        data["matrix"], data["guard_points"] = matrices(folder)
        fl = stats(floor(folder, 300))
        data["floor_fsync"] = fl
        for durability in ("sync", "async"):
            row: dict[str, Any] = {}
            for guarded in (False, True):
                sub = folder / f"{durability}-{guarded}"
                sub.mkdir()
                samples, appends, reads = runs(sub, args.runs, durability, guarded)
                row["guarded" if guarded else "unguarded"] = stats(samples)
                if guarded:
                    row["appends_per_guarded_effect"] = appends
                    row["reads_per_guarded_effect"] = reads
            extra = row["guarded"]["median_us"] - row["unguarded"]["median_us"]
            row["guard_us_per_effect"] = extra / EFFECTS_PER_RUN
            row["guard_per_effect_x_floor"] = extra / EFFECTS_PER_RUN / fl["median_us"]
            data[durability] = row
    for row in data["matrix"]:
        print(
            f"{row['framework']:13} {row['mode']:7} write {row['write']} "
            f"({row['label_without_guard']}) {row['side']:6}  repeated without guard "
            f"{row['repeated_without_guard']} (never {row['never_repeated_without_guard']}), "
            f"with guard {row['repeated_with_guard']} (never {row['never_repeated_with_guard']})"
        )
    for sums in data["guard_points"]:
        print(f"the guard's own writes: {sums}")
    print(f"floor write+fsync: {data['floor_fsync']['median_us']:.0f} us median")
    for durability in ("sync", "async"):
        row = data[durability]
        print(
            f"{durability:5}  unguarded {row['unguarded']['median_us']:7.0f} us/run  "
            f"guarded {row['guarded']['median_us']:7.0f} us/run  "
            f"guard {row['guard_us_per_effect']:6.0f} us/effect "
            f"({row['guard_per_effect_x_floor']:.1f}x floor), "
            f"{row['appends_per_guarded_effect']:.2f} appends/effect, "
            f"{row['reads_per_guarded_effect']:.2f} reads/effect"
        )
    data["measured"] = measured.entry()
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
