"""What snapshots buy: resume of a summarised run however long, however busy its state.

Run: ``uv run python benchmarks/bench_snapshots.py [--repeats 3] [--dir PATH]``

Everything is measured in one run, on one disk (``--dir``, a temp dir by default), on
the default SQLite journal:

* ``resume``: runs of 100 and 10,000 steps whose session is summarised every 50 steps
  (``bench_loop.resume_agent``), each interrupted before its last batch; then the same
  runs after 2,000 other sessions of the same user wrote 10 ``user:`` and ``app:`` state
  changes each (40,000 state records). The time ``resume`` takes (median of
  ``--repeats`` resumes of copies of each run, at ``synchronous=FULL``) and the records
  it reads. The goal: the slowest of the four at most 2x the fastest.
  For comparison, the 100-step run with the same state written without state
  snapshots (``STATE_SNAPSHOT_EVERY`` set out of reach), as before they existed.
* ``session snapshot bytes``: a session of 1,000 and of 10,000 events with random ids
  (the default), summarised at its end; the size of the latest ``session.snapshot``
  (its canonical JSON). The goal is at most 2x from 1,000 to 10,000 events.

Writes ``benchmarks/results/snapshots.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import _measured
from bench_loop import APP, build_interrupted, copy_db, resume_agent
from steadyloop.journal import ForwardingJournal, Journal, MemoryJournal, SQLiteJournal
from steadyloop.loop import resume
from steadyloop.records import StoredRecord
from steadyloop.sessions import SessionService, TextPart, session_stream
from steadyloop.sessions import _service as service_module
from steadyloop.sessions._streams import KIND_SNAPSHOT, STATE_SNAPSHOT_EVERY

RESULTS = Path(__file__).parent / "results" / "snapshots.json"
STEPS = (100, 10_000)
OTHER_SESSIONS = 2_000
CHANGES_EACH = 10
EVENTS = (1_000, 10_000)


class ReadCounter(ForwardingJournal):
    """Counts the records read on the way through."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.records = 0

    async def read(
        self, namespace: str, stream: str, start: int = 1, limit: int | None = None
    ) -> list[StoredRecord]:
        """Read through, counting what came back."""
        got = await super().read(namespace, stream, start=start, limit=limit)
        self.records += len(got)
        return got


async def add_scoped_state(db: Path) -> None:
    """2,000 other sessions of the run's user each change ``user:`` and ``app:`` state 10x."""
    journal = await SQLiteJournal.open(db, synchronous="OFF")
    try:
        service = SessionService(journal, APP)
        # Created first: a creation reads the state back, which without state snapshots
        # costs the whole user and app streams each time.
        sessions = [await service.create_session("u", f"other-{k}") for k in range(OTHER_SESSIONS)]
        for k, created in enumerate(sessions):
            session = created
            for n in range(CHANGES_EACH):
                delta = {f"app:k{n}": k, f"user:k{n}": k}
                session = await service.append_event(
                    session, service.new_event("tool", state_delta=delta)
                )
    finally:
        await journal.close()


async def resume_once(db: Path, steps: int) -> tuple[float, int]:
    """Seconds one ``resume`` of the run in ``db`` takes, and the records it reads."""
    journal = await SQLiteJournal.open(db)
    counting = ReadCounter(journal)
    try:
        t = time.perf_counter()
        result = await resume(resume_agent(counting, steps), counting, APP, "r")
        elapsed = time.perf_counter() - t
    finally:
        await journal.close()
    assert result.stop_reason.value == "completed" and result.steps == steps + 1, result
    return elapsed, counting.records


async def resume_figures(built: Path, steps: int, repeats: int, tmp: Path) -> dict[str, Any]:
    """Median ms and the records read of ``repeats`` resumes, each of a fresh copy."""
    times, reads = [], []
    for i in range(repeats):
        copy = tmp / f"{built.stem}-{i}.db"
        copy_db(built, copy)
        elapsed, read = await resume_once(copy, steps)
        times.append(elapsed * 1e3)
        reads.append(read)
    return {"ms": round(statistics.median(times), 1), "records_read": max(reads)}


async def snapshot_bytes(events: int) -> int:
    """Bytes of the latest session snapshot of a session of ``events`` random-id events."""
    async with MemoryJournal() as journal:
        service = SessionService(journal, APP)
        session = await service.create_session("u", "s")
        for start in range(0, events, 500):
            batch = [
                service.new_event("user", [TextPart(f"event {n}")])
                for n in range(start, min(events, start + 500))
            ]
            session = await service.append_event(session, batch)
        await service.summarize(
            session,
            "all of it",
            summary_id="sum",
            version=1,
            replaces=None,
            covers_through=session.events[-1].id,
        )
        records = await journal.read(APP, session_stream("u", "s"))
        (snapshot,) = [r for r in records if r.kind == KIND_SNAPSHOT]
        return len(snapshot.record.to_json().encode("utf-8"))


async def main_async(tmp: Path, repeats: int) -> dict[str, Any]:
    resume_ms: dict[str, dict[str, Any]] = {}
    for steps in STEPS:
        built = tmp / f"run-{steps}.db"
        t = time.perf_counter()
        await build_interrupted(built, steps)
        print(f"built {steps} steps in {time.perf_counter() - t:.0f} s", flush=True)
        resume_ms[f"{steps}"] = await resume_figures(built, steps, repeats, tmp)
        busy = tmp / f"run-{steps}-scoped.db"
        copy_db(built, busy)
        t = time.perf_counter()
        await add_scoped_state(busy)
        print(f"added scoped state in {time.perf_counter() - t:.0f} s", flush=True)
        resume_ms[f"{steps}_scoped"] = await resume_figures(busy, steps, repeats, tmp)
        if steps == STEPS[0]:  # the same, written without state snapshots: the cost they save
            bare = tmp / f"run-{steps}-bare.db"
            copy_db(built, bare)
            service_module.STATE_SNAPSHOT_EVERY = 10**12
            try:
                await add_scoped_state(bare)
            finally:
                service_module.STATE_SNAPSHOT_EVERY = STATE_SNAPSHOT_EVERY
            figures = await resume_figures(bare, steps, repeats, tmp)
            resume_ms[f"{steps}_scoped_without_state_snapshots"] = figures
        shutil.rmtree(tmp)
        os.mkdir(tmp)
    values = [v["ms"] for k, v in resume_ms.items() if "without" not in k]
    sizes = {f"{n}": await snapshot_bytes(n) for n in EVENTS}
    return {
        "resume": resume_ms,
        "resume_ratio_slowest_fastest": round(max(values) / min(values), 2),
        "other_sessions": OTHER_SESSIONS,
        "changes_each": CHANGES_EACH,
        "session_snapshot_bytes": sizes,
        "snapshot_ratio_10000_1000": round(sizes["10000"] / sizes["1000"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    measured = _measured.start()
    tmp = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-snapshots-"))
    try:
        data = asyncio.run(main_async(tmp, args.repeats))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    data["measured"] = measured.entry()
    for name, figures in data["resume"].items():
        steps, _, scoped = name.partition("_")
        label = f"resume, {int(steps):,} steps summarised" + (
            f", {OTHER_SESSIONS:,} other sessions' state" if scoped else ""
        )
        if "without" in scoped:
            label = f"  the same, {int(steps):,} steps, written without state snapshots"
        print(f"{label:<62} {figures['ms']:>8.1f} ms  {figures['records_read']:>7,} records")
    print(f"{'  slowest / fastest (goal <= 2)':<62} {data['resume_ratio_slowest_fastest']:>8.2f}")
    for n, size in data["session_snapshot_bytes"].items():
        print(f"{f'session snapshot, {int(n):,} random-id events':<62} {size:>8,} B")
    print(f"{'  10,000 / 1,000 (goal <= 2)':<62} {data['snapshot_ratio_10000_1000']:>8.2f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
