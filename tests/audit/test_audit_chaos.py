"""Workers SIGKILLed, SIGSTOPped and cut off from their store: the audit loop's promises hold."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from audit_helpers import marked, new_marker

from backends import require_server, server_store, terminate_postgres
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


def start(url: str, n: int, tmp: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(tmp / f"stderr-{n}.txt", "wb") as err:
        return subprocess.Popen(
            [
                sys.executable,
                str(HERE / "audit_chaos_worker.py"),
                url,
                f"w{n}",
                str(tmp / f"log-{n}.jsonl"),
                str(tmp / "scratch"),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def working(tmp: Path, n: int, born: float) -> bool:
    """Whether worker ``n`` is past its start-up: it has made a model call (and a while ago).

    Killing workers by age alone hits, on a loaded machine, only ones still starting.
    """
    log = tmp / f"log-{n}.jsonl"
    return time.monotonic() - born > 0.5 and log.exists() and log.stat().st_size > 0


@pytest.mark.chaos
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
            ready = [k for k in sorted(procs) if working(tmp_path, k, born[k])]
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
            elif "driver" in entry:
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


# -- SIGKILL, SIGSTOP/SIGCONT and connection drops, with real verify commands -----------

VERIFY = (
    "flock -n -E 75 .verify.lock sleep 0.3{marker}; "
    'if [ $? -eq 75 ]; then echo "$PWD" >> ../overlaps.txt; fi; '
    'test "$(cat answer.txt 2>/dev/null)" = 42'
)
"""The verify command: holds a lock on the task's folder for 0.3 s (a second verify of
the same task while one is alive finds it taken and says so), then checks the answer.
Its ``sleep`` carries a marker, so the test can find every live verify process."""


def chaos_specs(marker: str, n: int) -> tuple[list[TaskSpec], dict[str, tuple[str, int, int]]]:
    out, expected = [], {}
    command = ("sh", "-c", VERIFY.format(marker=marker))
    for i in range(n):
        kind = ORDER[i % 5]
        prefix, budget, status, rounds, audits = KINDS[kind]
        tid = f"task-{i:02d}"
        out.append(
            TaskSpec(
                prompt=f"{prefix}: write 42 into answer.txt. Task {tid}.",
                task_id=tid,
                priority=i % 3,
                goal=GoalSpec("answer.txt holds 42", VerifySpec(command), round_budget=budget),
            )
        )
        expected[tid] = (status, rounds, audits)
    return out, expected


def ancestors(pid: int) -> list[int] | None:
    """The parent chain of a process up to init, or ``None`` if one exited meanwhile."""
    chain = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None  # it (or a parent) just exited: nothing is orphaned there
        pid = int(stat[stat.rfind(")") + 2 :].split()[1])
        chain.append(pid)
    return chain


def orphans(marker: str, workers: set[int]) -> list[str]:
    """Live verify processes with no live worker above them (with their parent chains)."""
    out = []
    for pid in marked(marker):
        chain = ancestors(pid)
        if chain is not None and not workers.intersection(chain) and pid in marked(marker):
            names = []
            for p in [pid, *chain]:
                with contextlib.suppress(OSError):
                    names.append(f"{p}:{Path(f'/proc/{p}/cmdline').read_bytes()[:60]!r}")
            out.append(" < ".join(names))
    return out


@pytest.mark.chaos(smoke=["sqlite"])
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.server)])
async def test_kills_stops_and_connection_drops(tmp_path: Path, backend: str) -> None:
    """Under SIGKILLs, SIGSTOP/SIGCONT and (PostgreSQL) repeated pg_terminate_backend: every task ends once with its crash-free outcome, no worker dies of a drop, no verify command is orphaned or overlaps another, only touched workers lose leases, and a stopped worker's late results are refused."""
    marker = new_marker()
    application = f"sl-chaos-{uuid.uuid4().hex[:8]}"
    async with contextlib.AsyncExitStack() as stack:
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path}/chaos.db"
        else:
            url, _ = await stack.enter_async_context(
                server_store("postgres", application_name=application)
            )
        await _chaos(url, backend, tmp_path, marker, application)


LEASE = 3.0
"""The lease in the drop test: generous enough that a reconnect after a drop (bounded
backoff) renews it in time on a loaded machine; a stop outlasts it."""


async def _chaos(url: str, backend: str, tmp: Path, marker: str, application: str) -> None:
    submitted, expected = chaos_specs(marker, 15)
    async with await TaskBoard.open(url) as board:
        await board.submit_many(submitted)
    rng = random.Random(20261201)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    names: dict[int, str] = {}
    born: dict[int, float] = {}
    touched: set[str] = set()  # workers we killed or stopped
    stopped_names: set[str] = set()
    killed_names: set[str] = set()
    stopped: dict[int, float] = {}
    serial = 0
    kills = stops = drops = 0
    orphan_seen: list[str] = []

    def spawn() -> None:
        nonlocal serial
        procs[serial] = start(url, serial, tmp, "subprocess", str(LEASE))
        names[serial] = f"w{serial}"
        born[serial] = time.monotonic()
        serial += 1

    for _ in range(3):
        spawn()
    deadline = time.monotonic() + 80
    next_drop = time.monotonic() + 2.0
    async with await TaskBoard.open(url) as board:
        while time.monotonic() < deadline:
            await asyncio.sleep(rng.uniform(0.3, 0.6))
            live = {p.pid for p in procs.values() if p.poll() is None}
            orphan_seen += orphans(marker, live)
            counts = await board.counts()
            if counts[TaskStatus.QUEUED] + counts[TaskStatus.RUNNING] == 0:
                break
            for key, since in list(stopped.items()):
                if time.monotonic() - since > LEASE + 1.5:  # well past the lease
                    procs[key].send_signal(signal.SIGCONT)
                    del stopped[key]
            ready = [k for k in sorted(procs) if working(tmp, k, born[k]) and k not in stopped]
            roll = rng.random()
            if ready and roll < 0.45 and kills < 12:
                victim = rng.choice(ready)
                procs[victim].kill()
                procs[victim].wait()  # reap it at once: a zombie would look alive
                touched.add(names[victim])
                killed_names.add(names[victim])
                del procs[victim]
                kills += 1
                spawn()
                await asyncio.sleep(0.3)  # the supervisor's reaction time, generously
                live = {p.pid for p in procs.values() if p.poll() is None}
                orphan_seen += orphans(marker, live)
            elif ready and roll < 0.6 and stops < 4 and not stopped:
                # Stop a worker that holds a task, so its lease passes while it sleeps.
                owners = {t.owner for t in await board.tasks(TaskStatus.RUNNING)}
                holders = [k for k in ready if names[k] in owners]
                if holders:
                    victim = rng.choice(holders)
                    procs[victim].send_signal(signal.SIGSTOP)
                    touched.add(names[victim])
                    stopped_names.add(names[victim])
                    stopped[victim] = time.monotonic()
                    stops += 1
            if backend == "postgres" and time.monotonic() >= next_drop:
                drops += await terminate_postgres(await require_server("postgres"), application)
                next_drop = time.monotonic() + rng.uniform(2.0, 4.0)
            for key, proc in list(procs.items()):
                if proc.poll() is not None:
                    err = (tmp / f"stderr-{key}.txt").read_text()
                    assert proc.returncode == 0, err[-3000:]  # no worker lost to a drop
                    del procs[key]
                    spawn()
        for key in list(stopped):
            procs[key].send_signal(signal.SIGCONT)
        for key, proc in procs.items():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            assert proc.returncode == 0, (tmp / f"stderr-{key}.txt").read_text()[-3000:]
        rows = {t.task_id: t for t in await board.tasks()}
        trails = {tid: await board.trail(tid) for tid in rows}
    assert kills >= 6 and stops >= 1
    if backend == "postgres":
        assert drops >= 8, drops

    for tid, (status, rounds, audits) in expected.items():
        row, trail = rows[tid], trails[tid]
        terminal = [r for r in trail if r.kind in TERMINAL_KINDS]
        assert len(terminal) == 1 and trail[-1] is terminal[0], (tid, [r.kind for r in trail])
        assert (row.status.value, row.round, row.audit_rounds) == (status, rounds, audits), tid
        audits_seen = [r.payload["audit_round"] for r in trail if r.kind == "task.audited"]
        assert audits_seen == list(range(1, len(audits_seen) + 1)), tid
        # A lease is lost only by a worker we killed or stopped: no claim went to a blip.
        for r in trail:
            if r.kind == "task.lease_lost":
                assert r.payload["worker"] in touched, (tid, r.payload)
    assert not orphan_seen, f"verify processes outlived their worker: {orphan_seen}"
    overlaps = tmp / "scratch" / "overlaps.txt"
    assert not overlaps.exists(), overlaps.read_text()
    assert not marked(marker)
    # A stopped worker that lost its lease had its late writes refused (never recorded).
    fenced = []
    for log in tmp.glob("log-*.jsonl"):
        for line in log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                assert "error" not in entry, entry
                if entry.get("event") == "lease-lost":
                    fenced.append(entry)
    assert all(e["worker"] in touched for e in fenced), fenced
    lost_by = {
        str(r.payload["worker"])
        for trail in trails.values()
        for r in trail
        if r.kind == "task.lease_lost"
    }
    for name in (stopped_names & lost_by) - killed_names:
        # Its lease passed to another while it was stopped: once continued, its next
        # write was refused (lease-lost), so nothing it did late was recorded.
        assert name in {e["worker"] for e in fenced}, (name, fenced)
