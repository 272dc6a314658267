"""Append latency and parallel throughput of every journal backend, measured in one run.

Run: ``uv run python benchmarks/bench_backends.py [--n 200] [--per-writer 100]``

For each backend — memory, jsonl, sqlite (embedded) and postgres, redis, mysql (servers
named by ``STEADYLOOP_POSTGRES_URL``, ``STEADYLOOP_REDIS_URL``, ``STEADYLOOP_MYSQL_URL``,
defaulting to the local ones) — it measures:

* **latency**: ``--n`` appends of one small record, one after another, on one stream;
  p50 and p95 in milliseconds;
* **1 writer**: one task appending ``8 × --per-writer`` records, one per batch: batches/s;
* **8 writers**: eight tasks on one journal, each on its own stream, ``--per-writer``
  batches each: batches/s, and the speedup over one writer. A backend whose writers on
  different streams run in parallel shows a speedup well above 1.

Every batch is durable as the backend defines it (see each backend's docstring): the
embedded ones fsync, PostgreSQL and MariaDB commit with the server's settings (which
are recorded in the output), and Redis keeps what its persistence keeps — on a server
without persistence, nothing. Servers that cannot be reached are reported as skipped.
Server stores live under a fresh prefix that is removed afterwards.

Writes ``benchmarks/results/backends.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import _measured
from steadyloop import RecordFactory, SequentialIds, StepClock, StreamWrite
from steadyloop.journal import Journal, MemoryJournal, open_journal, redact_url

RESULTS = Path(__file__).parent / "results" / "backends.json"
WRITERS = 8
SERVERS = {
    "postgres": ("STEADYLOOP_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    "redis": ("STEADYLOOP_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "mysql": ("STEADYLOOP_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
}


def _with_prefix(url: str, prefix: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "prefix"]
    query.append(("prefix", prefix))
    return parts._replace(query=urlencode(query)).geturl()


async def _cleanup(backend: str, base: str, prefix: str) -> None:
    """Remove exactly what the benchmark's prefix created."""
    if backend == "postgres":
        import psycopg
        from psycopg import sql

        async with await psycopg.AsyncConnection.connect(base, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "AND starts_with(tablename, %s)",
                (prefix,),
            )
            for (table,) in await cur.fetchall():
                await conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
    elif backend == "redis":
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(base)
        try:
            keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
            for i in range(0, len(keys), 1000):
                await client.delete(*keys[i : i + 1000])
        finally:
            await client.aclose()
    elif backend == "mysql":
        from asyncmy import connect  # type: ignore[import-untyped]

        parts = urlsplit(base)
        conn = await connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=parts.username or "root",
            password=parts.password or "",
            database=parts.path.lstrip("/"),
            autocommit=True,
        )
        try:
            async with conn.cursor() as cur:
                await cur.execute(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = DATABASE() AND LEFT(table_name, %s) = %s",
                    (len(prefix), prefix),
                )
                for (table,) in await cur.fetchall():
                    await cur.execute(f"DROP TABLE `{table}`")
        finally:
            conn.close()


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _measure(journal: Journal, n: int, per_writer: int) -> dict[str, Any]:
    make = RecordFactory(StepClock(), SequentialIds("b"))
    payload = {"text": "x" * 200, "n": 0}
    await journal.append("bench", StreamWrite("warm-up", [make("w", payload)]))
    latencies: list[float] = []
    for i in range(n):
        record = make("lat", {**payload, "n": i})
        start = time.perf_counter()
        await journal.append("bench", StreamWrite("latency", [record]))
        latencies.append((time.perf_counter() - start) * 1000)

    async def writer(stream: str, count: int) -> None:
        for i in range(count):
            await journal.append("bench", StreamWrite(stream, [make("tp", {**payload, "n": i})]))

    # Warm up: let pooled backends open a connection per writer before timing.
    await asyncio.gather(*(writer(f"warm-{w}", 3) for w in range(WRITERS)))
    start = time.perf_counter()
    await writer("single", WRITERS * per_writer)
    single_s = time.perf_counter() - start
    start = time.perf_counter()
    await asyncio.gather(*(writer(f"parallel-{w}", per_writer) for w in range(WRITERS)))
    parallel_s = time.perf_counter() - start
    total = WRITERS * per_writer
    for w in range(WRITERS):
        assert await journal.head("bench", f"parallel-{w}") == per_writer
    return {
        "latency_ms": {
            "n": n,
            "p50": round(statistics.median(latencies), 3),
            "p95": round(_percentile(latencies, 0.95), 3),
            "mean": round(statistics.fmean(latencies), 3),
        },
        "one_writer": {"batches": total, "seconds": round(single_s, 3)},
        "eight_writers": {"batches": total, "seconds": round(parallel_s, 3)},
        "one_writer_per_s": round(total / single_s, 1),
        "eight_writers_per_s": round(total / parallel_s, 1),
        "speedup": round(single_s / parallel_s, 2),
        "settings": dict(getattr(journal, "server_settings", {})),
    }


async def _bench_backend(backend: str, tmp: Path, n: int, per_writer: int) -> dict[str, Any]:
    if backend == "memory":
        name = f"bench-{uuid.uuid4().hex}"
        try:
            async with await open_journal(f"memory://{name}") as journal:
                return await _measure(journal, n, per_writer)
        finally:
            MemoryJournal.forget(name)
    if backend == "jsonl":
        directory = tmp / "jsonl"
        directory.mkdir()
        async with await open_journal(f"jsonl://{directory}") as journal:
            return await _measure(journal, n, per_writer)
    if backend == "sqlite":
        async with await open_journal(f"sqlite://{tmp}/bench.db") as journal:
            return await _measure(journal, n, per_writer)
    variable, default = SERVERS[backend]
    base = os.environ.get(variable) or default
    prefix = (
        f"steadyloop-bench:{uuid.uuid4().hex[:8]}:"
        if backend == "redis"
        else f"bench{uuid.uuid4().hex[:8]}_"
    )
    try:
        journal = await open_journal(_with_prefix(base, prefix), connect_timeout=3)
    except Exception as exc:
        return {"skipped": f"{variable}: no server at {redact_url(base)} ({exc})".splitlines()[0]}
    try:
        async with journal:
            return await _measure(journal, n, per_writer)
    finally:
        await _cleanup(backend, base, prefix)


def _table(results: dict[str, dict[str, Any]]) -> str:
    head = (
        f"{'backend':<9} {'p50 ms':>8} {'p95 ms':>8} {'1 writer/s':>11} "
        f"{'8 writers/s':>12} {'speedup':>8}"
    )
    lines = [head, "-" * len(head)]
    for backend, r in results.items():
        if "skipped" in r:
            lines.append(f"{backend:<9} skipped: {r['skipped']}")
            continue
        lat = r["latency_ms"]
        lines.append(
            f"{backend:<9} {lat['p50']:>8.3f} {lat['p95']:>8.3f} {r['one_writer_per_s']:>11.1f} "
            f"{r['eight_writers_per_s']:>12.1f} {r['speedup']:>7.2f}x"
        )
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=200, help="appends for the latency figures")
    parser.add_argument("--per-writer", type=int, default=100, help="batches per writer")
    parser.add_argument(
        "--backends",
        default="memory,jsonl,sqlite,postgres,redis,mysql",
        help="comma-separated backends to measure",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    measured = _measured.start()
    results: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="steadyloop-bench-", dir=os.getcwd()) as tmp:
        for backend in args.backends.split(","):
            backend_tmp = Path(tmp) / backend
            backend_tmp.mkdir()
            t0 = time.perf_counter()
            results[backend] = await _bench_backend(backend, backend_tmp, args.n, args.per_writer)
            print(f"  {backend}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    report = {
        "what": "per-backend single-append latency and batches/s of 1 vs 8 concurrent writers "
        "on separate streams, one record per batch, one run",
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "measured": measured.entry(),
        "parameters": {"n": args.n, "per_writer": args.per_writer, "writers": WRITERS},
        "total_seconds": round(time.perf_counter() - started, 1),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(_table(results))
    print(f"\n{report['total_seconds']} s in all; written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
