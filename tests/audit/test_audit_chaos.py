"""50 tasks, 4 worker processes, workers SIGKILLed at random: the audit loop's promises hold."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from steadyloop.audit import (
    PREAMBLE_OPEN,
    TERMINAL,
    GoalSpec,
    TaskBoard,
    TaskSpec,
    TaskStatus,
    VerifySpec,
)

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
TERMINAL_KINDS = {"task.completed", "task.needs_human", "task.goal_unmet", "task.blocked"}

# kind -> (prompt marker, round budget, final status, rounds, audits)
KINDS = {
    "easy": ("EASY", 3, "completed", 1, 1),
    "fixable": ("FIXABLE", 3, "completed", 2, 2),
    "stubborn": ("STUBBORN", 10, "needs-human", 3, 3),
    "budget": ("BUDGET", 2, "goal-unmet", 2, 2),
}
ORDER = ["easy", "fixable", "fixable", "stubborn", "budget"]


def specs() -> tuple[list[TaskSpec], dict[str, tuple[str, int, int]]]:
    out, expected = [], {}
    for i in range(50):
        kind = ORDER[i % 5]
        marker, budget, status, rounds, audits = KINDS[kind]
        tid = f"task-{i:02d}"
        deps = (f"task-{i - 5:02d}",) if i >= 45 else ()
        out.append(
            TaskSpec(
                prompt=f"{marker}: write 42 into answer.txt. Task {tid}. Ünïcödé  stays\tas is ",
                task_id=tid,
                priority=i % 3,
                depends_on=deps,
                goal=GoalSpec(
                    goal="answer.txt holds exactly 42",
                    verify=VerifySpec(("check",)),
                    round_budget=budget,
                ),
            )
        )
        expected[tid] = (status, rounds, audits)
    for i in range(45, 50):
        dep_status = expected[f"task-{i - 5:02d}"][0]
        if dep_status != "completed":
            expected[f"task-{i:02d}"] = ("blocked", 0, 0)
    return out, expected


def start(url: str, n: int, tmp: Path) -> subprocess.Popen[bytes]:
    with open(tmp / f"stderr-{n}.txt", "wb") as err:
        return subprocess.Popen(
            [
                sys.executable,
                str(HERE / "audit_chaos_worker.py"),
                url,
                f"w{n}",
                str(tmp / f"log-{n}.jsonl"),
                str(tmp / "scratch"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


async def test_fifty_tasks_four_workers_random_sigkills(tmp_path: Path) -> None:
    """Under random SIGKILLs every task ends exactly once with the crash-free outcome, counters never go back, each resumed first turn carries the preamble once, and stored prompts and goals are unchanged."""
    url = f"sqlite:///{tmp_path}/chaos.db"
    submitted, expected = specs()
    async with await TaskBoard.open(url) as board:
        await board.submit_many(submitted)
    rng = random.Random(20240501)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    born: dict[int, float] = {}
    serial = 0
    for _ in range(4):
        procs[serial] = start(url, serial, tmp_path)
        born[serial] = time.monotonic()
        serial += 1
    kills = 0
    deadline = time.monotonic() + 80
    async with await TaskBoard.open(url) as board:
        while time.monotonic() < deadline:
            await asyncio.sleep(rng.uniform(0.3, 0.7))
            counts = await board.counts()
            if counts[TaskStatus.QUEUED] + counts[TaskStatus.RUNNING] == 0:
                break
            # Kill a worker that has been up long enough to be working, not starting.
            ready = [k for k in sorted(procs) if time.monotonic() - born[k] > 0.7]
            if kills < 20 and ready:
                victim = rng.choice(ready)
                procs[victim].kill()
                procs[victim].wait()  # reap it at once: a zombie would look alive
                del procs[victim]
                kills += 1
                procs[serial] = start(url, serial, tmp_path)
                born[serial] = time.monotonic()
                serial += 1
            for key, proc in list(procs.items()):
                if proc.poll() is not None:
                    err = (tmp_path / f"stderr-{key}.txt").read_text()
                    assert proc.returncode == 0, err
                    del procs[key]
                    procs[serial] = start(url, serial, tmp_path)
                    born[serial] = time.monotonic()
                    serial += 1
        for proc in procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        rows = {t.task_id: t for t in await board.tasks()}
        trails = {tid: await board.trail(tid) for tid in rows}
        all_text = []
        for stream in await board.journal.streams(board.app):
            all_text.extend(r.record.to_json() for r in await board.journal.read(board.app, stream))
    assert kills >= 8

    # Every task reached a terminal state exactly once, with the crash-free outcome.
    for tid, (status, rounds, audits) in expected.items():
        row, trail = rows[tid], trails[tid]
        assert row.status in TERMINAL, (tid, row.status)
        terminal = [r for r in trail if r.kind in TERMINAL_KINDS]
        assert len(terminal) == 1 and trail[-1] is terminal[0], (tid, [r.kind for r in trail])
        assert (row.status.value, row.round, row.audit_rounds) == (status, rounds, audits), tid

    # No round counter goes backwards; rounds start 1, 2, 3 … without gaps.
    resumed_rounds = 0
    for tid, trail in trails.items():
        seen = [int(r.payload["round"]) for r in trail if "round" in r.payload]  # type: ignore[call-overload]
        assert seen == sorted(seen), tid
        started = [r.payload["round"] for r in trail if r.kind == "task.round_started"]
        assert started == list(range(1, len(started) + 1)), tid
        audits = [r.payload["audit_round"] for r in trail if r.kind == "task.audited"]
        assert audits == list(range(1, len(audits) + 1)), tid
        resumed_rounds += sum(1 for r in trail if r.kind == "task.round_resumed")
    assert resumed_rounds >= 1, "no round was resumed: the kills never landed mid-round"

    # What each driver's model saw: the preamble exactly once on its first call, never after.
    calls: dict[str, list[dict[str, object]]] = {}
    errors = []
    for log in tmp_path.glob("log-*.jsonl"):
        for line in log.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut by SIGKILL
            if "error" in entry:
                errors.append(entry)
            else:
                calls.setdefault(str(entry["driver"]), []).append(entry)
    assert not errors, errors[:3]
    resumed_drivers = 0
    for entries in calls.values():
        first, rest = entries[0], entries[1:]
        if first["resumed"]:
            resumed_drivers += 1
            assert first["preambles"] == 1 and first["resume_note"], first
        elif first["round"] == 1:
            assert first["preambles"] == 0, first
        else:
            assert first["preambles"] == 1 and not first["resume_note"], first
        assert all(e["preambles"] == 0 for e in rest), entries
    assert resumed_drivers >= 1

    # Stored prompts and goals are byte-identical to what was submitted; no preamble stored.
    for spec in submitted:
        tid = str(spec.task_id)
        stored = trails[tid][0].payload["spec"]
        assert isinstance(stored, dict)
        assert stored["prompt"].encode() == spec.prompt.encode()  # type: ignore[union-attr]
        assert stored["goal"]["goal"].encode() == spec.goal.goal.encode()  # type: ignore[index, union-attr]
        assert rows[tid].spec.prompt.encode() == spec.prompt.encode()
        assert rows[tid].spec.goal == spec.goal
    assert not any(PREAMBLE_OPEN in text for text in all_text)
