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
* ``resume``: runs of 100, 1,000 and 10,000 steps whose session is summarised every
  ``SUMMARY_EVERY`` (50) steps, as an agent that summarises would (the tool writes the
  summary, and with it a session snapshot), each interrupted before its last
  batch (the final model call's result was never written); the time ``resume`` takes
  to read and fold the run and the session, redo that model call and write the end.
  The runs are built at ``synchronous=OFF`` to save time; resume runs at ``FULL``.
  Median of three resumes of copies of each run; the 10,000 / 100 ratio is the goal
  (at most 2). The same through the CLI (``steadyloop resume``, a fresh process: start-up
  included).
* ``peers``, per durable unit (one recorded effect), ``--steps`` steps of the same
  shape (a "model" step and a "tool" step per loop), on SQLite on the same disk:
  LangGraph's ``SqliteSaver`` (a two-node graph, ``durability="sync"``: one checkpoint
  per node, durable before the next node runs) and DBOS on its default SQLite system
  database (a workflow of two ``@DBOS.step`` calls per loop; run in a child process,
  since DBOS is process-global). Install them with ``uv sync --group bench``; without
  them the rows say so.
* ``concurrent``: 1, 4, 16, 32 and 64 runs of ``--steps // 4`` steps at once in one
  process, on one SQLite FULL journal (group commit: the appends queued together share
  one commit), on the same with group commit switched off for the benchmark, and on
  the memory journal: durable effects per second, the ratio to memory, and COMMITs per
  append (counted). The 32-run point is the issue's row; the 1-run point is the latency
  of one run alone, grouped and not. ``--concurrent-only`` measures just this section.
* ``start-up``: ``steadyloop --help`` against a minimal two-command typer app's
  ``--help``, alternating, median of ``--startup-repeats`` runs each.

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

import _measured
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
from steadyloop.records import StoredRecord
from steadyloop.sessions import SessionService
from steadyloop.testing import SimulatedCrash

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
    """Counts appends and reads (``read`` and ``head``) on the way through.

    It hands the inner journal the batch as this wrapper's ``append`` prepared it:
    through the inner ``append`` it would be validated and encoded a second time, and
    the step would be charged for work no user's run does.
    """

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.appends = 0
        self.reads = 0

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        self.appends += 1
        self.inner._check_open()
        return await self.inner._append(batch)

    def on_read(
        self, namespace: str, stream: str, records: list[StoredRecord]
    ) -> list[StoredRecord]:
        """Count one read."""
        self.reads += 1
        return records

    async def _head(self, namespace: str, stream: str) -> int:
        self.reads += 1
        return await super()._head(namespace, stream)


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


SUMMARY_EVERY = 50
"""Steps between summaries in the ``resume`` runs, as an agent that summarises would."""


class ResumeModel:
    """Calls ``work`` until ``steps`` tool calls were made, then answers; dies before that.

    The call index comes from the last tool message (its call id), so it holds however
    the session was summarised. With ``crash`` set, the final call dies (a simulated
    crash) after its intent is durable: the run is interrupted before its last batch.
    """

    name = "bench"

    def __init__(self, steps: int, *, crash: bool = False) -> None:
        self.steps, self.crash = steps, crash

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """Return the next scripted reply."""
        last = messages[-1]
        index = int(last.tool_call_id[1:]) + 1 if last.tool_call_id else 0
        if index < self.steps:
            return ModelReply.call("work", {"i": index}, id=f"c{index}")
        if self.crash:
            raise SimulatedCrash("the final model call")
        return ModelReply.final(f"did {self.steps} steps")


def resume_agent(journal: Journal, steps: int, *, crash: bool = False) -> Agent:
    """An agent whose tool summarises the session every ``SUMMARY_EVERY`` steps.

    The summary is written by the tool, between the tool's intent and its result, as a
    second writer of the session; the driver sees the session move, reads it again
    (partial, from the new snapshot) and goes on.
    """
    tools = ToolRegistry()
    service = SessionService(journal, APP)

    @tools.tool(policy=ReplayPolicy.SAFE)
    async def work(i: int) -> int:
        if i % SUMMARY_EVERY == SUMMARY_EVERY - 1:
            s = await service.get_session("u", "s", history=False)
            latest = s.latest_summary
            await service.summarize(
                s,
                f"steps up to {i}",
                summary_id=f"sum-{i}",
                version=1 if latest is None else latest.version + 1,
                replaces=None if latest is None else latest.id,
                covers_through=s.events[-1].id,
            )
        return i

    return Agent(
        "bench",
        ResumeModel(steps, crash=crash),
        tools,
        budgets=Budgets(max_steps=steps + 1, max_actions=steps, max_prompt_chars=10**12),
    )


async def build_interrupted(db: Path | str, steps: int | str) -> None:
    """A ``steps``-step run, summarised every ``SUMMARY_EVERY`` steps, cut before its end.

    Its last batch (the final model call's result and the end) was never written.
    """
    journal = await SQLiteJournal.open(db, synchronous="OFF")
    try:
        agent = resume_agent(journal, int(steps), crash=True)
        await run(agent, journal, APP, "u", "s", "r", "go")
        raise AssertionError("the run was expected to crash")  # pragma: no cover
    except SimulatedCrash:
        pass
    finally:
        await journal.close()


async def resume_time(db: Path, steps: int) -> float:
    """Seconds one ``resume`` of the interrupted run in ``db`` takes, at ``FULL``."""
    journal = await SQLiteJournal.open(db)
    try:
        t = time.perf_counter()
        result = await resume(resume_agent(journal, steps), journal, APP, "r")
        elapsed = time.perf_counter() - t
    finally:
        await journal.close()
    assert result.stop_reason.value == "completed" and result.steps == steps + 1, result
    return elapsed


def copy_db(source: Path, target: Path) -> None:
    """Copy an SQLite database, with the WAL it may have left behind."""
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{source}{suffix}"):
            shutil.copyfile(f"{source}{suffix}", f"{target}{suffix}")


def cli_resume_agent() -> Agent:
    """The ``resume`` agent for ``steadyloop resume --agent bench_loop:cli_resume_agent``.

    Its step count comes from ``BENCH_RESUME_STEPS``. Resuming the interrupted run only
    redoes the final model call, so its tool (and the journal it would summarise in)
    is never used.
    """
    return resume_agent(MemoryJournal(), int(os.environ["BENCH_RESUME_STEPS"]))


def build_in_child(db: Path, steps: int) -> None:
    """`build_interrupted` in a child process, which then exits.

    Like a crashed driver, its claim is then dead for every later process, the CLI's
    included (a claim of this process would make ``steadyloop resume`` refuse).
    """
    code = (
        "import asyncio, sys, bench_loop; asyncio.run(bench_loop.build_interrupted(*sys.argv[1:]))"
    )
    cmd = [sys.executable, "-c", code, str(db), str(steps)]
    subprocess.run(cmd, check=True, cwd=Path(__file__).parent)


def cli_resume_s(db: Path, steps: int) -> float:
    """Wall seconds of ``steadyloop resume`` (a fresh process) on the run in ``db``."""
    cmd = [sys.executable, "-m", "steadyloop", "resume", "r", "--agent"]
    cmd += ["bench_loop:cli_resume_agent", "--journal", f"sqlite:///{db}", "--app", APP]
    env = {**os.environ, "BENCH_RESUME_STEPS": str(steps)}
    t = time.perf_counter()
    here = Path(__file__).parent
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, cwd=here)
    assert done.returncode == 0, done.stdout + done.stderr
    return time.perf_counter() - t


async def resume_ms(directory: Path, steps: int, repeats: int = 3) -> tuple[float, float]:
    """Median milliseconds of ``resume`` and of ``steadyloop resume``, on copies of one run.

    The run is built once, in a child process, interrupted before its last batch; each
    resume gets a fresh copy of it.
    """
    built = directory / f"resume-{steps}.db"
    build_in_child(built, steps)
    api, cli = [], []
    for i in range(repeats):
        copy = directory / f"resume-{steps}-{i}.db"
        copy_db(built, copy)
        api.append(await resume_time(copy, steps) * 1e3)
        copy = directory / f"resume-{steps}-{i}-cli.db"
        copy_db(built, copy)
        cli.append(cli_resume_s(copy, steps) * 1e3)
    return statistics.median(api), statistics.median(cli)


def langgraph_peer(steps: int) -> Any:
    """LangGraph's peer of the bench step: a model node and a tool node, ``steps`` times.

    Returns the uncompiled graph; its input is ``{"i": 0, "last": ""}``.

    Raises:
        ImportError: LangGraph is not installed.
    """
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        i: int
        last: str

    def model(state: State) -> dict[str, Any]:
        return {"last": f"call noop {state['i']}"}

    def tool(state: State) -> dict[str, Any]:
        return {"i": state["i"] + 1, "last": str(state["i"])}

    graph = StateGraph(State)
    graph.add_node("model", model)
    graph.add_node("tool", tool)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", lambda s: "tool" if s["i"] < steps else END)
    graph.add_edge("tool", "model")
    return graph


def langgraph_per_unit(directory: Path, steps: int) -> float | None:
    """Seconds per checkpoint of a LangGraph ``SqliteSaver`` run, ``durability="sync"``."""
    try:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        graph = langgraph_peer(steps)
    except ImportError:
        return None
    conn = sqlite3.connect(directory / "langgraph.db", check_same_thread=False)
    try:
        app = graph.compile(checkpointer=SqliteSaver(conn))
        config: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": 4 * steps + 10}
        t = time.perf_counter()
        out = app.invoke({"i": 0, "last": ""}, config, durability="sync")
        elapsed = time.perf_counter() - t
        assert out["i"] == steps, out
    finally:
        conn.close()
    return elapsed / (2 * steps + 1)  # a checkpoint per node run (model steps+1 times)


DBOS_CHILD = """
import json, sys, time
from dbos import DBOS
steps = int(sys.argv[2])
DBOS(config={"name": "bench", "system_database_url": f"sqlite:///{sys.argv[1]}/dbos.sqlite"})

@DBOS.step()
def model(i: int) -> str:
    return f"call noop {i}"

@DBOS.step()
def tool(i: int) -> int:
    return i

@DBOS.workflow()
def agent() -> int:
    for i in range(steps):
        model(i)
        tool(i)
    return steps

DBOS.launch()
t = time.perf_counter()
assert agent() == steps
print(json.dumps((time.perf_counter() - t) / (2 * steps)))
DBOS.destroy()
"""


def dbos_per_unit(directory: Path, steps: int) -> float | None:
    """Seconds per recorded step of a DBOS workflow on its default SQLite database."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        return None
    proc = subprocess.run(
        [sys.executable, "-c", DBOS_CHILD, str(directory), str(steps)],
        capture_output=True,
        text=True,
        check=True,
        cwd=directory,
    )
    return float(proc.stdout.strip().splitlines()[-1])


MINI_TYPER = """
import typer
app = typer.Typer(add_completion=False, no_args_is_help=True)

@app.command()
def one(x: str) -> None:
    "One."

@app.command()
def two(y: str) -> None:
    "Two."

app()
"""


def startup(directory: Path, repeats: int) -> dict[str, float]:
    """Median wall seconds of ``steadyloop --help`` and of a minimal typer app's ``--help``."""
    mini = directory / "mini_typer.py"
    mini.write_text(MINI_TYPER)
    ours = [sys.executable, "-m", "steadyloop", "--help"]
    theirs = [sys.executable, str(mini), "--help"]
    times: dict[str, list[float]] = {"steadyloop": [], "typer": []}
    for _ in range(repeats):
        for name, cmd in (("steadyloop", ours), ("typer", theirs)):
            t = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            times[name].append(time.perf_counter() - t)
    ours_s, typer_s = statistics.median(times["steadyloop"]), statistics.median(times["typer"])
    return {"steadyloop_help_s": ours_s, "typer_help_s": typer_s, "ratio": ours_s / typer_s}


CONCURRENT_RUNS = (1, 4, 16, 32, 64)
"""The numbers of concurrent runs of the ``concurrent`` curve."""


async def concurrent_effects_per_s(
    journal: Journal, runs: int, steps: int, *, tag: str = "c"
) -> float:
    """Durable effects per second of ``runs`` concurrent runs on ``journal`` (closed after)."""
    try:
        t = time.perf_counter()
        results = await asyncio.gather(
            *(
                run(bench_agent(steps), journal, APP, "u", f"{tag}s{i}", f"{tag}{i}", "go")
                for i in range(runs)
            )
        )
        elapsed = time.perf_counter() - t
    finally:
        await journal.close()
    assert all(r.stop_reason.value == "completed" for r in results)
    return runs * (2 * steps + 1) / elapsed


async def sqlite_concurrent(
    db: Path, runs: int, steps: int, *, grouped: bool
) -> tuple[float, float]:
    """(effects/s, write COMMITs per append) of ``runs`` concurrent runs on one SQLite journal.

    ``grouped=False`` switches group commit off for this benchmark only (the worker
    then commits every append on its own, as before group commit), for comparison.
    """
    journal = await SQLiteJournal.open(db)
    if not grouped:
        journal._executor._run_group = None
    commits = 0
    writing = False  # reads run in transactions too: count only the commits of writes

    def count(statement: str) -> None:
        nonlocal commits, writing
        if statement.startswith("BEGIN"):
            writing = statement == "BEGIN IMMEDIATE"
        elif statement == "COMMIT" and writing:
            commits += 1

    assert journal._conn is not None
    journal._conn.set_trace_callback(count)
    counted = CountingJournal(journal)
    rate = await concurrent_effects_per_s(counted, runs, steps, tag=f"n{runs}")
    return rate, commits / counted.appends


async def concurrent(directory: Path, runs: int, steps: int, repeats: int = 3) -> dict[str, Any]:
    """The throughput curve of concurrent runs in one process, SQLite FULL next to memory.

    For each number of runs in `CONCURRENT_RUNS`: durable effects per second on one
    SQLite FULL journal with group commit, the same with group commit switched off,
    and the same runs on the memory journal; medians of ``repeats``, the three
    alternating so that a change of load hits them alike. ``runs`` is the point the
    issue's table row asks for (32), reported at the top level as before.
    """
    load = os.getloadavg()
    curve: list[dict[str, Any]] = []
    for n in CONCURRENT_RUNS:
        grouped: list[float] = []
        ungrouped: list[float] = []
        memory: list[float] = []
        commits: list[float] = []
        for i in range(repeats):
            rate, count = await sqlite_concurrent(
                directory / f"cc-{n}-{i}.db", n, steps, grouped=True
            )
            grouped.append(rate)
            commits.append(count)
            memory.append(await concurrent_effects_per_s(MemoryJournal(), n, steps))
            ungrouped.append(
                (await sqlite_concurrent(directory / f"cu-{n}-{i}.db", n, steps, grouped=False))[0]
            )
        g, u, m = (statistics.median(x) for x in (grouped, ungrouped, memory))
        curve.append(
            {
                "runs": n,
                "sqlite_full_effects_per_s": g,
                "sqlite_full_ungrouped_effects_per_s": u,
                "memory_effects_per_s": m,
                "ratio": g / m,
                "ungrouped_ratio": u / m,
                "commits_per_append": statistics.median(commits),
                "runs_effects_per_s": {
                    "grouped": grouped,
                    "ungrouped": ungrouped,
                    "memory": memory,
                },
            }
        )
    at = next(c for c in curve if c["runs"] == runs)
    alone: dict[str, list[float]] = {"grouped": [], "ungrouped": []}
    for i in range(3 * repeats):  # one run alone, alternating: its latency, grouped or not
        for way in ("grouped", "ungrouped") if i % 2 else ("ungrouped", "grouped"):
            db = directory / f"alone-{way}-{i}.db"
            rate, _ = await sqlite_concurrent(db, 1, steps, grouped=way == "grouped")
            alone[way].append(1e6 / rate)
    return {
        "runs": runs,
        "steps_per_run": steps,
        "repeats": repeats,
        "sqlite_full_effects_per_s": at["sqlite_full_effects_per_s"],
        "memory_effects_per_s": at["memory_effects_per_s"],
        "ratio": at["ratio"],
        "curve": curve,
        "one_run_alone_per_effect_us": {
            "grouped": statistics.median(alone["grouped"]),
            "ungrouped": statistics.median(alone["ungrouped"]),
            "runs_us": alone,
        },
        "load_average_at_start": list(load),
    }


def concurrent_rows(cc: dict[str, Any]) -> list[tuple[str, str]]:
    """The printed rows of the ``concurrent`` section."""
    rows = [
        (
            f"{cc['runs']} concurrent runs: effects/s sqlite FULL / memory",
            f"{cc['sqlite_full_effects_per_s']:.0f} / {cc['memory_effects_per_s']:.0f}"
            f" = {cc['ratio']:.2f}",
        )
    ]
    for c in cc.get("curve", []):
        rows.append(
            (
                f"  {c['runs']:>2} runs: grouped / ungrouped / memory (effects/s)",
                f"{c['sqlite_full_effects_per_s']:.0f} / "
                f"{c['sqlite_full_ungrouped_effects_per_s']:.0f} / "
                f"{c['memory_effects_per_s']:.0f} = {c['ratio']:.2f} "
                f"(ungrouped {c['ungrouped_ratio']:.2f}); "
                f"{c['commits_per_append']:.2f} commits per append",
            )
        )
    alone = cc.get("one_run_alone_per_effect_us")
    if alone:
        rows.append(
            (
                "  one run alone, per effect: grouped / ungrouped (median)",
                f"{alone['grouped']:.0f} us / {alone['ungrouped']:.0f} us",
            )
        )
    load = cc.get("load_average_at_start")
    if load:
        rows.append(("  load average when the section started", f"{load[0]:.2f} (2 cores)"))
    return rows


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_us": statistics.median(ordered) * 1e6,
        "mean_us": statistics.fmean(ordered) * 1e6,
        "p95_us": ordered[int(0.95 * (len(ordered) - 1))] * 1e6,
    }


async def main_async(
    directory: Path, steps: int, repeats: int, startup_repeats: int = 9
) -> dict[str, Any]:
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
    both = {str(n): await resume_ms(directory, n) for n in (100, 1_000, 10_000)}
    resumes = {n: api for n, (api, _) in both.items()}
    cli_resumes = {n: cli for n, (_, cli) in both.items()}
    appends_per_step = (appends - 3) / steps  # session, first and final batches aside
    peers: dict[str, Any] = {}
    for name, fn in (("langgraph_sqlite_sync", langgraph_per_unit), ("dbos_sqlite", dbos_per_unit)):
        got: list[float] = []
        for i in range(repeats):
            where = directory / f"{name}-{i}"
            where.mkdir()
            seconds = fn(where, steps)
            if seconds is not None:
                got.append(seconds)
        peers[name] = (
            None
            if not got
            else {
                "per_unit_us": statistics.median(got) * 1e6,
                "runs_us": [r * 1e6 for r in got],
                "x_floor_median": statistics.median(got) * 1e6 / fl["median_us"],
            }
        )
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
        "resume_summary_every": SUMMARY_EVERY,
        "resume_ratio_10000_100": resumes["10000"] / resumes["100"],
        "resume_cli_ms": cli_resumes,
        "peers": peers,
        "concurrent": await concurrent(directory, 32, max(1, steps // 4), repeats),
        "startup": startup(directory, startup_repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--startup-repeats", type=int, default=9)
    parser.add_argument(
        "--concurrent-only",
        action="store_true",
        help="measure only the concurrent section; replace only its entry in loop.json",
    )
    args = parser.parse_args()
    measured = _measured.start()
    if args.concurrent_only:
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-loop-") as tmp:
            cc = asyncio.run(concurrent(Path(tmp), 32, max(1, args.steps // 4), args.repeats))
        for name, value in concurrent_rows(cc):
            print(f"{name:<58}  {value}")
        old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        # The rest of the file keeps its own date: this entry says when it was measured.
        old["concurrent"] = {**cc, "measured": measured.entry()}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(old, indent=2, sort_keys=True) + "\n")
        print(f"wrote the concurrent entry of {RESULTS}")
        return
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-loop-") as tmp:
        data = asyncio.run(main_async(Path(tmp), args.steps, args.repeats, args.startup_repeats))
    data["measured"] = measured.entry()
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
    ] + [
        (f"resume, {int(n):,} steps (summarised)", f"{ms:.1f} ms")
        for n, ms in data["resume_ms"].items()
    ]
    rows.append(("  10,000 / 100 (goal <= 2)", f"{data['resume_ratio_10000_100']:.2f}"))
    rows += [
        (f"  through the CLI, {int(n):,} steps", f"{ms:.0f} ms")
        for n, ms in data["resume_cli_ms"].items()
    ]
    for name, peer in data["peers"].items():
        rows.append(
            (
                f"peer {name}, per durable unit",
                "not installed (uv sync --group bench)"
                if peer is None
                else f"{peer['per_unit_us']:.0f} us = {peer['x_floor_median']:.2f} x floor",
            )
        )
    rows.extend(concurrent_rows(data["concurrent"]))
    su = data["startup"]
    rows.append(
        (
            "steadyloop --help / minimal typer --help",
            f"{su['steadyloop_help_s']:.3f} s / {su['typer_help_s']:.3f} s = {su['ratio']:.2f}",
        )
    )
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
