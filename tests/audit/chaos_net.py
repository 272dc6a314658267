"""Audit workers under real network and server faults: the run, its observer and its counts.

One function, `run_chaos`, submits goal-mode tasks whose verify command holds a lock
in the task's folder, starts worker processes, and while a fault plays out watches
from outside them:

* **overlaps**: moments when two live verify processes of one task run at once, seen
  by this process through ``/proc`` (each verify's ``cwd`` is its task folder, where it
  holds ``.verify.lock``), and also reported by a verify that finds the lock taken;
* **orphans**: live verify processes with no live worker above them;
* **dead workers**: worker processes that exited with an error.

At the end it counts, from the store: tasks whose trail ended more or less than once
or whose row disagrees with the trail or with the task's crash-free outcome, and
acknowledged writes lost (each worker logs the trail records it was told were written;
every one must be in the trail).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit_helpers import marked
from test_audit_chaos import VERIFY, chaos_specs, orphans

from steadyloop.audit import TaskBoard

HERE = Path(__file__).parent
TERMINAL_KINDS = {"task.completed", "task.needs_human", "task.goal_unmet", "task.blocked"}
ACKED = {
    "round": "task.round_started",
    "verified": "task.verified",
    "completed": "task.completed",
    "needs-human": "task.needs_human",
    "goal-unmet": "task.goal_unmet",
}
"""Worker events emitted once their trail record was acknowledged, and that record's kind."""


@dataclass
class Counts:
    """What one chaos run saw (every count but ``tasks``, ``workers`` and the fault's is 0 when all held)."""

    fault: str
    backend: str
    tasks: int
    workers: int
    seconds: float = 0.0
    not_terminal_once: int = 0
    wrong_outcome: int = 0
    overlaps: int = 0
    overlaps_reported: int = 0
    orphans: int = 0
    dead_workers: int = 0
    acked_lost: int = 0
    acked_writes: int = 0
    worker_errors: int = 0
    killed_at_budget: int = 0
    journal_kills: int = 0
    journal_acked: int = 0
    journal_acked_lost: int = 0
    journal_duplicates: int = 0
    fault_events: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def held(self) -> bool:
        """Whether every promise held."""
        return not (
            self.not_terminal_once
            or self.wrong_outcome
            or self.overlaps
            or self.overlaps_reported
            or self.orphans
            or self.dead_workers
            or self.acked_lost
            or self.killed_at_budget
            or self.journal_acked_lost
            or self.journal_duplicates
        )

    def to_json(self) -> dict[str, Any]:
        """The counts as a JSON object (problems cut to the first 20)."""
        out = dict(self.__dict__)
        out["problems"] = self.problems[:20]
        return out


def worker_argv(url: str, name: str, tmp: Path, lease: float, heartbeat: float) -> list[str]:
    """The command line of one chaos worker process (its log and scratch under ``tmp``)."""
    return [
        sys.executable,
        str(HERE / "audit_chaos_worker.py"),
        url,
        name,
        str(tmp / f"log-{name}.jsonl"),
        str(tmp / "scratch"),
        "subprocess",
        str(lease),
        str(heartbeat),
    ]


def writer_argv(url: str, log: Path, generation: int) -> list[str]:
    """The command line of one `journal_writer` process (appending until it is killed)."""
    return [sys.executable, str(HERE / "journal_writer.py"), url, str(log), str(generation)]


def spawn(argv: list[str], err: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` with its standard error in ``err``."""
    return _spawn(argv, err)


def _spawn(argv: list[str], err: Path) -> subprocess.Popen[bytes]:
    with open(err, "wb") as out:
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out)


def _overlapping(marker: str) -> list[str]:
    """Task folders in which two or more live verify processes run now."""
    seen: dict[str, int] = {}
    for pid in marked(marker):
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if not cmd.startswith(b"sleep"):
                continue  # the verify's ``sleep``: one per live verify (not its shell, flock)
            cwd = os.readlink(f"/proc/{pid}/cwd")
            seen[cwd] = seen.get(cwd, 0) + 1
    return sorted(cwd for cwd, n in seen.items() if n > 1)


async def run_chaos(
    *,
    fault: str,
    backend: str,
    board_url: str,
    worker_urls: list[str],
    tmp: Path,
    marker: str,
    tasks: int,
    wrap: Callable[[int, list[str]], list[str]] | None = None,
    step: Callable[[float], Awaitable[None]] | None = None,
    lease: float = 3.0,
    heartbeat: float = 0.2,
    budget: float = 600.0,
    writer_url: str | None = None,
    writer_wrap: Callable[[list[str]], list[str]] | None = None,
    writer_kills: tuple[float, ...] = (),
) -> Counts:
    """Run ``tasks`` chaos tasks on ``len(worker_urls)`` workers while ``step`` makes a fault.

    Args:
        fault: The fault's name (for the counts).
        backend: The store's name (for the counts).
        board_url: Where this process (the observer) reads the store, around the fault.
        worker_urls: Each worker's URL (through a proxy, say).
        tmp: The run's folder.
        marker: The verify processes' marker.
        tasks: How many tasks.
        wrap: ``wrap(index, argv)``: the command to start worker ``index`` with (in a
            network namespace, say).
        step: Called every 0.2 s with the seconds since every worker began its first
            round (a worker's start, opening its store, is not under test); it plays
            the fault.
        lease: The workers' lease.
        heartbeat: The workers' heartbeat.
        budget: Seconds the run may take.
        writer_url: Where a `journal_writer` process appends (through the fault, as a
            worker's store is) while the workers work; ``None``: no writer.
        writer_wrap: ``writer_wrap(argv)``: the command to start it with.
        writer_kills: Seconds on the fault's clock at which the writer is SIGKILLed
            (and a new one started); the last one is SIGKILLed when the workers end.
            Every append it logged as acknowledged must then be in the journal, once.
    """
    counts = Counts(fault, backend, tasks, len(worker_urls))
    specs, expected = chaos_specs(marker, tasks)
    async with await TaskBoard.open(board_url) as board:
        await board.submit_many(specs)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    errs: dict[int, Path] = {}
    for index, url in enumerate(worker_urls):
        argv = worker_argv(url, f"w{index}", tmp, lease, heartbeat)
        if wrap is not None:
            argv = wrap(index, argv)
        errs[index] = tmp / f"stderr-w{index}.txt"
        procs[index] = _spawn(argv, errs[index])
    writer_log = tmp / "writer.jsonl"
    generation = 0
    writer: subprocess.Popen[bytes] | None = None

    def start_writer() -> subprocess.Popen[bytes]:
        nonlocal generation
        assert writer_url is not None
        generation += 1
        argv = writer_argv(writer_url, writer_log, generation)
        if writer_wrap is not None:
            argv = writer_wrap(argv)
        return _spawn(argv, tmp / f"stderr-writer{generation}.txt")

    def kill_writer() -> None:
        if writer is not None and writer.poll() is None:
            writer.kill()  # SIGKILL: whatever it had in flight is cut off
            writer.wait()
            counts.journal_kills += 1

    if writer_url is not None:
        writer = start_writer()
    kills = sorted(writer_kills)
    began = time.monotonic()
    ready: float | None = None  # when every worker had begun a round: the fault's clock

    async def writer_killer() -> None:
        # Apart from ``step``, which waits for each restart to end: the kill falls
        # inside the fault, not after it.
        nonlocal writer
        while kills:
            await asyncio.sleep(0.05)
            if ready is not None and time.monotonic() - ready >= kills[0]:
                kills.pop(0)
                kill_writer()
                writer = start_writer()

    killing = asyncio.ensure_future(writer_killer()) if writer_url is not None else None
    logs = [tmp / f"log-w{index}.jsonl" for index in range(len(worker_urls))]
    overlap_dirs: set[str] = set()
    orphan_seen: set[str] = set()
    try:
        while time.monotonic() - began < budget:
            await asyncio.sleep(0.2)
            if ready is None and (
                all(log.exists() and log.stat().st_size > 0 for log in logs)
                or time.monotonic() - began > 30
            ):
                ready = time.monotonic()
            if step is not None and ready is not None:
                await step(time.monotonic() - ready)
            live = {p.pid for p in procs.values() if p.poll() is None}
            both = _overlapping(marker)
            if both:
                counts.overlaps += len(both)
                overlap_dirs.update(both)
            for line in orphans(marker, live):
                orphan_seen.add(line)
            if not live:
                break  # every worker ended: the queue is drained (or they died)
    finally:
        if killing is not None:
            killing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await killing
        kill_writer()
        for index, proc in procs.items():
            if proc.poll() is None:  # out of budget (or the observer failed): ours to end
                proc.kill()
                proc.wait()
                counts.killed_at_budget += 1
                counts.problems.append(f"worker w{index} still working after {budget:g} s")
    counts.seconds = round(time.monotonic() - began, 1)
    counts.orphans = len(orphan_seen)
    counts.problems += [f"overlap in {d}" for d in sorted(overlap_dirs)]
    counts.problems += [f"orphan {o}" for o in sorted(orphan_seen)]
    for index, proc in procs.items():
        if proc.returncode not in (0, -9):
            counts.dead_workers += 1
            counts.problems.append(
                f"worker w{index} exited {proc.returncode}: {errs[index].read_text()[-800:]}"
            )
    reported = tmp / "scratch" / "overlaps.txt"
    if reported.exists():
        counts.overlaps_reported = len(reported.read_text().splitlines())
    await _count_store(board_url, tmp, expected, counts)
    if writer_url is not None:
        lost, duplicates, counts.journal_acked = await writer_survivors(board_url, writer_log)
        counts.journal_acked_lost, counts.journal_duplicates = len(lost), len(duplicates)
        counts.problems += [f"acknowledged append {x} is lost" for x in lost]
        counts.problems += [f"append {x} is stored twice" for x in duplicates]
    return counts


async def _count_store(
    url: str, tmp: Path, expected: dict[str, tuple[str, int, int]], counts: Counts
) -> None:
    for _ in range(100):  # the store may still be coming back from the fault
        try:
            async with await TaskBoard.open(url, create=False) as board:
                rows = {t.task_id: t for t in await board.tasks()}
                trails = {tid: await board.trail(tid) for tid in rows}
            break
        except Exception:  # a restarting server
            await asyncio.sleep(0.5)
    else:  # pragma: no cover - the store never came back
        raise AssertionError(f"the store at {url} did not come back")
    for tid, (status, rounds, audits) in expected.items():
        row, trail = rows.get(tid), trails.get(tid, [])
        terminal = [r for r in trail if r.kind in TERMINAL_KINDS]
        if len(terminal) != 1 or trail[-1] is not terminal[0]:
            counts.not_terminal_once += 1
            counts.problems.append(f"{tid}: trail {[r.kind for r in trail]}")
            continue
        if row is None or (row.status.value, row.round, row.audit_rounds) != (
            status,
            rounds,
            audits,
        ):
            counts.wrong_outcome += 1
            got = None if row is None else (row.status.value, row.round, row.audit_rounds)
            told = [
                (r.kind, {k: v for k, v in r.payload.items() if k != "preamble"}) for r in trail
            ]
            counts.problems.append(
                f"{tid}: row {got}, expected {(status, rounds, audits)}; trail {told}"
            )
    for log in tmp.glob("log-*.jsonl"):
        for line in log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if "error" in entry:
                    counts.worker_errors += 1
                    counts.problems.append(f"worker error: {entry['error'][:300]}")
                kind = ACKED.get(entry.get("ack", ""))
                if kind is None:
                    continue
                counts.acked_writes += 1
                kinds = [r.kind for r in trails.get(entry["task"], [])]
                if kind not in kinds:
                    counts.acked_lost += 1
                    counts.problems.append(f"acknowledged {kind} of {entry['task']} is lost")


async def writer_survivors(url: str, *logs: Path) -> tuple[list[str], list[str], int]:
    """Check every append a `journal_writer` process logged as acknowledged, in the store.

    Returns:
        The acknowledged appends missing from the journal, those stored more than once
            (as ``GENERATION-N``), and how many were acknowledged.
    """
    from journal_writer import NAMESPACE, stream

    from steadyloop.journal import open_journal

    acked: list[tuple[int, int, str]] = []
    for log in logs:
        if not log.exists():
            continue
        for line in log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if "ack" in entry:
                    acked.append((int(entry["gen"]), int(entry["ack"]), str(entry["id"])))
    stored: dict[int, list[Any]] = {}
    for _ in range(100):  # the store may still be coming back from the fault
        try:
            journal = await open_journal(url, create=False)
            try:
                for gen in sorted({g for g, _, _ in acked}):
                    stored[gen] = await journal.read(NAMESPACE, stream(gen))
            finally:
                await journal.close()
            break
        except Exception:  # a restarting server
            await asyncio.sleep(0.5)
    else:  # pragma: no cover - the store never came back
        raise AssertionError(f"the journal at {url} did not come back")
    lost, duplicates = [], []
    for gen, n, rec_id in acked:
        found = [r.record for r in stored.get(gen, []) if r.record.payload.get("n") == n]
        if not any(r.id == rec_id for r in found):
            lost.append(f"{gen}-{n}")
        if len(found) > 1:
            duplicates.append(f"{gen}-{n}")
    return lost, duplicates, len(acked)


__all__ = [
    "VERIFY",
    "Counts",
    "run_chaos",
    "spawn",
    "worker_argv",
    "writer_argv",
    "writer_survivors",
]


FAULTS = ("latency", "blackhole", "postgres-restart", "postgres-sigkill", "mariadb-restart")
"""The faults `chaos_under` makes."""

LATENCY_LEASE = 10.0
"""The lease under latency: a renewal is a few round trips of up to 0.3 s, or one stall of
2 s; the worker's own deadline (lease less one heartbeat) must not expire on that alone."""

LATENCY_HEARTBEAT = 1.0
"""The heartbeat under latency: a renewal every 0.2 s would be one long chain of slow
round trips, competing with the round's own writes for the worker's connections."""


def _at(times: list[float], action: Callable[[], None]) -> Callable[[float], Awaitable[None]]:
    """A fault step that runs ``action`` (in a thread) once at each of ``times`` (seconds)."""
    due = sorted(times)

    async def step(now: float) -> None:
        while due and now >= due[0]:
            due.pop(0)
            await asyncio.to_thread(action)

    return step


async def chaos_under(
    fault: str,
    tmp: Path,
    marker: str,
    *,
    tasks: int,
    workers: int,
    times: tuple[float, ...] = (4.0, 12.0, 20.0),
) -> Counts:
    """One chaos run of ``tasks`` tasks on ``workers`` workers under ``fault`` (see `FAULTS`).

    * ``latency``: every worker reaches the shared PostgreSQL (under a private table
      prefix) through a `FaultProxy`: 200 ms ± 100 per round trip, every 20th stalled
      for 2 s;
    * ``blackhole``: worker 0 runs in a network namespace of its own (`Blackhole`) and
      reaches a private PostgreSQL over its veth pair; its route goes dark for 2.5
      leases from the first of ``times``, up to three times (5 s of light in between),
      and comes back;
    * ``postgres-restart`` / ``postgres-sigkill``: a private PostgreSQL is restarted
      (``pg_ctl restart -m fast``) or its postmaster SIGKILLed (crash recovery) at
      each of ``times`` (seconds into the run);
    * ``mariadb-restart``: a private MariaDB is restarted at each of ``times``.
    """
    from private_servers import PrivateMariaDB, PrivatePostgres

    from backends import server_store
    from steadyloop.faults import Blackhole, FaultProxy, Latency

    common: dict[str, Any] = {"tmp": tmp, "marker": marker, "tasks": tasks}
    if fault == "latency":
        async with server_store("postgres") as (url, _):
            from steadyloop._urls import parse_url

            target = parse_url(url)
            host, port = target.host or "127.0.0.1", target.port or 5432
            latency = Latency(0.2, 0.1, stall_every=20, stall_for=2.0)
            async with FaultProxy(host, port, latency=latency, seed=fault) as proxy:
                through = url.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}", 1)
                counts = await run_chaos(
                    fault=fault,
                    backend="postgres",
                    board_url=url,
                    worker_urls=[through] * workers,
                    lease=LATENCY_LEASE,
                    heartbeat=LATENCY_HEARTBEAT,
                    budget=1500.0,
                    writer_url=through,
                    writer_kills=(10.0, 30.0, 60.0),
                    **common,
                )
                counts.fault_events = {
                    "round_trips": proxy.round_trips,
                    "delayed": len(proxy.delays),
                    "stalls": proxy.stalls,
                }
        return counts
    if fault == "blackhole":
        lease = 3.0
        with Blackhole() as hole, PrivatePostgres(listen="*") as pg:
            dark: list[float] = []
            restored: list[float] = []  # wall clock, to compare with the workers' logs

            start = times[0]  # the first dark spell: 4 s in by default

            async def step(now: float) -> None:
                # Dark for 2.5 leases from `start`, 12.5 s and 25 s later; light in between.
                phase = (now - start) % (lease * 2.5 + 5.0)
                want = start <= now < start + 3 * (lease * 2.5 + 5.0) and phase < lease * 2.5
                if want and not hole.dark:
                    await asyncio.to_thread(hole.blackhole)
                    dark.append(now)
                elif not want and hole.dark:
                    await asyncio.to_thread(hole.restore)
                    restored.append(time.time())

            urls = [pg.url(hole.host_ip)] + [pg.url()] * (workers - 1)
            counts = await run_chaos(
                fault=fault,
                backend="postgres",
                board_url=pg.url(),
                worker_urls=urls,
                wrap=lambda i, argv: hole.command(argv) if i == 0 else argv,
                step=step,
                lease=lease,
                # The writer shares worker 0's cut-off route; it is killed in each dark spell.
                writer_url=pg.url(hole.host_ip),
                writer_wrap=hole.command,
                writer_kills=tuple(start + k * (lease * 2.5 + 5.0) + lease for k in range(3)),
                **common,
            )
            entries = [
                json.loads(line)
                for line in (tmp / "log-w0.jsonl").read_text().splitlines()
                if line.startswith("{")
            ]
            counts.fault_events = {
                "blackholed": len(dark),
                # The cut-off worker's leases it gave up by its own deadline, and the
                # trail writes it made after the route came back.
                "hole_worker_fenced": sum(e.get("event") == "lease-lost" for e in entries),
                "hole_worker_acks_after_restore": sum(
                    "ack" in e and bool(restored) and e["time"] > restored[0] for e in entries
                ),
            }
        return counts
    if fault in ("postgres-restart", "postgres-sigkill"):
        with PrivatePostgres() as pg:
            action = pg.restart if fault == "postgres-restart" else pg.kill_postmaster
            counts = await run_chaos(
                fault=fault,
                backend="postgres",
                board_url=pg.url(),
                worker_urls=[pg.url()] * workers,
                step=_at(list(times), action),
                writer_url=pg.url(),
                writer_kills=tuple(t + 0.3 for t in times),  # while the server is down
                **common,
            )
            counts.fault_events = {"restarts": pg.restarts, "postmaster_kills": pg.kills}
        return counts
    if fault == "mariadb-restart":
        with PrivateMariaDB() as db:
            counts = await run_chaos(
                fault=fault,
                backend="mariadb",
                board_url=db.url(),
                worker_urls=[db.url()] * workers,
                step=_at(list(times), db.restart),
                writer_url=db.url(),
                writer_kills=tuple(t + 0.3 for t in times),  # while the server is down
                **common,
            )
            counts.fault_events = {"restarts": db.restarts}
        return counts
    raise ValueError(f"unknown fault {fault!r}; expected one of {FAULTS}")
