"""SIGKILL soak: a many-step run killed at random moments, hundreds of times, resumed.

Run: ``uv run python benchmarks/soak_loop.py [--duration 60] [--backends sqlite,jsonl]
[--url NAME=URL ...] [--steps 200] [--runs 4] [--max-delay 0.05] [--spawn]``

The same approach as ``tests/loop/test_sigkill.py``, for longer: a child process drives
a run of ``--steps`` steps, each calling a **never-repeat** tool ``send(n)`` that appends
``<intent id> <n>`` to an external sink (``O_APPEND``, ``fsync``) the child cannot take
back. The parent kills the child with ``SIGKILL`` at a random moment, then does what a
careful caller does: if the run stopped at ``RESUME_STATE_UNKNOWN`` it looks the open
intent up in the sink and resolves it (``Happened`` if it is there, ``NotHappened`` if
not), then starts a new child, which resumes. When a run ends, the next run starts, until
``--duration`` seconds per backend are spent. Each child drives ``--runs`` runs at once
on one journal (4 by default), each with its own sink, so their appends share commits
(group commit) and a kill lands in the middle of a group; every run is checked on its
own.

Checked, after every kill and at the end of every run:

* no completed step lost: the durable step and action counts never go back;
* the sink holds at most one effect beyond the durable results (the one in flight);
* no never-repeat action executed twice: the sink never holds ``n`` twice, and a
  finished run's sink is exactly ``1..steps``, matching the session's tool results;
* every run ends in a terminal stop reason (``completed``).

Snapshots are on, and frequent: ``--snapshot-every`` run records (25 by default, so
resumes start from a snapshot and kills land around snapshot writes).

Children are forked from this (already imported) process by default, so a kill costs
milliseconds, not an interpreter start; ``--spawn`` starts a fresh interpreter per child
instead, as the test does. Backends: ``sqlite`` and ``jsonl`` in a temp dir (``--dir``),
and any URL given as ``--url NAME=URL`` (a fresh app namespace is used per soak).

Prints a summary and writes ``benchmarks/results/soak.json`` (or ``--out``); exits 1
if any guarantee failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import _measured
from steadyloop._errors import RunFinished, RunNotFound
from steadyloop.journal import open_journal
from steadyloop.loop import (
    Agent,
    Budgets,
    Happened,
    Message,
    ModelReply,
    NotHappened,
    ReplayPolicy,
    ScriptedModel,
    StopReason,
    ToolContext,
    ToolRegistry,
    _run,
    load_run,
    resolve,
    resume,
    run,
)
from steadyloop.sessions import SessionService

RESULTS = Path(__file__).parent / "results" / "soak.json"
USER = "user"


# -- the child ---------------------------------------------------------------------------


def counting_agent(steps: int, sink: str) -> Agent:
    """Calls the never-repeat ``send(n)`` for n = 1..steps, then answers."""
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.NEVER)
    def send(n: int, context: ToolContext) -> dict[str, int]:
        fd = os.open(sink, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{context.intent_id} {n}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return {"sent": n}

    def script(index: int, messages: Sequence[Message]) -> ModelReply | str:
        if index < steps:
            return ModelReply.call("send", {"n": index + 1}, id=f"c{index + 1}")
        return f"sent {steps}"

    return Agent(
        name="soak",
        model=ScriptedModel(script, record=False),
        tools=tools,
        budgets=Budgets(max_steps=steps + 5, max_actions=steps + 5, max_prompt_chars=10**9),
    )


async def child_main(  # noqa: PLR0917 - a plain entry point
    url: str, app: str, run_ids: str, sinks: str, steps: int, ready: Any
) -> str:
    """Drive the runs (start or resume each), all at once on one journal.

    ``run_ids`` and ``sinks`` are comma-separated, one sink per run. Calls ``ready()``
    once the journal is open. Several runs in one process share the journal, so their
    appends are committed in groups (group commit).
    """

    async def drive(journal: Any, run_id: str, sink: str) -> dict[str, Any]:
        agent = counting_agent(steps, sink)
        try:
            result = await resume(agent, journal, app, run_id)
        except RunNotFound:
            result = await run(agent, journal, app, USER, f"session-{run_id}", run_id, "go")
        except RunFinished:
            ended = (await load_run(journal, app, run_id)).state.ended
            assert ended is not None
            result = ended
        return {"stop_reason": result.stop_reason.value, "open_intent": result.open_intent}

    async with await open_journal(url) as journal:
        ready()
        results = await asyncio.gather(
            *(
                drive(journal, run_id, sink)
                for run_id, sink in zip(run_ids.split(","), sinks.split(","), strict=True)
            )
        )
    return json.dumps(results)


def _spawned_child(argv: list[str]) -> None:
    url, app, run_id, sink, steps = argv[0], argv[1], argv[2], argv[3], int(argv[4])
    _run.SNAPSHOT_EVERY = int(os.environ.get("SOAK_SNAPSHOT_EVERY", _run.SNAPSHOT_EVERY))

    def ready() -> None:
        print("ready", flush=True)

    print(asyncio.run(child_main(url, app, run_id, sink, steps, ready)), flush=True)


class Child:
    """One child process driving the run; killed, or left to finish."""

    def __init__(  # noqa: PLR0917 - a plain entry point
        self, spawn: bool, url: str, app: str, run_id: str, sink: str, steps: int
    ) -> None:
        self.spawn = spawn
        if spawn:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--child", url, app, run_id, sink, str(steps)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"child did not start: {line!r} {self.proc.stderr.read()}")  # type: ignore[union-attr]
            self.pid = self.proc.pid
            return
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 0
            try:
                os.close(read_fd)

                def ready() -> None:
                    os.write(write_fd, b"ready\n")

                out = asyncio.run(child_main(url, app, run_id, sink, steps, ready))
                os.write(write_fd, out.encode() + b"\n")
            except BaseException as exc:  # report, then exit without running atexit
                os.write(write_fd, f"error {type(exc).__name__}: {exc}\n".encode())
                code = 1
            finally:
                os._exit(code)
        os.close(write_fd)
        self.pid = pid
        self.reader = os.fdopen(read_fd, "r")
        line = self.reader.readline().strip()
        if line != "ready":
            raise RuntimeError(f"child did not start: {line!r}")

    def kill(self) -> None:
        """SIGKILL the child (it may have ended already)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> tuple[int, str]:
        """(return code as Popen gives it: -9 when killed, output line)."""
        if self.spawn:
            out, err = self.proc.communicate()
            if self.proc.returncode not in (0, -9):
                raise RuntimeError(f"child failed ({self.proc.returncode}):\n{err}")
            return self.proc.returncode, out.strip()
        out = self.reader.read().strip()
        self.reader.close()
        _, status = os.waitpid(self.pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        if code not in (0, -9):
            raise RuntimeError(f"child failed ({code}): {out}")
        return code, out


# -- the parent --------------------------------------------------------------------------


class SoakFailure(AssertionError):
    """A guarantee did not hold."""


def sink_lines(sink: Path) -> list[tuple[str, int]]:
    if not sink.exists():
        return []
    text = sink.read_text()
    # Each line is written and synced whole by one os.write, so none is torn.
    return [(i, int(n)) for i, n in (line.split() for line in text.splitlines())]


@dataclass
class BackendStats:
    """What one backend's soak did."""

    backend: str
    seconds: float = 0.0
    kills: int = 0
    children: int = 0
    runs_completed: int = 0
    steps_completed: int = 0
    resolutions_happened: int = 0
    resolutions_not_happened: int = 0
    children_stopped_unknown: int = 0
    max_lives_per_run: int = 0
    stop_reasons: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


@dataclass
class RunWatch:
    """What the parent knows of one run between kills."""

    run_id: str
    sink: Path
    steps: int = 0
    actions: int = 0


async def observe(url: str, app: str, watch: RunWatch, stats: BackendStats) -> bool:
    """Check the run after a child died, and resolve an open intent from the sink.

    Returns whether the run has ended.
    """
    async with await open_journal(url) as journal:
        try:
            info = await load_run(journal, app, watch.run_id)
        except RunNotFound:
            if watch.steps or watch.actions:
                raise SoakFailure(f"{watch.run_id}: the run vanished") from None
            return False
        state = info.state
        if state.steps < watch.steps or state.actions < watch.actions:
            raise SoakFailure(
                f"{watch.run_id}: durable progress went back from "
                f"{watch.steps}/{watch.actions} to {state.steps}/{state.actions} (steps/actions)"
            )
        watch.steps, watch.actions = state.steps, state.actions
        lines = sink_lines(watch.sink)
        sent = [n for _, n in lines]
        if len(set(sent)) != len(sent):
            raise SoakFailure(f"{watch.run_id}: a never-repeat action ran twice: {sorted(sent)}")
        if not state.actions <= len(sent) <= state.actions + 1:
            raise SoakFailure(
                f"{watch.run_id}: the sink holds {len(sent)} effects for "
                f"{state.actions} durable results"
            )
        if state.suspended is not None:
            done = dict(lines)
            intent = state.suspended
            decision: Happened | NotHappened
            if intent in done:
                decision = Happened({"sent": done[intent]}, note="found in the sink")
                stats.resolutions_happened += 1
            else:
                decision = NotHappened("not in the sink")
                stats.resolutions_not_happened += 1
            await resolve(journal, app, watch.run_id, intent, decision)
        return state.ended is not None


async def verify_finished(url: str, app: str, watch: RunWatch, steps: int) -> str:
    """A finished run: a terminal stop reason, every effect exactly once."""
    async with await open_journal(url) as journal:
        info = await load_run(journal, app, watch.run_id)
        ended = info.state.ended
        if ended is None or not ended.stop_reason.final:
            raise SoakFailure(f"{watch.run_id}: not ended in a terminal stop reason")
        if ended.stop_reason is not StopReason.COMPLETED:
            raise SoakFailure(f"{watch.run_id}: ended {ended.stop_reason.value}: {ended.detail}")
        if (info.state.steps, info.state.actions) != (steps + 1, steps):
            raise SoakFailure(f"{watch.run_id}: {info.state.steps} steps, {info.state.actions}")
        sent = sorted(n for _, n in sink_lines(watch.sink))
        if sent != list(range(1, steps + 1)):
            raise SoakFailure(f"{watch.run_id}: the sink is not 1..{steps} once each")
        session = await SessionService(journal, app).get_session(USER, f"session-{watch.run_id}")
        observed = [p.response for e in session.events if e.author == "tool" for p in e.parts]
        if observed != [{"sent": n} for n in range(1, steps + 1)]:
            raise SoakFailure(f"{watch.run_id}: the session's tool results differ from the sink")
        return ended.stop_reason.value


async def soak_backend(name: str, url: str, args: argparse.Namespace, work: Path) -> BackendStats:
    rng = random.Random(f"{args.seed}-{name}")
    stats = BackendStats(backend=name)
    app = f"soak-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    deadline = started + args.duration
    run_no = 0
    while time.monotonic() < deadline:
        run_no += 1
        watches = [
            RunWatch(run_id=f"run-{run_no}-{k}", sink=work / f"{name}-sink-{run_no}-{k}.log")
            for k in range(args.runs)
        ]
        lives = 0
        while True:
            child = Child(
                args.spawn,
                url,
                app,
                ",".join(w.run_id for w in watches),
                ",".join(str(w.sink) for w in watches),
                args.steps,
            )
            stats.children += 1
            lives += 1
            # Kill at a random moment, unless the time is up: then let the runs finish.
            if time.monotonic() < deadline:
                await asyncio.sleep(rng.uniform(0.0, args.max_delay))
                child.kill()
            code, out = child.wait()
            stats.kills += code == -9
            if code == 0:
                stats.children_stopped_unknown += sum(
                    r["stop_reason"] == "resume_state_unknown" for r in json.loads(out)
                )
            ended = [await observe(url, app, watch, stats) for watch in watches]
            if all(ended):
                break
        for watch in watches:
            reason = await verify_finished(url, app, watch, args.steps)
            stats.stop_reasons[reason] = stats.stop_reasons.get(reason, 0) + 1
            stats.runs_completed += 1
            stats.steps_completed += args.steps
            watch.sink.unlink()
        stats.max_lives_per_run = max(stats.max_lives_per_run, lives)
    stats.seconds = time.monotonic() - started
    async with await open_journal(url) as journal:
        await journal.delete_namespace(app)  # leave a shared server as it was
    return stats


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _spawned_child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per backend")
    parser.add_argument("--backends", default="sqlite,jsonl", help="embedded backends to soak")
    parser.add_argument("--url", action="append", default=[], help="NAME=URL of a server")
    parser.add_argument("--steps", type=int, default=200, help="steps per run")
    parser.add_argument(
        "--runs", type=int, default=4, help="runs driven at once by each child (group commit)"
    )
    parser.add_argument("--max-delay", type=float, default=0.05, help="longest life, seconds")
    parser.add_argument("--seed", default="soak")
    parser.add_argument("--spawn", action="store_true", help="a fresh interpreter per child")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--snapshot-every", type=int, default=25, help="run records apart")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args()
    measured = _measured.start()
    results: list[BackendStats] = []
    failed = False
    _run.SNAPSHOT_EVERY = args.snapshot_every  # forked children inherit it
    os.environ["SOAK_SNAPSHOT_EVERY"] = str(args.snapshot_every)  # spawned ones read it
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="soak-loop-") as tmp:
        work = Path(tmp)
        targets: list[tuple[str, str]] = []
        for name in [b for b in args.backends.split(",") if b]:
            if name == "sqlite":
                targets.append((name, f"sqlite://{work}/soak.db"))
            elif name == "jsonl":
                (work / "jsonl").mkdir()
                targets.append((name, f"jsonl://{work}/jsonl"))
            else:
                parser.error(f"unknown embedded backend {name!r}; give servers with --url")
        for spec in args.url:
            name, _, url = spec.partition("=")
            if not url:
                parser.error(f"--url takes NAME=URL, got {spec!r}")
            targets.append((name, url))
        for name, url in targets:
            stats = BackendStats(backend=name)
            try:
                stats = asyncio.run(soak_backend(name, url, args, work))
            except SoakFailure as exc:
                stats.failures.append(str(exc))
                failed = True
            results.append(stats)
            print(
                f"{name:<10} {stats.seconds:5.1f}s  {stats.kills:4d} kills  "
                f"{stats.children:4d} children  {stats.runs_completed:3d} runs "
                f"({stats.steps_completed} steps) completed  resolved "
                f"{stats.resolutions_happened} happened / {stats.resolutions_not_happened} "
                f"not  max {stats.max_lives_per_run} lives/run  "
                f"{'FAILED: ' + '; '.join(stats.failures) if stats.failures else 'ok'}",
                flush=True,
            )
    data = {
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "settings": {
            "duration_s": args.duration,
            "steps_per_run": args.steps,
            "max_delay_s": args.max_delay,
            "snapshot_every": args.snapshot_every,
            "children": "spawned interpreters" if args.spawn else "forked",
            "seed": args.seed,
        },
        "backends": [asdict(s) for s in results],
        "ok": not failed,
        "measured": measured.entry(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
