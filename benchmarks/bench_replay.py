"""Replay-diff cost: the bundled suite on the embedded backends, and the diff engine at scale.

Run: ``uv run python benchmarks/bench_replay.py [--repeat 3] [--events 100000]``

Measured in one run and written to ``benchmarks/results/replay.json``:

* ``suite``: the whole bundled suite on ``memory``, ``sqlite`` and ``jsonl`` (every case
  on every backend, snapshots read back, compared, report built), best and median of
  ``--repeat`` runs, with the seconds per backend of the best run. Aim: under 5 s.
* ``diff``: two snapshots of ``--events`` events each (one session, text parts, state
  deltas, clock times), identical but for 100 scattered changes. Normalising both and
  diffing them are timed separately; aim for the diff: under 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from steadyloop.replay import (
    CLOCK_START,
    CLOCK_STEP,
    Normaliser,
    bundled_cases,
    diff,
    load_cases,
    replay,
)

RESULTS = Path(__file__).parent / "results" / "replay.json"
BACKENDS = ["memory", "sqlite", "jsonl"]


async def _suite(repeat: int) -> dict[str, Any]:
    cases = load_cases([bundled_cases()])
    totals: list[float] = []
    best_per_backend: dict[str, float] = {}
    best = float("inf")
    ok = True
    for _ in range(repeat):
        started = time.perf_counter()
        report = await replay(cases, BACKENDS)
        total = time.perf_counter() - started
        ok = ok and report.ok
        totals.append(total)
        if total < best:
            best = total
            per: dict[str, float] = dict.fromkeys(BACKENDS, 0.0)
            for run in report.timings["runs"]:
                per[run["backend"]] += run["seconds"]
            best_per_backend = {k: round(v, 4) for k, v in per.items()}
    return {
        "cases": len(cases),
        "backends": BACKENDS,
        "runs": len(cases) * len(BACKENDS),
        "all_agree": ok,
        "best_seconds": round(min(totals), 4),
        "median_seconds": round(statistics.median(totals), 4),
        "per_backend_seconds": best_per_backend,
        "aim_seconds": 5.0,
    }


def _snapshot(events: int, changed: set[int]) -> tuple[dict[str, Any], list[str], list[int]]:
    times = [CLOCK_START + i * CLOCK_STEP for i in range(events)]
    ids = [f"id-{i:06d}" for i in range(events)]
    evs = []
    for i in range(events):
        text = f"Message {i}: the quick brown fox jumps over the lazy dog."
        if i in changed:
            text += " (changed)"
        evs.append(
            {
                "id": ids[i],
                "author": "user" if i % 2 else "agent",
                "parts": [{"type": "text", "text": text}],
                "state_delta": {"turn": i, "flag": i % 3 == 0},
                "time": times[i],
                "invocation_id": None,
            }
        )
    snap = {
        "sessions": {
            "s1": {
                "user_id": "ada",
                "session_id": "s1",
                "events": evs,
                "historical_events": [],
                "state": {"session": {"turn": events - 1}, "user": {}, "app": {}, "temp": {}},
                "summaries": [],
            }
        },
        "memory": {},
        "queries": {},
        "checkpoints": {},
        "errors": {},
        "loops": {},
    }
    return snap, ids, times


def _diff_bench(events: int, repeat: int) -> dict[str, Any]:
    changed = set(range(7, events, max(1, events // 100)))
    left, ids, times = _snapshot(events, set())
    right, _, _ = _snapshot(events, changed)
    normalise: list[float] = []
    compare: list[float] = []
    both: list[float] = []
    found = 0
    for _ in range(repeat):
        started = time.perf_counter()
        norm = Normaliser(ids, times)
        a, b = norm(left), norm(right)
        normalise.append(time.perf_counter() - started)
        started = time.perf_counter()
        found = len(diff(a, b))
        compare.append(time.perf_counter() - started)
        both.append(normalise[-1] + compare[-1])
    return {
        "events_per_snapshot": events,
        "changed_events": len(changed),
        "differences_found": found,
        "normalise_both_best_seconds": round(min(normalise), 4),
        "diff_best_seconds": round(min(compare), 4),
        "diff_median_seconds": round(statistics.median(compare), 4),
        "normalise_and_diff_best_seconds": round(min(both), 4),
        "aim_seconds": 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--events", type=int, default=100_000)
    args = parser.parse_args()
    suite = asyncio.run(_suite(args.repeat))
    engine = _diff_bench(args.events, args.repeat)
    result = {
        "benchmark": "replay",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "suite": suite,
        "diff": engine,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(
        f"suite: {suite['cases']} cases x {len(BACKENDS)} backends in "
        f"{suite['best_seconds']} s (median {suite['median_seconds']} s; aim < 5 s); "
        f"per backend {suite['per_backend_seconds']}"
    )
    print(
        f"diff: 2 x {engine['events_per_snapshot']} events, {engine['differences_found']} "
        f"differences in {engine['diff_best_seconds']} s (aim < 1 s); normalising both "
        f"{engine['normalise_both_best_seconds']} s; both steps "
        f"{engine['normalise_and_diff_best_seconds']} s"
    )
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
