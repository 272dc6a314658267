"""Several workers on the real PostgreSQL server never hold the same task at once."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backends import CONNECT_TIMEOUT, server_store
from steadyloop.audit import TaskSpec, TaskStatus, open_queue

pytestmark = pytest.mark.server

HERE = Path(__file__).parent


async def test_four_processes_never_hold_one_task_at_the_same_time(tmp_path: Path) -> None:
    """Four claimer processes cycling through 12 tasks for 3 s never hold one task in overlapping intervals."""
    async with server_store("postgres") as (url, _):
        queue = await open_queue(url)
        try:
            await queue.submit_many([TaskSpec(prompt="p", task_id=f"k{i:02d}") for i in range(12)])
        finally:
            await queue.close()
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "audit_pg_claimer.py"),
                    url,
                    f"w{n}",
                    "3",
                    str(tmp_path / f"w{n}.json"),
                ]
            )
            for n in range(4)
        ]
        for p in procs:
            assert p.wait(timeout=60) == 0
        holds = []
        for n in range(4):
            holds.extend(json.loads((tmp_path / f"w{n}.json").read_text()))
        assert len({w for _, w, _, _ in holds}) == 4, "every worker got work"
        assert len(holds) > 100
        by_task: dict[str, list[tuple[float, float, str]]] = {}
        for task, worker, start, end in holds:
            by_task.setdefault(task, []).append((start, end, worker))
        for task, spans in by_task.items():
            spans.sort()
            for (_, end, w1), (start, _, w2) in itertools.pairwise(spans):
                assert start >= end, f"{task} held by {w1} and {w2} at once"


async def test_a_locked_row_is_skipped_not_waited_for() -> None:
    """While another transaction locks the best task's row, a claim returns the next task at once."""
    import psycopg

    async with server_store("postgres") as (url, prefix):
        queue = await open_queue(url)
        try:
            await queue.submit(TaskSpec(prompt="p", task_id="first", priority=9))
            await queue.submit(TaskSpec(prompt="p", task_id="second"))
            conninfo = url.split("?", 1)[0]
            async with await psycopg.AsyncConnection.connect(
                conninfo, connect_timeout=CONNECT_TIMEOUT
            ) as conn:
                await conn.execute(
                    f"SELECT 1 FROM {prefix}audit_tasks WHERE task_id = 'first' FOR UPDATE"
                )
                claim = await queue.claim("w", 30)
                assert claim is not None and claim.task_id == "second"
                assert await queue.claim("w", 30) is None
                await conn.rollback()
            claim = await queue.claim("w", 30)
            assert claim is not None and claim.task_id == "first"
            assert (await queue.get("first")).status is TaskStatus.RUNNING
        finally:
            await queue.close()


class _SkewedClock:
    def __init__(self, offset_s: float) -> None:
        self.offset_us = int(offset_s * 1_000_000)

    def now_us(self) -> int:
        return time.time_ns() // 1000 + self.offset_us


async def test_skewed_worker_clocks_cannot_both_hold_a_task() -> None:
    """On PostgreSQL leases are compared with the server's clock, so a worker whose clock runs 45 s ahead cannot take a live lease."""
    async with server_store("postgres") as (url, _prefix):
        a = await open_queue(url, clock=_SkewedClock(-45))
        b = await open_queue(url, clock=_SkewedClock(45))
        try:
            await a.submit(TaskSpec(prompt="p", task_id="t"))
            held = await a.claim("A", 30)
            assert held is not None
            assert await a.heartbeat("t", held.lease_token, 30)
            assert await b.claim("B", 30) is None
            assert abs(held.lease_expires - (time.time_ns() // 1000 + 30_000_000)) < 10_000_000
            # A short lease still expires by the server's clock, whatever the workers say.
            await a.settle("t", held.lease_token, TaskStatus.QUEUED, round=0, audit_rounds=0)
            short = await a.claim("A", 0.2)
            assert short is not None and await b.claim("B", 30) is None
            await asyncio.sleep(0.4)
            taken = await b.claim("B", 30)
            assert taken is not None and taken.previous_owner == "A"
        finally:
            await a.close()
            await b.close()
