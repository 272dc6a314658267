"""How long the documentation takes to build and the notebooks take to run.

Run: ``uv run python benchmarks/bench_docs.py [--repeat 1]``

Measured in one run and written to ``benchmarks/results/docs.json``:

* ``build``: ``mkdocs build --strict`` of both languages into a temporary folder,
  every notebook executed by mkdocs-jupyter (each language executes its own). Aim:
  under 90 s.
* ``nbmake``: ``pytest notebooks/`` (the project's pytest settings add ``--nbmake``),
  the notebooks as CI runs them, once per language.
* ``notebooks``: each notebook's own run time, from nbmake's per-test durations.
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

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results" / "docs.json"
AIM_SECONDS = 90.0


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return elapsed, out.stdout


def measure(repeat: int) -> dict[str, Any]:
    """Build the site and run the notebooks ``repeat`` times each; keep the best."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    bindir = Path(sys.executable).parent
    builds, runs = [], []
    durations: dict[str, float] = {}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as site:
            seconds, _ = _timed(
                [str(bindir / "mkdocs"), "build", "--strict", "--site-dir", site], env
            )
            builds.append(seconds)
        seconds, stdout = _timed(
            [str(bindir / "pytest"), "notebooks", "-p", "no:cacheprovider", "--durations=0", "-q"],
            env,
        )
        runs.append(seconds)
        for match in re.finditer(r"^([\d.]+)s call\s+(\S+\.ipynb)::", stdout, re.MULTILINE):
            durations[match.group(2)] = min(
                durations.get(match.group(2), float("inf")), float(match.group(1))
            )
    return {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "repeat": repeat,
        "build_seconds": round(min(builds), 2),
        "build_aim_seconds": AIM_SECONDS,
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
    print(f"strict build, both languages: {result['build_seconds']:.1f} s ({aim} the 90 s aim)")
    print(f"nbmake, every notebook:       {result['nbmake_seconds']:.1f} s")
    for name, seconds in result["notebook_seconds"].items():
        print(f"  {name:<45}{seconds:>7.2f} s")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
