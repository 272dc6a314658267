"""What the agent loop's write-ahead journal costs per step, and how fast resume is.

Run: ``uv run python benchmarks/bench_loop.py [--steps 300] [--dir PATH]``

Everything is measured in one run, on one disk (``--dir``, a temp dir by default):

* ``floor fsync``: ``os.write`` of a 200-byte record plus ``os.fsync``, in a loop —
  the least one durable write costs on this disk.
* ``step``: a scripted model calling a no-op tool (both ``SAFE``), ``--steps`` steps on
  the default SQLite journal at full durability (``synchronous=FULL``). A step is two
  external effects (the model call, the tool call), so the design's floor is two
  syncs per step. Reported per step and per effect, as multiples of the floor.
* ``syncs per step``: counted, not assumed — journal appends per step by a counting
  wrapper, and ``fsync``/``fdatasync`` system calls per step by running the same run
  in a child process under ``strace -f -c`` (skipped with a note without strace).
* ``synchronous=OFF``: the same run without syncs, to split a step into its syncs and
  the rest (encoding, validation, SQLite's own work, the loop).
* ``memory``: the same run on the in-memory journal: the loop, sessions, records and
  the journal protocol alone, without SQLite or its worker thread.
* ``resume``: runs of 100, 1,000 and 10,000 steps, each interrupted before its last
  batch (the final model call's result was never written); the time ``resume`` takes
  to read and fold the run and the session, redo that model call and write the end.
  The runs are built at ``synchronous=OFF`` to save time; resume runs at ``FULL``.

Writes ``benchmarks/results/loop.json`` and prints a table.
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from steadyloop.journal import (
    AppendResult,
    ForwardingJournal,
    Journal,
    MemoryJournal,
    SQLiteJournal,
)
from steadyloop.journal._protocol import PreparedBatch
from steadyloop.loop import (
    Agent,
    Budgets,
    Message,
    ModelReply,
    ReplayPolicy,
    ToolRegistry,
    ToolSpec,
    resume,
    run,
)
from steadyloop.testing import CrashingJournal, SimulatedCrash

RESULTS = Path(__file__).parent / "results" / "loop.json"
APP = "bench"


class StepModel:
    """Calls ``noop`` until ``steps`` tool calls were made, then answers.

    The call index comes from the prompt's length (one user message, then an assistant
    turn and a tool message per step), so it costs O(1) even at 10,000 steps.
    """

    name = "bench"

    def __init__(self, steps: int) -> None:
        self.steps = steps

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """Return the next scripted reply."""
        index = (len(messages) - 1) // 2
        if index < self.steps:
            return ModelReply.call("noop", {"i": index}, id=f"c{index}")
        return ModelReply.final(f"did {self.steps} steps")


def bench_agent(steps: int) -> Agent:
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.SAFE)
    def noop(i: int) -> int:
        return i

    return Agent(
        "bench",
        StepModel(steps),
        tools,
        budgets=Budgets(max_steps=steps + 1, max_actions=steps, max_prompt_chars=10**12),
    )


class CountingJournal(ForwardingJournal):
    """Counts appends on the way through."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.appends = 0

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        self.appends += 1
        return await super()._append(batch)


def floor(directory: Path, n: int) -> list[float]:
    """Seconds per ``os.write`` + ``os.fsync`` of a 200-byte record."""
    path = directory / "floor.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    record = b"x" * 199 + b"\n"
    samples = []
    try:
        os.write(fd, record)
        os.fsync(fd)
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, record)
            os.fsync(fd)
            samples.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink()
    return samples


async def timed_run(journal: Journal, steps: int) -> float:
    """Seconds per step of one ``steps``-step run on ``journal``, which it closes."""
    try:
        t = time.perf_counter()
        result = await run(bench_agent(steps), journal, APP, "u", "s", "r", "go")
        elapsed = time.perf_counter() - t
    finally:
        await journal.close()
    assert result.stop_reason.value == "completed", result
    return elapsed / steps


async def step_run(db: Path, steps: int, synchronous: str = "FULL") -> tuple[float, int]:
    """(seconds per step, appends) of one ``steps``-step run."""
    journal = CountingJournal(await SQLiteJournal.open(db, synchronous=synchronous))
    return await timed_run(journal, steps), journal.appends


async def memory_step_run(steps: int) -> float:
    """Seconds per step of one ``steps``-step run on the in-memory journal."""
    return await timed_run(MemoryJournal(), steps)


def syncs_per_step(directory: Path, steps: int) -> float | None:
    """Count ``fsync`` + ``fdatasync`` calls per step (child under strace); None without it."""
    if shutil.which("strace") is None:
        return None
    db = directory / "strace.db"
    here, target = str(Path(__file__).parent), str(db)
    code = (
        f"import asyncio, sys; sys.path.insert(0, {here!r})\n"
        "from bench_loop import step_run\n"
        f"asyncio.run(step_run(__import__('pathlib').Path({target!r}), {steps}))\n"
    )
    # The same setup without the run, to subtract what opening the database costs.
    base = code.replace("asyncio.run(step_run(", "(lambda *a: None)((")
    counts = []
    for script in (code, base):
        out = directory / "strace.txt"
        subprocess.run(
            [
                "strace",
                "-f",
                "-c",
                "-o",
                str(out),
                "-e",
                "trace=fsync,fdatasync",
                sys.executable,
                "-c",
                script,
            ],
            check=True,
            capture_output=True,
        )
        total = 0
        for line in out.read_text().splitlines():
            parts = line.split()
            if parts and parts[-1] in ("fsync", "fdatasync"):
                total += int(parts[3])
        counts.append(total)
        for leftover in directory.glob("strace.db*"):
            leftover.unlink()
    return (counts[0] - counts[1]) / steps


async def build_interrupted(db: Path, steps: int) -> None:
    """A ``steps``-step run whose last batch (final result + end) was never written."""
    last = 2 * steps + 3  # session, first batch, two per step, the final batch
    inner = await SQLiteJournal.open(db, synchronous="OFF")
    journal = CrashingJournal(inner, crash_at=last, side="before")
    try:
        await run(bench_agent(steps), journal, APP, "u", "s", "r", "go")
        raise AssertionError("the run was expected to crash")  # pragma: no cover
    except SimulatedCrash:
        pass
    finally:
        await journal.close()


async def resume_time(db: Path, steps: int) -> float:
    await build_interrupted(db, steps)
    journal = await SQLiteJournal.open(db)  # FULL
    try:
        t = time.perf_counter()
        result = await resume(bench_agent(steps), journal, APP, "r")
        elapsed = time.perf_counter() - t
    finally:
        await journal.close()
    assert result.stop_reason.value == "completed" and result.steps == steps + 1, result
    return elapsed


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_us": statistics.median(ordered) * 1e6,
        "mean_us": statistics.fmean(ordered) * 1e6,
        "p95_us": ordered[int(0.95 * (len(ordered) - 1))] * 1e6,
    }


async def main_async(directory: Path, steps: int, repeats: int) -> dict[str, Any]:
    floor_samples = floor(directory, 500)
    fl = _stats(floor_samples)
    per_step: list[float] = []
    appends = 0
    for i in range(repeats):
        seconds, appends = await step_run(directory / f"steps-{i}.db", steps)
        per_step.append(seconds)
    step_us = statistics.median(per_step) * 1e6
    no_sync = [(await step_run(directory / f"off-{i}.db", steps, "OFF"))[0] for i in range(repeats)]
    no_sync_us = statistics.median(no_sync) * 1e6
    memory_us = statistics.median([await memory_step_run(steps) for _ in range(repeats)]) * 1e6
    syscalls = syncs_per_step(directory, steps)
    resumes = {}
    for n in (100, 1_000, 10_000):
        resumes[str(n)] = await resume_time(directory / f"resume-{n}.db", n) * 1e3
    appends_per_step = (appends - 3) / steps  # session, first and final batches aside
    return {
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "steps": steps,
        "repeats": repeats,
        "floor_fsync": fl,
        "step": {
            "median_of_runs_us": step_us,
            "runs_us": [s * 1e6 for s in per_step],
            "x_floor_median": step_us / fl["median_us"],
            "x_floor_mean": step_us / fl["mean_us"],
            "per_effect_us": step_us / 2,
            "per_effect_x_floor_median": step_us / 2 / fl["median_us"],
            "synchronous_off_us": no_sync_us,
            "synchronous_off_runs_us": [s * 1e6 for s in no_sync],
            "memory_us": memory_us,
            "sync_share_us": step_us - no_sync_us,
        },
        "appends_per_step": appends_per_step,
        "fsync_syscalls_per_step": syscalls,
        "resume_ms": resumes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-loop-") as tmp:
        data = asyncio.run(main_async(Path(tmp), args.steps, args.repeats))
    fl, step = data["floor_fsync"], data["step"]
    syscalls = data["fsync_syscalls_per_step"]
    rows = [
        ("floor: write+fsync, 200 B", f"{fl['median_us']:.0f} us median, {fl['mean_us']:.0f} mean"),
        ("step (model + no-op tool), sqlite FULL", f"{step['median_of_runs_us']:.0f} us"),
        (
            "  = x floor (median / mean)",
            f"{step['x_floor_median']:.2f} / {step['x_floor_mean']:.2f}",
        ),
        ("  per effect, x floor (median)", f"{step['per_effect_x_floor_median']:.2f}"),
        ("  same run at synchronous=OFF (no syncs)", f"{step['synchronous_off_us']:.0f} us"),
        ("  so the two syncs cost", f"{step['sync_share_us']:.0f} us"),
        ("  same run on the memory journal", f"{step['memory_us']:.0f} us"),
        ("journal appends per step", f"{data['appends_per_step']:.2f}"),
        (
            "fsync+fdatasync calls per step",
            "not measured (strace missing)" if syscalls is None else f"{syscalls:.2f}",
        ),
    ] + [(f"resume, {int(n):,} steps", f"{ms:.1f} ms") for n, ms in data["resume_ms"].items()]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
