"""Audit workers under real network and server faults: the chaos counts of one full run.

Run (as root, for the network namespace; ``initdb`` and ``mariadb-install-db`` on the
path): ``uv run python benchmarks/bench_audit_chaos.py [--tasks 24] [--workers 3]
[--fault NAME ...]``

For each fault of ``tests/audit/chaos_net.py`` (``FAULTS``), ``--tasks`` goal-mode tasks
run on ``--workers`` worker processes while the fault plays out:

* ``latency``: every worker's connections to the shared PostgreSQL go through a
  ``FaultProxy``: 200 ms ± 100 per round trip, every 20th round trip stalled 2 s;
* ``blackhole``: one worker in its own network namespace (``Blackhole``) reaches a
  private PostgreSQL over a veth pair whose route goes dark for 2.5 leases, three times;
* ``postgres-restart`` / ``postgres-sigkill``: a private PostgreSQL (``initdb`` in a temp
  folder, another port) restarted, or its postmaster SIGKILLed, three times mid-run;
* ``mariadb-restart``: a private MariaDB (``mariadb-install-db``) restarted three times.

The counts per fault: tasks not terminal exactly once, wrong outcomes, overlapping
verifies (seen from outside the workers, and reported by a verify finding its task
folder's lock taken), orphaned verify processes, workers dead of the fault,
acknowledged writes lost (of how many), and what the fault did. Writes
``benchmarks/results/audit_chaos.json`` with its date and load average, and each run's
own (``--keep`` keeps the file's runs of the faults not measured now). The same runs,
as assertions, are ``tests/audit/test_audit_chaos_net.py`` (marker ``chaos``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

import _measured

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "audit"), str(ROOT / "tests")]

from audit_helpers import new_marker  # noqa: E402 - after the path
from chaos_net import FAULTS, chaos_under  # noqa: E402 - after the path

OUT = ROOT / "benchmarks" / "results" / "audit_chaos.json"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=24, help="Tasks per fault.")
    parser.add_argument("--workers", type=int, default=3, help="Worker processes per fault.")
    parser.add_argument("--fault", action="append", choices=FAULTS, help="Only these faults.")
    parser.add_argument("--out", type=Path, default=OUT, help="The result file.")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="Keep the result file's runs of the faults not measured now (each run has its date).",
    )
    args = parser.parse_args()
    measured = _measured.start()
    runs = []
    for fault in args.fault or FAULTS:
        started = _measured.start()
        with tempfile.TemporaryDirectory(prefix=f"audit-chaos-{fault}-") as tmp:
            os.chmod(tmp, 0o755)  # the private servers' users reach their folders
            counts = await chaos_under(
                fault, Path(tmp), new_marker(), tasks=args.tasks, workers=args.workers
            )
        runs.append(counts.to_json() | {"held": counts.held(), "measured": started.entry()})
        print(json.dumps(runs[-1]), flush=True)
    if args.keep and args.out.exists():
        now = {r["fault"] for r in runs}
        kept = [r for r in json.loads(args.out.read_text())["runs"] if r["fault"] not in now]
        runs = sorted(kept + runs, key=lambda r: FAULTS.index(r["fault"]))
    entry = measured.entry()
    if args.keep:
        # The file spans every run it holds: from the first one's start to now.
        first = min(runs, key=lambda r: r["measured"]["date"])["measured"]
        entry |= {"date": first["date"], "load_average_at_start": first["load_average_at_start"]}
    results = {
        "benchmark": "audit workers under network and server faults: chaos counts",
        "tasks_per_fault": args.tasks,
        "workers_per_fault": args.workers,
        "runs": runs,
        "measured": entry,
    }
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
