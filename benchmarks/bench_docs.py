"""How long the documentation takes to build, and what a test run pays for the notebooks.

Run: ``uv run python benchmarks/bench_docs.py [--repeat 1]``

Measured in one run, on an empty notebook cache of its own (``STEADYLOOP_NOTEBOOK_CACHE``
in a temporary folder, so your own ``.cache/notebooks`` is neither used nor changed),
and written to ``benchmarks/results/docs.json``:

* ``build_seconds``: ``mkdocs build --strict`` of both languages with every notebook
  executed (``hooks/notebook_cache.py`` runs them in parallel, each once). Aim: under
  120 s. This is what a fresh clone's first build, or CI, pays.
* ``warm_build_seconds``: the same build again; the notebooks, unchanged, come from
  the cache. This is what a rebuild after a prose edit pays.
* ``nbmake_seconds``: ``pytest notebooks`` after the build (the notebook tests of a
  test run, which reuse the build's executed copies: the notebooks run once per run).
* ``notebook_seconds``: each notebook's execution time in the cold build (wall time,
  in parallel with the others). Every notebook in ``notebooks/`` must be there: a cold
  build that did not execute one of them writes no result.
* ``measured``: the date and the load average (``benchmarks/_measured.py``).
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
_EXECUTED = re.compile(r"Executed notebook (\S+\.ipynb) in ([\d.]+) s")


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return elapsed, out.stdout + out.stderr


def notebooks() -> list[str]:
    """Every notebook of the project, as ``notebooks/<lang>/<name>.ipynb``."""
    return sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("notebooks/*/*.ipynb"))


def measure(repeat: int) -> dict[str, Any]:
    """Build cold, build warm and run the notebook tests ``repeat`` times; keep the best."""
    bindir = Path(sys.executable).parent
    measured = _measured.start()
    load_before = os.getloadavg()[0]
    cold, warm, runs = [], [], []
    durations: dict[str, float] = {}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            env = {
                **os.environ,
                "NO_MKDOCS_2_WARNING": "1",
                "STEADYLOOP_NOTEBOOK_CACHE": str(Path(tmp) / "cache"),
            }
            env.pop("STEADYLOOP_DOCS_FAST", None)
            build = [
                str(bindir / "mkdocs"),
                "build",
                "--strict",
                "--site-dir",
                str(Path(tmp) / "site"),
            ]
            seconds, log = _timed(build, env)
            cold.append(seconds)
            for name, value in _EXECUTED.findall(log):
                durations[name] = min(durations.get(name, float("inf")), float(value))
            # The figure is the time of a build with every notebook executed, or none.
            missing = [n for n in notebooks() if n not in durations]
            if missing:
                sys.exit(f"the cold build did not execute {', '.join(missing)}; no result written")
            seconds, _ = _timed(build, env)
            warm.append(seconds)
            seconds, _ = _timed(
                [str(bindir / "pytest"), "notebooks", "-p", "no:cacheprovider", "-q"], env
            )
            runs.append(seconds)
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
        "build_seconds": round(min(cold), 2),
        "build_aim_seconds": AIM_SECONDS,
        "warm_build_seconds": round(min(warm), 2),
        "nbmake_seconds": round(min(runs), 2),
        "notebook_seconds": {k: round(v, 2) for k, v in sorted(durations.items())},
    }


def main() -> None:
    """Measure, print a summary and write benchmarks/results/docs.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the best is kept")
    args = parser.parse_args()
    result = measure(args.repeat)
    aim = "within" if result["build_seconds"] <= AIM_SECONDS else "OVER"
    print(
        f"strict build, both languages, notebooks executed: {result['build_seconds']:.1f} s"
        f" ({aim} the {AIM_SECONDS:.0f} s aim)"
    )
    print(f"the same build again, notebooks from the cache: {result['warm_build_seconds']:.1f} s")
    print(f"notebook tests after the build (cache hits):    {result['nbmake_seconds']:.1f} s")
    for name, seconds in result["notebook_seconds"].items():
        print(f"  {name:<45}{seconds:>7.2f} s")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
