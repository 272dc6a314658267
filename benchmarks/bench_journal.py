"""Durable append cost of the embedded journals, next to the disk's write+fsync floor.

Run: ``uv run python benchmarks/bench_journal.py [--n 300] [--dir PATH]``

Everything is measured in one run, on the same disk (``--dir``, a temp dir by
default), so the figures are ratios to a floor rather than absolute claims:

* ``floor fsync``: ``os.write`` of a 256-byte line plus ``os.fsync``, the least any
  durable append can cost on this disk; ``floor fdatasync`` likewise.
* ``sqlite FULL``: one-record batches through ``SQLiteJournal`` at the default
  ``synchronous=FULL`` (survives power loss); ``sqlite FULL x10``: ten-record batches;
  ``sqlite NORMAL``: the weaker setting, to show what full durability costs.
* ``jsonl``: one-record batches through ``JSONLJournal``.
* ``memory``: the protocol's own overhead, with no I/O.

Syncs per append are counted, not assumed: for JSONL through a counting file layer,
for SQLite by running the appends in a child process under ``strace -f -c`` (skipped
with a note when strace is missing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import _measured
from steadyloop import RecordFactory, SequentialIds, StepClock, StreamWrite
from steadyloop.journal import Files, Journal, JSONLJournal, MemoryJournal, SQLiteJournal

RESULTS = Path(__file__).parent / "results" / "journal.json"


class CountingFiles(Files):
    """The real file layer, counting syncs."""

    def __init__(self) -> None:
        self.syncs = 0

    def sync(self, fd: int) -> None:
        """Count, then sync."""
        self.syncs += 1
        super().sync(fd)

    def sync_directory(self, path: str) -> None:
        """Count, then sync the directory."""
        self.syncs += 1
        super().sync_directory(path)


def _summary(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {
        "median_us": statistics.median(samples) * 1e6,
        "p95_us": samples[int(len(samples) * 0.95) - 1] * 1e6,
        "mean_us": statistics.fmean(samples) * 1e6,
    }


def floor(directory: Path, n: int, sync: Callable[[int], None]) -> list[float]:
    """Time ``n`` appends of a 256-byte line, each followed by ``sync``."""
    path = directory / f"floor-{sync.__name__}.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    line = b"x" * 255 + b"\n"
    times = []
    try:
        for _ in range(n):
            start = time.perf_counter()
            os.write(fd, line)
            sync(fd)
            times.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return times


async def appends(journal: Journal, n: int, per_batch: int) -> list[float]:
    """Time ``n`` appends of ``per_batch`` small records to one stream."""
    make = RecordFactory(StepClock(), SequentialIds("b"))
    times = []
    for i in range(n):
        records = [make("bench", {"i": i, "j": j, "text": "x" * 100}) for j in range(per_batch)]
        start = time.perf_counter()
        await journal.append("bench", StreamWrite("s", records))
        times.append(time.perf_counter() - start)
    return times


def sqlite_syncs_per_append(directory: Path, n: int) -> float | None:
    """Count fsync/fdatasync calls per SQLite append with strace; None without strace."""
    if shutil.which("strace") is None:
        return None
    counts = []
    for count in (0, n):
        db = directory / f"strace-{count}.db"
        code = (
            "import asyncio, sys\n"
            f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "from bench_journal import appends\n"
            "from steadyloop.journal import SQLiteJournal\n"
            "async def main():\n"
            f"    j = await SQLiteJournal.open({str(db)!r})\n"
            "    await appends(j, 1, 1)\n"  # warm up: schema and first write
            f"    await appends(j, {count}, 1)\n"
            "    await j.close()\n"
            "asyncio.run(main())\n"
        )
        out = subprocess.run(
            ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
        )
        total = 0
        for line in out.stderr.splitlines():
            parts = line.split()
            if parts and parts[-1] in ("fsync", "fdatasync"):
                total += int(parts[3])
        counts.append(total)
    return (counts[1] - counts[0]) / n


async def run(directory: Path, n: int) -> dict[str, object]:
    """Measure everything once, side by side."""
    rows: dict[str, dict[str, float]] = {}
    rows["floor fsync"] = _summary(floor(directory, n, os.fsync))
    rows["floor fdatasync"] = _summary(floor(directory, n, os.fdatasync))

    async def measure(name: str, opener: Callable[[], Awaitable[Journal]], per_batch: int) -> None:
        journal = await opener()
        try:
            await appends(journal, 5, per_batch)  # warm up
            rows[name] = _summary(await appends(journal, n, per_batch))
        finally:
            await journal.close()

    await measure("memory", _memory, 1)
    await measure("sqlite FULL", lambda: SQLiteJournal.open(directory / "full.db"), 1)
    await measure("sqlite FULL x10", lambda: SQLiteJournal.open(directory / "full10.db"), 10)
    await measure(
        "sqlite NORMAL",
        lambda: SQLiteJournal.open(directory / "normal.db", synchronous="NORMAL"),
        1,
    )
    counting = CountingFiles()
    jsonl_dir = directory / "jsonl"
    jsonl_dir.mkdir()
    await measure("jsonl", lambda: JSONLJournal.open(jsonl_dir, files=counting), 1)
    base = rows["floor fsync"]["median_us"]
    for row in rows.values():
        row["x_floor"] = row["median_us"] / base
    syncs = {
        # Making the file costs two syncs once: its directory, and its header line.
        "jsonl": (counting.syncs - 2) / (n + 5),
        "sqlite FULL": sqlite_syncs_per_append(directory, min(n, 200)),
    }
    return {
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "n": n,
        "rows": rows,
        "syncs_per_append": syncs,
    }


async def _memory() -> Journal:
    return MemoryJournal()


def main() -> None:
    """Run the benchmark, print a table and write benchmarks/results/journal.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="appends per row")
    parser.add_argument("--dir", type=Path, default=None, help="directory on the disk to test")
    args = parser.parse_args()
    measured = _measured.start()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = asyncio.run(run(Path(tmp), args.n))
    result["measured"] = measured.entry()
    print(f"{'row':<18}{'median µs':>12}{'p95 µs':>12}{'× fsync floor':>16}")
    for name, row in result["rows"].items():  # type: ignore[attr-defined]
        print(f"{name:<18}{row['median_us']:>12.1f}{row['p95_us']:>12.1f}{row['x_floor']:>16.2f}")
    for name, value in result["syncs_per_append"].items():  # type: ignore[attr-defined]
        shown = "not measured (strace missing)" if value is None else f"{value:.2f}"
        print(f"syncs per append, {name}: {shown}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
