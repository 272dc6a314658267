"""Audit workers: tasks per second and submit-to-claim latency, before and after, in one run.

Run: ``uv run python benchmarks/bench_audit.py [--tasks 200] [--submits 12] [--dir PATH]
[--before REV] [--repeat N] [--counts 1,2,4] [--backend sqlite|postgresql]``

Two code trees are measured side by side in one run, on this machine:

* ``before``: main at commit ``--before`` (``0cfcfd1`` by default: the queue on the
  journal's SQL stack, before app scoping and the round's merged first write), its
  ``src`` unpacked with ``git archive`` into a temporary folder (the repository is only
  read);
* ``after``: this tree.

``--repeat N`` measures every configuration N times (before and after alternating), to
show the spread on a shared machine; the load average at the start and the end of the
run is recorded with the results, so numbers from a loaded machine say so.

Both on SQLite (a file in ``--dir``, a temp dir by default, ``synchronous=FULL``) and on
PostgreSQL (the server named by ``STEADYLOOP_POSTGRES_URL``, under a private table
prefix dropped afterwards; skipped with a note when no server answers), each with 1, 2
and 4 worker *processes* (``--counts``; ``--backend`` measures one backend only).
Every worker runs with its version's defaults (the idle poll interval included: that
is what a user gets).

For each configuration:

* ``tasks_per_s`` — ``--tasks`` plain tasks are queued, the workers start at a common
  start line and drain the queue; tasks divided by the time from the start line to the
  last worker's end. A task is a full round: claim, trail records (claimed, round
  started, run finished, audited, completed), a loop run with one scripted model call
  (intent and result), and settling the queue row.
* ``submit_to_claim_ms`` — the workers wait, idle; ``--submits`` tasks are submitted one
  at a time, 0.3 s apart; for each, the time from ``submit`` returning to the worker's
  ``task.claimed`` record (both wall clocks of this machine): p50, p95, max. On
  PostgreSQL *after*, an idle worker sleeps on ``LISTEN`` and wakes on the submit's
  ``NOTIFY``, so this is not bounded by a poll interval; everywhere else it is.

* ``plans_per_task`` — transactions (and single reads) the workers ran per task during
  the throughput run through the journal's generic plan runner (``PlanJournal.run_plan``),
  and ``queue_plans_per_task`` — those of them that are the queue's (claim, heartbeat,
  settle, …). The SQLite and PostgreSQL journals run their own appends and reads on
  their backend's runner directly, so on those two both counts are the queue's plans.

Each configuration runs in a fresh process whose ``sys.path`` starts with its tree's
``src``. Writes ``benchmarks/results/audit.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import _measured

RESULTS = Path(__file__).parent / "results" / "audit.json"
ROOT = Path(__file__).resolve().parent.parent
BEFORE = "0cfcfd1"
WORKERS = (1, 2, 4)
GAP = 0.3  # seconds between the latency run's submissions


# -- inside one configuration's process -------------------------------------------------


def _worker_main(  # noqa: PLR0917 - a multiprocessing target
    src: str,
    url: str,
    name: str,
    scratch: str,
    events: tuple[Any, Any],
    queues: tuple[Any, Any],
    drain: bool,
) -> None:
    """One worker process: open, say so, wait at the start line, work, report its end."""
    start, stop = events
    ready, out = queues
    sys.path.insert(0, src)
    from steadyloop.audit import TaskBoard, Worker
    from steadyloop.loop import Agent, ScriptedModel

    plans = {"all": 0, "queue": 0}
    with contextlib.suppress(ImportError, AttributeError):
        from steadyloop.journal._sql import PlanJournal

        run_plan = PlanJournal.run_plan

        async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            plans["all"] += 1
            frame = sys._getframe(1)
            for _ in range(4):  # run_plan <- the queue's retry <- its _run
                if frame is None:
                    break
                if frame.f_code.co_filename.endswith("_queue.py"):
                    plans["queue"] += 1
                    break
                frame = frame.f_back
            return await run_plan(self, *args, **kwargs)

        PlanJournal.run_plan = counted  # type: ignore[method-assign]

    async def work() -> dict[str, Any]:
        async with await TaskBoard.open(url) as board:
            agent = Agent("bench", ScriptedModel(["done"], record=False))
            worker = Worker(board, agent, worker_id=name, scratch_root=scratch)
            ready.put(name)
            start.wait()
            plans["all"] = plans["queue"] = 0  # count only the measured work
            if drain:
                done = await worker.run()
            else:

                async def watch() -> None:
                    # A multiprocessing event: waited for in a thread, then the worker stops.
                    await asyncio.to_thread(stop.wait)
                    worker.stop()

                watcher = asyncio.ensure_future(watch())
                done = await worker.run(until_idle=False)
                watcher.cancel()
            return {"done": done, "end": time.monotonic(), "plans": dict(plans)}

    out.put(asyncio.run(work()))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _spawn(
    src: str, url: str, n: int, scratch: str, drain: bool
) -> tuple[list[Any], Any, Any, Any]:
    """Start ``n`` worker processes and wait until each has opened its board."""
    ctx = mp.get_context("spawn")
    start, stop, ready, out = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker_main,
            args=(src, url, f"w{i}", scratch, (start, stop), (ready, out), drain),
        )
        for i in range(n)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    return procs, start, stop, out


def _throughput(src: str, url: str, n_tasks: int, n: int, scratch: str) -> dict[str, Any]:
    from steadyloop.audit import TaskBoard, TaskSpec

    async def submit() -> None:
        async with await TaskBoard.open(url) as board:
            await board.submit_many(
                [TaskSpec(prompt=f"task {i}", task_id=f"b{i:04d}") for i in range(n_tasks)]
            )

    asyncio.run(submit())
    procs, start, _stop, out = _spawn(src, url, n, scratch, drain=True)
    t0 = time.monotonic()
    start.set()
    reports = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    elapsed = max(r["end"] for r in reports) - t0
    return {
        "tasks": n_tasks,
        "seconds": round(elapsed, 3),
        "tasks_per_s": round(n_tasks / elapsed, 1),
        "plans_per_task": round(sum(r["plans"]["all"] for r in reports) / n_tasks, 2),
        "queue_plans_per_task": round(sum(r["plans"]["queue"] for r in reports) / n_tasks, 2),
    }


def _latency(src: str, url: str, submits: int, n: int, scratch: str) -> dict[str, Any]:
    from steadyloop.audit import TaskBoard, TaskSpec

    async def open_store() -> None:
        async with await TaskBoard.open(url) as board:
            await board.counts()

    asyncio.run(open_store())  # the store exists before any worker opens it
    procs, start, stop, out = _spawn(src, url, n, scratch, drain=False)
    start.set()
    time.sleep(1.5)  # every worker has found the queue empty and waits, idle

    async def submit_and_read() -> list[float]:
        async with await TaskBoard.open(url) as board:
            sent: dict[str, float] = {}
            for i in range(submits):
                tid = f"l{i:04d}"
                await board.submit(TaskSpec(prompt=f"task {i}", task_id=tid))
                sent[tid] = time.time()
                await asyncio.sleep(GAP)
            deadline = time.monotonic() + 60
            out_ms: dict[str, float] = {}
            while len(out_ms) < submits and time.monotonic() < deadline:
                for tid, at in sent.items():
                    if tid in out_ms:
                        continue
                    claimed = [r for r in await board.trail(tid) if r.kind == "task.claimed"]
                    if claimed:
                        out_ms[tid] = (claimed[0].record.time / 1e6 - at) * 1000
                await asyncio.sleep(0.1)
            return list(out_ms.values())

    try:
        latencies = asyncio.run(submit_and_read())
    finally:
        stop.set()
        for _ in procs:
            with contextlib.suppress(Exception):
                out.get(timeout=60)
        for p in procs:
            p.join(timeout=30)
    return {
        "submits": submits,
        "claimed": len(latencies),
        "p50": round(statistics.median(latencies), 1),
        "p95": round(_pct(latencies, 0.95), 1),
        "max": round(max(latencies), 1),
    }


def child(args: argparse.Namespace) -> None:
    """Measure one configuration with the tree at ``args.src``; print one JSON line."""
    sys.path.insert(0, args.src)
    import steadyloop

    assert Path(steadyloop.__file__).is_relative_to(args.src), steadyloop.__file__
    row: dict[str, Any] = {"workers": args.workers}
    row.update(_throughput(args.src, args.url, args.tasks, args.workers, args.scratch))
    row["submit_to_claim_ms"] = _latency(
        args.src, args.url_latency, args.submits, args.workers, args.scratch
    )
    print(json.dumps(row), flush=True)


# -- the driver ------------------------------------------------------------------------


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


def _configuration(
    src: str, urls: tuple[str, str], n: int, args: argparse.Namespace, tmp: str
) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--child",
        "--src",
        src,
        "--url",
        urls[0],
        "--url-latency",
        urls[1],
        "--workers",
        str(n),
        "--tasks",
        str(args.tasks),
        "--submits",
        str(args.submits),
        "--scratch",
        tmp,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--submits", type=int, default=12)
    parser.add_argument("--dir", default=None, help="Where the SQLite files go.")
    parser.add_argument("--before", default=BEFORE, help="The commit measured as before.")
    parser.add_argument("--repeat", type=int, default=1, help="Runs of each configuration.")
    parser.add_argument(
        "--counts", default=",".join(map(str, WORKERS)), help="Worker counts, comma-separated."
    )
    parser.add_argument(
        "--backend", choices=("sqlite", "postgresql"), default=None, help="Only this backend."
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--src", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--url-latency", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    counts = tuple(int(n) for n in str(args.counts).split(","))
    measured = _measured.start()
    results: dict[str, Any] = {
        "benchmark": "audit workers: tasks per second and submit-to-claim latency",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "before": f"main at {args.before}",
        "after": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip(),
        "tasks_per_config": args.tasks,
        "latency_submits": args.submits,
        "latency_gap_s": GAP,
        "task": "one plain round: claim, 5 trail records, a one-call loop run, settle",
        "repeat": args.repeat,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "backends": {},
    }
    base = os.environ.get("STEADYLOOP_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
    problem = asyncio.run(_probe(base))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        before = Path(tmp) / "before"
        before.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", args.before, "src"],
            check=True,
            capture_output=True,
        )
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
        try:
            trees = {"before": str(before / "src"), "after": str(ROOT / "src")}
            sqlite: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
            postgres: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
            for n, _ in ((n, r) for n in counts for r in range(args.repeat)):
                for version, src in trees.items():
                    key = uuid.uuid4().hex[:6]
                    urls = (
                        f"sqlite:///{tmp}/{version}-{n}-{key}.db",
                        f"sqlite:///{tmp}/{version}-{n}-{key}-latency.db",
                    )
                    if args.backend in (None, "sqlite"):
                        sqlite[version].append(_configuration(src, urls, n, args, tmp))
                        print("sqlite", version, sqlite[version][-1], flush=True)
                    if problem is not None or args.backend == "sqlite":
                        continue
                    prefixes = (f"bench{key}a_", f"bench{key}b_")
                    sep = "&" if "?" in base else "?"
                    try:
                        pg_urls = (
                            f"{base}{sep}prefix={prefixes[0]}",
                            f"{base}{sep}prefix={prefixes[1]}",
                        )
                        postgres[version].append(_configuration(src, pg_urls, n, args, tmp))
                    finally:
                        for prefix in prefixes:
                            asyncio.run(_drop_prefix(base, prefix))
                    print("postgresql", version, postgres[version][-1], flush=True)
        finally:
            shutil.rmtree(before, ignore_errors=True)
        results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        # Loaded: other work kept more than half the CPUs busy (1-minute load average).
        cpus = os.cpu_count() or 1
        results["loaded"] = (
            max(results["load_average_at_start"][0], results["load_average_at_end"][0]) > cpus / 2
        )
        results["measured"] = measured.entry()
        if args.backend in (None, "sqlite"):
            results["backends"]["sqlite"] = {"durability": "synchronous=FULL", **sqlite}
        if problem is None:
            results["backends"]["postgresql"] = {"durability": "server defaults", **postgres}
        else:
            results["backends"]["postgresql"] = {"skipped": f"no server: {problem}"}
            print("postgresql skipped:", problem)
    results["workers"] = list(counts)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
