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

**Before and after** (``--before REV``): the guard's time per effect at an earlier
commit and today, on a tmpfs (``--tmpfs``, default ``/dev/shm``), where an fsync costs
almost nothing and the guard's own work is what is left. Children on each commit's
``src`` alternate for ``--rounds`` rounds (``_guard_graph.py``); ``before_after`` holds
the medians.

Writes ``benchmarks/results/guard.json`` and prints both.
Run: ``uv run python benchmarks/bench_guard.py [--runs N] [--before REV]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import _measured
from _guard_graph import EFFECTS_PER_RUN, timed_runs
from bench_loop import CountingJournal, floor

# The crash matrices run the very graph and agent the tests check.
sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "integrations"))
from lg_graphs import shop, sqlite_saver
from oa_agents import shop_agent, sqlite_session

SUMMARY_ZH = "防护能防住什么、要付出什么代价：崩溃矩阵，以及每个受防护副作用所需的时间。"
"""The first line of this docstring in Chinese, for the performance page."""

RESULTS = Path(__file__).parent / "results" / "guard.json"
CHILD = Path(__file__).parent / "_guard_graph.py"


def runs(folder: Path, n: int, durability: str, guarded: bool) -> tuple[list[float], float, float]:
    """Seconds per graph run over ``n`` threads, and guard appends and reads per effect."""
    counters: list[CountingJournal] = []
    start = [0, 0]

    def wrap(journal: Any) -> Any:
        counters.append(CountingJournal(journal))
        return counters[-1]

    def warmed_up() -> None:
        start[:] = [sum(c.appends for c in counters), sum(c.reads for c in counters)]

    samples = timed_runs(folder, n, durability, guarded, wrap=wrap, warmed_up=warmed_up)
    appends = (sum(c.appends for c in counters) - start[0]) / (n * EFFECTS_PER_RUN)
    reads = (sum(c.reads for c in counters) - start[1]) / (n * EFFECTS_PER_RUN)
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


def before_after(before: str, folder: Path, runs: int, rounds: int) -> dict[str, Any]:
    """Time per guarded effect at commit ``before`` and now, in alternating child processes.

    Each round starts one child on ``before``'s ``src`` (extracted with ``git archive``)
    and one on today's, each timing the graph without and with the guard in ``folder``;
    the per-effect figure of each mode is the median over the rounds.
    """
    root = Path(__file__).parents[1]
    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", before],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    old = folder / "before-src"
    old.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", commit, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    sources = {"before": old / "src", "after": root / "src"}
    per_effect: dict[str, dict[str, list[float]]] = {k: {"sync": [], "async": []} for k in sources}
    for r in range(rounds):
        for label, src in sources.items():
            work = folder / f"{label}-{r}"
            work.mkdir()
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(CHILD.parent)])}
            out = subprocess.run(
                [sys.executable, str(CHILD), str(work), str(runs)],
                check=True,
                capture_output=True,
                text=True,
                env=env,
            ).stdout
            timed = json.loads(out.splitlines()[-1])
            if Path(timed.pop("steadyloop")) != src / "steadyloop":
                raise RuntimeError(f"the {label} child did not import steadyloop from {src}")
            for mode, samples in timed.items():
                extra = statistics.median(samples["guarded"]) - statistics.median(
                    samples["unguarded"]
                )
                per_effect[label][mode].append(extra / EFFECTS_PER_RUN * 1e6)
    return {
        "before_commit": commit,
        "folder": str(folder.parent),
        "rounds": rounds,
        "runs_per_round": runs,
        **{
            mode: {
                label: {
                    "guard_us_per_effect": statistics.median(per_effect[label][mode]),
                    "rounds_us": [round(x, 1) for x in per_effect[label][mode]],
                }
                for label in sources
            }
            for mode in ("sync", "async")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument(
        "--dir", help="measure in this folder (a tmpfs such as /dev/shm: fsync nearly free)"
    )
    parser.add_argument(
        "--before",
        help="also time the guard at this commit next to today's, on --tmpfs (before_after)",
    )
    parser.add_argument("--tmpfs", default="/dev/shm", help="where --before measures")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds of --before")
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
    if args.before:
        with tempfile.TemporaryDirectory(dir=args.tmpfs) as tmp:
            data["before_after"] = before_after(args.before, Path(tmp), args.runs, args.rounds)
        for mode in ("sync", "async"):
            pair = data["before_after"][mode]
            print(
                f"{mode:5}  on {args.tmpfs}: guard {pair['before']['guard_us_per_effect']:6.0f} "
                f"us/effect at {data['before_after']['before_commit']}, "
                f"{pair['after']['guard_us_per_effect']:6.0f} now"
            )
    data["measured"] = measured.entry()
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
