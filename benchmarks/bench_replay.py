"""Replay-diff cost: the bundled suite on the embedded backends, and the diff engine at scale.

Run: ``uv run python benchmarks/bench_replay.py [--repeat 3] [--events 100000]
[--long 10000] [--stores memory,sqlite,jsonl,adk+memory,…]``

Measured in one run and written to ``benchmarks/results/replay.json``:

* ``suite``: the whole bundled suite on ``memory``, ``sqlite`` and ``jsonl`` (every case
  on every backend, snapshots read back, compared, report built), best and median of
  ``--repeat`` runs, with the seconds per backend of the best run. Aim: under 5 s.
* ``diff``: two snapshots of ``--events`` events each (one session, text parts, state
  deltas, clock times), identical but for 100 scattered changes. Normalising both and
  diffing them are timed separately; aim for the diff: under 1 s.
* ``session_length``: one case appending 100 and then ``--long`` events to one session
  on ``sqlite``, replayed end to end (run, read back, compare); the cost per event of
  the long one as a ratio of the short one's. Aim: at most 1.5 (the harness is linear
  in session length).
* ``pack``: the hostile-values pack on each store of ``--stores`` (by default
  Steadyloop's embedded ones and every framework store whose extra is installed, in
  memory and on SQLite), seconds per store, in one run, with the cases that agreed,
  differed and were not applicable there.
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

import _measured
from steadyloop._errors import UnknownBackend
from steadyloop.replay import (
    CLOCK_START,
    CLOCK_STEP,
    Normaliser,
    bundled_cases,
    diff,
    load_cases,
    pack_cases,
    parse_case,
    parse_store_url,
    replay,
    store_opener,
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


def _long_case(events: int) -> Any:
    lines = [
        {"op": "case", "case_id": f"long_{events}", "description": "one long session"},
        {"op": "create_session", "session": "s", "user": "ada"},
    ]
    for i in range(events):
        lines.append(
            {
                "op": "append_event",
                "session": "s",
                "author": "user" if i % 2 else "agent",
                "text": f"Message {i}: the quick brown fox jumps over the lazy dog.",
                "state_delta": {"turn": i},
            }
        )
    return parse_case("".join(json.dumps(r) + "\n" for r in lines), f"long_{events}.jsonl")


async def _session_length(long: int) -> dict[str, Any]:
    out: dict[str, Any] = {"backend": "sqlite"}
    for label, events in (("short", 100), ("long", long)):
        case = _long_case(events)
        started = time.perf_counter()
        report = await replay([case], ["sqlite"])
        seconds = time.perf_counter() - started
        assert report.ok, report.unexpected[:3]
        out[label] = {
            "events": events,
            "seconds": round(seconds, 4),
            "us_per_event": round(seconds / events * 1e6, 1),
        }
    out["ratio_per_event"] = round(out["long"]["us_per_event"] / out["short"]["us_per_event"], 3)
    out["aim_ratio"] = 1.5
    return out


FRAMEWORK_STORES = (
    "adk+memory",
    "adk+sqlite",
    "openai-agents+memory",
    "openai-agents+sqlite",
    "trpc+memory",
    "trpc+sqlite",
)


def _available(stores: list[str]) -> list[str]:
    """The stores whose framework is installed (a missing extra is skipped, and said)."""
    out = []
    for name in stores:
        spec = parse_store_url(name, Path("."))
        if spec is None:
            out.append(name)
            continue
        try:
            store_opener(spec.framework)
        except UnknownBackend as exc:
            print(f"pack: skipping {name}: {exc}")
            continue
        out.append(name)
    return out


async def _pack(stores: list[str]) -> dict[str, Any]:
    cases = load_cases([pack_cases("hostile")])
    per: dict[str, Any] = {}
    for name in stores:
        try:
            report = await replay(cases, [name])
        except UnknownBackend as exc:  # an extra that is not installed
            print(f"pack: skipping {name}: {exc}")
            continue
        seconds = sum(r["seconds"] for r in report.timings["runs"])
        runs = [c.runs[name] for c in report.cases]
        per[name] = {
            "seconds": round(seconds, 4),
            "cases": len(cases),
            "not_applicable": sum(1 for r in runs if not r.applicable),
        }
    return {"cases": len(cases), "per_store": per}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--long", type=int, default=10_000)
    parser.add_argument(
        "--stores", default=",".join(["memory", "sqlite", "jsonl", *FRAMEWORK_STORES])
    )
    args = parser.parse_args()
    measured = _measured.start()
    suite = asyncio.run(_suite(args.repeat))
    engine = _diff_bench(args.events, args.repeat)
    length = asyncio.run(_session_length(args.long))
    pack = asyncio.run(_pack(_available([s.strip() for s in args.stores.split(",") if s.strip()])))
    result = {
        "benchmark": "replay",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "suite": suite,
        "diff": engine,
        "session_length": length,
        "pack": pack,
        "measured": measured.entry(),
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
    print(
        f"session length on sqlite: {length['short']['us_per_event']} us/event at 100 events, "
        f"{length['long']['us_per_event']} us/event at {length['long']['events']}: ratio "
        f"{length['ratio_per_event']} (aim <= 1.5)"
    )
    for name, row in pack["per_store"].items():
        print(
            f"pack hostile on {name}: {row['seconds']} s, "
            f"{row['not_applicable']}/{row['cases']} not applicable"
        )
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
