"""How long the notebooks take to run (nbmake) and the documentation to build from them.

Run: ``uv run python benchmarks/bench_docs.py [--repeat 1]``

Measured in one run, on an empty notebook cache of its own (``STEADYLOOP_NOTEBOOK_CACHE``
in a temporary folder, so your own ``.cache/notebooks`` is neither used nor changed),
and written to ``benchmarks/results/docs.json``:

* ``nbmake_seconds``: ``pytest notebooks`` on the empty cache, two at a time: one
  ``pytest notebooks/en`` and one ``pytest notebooks/zh``, side by side, each executing
  its language's notebooks once into the cache (``parallel``: 2). This is what a fresh
  clone pays for the notebooks on two cores.
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
* ``measured``: the date and the load average (``benchmarks/_measured.py``). The two
  notebook runs share the machine's cores with each other and with anything else
  running: a load above the core count slows every figure.
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
LANGUAGES = ("en", "zh")
_DURATION = re.compile(r"^([\d.]+)s call\s+(\S+\.ipynb)::", re.M)


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return elapsed, out.stdout + out.stderr


def _side_by_side(commands: list[list[str]], env: dict[str, str]) -> tuple[float, str]:
    """Run ``commands`` at once; the wall time until the last ends, and their output."""
    started = time.perf_counter()
    children = [
        subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for args in commands
    ]
    outputs = [child.communicate()[0] for child in children]
    elapsed = time.perf_counter() - started
    for args, child, out in zip(commands, children, outputs, strict=True):
        if child.returncode != 0:
            sys.exit(f"{' '.join(args)} failed:\n{out[-3000:]}")
    return elapsed, "\n".join(outputs)


def measure(repeat: int) -> dict[str, Any]:
    """Run the notebooks cold, build, run them warm, ``repeat`` times; keep the best."""
    bindir = Path(sys.executable).parent
    measured = _measured.start()
    load_before = os.getloadavg()[0]
    cold, builds, totals, warm = [], [], [], []
    durations: dict[str, float] = {}
    pytest = [str(bindir / "pytest"), "-p", "no:cacheprovider", "-q"]
    notebooks = [*pytest, "notebooks"]
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            env = {
                **os.environ,
                "NO_MKDOCS_2_WARNING": "1",
                "STEADYLOOP_NOTEBOOK_CACHE": str(Path(tmp) / "cache"),
            }
            env.pop("STEADYLOOP_DOCS_FAST", None)
            timed = ["--durations=0", "--durations-min=0"]
            per_language = [[*pytest, f"notebooks/{lang}", *timed] for lang in LANGUAGES]
            seconds, log = _side_by_side(per_language, env)
            cold.append(seconds)
            for value, name in _DURATION.findall(log):
                durations[name] = min(durations.get(name, float("inf")), float(value))
            executed = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("notebooks/*/*.ipynb")}
            missing = sorted(executed - set(durations))
            if missing:
                sys.exit(f"the cold run did not execute {', '.join(missing)}; no result written")
            build = [
                str(bindir / "mkdocs"),
                "build",
                "--strict",
                "--site-dir",
                str(Path(tmp) / "site"),
            ]
            seconds, _ = _timed(build, env)
            builds.append(seconds)
            totals.append(cold[-1] + seconds)
            seconds, log = _timed(notebooks, env)
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
        "parallel": len(LANGUAGES),
        "nbmake_seconds": round(min(cold), 2),
        "build_seconds": round(min(builds), 2),
        "cold_seconds": round(min(totals), 2),
        "cold_aim_seconds": AIM_SECONDS,
        "notebook_aim_seconds": NOTEBOOK_AIM_SECONDS,
        "warm_nbmake_seconds": round(min(warm), 2),
        "notebook_seconds": {k: round(v, 2) for k, v in sorted(durations.items())},
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
