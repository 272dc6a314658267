"""How the journal's costs grow with its size: 10^4 and 10^5 records, SQLite and PostgreSQL.

Run: ``uv run python benchmarks/bench_scale.py [--sizes 10000,100000] [--backends sqlite,postgres]``

Each journal is filled with copies of two template runs made once on the memory journal:
finished runs of ``bench_loop.resume_agent`` (5 steps, with their sessions), renamed, until
the journal holds the size's records, plus one run of 20 steps interrupted before its last
batch. Then, on that journal, in this order:

* ``bytes_per_record``: the SQLite file (after a checkpoint) or the PostgreSQL tables
  (``pg_total_relation_size``), over the records;
* ``runs_list_ms``: the first page of ``list_runs`` (50 runs), what ``steadyloop runs
  list`` prints; it reads those runs and the stream names of the others;
* ``runs_show_ms``: ``load_run`` of one run, what ``steadyloop runs show`` prints;
* ``resume_ms``: ``resume`` of the interrupted run;
* ``doctor_records_per_s``: ``journal doctor`` (``diagnose``) over every record;
* ``copy_records_per_s``: ``copy_journal`` into an empty journal of the same backend,
  its comparison included;
* ``prune_records_per_s``: ``prune_runs`` of every finished run (sessions stay), with the
  space reclaimed.

PostgreSQL uses its own table prefix, dropped afterwards. Writes
``benchmarks/results/scale.json`` with the date and load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import _measured
from bench_loop import APP, resume_agent
from steadyloop.cli._journal import diagnose
from steadyloop.faults import SimulatedCrash
from steadyloop.journal import Journal, MemoryJournal, StreamWrite, copy_journal, open_journal
from steadyloop.loop import list_runs, load_run, prune_runs, resume, run
from steadyloop.records import Record, StoredRecord

PAGE = 50  # the first page of `steadyloop runs list`

RESULTS = Path(__file__).parent / "results" / "scale.json"
PG = "postgresql://postgres@127.0.0.1:5432/test"
TEMPLATE_STEPS = 5
VICTIM_STEPS = 20


async def template(steps: int, *, crash: bool) -> dict[str, list[StoredRecord]]:
    """The streams of one run of ``steps`` steps (run id ``TPLRUN``, session ``TPLSES``)."""
    journal = MemoryJournal()
    try:
        await run(
            resume_agent(journal, steps, crash=crash), journal, APP, "u", "TPLSES", "TPLRUN", "go"
        )
    except SimulatedCrash:
        assert crash
    return {s: await journal.read(APP, s) for s in await journal.streams(APP)}


def renamed(streams: dict[str, list[StoredRecord]], run_id: str) -> list[StreamWrite]:
    """The template's streams as one batch, with the run and session renamed."""
    writes = []
    for stream, records in streams.items():
        name = stream.replace("TPLRUN", run_id).replace("TPLSES", f"s-{run_id}")
        out = []
        for r in records:
            text = json.dumps(dict(r.payload)).replace("TPLRUN", run_id)
            payload = json.loads(text.replace("TPLSES", f"s-{run_id}"))
            out.append(Record(r.kind, payload, r.record.id, r.record.time))
        writes.append(StreamWrite(name, out, expected_next=1))
    return writes


async def fill(
    journal: Journal, size: int, done: dict[str, Any], victim: dict[str, Any]
) -> tuple[int, int]:
    """Copies of the finished template until ``size`` records, and the interrupted one."""
    per_run = sum(len(v) for v in done.values())
    runs = max(1, (size - sum(len(v) for v in victim.values())) // per_run)
    for i in range(runs):
        await journal.append(APP, renamed(done, f"r{i:06d}"))
    await journal.append(APP, renamed(victim, "victim"))
    return runs, runs * per_run + sum(len(v) for v in victim.values())


async def size_on_disk(backend: str, url: str, prefix: str, path: Path) -> int:
    if backend == "sqlite":
        import sqlite3

        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    import psycopg

    async with await psycopg.AsyncConnection.connect(PG) as conn:
        cur = await conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "WHERE c.relkind = 'r' AND c.relname LIKE %s",
            (prefix + "%",),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def drop_prefix(prefix: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(PG, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (prefix + "%",)
        )
        for (table,) in await cur.fetchall():
            await conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


def ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1e3, 1)


async def measure(backend: str, size: int, tmp: Path, done: Any, victim: Any) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    if backend == "sqlite":
        path = tmp / f"scale-{size}.db"
        url, copy_url, prefix = f"sqlite://{path}", f"sqlite://{tmp}/copy-{size}.db", ""
    else:
        path = tmp
        prefix = f"snapshots_scale_{tag}_"
        url, copy_url = f"{PG}?prefix={prefix}", f"{PG}?prefix={prefix}copy_"
    try:
        async with await open_journal(url) as journal:
            t = time.perf_counter()
            runs, records = await fill(journal, size, done, victim)
            fill_s = round(time.perf_counter() - t, 1)
            out: dict[str, Any] = {"records": records, "fill_s": fill_s}
            out["runs"] = runs + 1
            out["bytes_per_record"] = round(
                await size_on_disk(backend, url, prefix, path) / records, 1
            )
            t = time.perf_counter()
            listed = await list_runs(journal, APP, limit=PAGE)
            out["runs_list_ms"] = ms(t)
            assert len(listed) == PAGE
            t = time.perf_counter()
            await load_run(journal, APP, "r000001")
            out["runs_show_ms"] = ms(t)
            t = time.perf_counter()
            result = await resume(resume_agent(journal, VICTIM_STEPS), journal, APP, "victim")
            out["resume_ms"] = ms(t)
            assert result.stop_reason.value == "completed", result
            t = time.perf_counter()
            findings = await diagnose(journal)
            out["doctor_records_per_s"] = round(records / (time.perf_counter() - t))
            assert not [f for f in findings if f.severity == "error"], findings[:3]
            async with await open_journal(copy_url) as target:
                t = time.perf_counter()
                report = await copy_journal(journal, target)
                out["copy_records_per_s"] = round(records / (time.perf_counter() - t))
                assert not report.differences
            t = time.perf_counter()
            pruned = await prune_runs(journal, 2**62, namespace=APP)
            elapsed = time.perf_counter() - t
            out["pruned_records"] = pruned.records
            out["prune_records_per_s"] = round(pruned.records / elapsed)
        return out
    finally:
        if backend == "postgres":
            await drop_prefix(prefix)


def write(data: dict[str, Any], measured: Any) -> None:
    """Write what was measured so far (a run stopped later keeps the sizes it reached)."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({**data, "measured": measured.entry()}, indent=2, sort_keys=True) + "\n"
    )


async def main_async(
    sizes: list[int], backends: list[str], tmp: Path, measured: Any
) -> dict[str, Any]:
    done = await template(TEMPLATE_STEPS, crash=False)
    victim = await template(VICTIM_STEPS, crash=True)
    out: dict[str, Any] = {
        "template_records_per_run": sum(len(v) for v in done.values()),
        "sizes": sizes,
        "backends": {},
    }
    for backend in backends:
        rows: dict[str, Any] = {}
        for size in sizes:
            out["backends"][backend] = rows
            rows[str(size)] = await measure(backend, size, tmp, done, victim)
            print(backend, size, rows[str(size)], flush=True)
            write(out, measured)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    measured = _measured.start()
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        sizes = [int(s) for s in args.sizes.split(",")]
        asyncio.run(main_async(sizes, args.backends.split(","), Path(tmp), measured))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
