"""Audit queue: claim latency and tasks per second with 1, 2 and 4 worker processes.

Run: ``uv run python benchmarks/bench_audit.py [--tasks 200] [--dir PATH]``

Both backends are measured in one run, on this machine: SQLite (a file in ``--dir``,
a temp dir by default, ``synchronous=FULL``) and PostgreSQL (the server named by
``STEADYLOOP_POSTGRES_URL``, under a private table prefix removed afterwards; skipped
with a note when no server answers).

Each configuration queues ``--tasks`` plain tasks and starts N worker *processes*;
each opens its own board, waits at a common start line, and works until the queue is
empty. A task is a full round: claim, trail records (claimed, round started, run
finished, audited, completed), a loop run with one scripted model call (intent and
result), and settling the queue row. Figures:

* ``claim_ms``: latency of successful ``claim`` calls (p50, p95, max), across workers;
* ``tasks_per_s``: tasks divided by the time from the start line to the last worker's
  end.

Writes ``benchmarks/results/audit.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from steadyloop.audit import TaskBoard, TaskSpec, Worker
from steadyloop.loop import Agent, ScriptedModel

RESULTS = Path(__file__).parent / "results" / "audit.json"
WORKERS = (1, 2, 4)


def _worker_main(url: str, name: str, scratch: str, start: Any, out: Any) -> None:
    """One worker process: open, wait at the start line, work, report."""

    async def work() -> dict[str, Any]:
        async with await TaskBoard.open(url) as board:
            latencies: list[float] = []
            claim = board.queue.claim

            async def timed(worker: str, lease: float = 30.0) -> Any:
                t = time.perf_counter()
                result = await claim(worker, lease)
                if result is not None:
                    latencies.append((time.perf_counter() - t) * 1000)
                return result

            board.queue.claim = timed  # type: ignore[method-assign]
            agent = Agent("bench", ScriptedModel(["done"], record=False))
            worker = Worker(board, agent, worker_id=name, scratch_root=scratch, poll=0.01)
            start.wait()
            done = await worker.run()
            return {"done": done, "claims_ms": latencies, "end": time.monotonic()}

    out.put(asyncio.run(work()))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(url: str, n_tasks: int, n_workers: int, scratch: str) -> dict[str, Any]:
    """Queue ``n_tasks`` tasks at ``url`` and time ``n_workers`` processes working them."""

    async def submit() -> None:
        async with await TaskBoard.open(url) as board:
            await board.submit_many(
                [TaskSpec(prompt=f"task {i}", task_id=f"b{i:04d}") for i in range(n_tasks)]
            )

    asyncio.run(submit())
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_worker_main, args=(url, f"w{i}", scratch, start, out))
        for i in range(n_workers)
    ]
    for p in procs:
        p.start()
    time.sleep(1.5)  # let every process import and open its board
    t0 = time.monotonic()
    start.set()
    reports = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    elapsed = max(r["end"] for r in reports) - t0
    claims = [c for r in reports for c in r["claims_ms"]]
    done = sum(r["done"] for r in reports)
    return {
        "workers": n_workers,
        "tasks": n_tasks,
        "claims": done,
        "seconds": round(elapsed, 3),
        "tasks_per_s": round(n_tasks / elapsed, 1),
        "claim_ms": {
            "p50": round(statistics.median(claims), 3),
            "p95": round(_pct(claims, 0.95), 3),
            "max": round(max(claims), 3),
        },
    }


async def _drop_prefix(base: str, prefix: str) -> None:
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(base, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND starts_with(tablename, %s)",
            (prefix,),
        )
        for (table,) in await cur.fetchall():
            await conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


async def _probe(base: str) -> str | None:
    try:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(base, connect_timeout=3)
        await conn.close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--dir", default=None, help="Where the SQLite files go.")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "benchmark": "audit queue: claim latency and tasks per second",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "tasks_per_config": args.tasks,
        "task": "one plain round: claim, 5 trail records, a one-call loop run, settle",
        "backends": {},
    }
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = []
        for n in WORKERS:
            url = f"sqlite:///{tmp}/bench-{n}.db"
            rows.append(measure(url, args.tasks, n, tmp))
            print("sqlite", rows[-1], flush=True)
        results["backends"]["sqlite"] = {"durability": "synchronous=FULL", "runs": rows}

        base = os.environ.get("STEADYLOOP_POSTGRES_URL") or (
            "postgresql://postgres@127.0.0.1:5432/test"
        )
        problem = asyncio.run(_probe(base))
        if problem is not None:
            results["backends"]["postgresql"] = {"skipped": f"no server: {problem}"}
            print("postgresql skipped:", problem)
        else:
            rows = []
            for n in WORKERS:
                prefix = f"bench{uuid.uuid4().hex[:8]}_"
                sep = "&" if "?" in base else "?"
                try:
                    rows.append(measure(f"{base}{sep}prefix={prefix}", args.tasks, n, tmp))
                finally:
                    asyncio.run(_drop_prefix(base, prefix))
                print("postgresql", rows[-1], flush=True)
            results["backends"]["postgresql"] = {"durability": "server defaults", "runs": rows}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
