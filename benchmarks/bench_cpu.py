"""The agent loop's CPU per step, in instructions, counted by valgrind's callgrind.

Run: ``uv run python benchmarks/bench_cpu.py [--steps 100] [--repeats 2]``

Wall-clock figures on a shared machine swing two to three times from run to run; the
number of instructions a process executes does not. Each workload runs in a child
process under ``valgrind --tool=callgrind --separate-threads=no`` (every thread of the
process counted together, the SQLite journal's worker thread included), once for
``--steps`` steps (N) and once for 3N; the difference divided by 2N is the cost of one
step, with the interpreter's start-up, the imports and the run's own start and end
taken out. The workloads, all on the project's CPython:

* ``memory``: `bench_loop.py`'s step (a scripted model calling a no-op ``SAFE`` tool:
  one model call and one tool call per step) on the in-memory journal: the loop,
  sessions, records, canonical JSON and the journal protocol, without storage.
* ``sqlite``: the same step on the default SQLite journal (``synchronous=FULL``, on a
  temporary folder). Callgrind counts the instructions in the process, not the time
  it waits for the disk: this is SQLite's CPU and the hand-off to its worker thread.
* ``langgraph``: the peer, LangGraph's two-node graph (a "model" node and a "tool"
  node per step, as in `bench_loop.py`) with ``InMemorySaver`` and
  ``durability="sync"``; its version is in the result. Install it with
  ``uv sync --group bench``; without it the row says so.

``PYTHONHASHSEED=0`` in the child makes the counts repeat to within a few hundred
instructions per step; the children's bytecode is cached in a temporary folder (filled
by a native run first), so that they do not compile every module under valgrind. For
the memory journal the result also lists the CPython and library functions that cost
the most instructions per step (self cost, from ``callgrind_annotate`` of the two runs,
subtracted), and the Python functions called
most per step (from a ``cProfile`` pass without valgrind: call counts, not times).

Writes ``benchmarks/results/cpu.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib.metadata
import json
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

import _measured

RESULTS = Path(__file__).parent / "results" / "cpu.json"
HERE = Path(__file__).resolve().parent
KINDS = ("memory", "sqlite", "langgraph")
TOP = 15
"""How many functions the profile lists."""


async def _steadyloop_run(kind: str, steps: int, directory: str) -> None:
    from bench_loop import APP, bench_agent
    from steadyloop.journal import Journal, MemoryJournal, SQLiteJournal
    from steadyloop.loop import run

    journal: Journal
    if kind == "memory":
        journal = MemoryJournal()
    else:
        journal = await SQLiteJournal.open(Path(directory) / "cpu.db")
    try:
        result = await run(bench_agent(steps), journal, APP, "u", "s", "r", "go")
    finally:
        await journal.close()
    assert result.stop_reason.value == "completed", result


def _langgraph_run(steps: int) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from bench_loop import langgraph_peer

    graph = langgraph_peer(steps)
    app = graph.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 4 * steps + 10}
    out = app.invoke({"i": 0, "last": ""}, config, durability="sync")
    assert out["i"] == steps, out


def workload(kind: str, steps: int, directory: str) -> None:
    """Run one workload of ``steps`` steps in this process."""
    if kind == "langgraph":
        _langgraph_run(steps)
    else:
        asyncio.run(_steadyloop_run(kind, steps, directory))


def langgraph_version() -> str | None:
    """LangGraph's installed version, or None when it is not installed."""
    try:
        return importlib.metadata.version("langgraph")
    except importlib.metadata.PackageNotFoundError:
        return None


def child_env(work: Path) -> dict[str, str]:
    """The children's environment: hash seed fixed, bytecode cached in ``work``.

    Without a bytecode cache (``PYTHONDONTWRITEBYTECODE``) every child compiles every
    module it imports, under valgrind: the same in both runs, so it cancels out, but it
    makes each count minutes longer. `warm_up` fills the cache first, natively.
    """
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPYCACHEPREFIX": str(work / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def warm_up(kind: str, work: Path) -> None:
    """Run ``kind`` for one step natively, so that its modules' bytecode is cached."""
    with tempfile.TemporaryDirectory(dir=work) as directory:
        command = [sys.executable, str(Path(__file__).resolve()), "--child", kind]
        command += ["--steps", "1", "--dir", directory]
        subprocess.run(command, check=True, env=child_env(work), capture_output=True)


def callgrind(kind: str, steps: int, out: Path) -> int:
    """Instructions of one child process running ``kind`` for ``steps`` steps."""
    with tempfile.TemporaryDirectory(dir=out.parent) as directory:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            kind,
            "--steps",
            str(steps),
            "--dir",
            directory,
        ]
        subprocess.run(command, check=True, env=child_env(out.parent), capture_output=True)
    totals = re.search(r"^(?:totals|summary):\s*(\d+)", out.read_text(), re.M)
    assert totals is not None, f"no totals in {out}"
    return int(totals.group(1))


def self_costs(path: Path) -> dict[str, int]:
    """Instructions by function (self cost), from ``callgrind_annotate``."""
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    costs: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?)\s*$", line)
        if match and ":" in match.group(2):
            # "/build/Python-3.11.7/Python/ceval.c:_PyEval_EvalFrameDefault'2 [lib…]"
            # → "ceval.c:_PyEval_EvalFrameDefault" (recursion levels counted together).
            where, _, function = match.group(2).partition(":")
            function = function.split(" [", 1)[0].split("'", 1)[0]
            name = f"{Path(where).name}:{function}"
            costs[name] = costs.get(name, 0) + int(match.group(1).replace(",", ""))
    return costs


def profile_per_step(small: Path, large: Path, steps: int) -> list[dict[str, Any]]:
    """The functions that cost the most instructions per step: large run minus small."""
    a, b = self_costs(small), self_costs(large)
    per_step = {name: (b[name] - a.get(name, 0)) / (2 * steps) for name in b}
    top = sorted(per_step.items(), key=lambda item: -item[1])[:TOP]
    return [{"function": name, "instructions_per_step": round(cost)} for name, cost in top]


def python_calls_per_step(steps: int) -> dict[str, Any]:
    """Python function calls per step on the memory journal, from two ``cProfile`` passes."""
    counts: list[dict[str, int]] = []
    totals: list[int] = []
    with tempfile.TemporaryDirectory() as directory:
        workload("memory", 1, directory)  # imports and first-call caches, outside the counts
    for n in (steps, 3 * steps):
        profiler = cProfile.Profile()
        with tempfile.TemporaryDirectory() as directory:
            profiler.runcall(workload, "memory", n, directory)
        stats = cast(Any, pstats.Stats(profiler)).stats
        by_name: dict[str, int] = {}
        for (file, line, name), (_, calls, *_rest) in stats.items():
            short = f"{Path(file).name}:{line}({name})" if line else name
            by_name[short] = by_name.get(short, 0) + calls
        counts.append(by_name)
        totals.append(sum(by_name.values()))
    small, large = counts
    per_step = {k: (v - small.get(k, 0)) / (2 * steps) for k, v in large.items()}
    top = sorted(per_step.items(), key=lambda item: -item[1])[:TOP]
    return {
        "calls_per_step": round((totals[1] - totals[0]) / (2 * steps), 1),
        "most_called": [{"function": k, "calls_per_step": round(v, 2)} for k, v in top],
    }


def measure(kind: str, steps: int, repeats: int, work: Path) -> dict[str, Any]:
    """Instructions per step of ``kind``: (count at 3N − count at N) / 2N, ``repeats`` times."""
    runs: list[float] = []
    warm_up(kind, work)
    for i in range(repeats):
        small = callgrind(kind, steps, work / f"{kind}-{i}-small.out")
        large = callgrind(kind, 3 * steps, work / f"{kind}-{i}-large.out")
        runs.append((large - small) / (2 * steps))
        print(f"  {kind}: {runs[-1]:,.0f} instructions per step", file=sys.stderr)
    entry: dict[str, Any] = {
        "instructions_per_step": min(runs),
        "runs_instructions_per_step": runs,
    }
    if kind == "memory":
        entry["top_functions"] = profile_per_step(
            work / "memory-0-small.out", work / "memory-0-large.out", steps
        )
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=100, help="N: runs of N and 3N steps")
    parser.add_argument("--repeats", type=int, default=2, help="counts of each workload")
    parser.add_argument("--only", choices=KINDS, action="append", help="measure just these")
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="print, do not write JSON")
    args = parser.parse_args()
    if args.child:
        workload(args.child, args.steps, args.dir)
        return
    if shutil.which("valgrind") is None:
        sys.exit("bench_cpu.py needs valgrind (apt-get install valgrind)")
    measured = _measured.start()
    version = langgraph_version()
    kinds = [k for k in args.only or KINDS if k != "langgraph" or version is not None]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as work:
        for kind in kinds:
            results[kind] = measure(kind, args.steps, args.repeats, Path(work))
    calls = python_calls_per_step(args.steps) if "memory" in kinds else None
    langgraph = results.get("langgraph")
    if langgraph is None:
        langgraph = {"skipped": "LangGraph is not installed (uv sync --group bench)"}
    data = {
        "measured": measured.entry(),
        "steps": args.steps,
        "repeats": args.repeats,
        "step": "one model call and one tool call (both SAFE), as in bench_loop.py",
        "valgrind": subprocess.run(
            ["valgrind", "--version"], check=True, capture_output=True, text=True
        ).stdout.strip(),
        "memory": results.get("memory"),
        "sqlite": results.get("sqlite"),
        "langgraph": {**langgraph, "version": version, "checkpointer": "InMemorySaver"},
        "python_calls": calls,
    }
    for kind in KINDS:
        entry = data[kind]
        if entry and "instructions_per_step" in entry:
            print(f"{kind:10} {entry['instructions_per_step']:>14,.0f} instructions per step")
    if calls:
        print(f"{'python':10} {calls['calls_per_step']:>14,} function calls per step")
    if not args.no_write:
        RESULTS.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
