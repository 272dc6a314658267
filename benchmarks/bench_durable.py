"""The durable part of a loop step, next to the write+fsync floor, and many runs at once.

Run: ``uv run python benchmarks/bench_durable.py [--steps 200] [--repeats 5] [--dir PATH]``

Everything is measured in one run, on one disk (``--dir``, a temp dir under the working
directory by default; tmpfs is refused), so the figures are ratios to a floor that was
measured next to them:

* ``floor``: ``os.write`` of a 200-byte record plus ``os.fsync``, 200 times in every
  round, the least one durable write costs on this disk.
* ``per effect``: one run of ``--steps`` steps of the bench agent (a scripted model
  calling a no-op tool, both ``SAFE``: two effects per step) on each journal of `KINDS`:
  the memory journal, SQLite at ``synchronous=FULL``, the same with group commit as it
  was before one statement per table (each append's own plan, switched for the
  benchmark only), JSONL, JSONL as it was before its lines were spliced (each record
  decoded and encoded again, switched likewise), PostgreSQL (a server; ``--postgres
  URL``, its own table prefix, dropped after), and two journals that are not durable,
  to split the cost: SQLite at ``synchronous=OFF`` and JSONL without ``fsync``. The
  journals alternate,
  round after round (``--repeats``), so a change of load hits them alike; medians.
* ``durable part``: per effect on a journal minus per effect on memory: what storage
  adds to an effect, as a multiple of the floor (of the medians, and the median of each
  round's own ratio). ``split``: of that, the sync (FULL minus OFF, JSONL minus JSONL
  without fsync) and the rest (SQLite's or JSONL's own work and the hand-off to the
  writer's thread).
* ``counts``: per journal append, counted, not assumed: SQLite statements (its trace
  callback; ``BEGIN``, ``COMMIT`` and savepoints apart) and write commits; and
  ``fsync``/``fdatasync`` system calls per append of SQLite and JSONL, from the same run
  in a child process under ``strace -f -c``, a one-step run subtracted so that opening
  the journal does not count.
* ``concurrent``: 1, 4, 16, 32 and 64 runs of ``--steps // 4`` steps at once in one
  process on one journal (memory, SQLite FULL and JSONL, each also as before): durable
  effects per second, the ratio to memory, SQLite's commits and statements per append,
  and the load average after each point. Medians of ``--repeats``, alternating.

Writes ``benchmarks/results/durable.json`` (``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _measured
from bench_loop import APP, CountingJournal, bench_agent, floor
from steadyloop.journal import Files, Journal, JSONLJournal, MemoryJournal, SQLiteJournal, _jsonl
from steadyloop.loop import run
from steadyloop.records import canonical_json, decode

RESULTS = Path(__file__).parent / "results" / "durable.json"
KINDS = {
    "memory": "the memory journal (no storage)",
    "sqlite": "SQLite, synchronous=FULL",
    "sqlite_before": "SQLite FULL, each append's own plan in the group (before)",
    "sqlite_off": "SQLite, synchronous=OFF (not durable: splits off the sync)",
    "jsonl": "JSONL",
    "jsonl_before": "JSONL, each record decoded and encoded again in its line (before)",
    "jsonl_unsynced": "JSONL without fsync (not durable: splits off the sync)",
    "postgresql": "PostgreSQL (a server on this machine)",
}
"""The journals measured, by key in the result file."""
CONCURRENT_RUNS = (1, 4, 16, 32, 64)
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


class Counted:
    """A journal under a `CountingJournal`, with SQLite's statements and commits counted."""

    def __init__(self, journal: Journal) -> None:
        self.counting = CountingJournal(journal)
        self.statements = 0
        self.commits = 0
        self._writing = False
        if isinstance(journal, SQLiteJournal):
            assert journal._conn is not None
            journal._conn.set_trace_callback(self._trace)

    def _trace(self, statement: str) -> None:
        if statement.startswith("BEGIN"):
            self._writing = statement == "BEGIN IMMEDIATE"
        elif statement == "COMMIT":
            self.commits += self._writing
        elif not statement.startswith(("SAVEPOINT", "RELEASE", "ROLLBACK")):
            self.statements += 1

    def per_append(self) -> dict[str, float]:
        """Statements and write commits per append (SQLite only; zero elsewhere)."""
        appends = max(1, self.counting.appends)
        return {
            "statements_per_append": self.statements / appends,
            "commits_per_append": self.commits / appends,
        }


class UnsyncedFiles(Files):
    """The real file layer without ``fsync``: only to split JSONL's cost, never durable."""

    def sync(self, fd: int) -> None:
        """Skip the sync."""

    def sync_directory(self, path: str) -> None:
        """Skip the sync."""


def _member_text_before(obj: dict[str, Any], text: str) -> str:
    """A JSONL member line as it was made before splicing: the record decoded, then encoded."""
    return canonical_json({**obj, "record": decode(text)})


def plan_per_append(journal: SQLiteJournal) -> SQLiteJournal:
    """Switch ``journal`` back to the way before set-based groups, for this benchmark only.

    A group then runs each append's own plan in the shared transaction (about three
    statements per append), as group commit did before one statement per table.
    """

    def run_group(payloads: list[Any]) -> list[tuple[Any, BaseException | None]]:
        return journal._plans_transaction([make for _, make in payloads])

    def alone(payloads: list[Any]) -> list[tuple[Any, BaseException | None]]:
        return run_group(payloads)

    journal._group_transaction = alone  # type: ignore[method-assign]
    journal._executor._run_group = run_group
    return journal


async def open_kind(kind: str, where: Path, postgres: str) -> Journal:
    """A fresh journal of ``kind`` (see `KINDS`) at ``where``."""
    if kind == "memory":
        return MemoryJournal()
    if kind == "sqlite":
        return await SQLiteJournal.open(where.with_suffix(".db"))
    if kind == "sqlite_before":
        return plan_per_append(await SQLiteJournal.open(where.with_suffix(".db")))
    if kind == "sqlite_off":
        return await SQLiteJournal.open(where.with_suffix(".db"), synchronous="OFF")
    if kind == "jsonl":
        os.mkdir(where)
        return await JSONLJournal.open(where)
    if kind == "jsonl_before":
        os.mkdir(where)
        return await JSONLJournal.open(where)
    if kind == "jsonl_unsynced":
        os.mkdir(where)
        return await JSONLJournal.open(where, files=UnsyncedFiles())
    if kind == "postgresql":
        from steadyloop.journal._postgres import PostgresJournal

        prefix = f"durable_{where.name.replace('-', '_')}_"
        return await PostgresJournal.open(postgres, prefix=prefix)
    raise ValueError(kind)


async def drop_postgres(journal: Journal) -> None:
    """Drop the tables a benchmark's PostgreSQL journal created (its own prefix only)."""
    import psycopg

    prefix = journal.dialect.prefix  # type: ignore[attr-defined]
    url = journal.url.split("?")[0]
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        rows = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (prefix + "%",)
        )
        for (name,) in await rows.fetchall():
            await conn.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')


async def runs_at_once(
    kind: str, where: Path, runs: int, steps: int, postgres: str
) -> tuple[float, dict[str, float]]:
    """(durable effects per second, counts per append) of ``runs`` runs at once on one journal."""
    journal = await open_kind(kind, where, postgres)
    counted = Counted(journal)
    old_lines = _jsonl._member_text
    if kind == "jsonl_before":
        _jsonl._member_text = _member_text_before
    try:
        t = time.perf_counter()
        results = await asyncio.gather(
            *(
                run(bench_agent(steps), counted.counting, APP, "u", f"s{i}", f"r{i}", "go")
                for i in range(runs)
            )
        )
        elapsed = time.perf_counter() - t
    finally:
        _jsonl._member_text = old_lines
        await journal.close()
        if kind == "postgresql":
            await drop_postgres(journal)
    assert all(r.stop_reason.value == "completed" for r in results), results
    counts = counted.per_append()
    counts["appends_per_effect"] = counted.counting.appends / (runs * (2 * steps + 1))
    return runs * (2 * steps + 1) / elapsed, counts


def syncs_per_append(kind: str, directory: Path, steps: int) -> float | None:
    """``fsync`` + ``fdatasync`` calls per append of one run (child under strace)."""
    if shutil.which("strace") is None:
        return None
    counts: list[tuple[int, int]] = []
    for n in (steps, 1):
        where = directory / f"strace-{kind}-{n}"
        out = directory / f"strace-{kind}-{n}.txt"
        code = (
            f"import asyncio, sys, pathlib; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "from bench_durable import strace_child\n"
            f"print(asyncio.run(strace_child({kind!r}, pathlib.Path({str(where)!r}), {n})))\n"
        )
        cmd = ["strace", "-f", "-c", "-o", str(out), "-e", "trace=fsync,fdatasync"]
        done = subprocess.run(
            [*cmd, sys.executable, "-c", code], check=True, capture_output=True, text=True
        )
        appends = int(done.stdout.strip().splitlines()[-1])
        total = 0
        for line in out.read_text().splitlines():
            parts = line.split()
            if parts and parts[-1] in ("fsync", "fdatasync"):
                total += int(parts[3])
        counts.append((total, appends))
    (big, big_appends), (small, small_appends) = counts
    return (big - small) / (big_appends - small_appends)


async def strace_child(kind: str, where: Path, steps: int) -> int:
    """One run in a child under strace; returns its journal appends."""
    journal = await open_kind(kind, where, DEFAULT_POSTGRES)
    counted = CountingJournal(journal)
    try:
        result = await run(bench_agent(steps), counted, APP, "u", "s", "r", "go")
    finally:
        await journal.close()
    assert result.stop_reason.value == "completed", result
    return counted.appends


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


async def single(
    directory: Path, steps: int, repeats: int, kinds: list[str], postgres: str
) -> dict[str, Any]:
    """Per effect of one run on each journal, round after round, next to the floor.

    Each round measures the floor (200 syncs) and then one run on every journal, so a
    round's figures share its load; besides the ratio of the medians, the median of the
    rounds' own ratios is given, which a slow round moves less.
    """
    floors: list[float] = []
    round_floors: list[float] = []
    per: dict[str, list[float]] = {k: [] for k in kinds}
    counts: dict[str, dict[str, float]] = {}
    for r in range(repeats + 1):  # round 0 warms up (imports, first files) and is dropped
        got = floor(directory, 200)
        if r:
            floors.extend(got)
            round_floors.append(statistics.median(got))
        for kind in kinds:
            rate, c = await runs_at_once(kind, directory / f"one-{kind}-{r}", 1, steps, postgres)
            if r:
                per[kind].append(1 / rate)
                counts[kind] = c
    floor_us = _median_us(floors)
    memory_us = _median_us(per["memory"])
    rows: dict[str, Any] = {}
    for kind in kinds:
        us = _median_us(per[kind])
        durable = us - memory_us
        by_round = [
            (k - m) / f for k, m, f in zip(per[kind], per["memory"], round_floors, strict=True)
        ]
        rows[kind] = {
            "per_effect_us": us,
            "runs_us": [s * 1e6 for s in per[kind]],
            "durable_part_us": durable,
            "durable_x_floor": durable / floor_us,
            "durable_x_floor_median_of_rounds": statistics.median(by_round),
            **counts[kind],
        }
    split = {
        durable: {
            "sync_us": rows[durable]["per_effect_us"] - rows[unsynced]["per_effect_us"],
            "rest_us": rows[unsynced]["durable_part_us"],
        }
        for durable, unsynced in (("sqlite", "sqlite_off"), ("jsonl", "jsonl_unsynced"))
        if durable in rows and unsynced in rows
    }
    return {
        "floor": {
            "median_us": floor_us,
            "mean_us": statistics.fmean(floors) * 1e6,
            "p95_us": sorted(floors)[int(0.95 * (len(floors) - 1))] * 1e6,
            "n": len(floors),
            "rounds_median_us": [f * 1e6 for f in round_floors],
        },
        "rows": rows,
        "split": split,
    }


async def concurrent(
    directory: Path, steps: int, repeats: int, kinds: list[str], postgres: str
) -> list[dict[str, Any]]:
    """Effects per second of 1…64 runs at once, each journal next to memory."""
    curve: list[dict[str, Any]] = []
    for n in CONCURRENT_RUNS:
        rates: dict[str, list[float]] = {k: [] for k in kinds}
        counts: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        for r in range(repeats):
            for kind in kinds:
                where = directory / f"cc-{kind}-{n}-{r}"
                rate, c = await runs_at_once(kind, where, n, steps, postgres)
                rates[kind].append(rate)
                counts[kind].append(c)
        memory = statistics.median(rates["memory"])
        point: dict[str, Any] = {"runs": n, "load_average": _measured.load_average()}
        for kind in kinds:
            rate = statistics.median(rates[kind])
            point[kind] = {
                "effects_per_s": rate,
                "runs_effects_per_s": rates[kind],
                "ratio_to_memory": rate / memory,
                **{key: statistics.median(c[key] for c in counts[kind]) for key in counts[kind][0]},
            }
        curve.append(point)
        print(
            f"  {n:>2} runs: "
            + ", ".join(
                f"{k} {point[k]['effects_per_s']:.0f}/s ({point[k]['ratio_to_memory']:.2f})"
                for k in kinds
            ),
            flush=True,
        )
    return curve


async def postgres_reachable(url: str) -> bool:
    """Whether the PostgreSQL server answers (its row is left out otherwise)."""
    try:
        import psycopg

        async with await psycopg.AsyncConnection.connect(url, connect_timeout=3):
            return True
    except Exception:
        return False


async def main_async(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    kinds = ["memory", "sqlite", "sqlite_before", "jsonl", "jsonl_before"]
    with_pg = not args.no_postgres and await postgres_reachable(args.postgres)
    split = ["sqlite_off", "jsonl_unsynced"]
    one = await single(
        directory,
        args.steps,
        args.repeats,
        [*kinds, *split, "postgresql"] if with_pg else [*kinds, *split],
        args.postgres,
    )
    for kind in ("sqlite", "jsonl"):
        one["rows"][kind]["syncs_per_append"] = syncs_per_append(kind, directory, args.steps)
    print("single run, per effect:", flush=True)
    for kind, row in one["rows"].items():
        print(
            f"  {kind:<15}{row['per_effect_us']:>8.0f} us, durable part "
            f"{row['durable_part_us']:>6.0f} us = {row['durable_x_floor']:.2f} x floor "
            f"(rounds: {row['durable_x_floor_median_of_rounds']:.2f}); "
            f"{row['statements_per_append']:.2f} statements, "
            f"{row['commits_per_append']:.2f} commits per append"
        )
    for kind, part in one["split"].items():
        print(f"  {kind}: sync {part['sync_us']:.0f} us, the rest {part['rest_us']:.0f} us")
    print(f"  floor {one['floor']['median_us']:.0f} us; load {_measured.load_average()}")
    curve = await concurrent(directory, max(1, args.steps // 4), args.repeats, kinds, args.postgres)
    return {
        "kinds": KINDS,
        "steps": args.steps,
        "repeats": args.repeats,
        "single": one,
        "concurrent": {"steps_per_run": max(1, args.steps // 4), "curve": curve},
        "directory_filesystem": _filesystem(directory),
    }


def _filesystem(directory: Path) -> str:
    """The file system type the runs used (from ``/proc/mounts``; the longest mount prefix)."""
    best, kind = "", "unknown"
    real = str(directory.resolve())
    with open("/proc/mounts", encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if real.startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


def main() -> None:
    """Run the benchmark, print a table and write benchmarks/results/durable.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    measured = _measured.start()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-durable-") as tmp:
        if _filesystem(Path(tmp)) in ("tmpfs", "ramfs"):
            raise SystemExit(f"{tmp} is on tmpfs: the floor and the runs must be on a disk")
        data = asyncio.run(main_async(args, Path(tmp)))
    data["measured"] = measured.entry()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.out}; load {data['measured']['load_average_at_end']}")


if __name__ == "__main__":
    main()
