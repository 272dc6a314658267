"""How long the notebooks take to run (nbmake) and the documentation to build from them.

Run: ``uv run python benchmarks/bench_docs.py [--repeat 1]``

Measured in one run, on an empty notebook cache of its own (``STEADYLOOP_NOTEBOOK_CACHE``
in a temporary folder, so your own ``.cache/notebooks`` is neither used nor changed),
and written to ``benchmarks/results/docs.json``:

* ``nbmake_seconds``: the notebooks through nbmake on the empty cache, two at a time
  (``parallel``): one ``pytest notebooks/<lang>/<name>.ipynb`` per notebook, the slowest
  of the last result first, a new one starting as soon as one of the two ends. This is
  what a fresh clone pays for the notebooks on two cores.
* ``build_seconds``: ``mkdocs build --strict`` of both languages after it; it executes
  no notebook and renders the executed copies.
* ``cold_seconds``: the two together, the cold strict build with every notebook
  executed. Aim (``cold_aim_seconds``): at most 120 s on a quiet 2-core machine.
* ``warm_nbmake_seconds``: ``pytest notebooks`` again; every notebook already passed in
  this state, so each test is skipped and nothing is executed.
* ``notebook_seconds``: each notebook's nbmake test in the cold run (pytest's
  ``--durations``, the call phase: kernel start and every cell). Aim
  (``notebook_aim_seconds``): at most 20 s each. Every notebook in ``notebooks/`` must
  be there: a run that did not execute one of them writes no result.
* ``notebook_cpu_seconds``, ``build_cpu_seconds``: the CPU seconds (user and system) of
  each notebook's pytest process with its kernel, and of the build, from ``wait4``. On a
  shared machine the wall times grow with the load; these do not, so they say what a
  quiet machine would take for the work that is not waiting on the disk.
* ``measured``: the date and the load average (``benchmarks/_measured.py``). The two
  notebook runs share the machine's cores with each other and with anything else
  running: a load above the core count slows every wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _measured

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results" / "docs.json"
AIM_SECONDS = 120.0
"""The cold strict build, notebooks included, on a quiet 2-core machine."""
NOTEBOOK_AIM_SECONDS = 20.0
"""One notebook's nbmake test (issue 22)."""
PARALLEL = 2
"""Notebooks run at once: one per core of the 2-core machine the aim is for."""
_DURATION = re.compile(r"^([\d.]+)s call\s+(\S+\.ipynb)::", re.M)


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return elapsed, out.stdout + out.stderr


def _cpu(usage: Any) -> float:
    return float(usage.ru_utime + usage.ru_stime)


def _two_at_a_time(
    commands: dict[str, list[str]], env: dict[str, str], order: list[str], logs: Path
) -> tuple[float, dict[str, float], str]:
    """Run ``commands`` two at a time, in ``order``; wall time, CPU seconds each, output.

    A command's CPU seconds are those of its process and every child it waited for (the
    notebook's kernel), from ``wait4``: unlike a wall time, they do not grow when other
    work shares the cores.
    """
    started = time.perf_counter()
    queue = list(order)
    running: dict[int, tuple[str, subprocess.Popen[bytes], Path]] = {}
    cpu: dict[str, float] = {}
    outputs: list[str] = []
    while queue or running:
        while queue and len(running) < PARALLEL:
            name = queue.pop(0)
            log = logs / f"{len(cpu) + len(running)}.log"
            with log.open("wb") as out:  # the child keeps its own copy of the descriptor
                child = subprocess.Popen(commands[name], cwd=ROOT, env=env, stdout=out, stderr=out)
            running[child.pid] = (name, child, log)
        pid, status, usage = os.wait4(-1, 0)
        if pid not in running:
            continue
        name, child, log = running.pop(pid)
        child.returncode = os.waitstatus_to_exitcode(status)
        out = log.read_text(encoding="utf-8", errors="replace")
        if child.returncode != 0:
            sys.exit(f"{' '.join(commands[name])} failed:\n{out[-3000:]}")
        cpu[name] = _cpu(usage)
        outputs.append(out)
    return time.perf_counter() - started, cpu, "\n".join(outputs)


def _timed_cpu(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one command (its children included)."""
    started = time.perf_counter()
    child = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert child.stderr is not None
    err = child.stderr.read()
    _pid, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - started
    if child.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{err.decode(errors='replace')[-3000:]}")
    return elapsed, _cpu(usage)


def _previous_seconds() -> dict[str, float]:
    """The last result's seconds per notebook, to start the slowest first."""
    try:
        data = json.loads(RESULTS.read_text(encoding="utf-8"))
        return {str(k): float(v) for k, v in data["notebook_seconds"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def measure(repeat: int) -> dict[str, Any]:
    """Run the notebooks cold, build, run them warm, ``repeat`` times; keep the best."""
    bindir = Path(sys.executable).parent
    measured = _measured.start()
    load_before = os.getloadavg()[0]
    cold, builds, totals, warm = [], [], [], []
    durations: dict[str, float] = {}
    cpu: dict[str, float] = {}
    build_cpu: list[float] = []
    pytest = [str(bindir / "pytest"), "-p", "no:cacheprovider", "-q"]
    names = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("notebooks/*/*.ipynb"))
    previous = _previous_seconds()
    order = sorted(names, key=lambda n: -previous.get(n, 0.0))  # slowest first
    timed = ["--durations=0", "--durations-min=0"]
    commands = {name: [*pytest, name, *timed] for name in names}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            env = {
                **os.environ,
                "NO_MKDOCS_2_WARNING": "1",
                "STEADYLOOP_NOTEBOOK_CACHE": str(Path(tmp) / "cache"),
            }
            env.pop("STEADYLOOP_DOCS_FAST", None)
            seconds, cpu_now, log = _two_at_a_time(commands, env, order, Path(tmp))
            cold.append(seconds)
            for name, value in cpu_now.items():
                cpu[name] = min(cpu.get(name, float("inf")), value)
            for value, name in _DURATION.findall(log):
                durations[name] = min(durations.get(name, float("inf")), float(value))
            missing = sorted(set(names) - set(durations))
            if missing:
                sys.exit(f"the cold run did not execute {', '.join(missing)}; no result written")
            build = [
                str(bindir / "mkdocs"),
                "build",
                "--strict",
                "--site-dir",
                str(Path(tmp) / "site"),
            ]
            seconds, seconds_cpu = _timed_cpu(build, env)
            builds.append(seconds)
            build_cpu.append(seconds_cpu)
            totals.append(cold[-1] + seconds)
            seconds, log = _timed([*pytest, "notebooks"], env)
            if " passed" in log:
                sys.exit(f"the second notebook run executed a notebook again:\n{log[-3000:]}")
            warm.append(seconds)
    return {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            # Other work on the machine slows every figure here; this says how busy it was.
            "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        },
        "measured": measured.entry(),
        "repeat": repeat,
        "parallel": PARALLEL,
        "nbmake_seconds": round(min(cold), 2),
        "build_seconds": round(min(builds), 2),
        "cold_seconds": round(min(totals), 2),
        "cold_aim_seconds": AIM_SECONDS,
        "notebook_aim_seconds": NOTEBOOK_AIM_SECONDS,
        "warm_nbmake_seconds": round(min(warm), 2),
        "notebook_seconds": {k: round(v, 2) for k, v in sorted(durations.items())},
        "notebook_cpu_seconds": {k: round(v, 2) for k, v in sorted(cpu.items())},
        "build_cpu_seconds": round(min(build_cpu), 2),
    }


def main() -> None:
    """Measure, print a summary and write benchmarks/results/docs.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the best is kept")
    args = parser.parse_args()
    result = measure(args.repeat)
    aim = "within" if result["cold_seconds"] <= AIM_SECONDS else "OVER"
    print(f"notebooks through nbmake, empty cache, 2 at a time: {result['nbmake_seconds']:.1f} s")
    print(f"strict build, both languages, from the copies:      {result['build_seconds']:.1f} s")
    print(
        f"cold strict build, notebooks included:              {result['cold_seconds']:.1f} s"
        f" ({aim} the {AIM_SECONDS:.0f} s aim)"
    )
    print(
        f"notebooks again (each already passed):              {result['warm_nbmake_seconds']:.1f} s"
    )
    for name, seconds in result["notebook_seconds"].items():
        over = "  OVER the 20 s aim" if seconds > NOTEBOOK_AIM_SECONDS else ""
        print(f"  {name:<45}{seconds:>7.2f} s{over}")
    measured = result["measured"]
    print(
        f"measured {measured['date']}, load average (1, 5, 15 min)"
        f" {measured['load_average_at_start']} -> {measured['load_average_at_end']}"
    )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
