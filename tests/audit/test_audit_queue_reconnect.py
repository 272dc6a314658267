"""Real connection drops (pg_terminate_backend, KILL CONNECTION) cost no claim and no worker."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from backends import server_store, terminate_postgres
from steadyloop.audit import TaskBoard, TaskQueue, TaskSpec, TaskStatus, open_queue
from steadyloop.journal._sql import Plan, Query

pytestmark = pytest.mark.server

HERE = Path(__file__).parent


async def _kill_mariadb(queue: TaskQueue) -> int:
    """KILL CONNECTION every connection the queue's MariaDB pool holds (found through it)."""
    from asyncmy import connect  # type: ignore[import-untyped]

    def who() -> Plan:
        rows = yield Query("SELECT CONNECTION_ID(), SLEEP(0.05)", fetch=True)
        return int(rows[0][0])

    ids = set(await asyncio.gather(*(queue.journal.run_plan(who, write=False) for _ in range(4))))
    conn = await connect(host="127.0.0.1", port=3306, user="root", database="test", autocommit=True)
    try:
        async with conn.cursor() as cur:
            for pid in ids:
                await cur.execute(f"KILL CONNECTION {pid}")
    finally:
        conn.close()
    return len(ids)


async def test_queue_calls_survive_terminated_postgres_connections() -> None:
    """After pg_terminate_backend of every pooled connection, each queue call succeeds once."""
    application = f"sl-{uuid.uuid4().hex[:10]}"
    async with server_store("postgres", application_name=application) as (url, _):
        base = url.split("?", 1)[0]
        async with await open_queue(url) as queue:
            await queue.submit_many([TaskSpec(prompt="p", task_id=f"t{i}") for i in range(3)])
            claims = []
            for step in range(3):
                assert await terminate_postgres(base, application) >= 1
                claim = await queue.claim(f"w{step}", 30)
                assert claim is not None
                claims.append(claim)
                assert await terminate_postgres(base, application) >= 1
                assert await queue.heartbeat(claim.task_id, claim.lease_token, 30)
                await terminate_postgres(base, application)
                await queue.settle(
                    claim.task_id, claim.lease_token, TaskStatus.COMPLETED, round=1, audit_rounds=1
                )
            rows = await queue.tasks()
            assert [(r.status, r.attempts) for r in rows] == [(TaskStatus.COMPLETED, 1)] * 3


async def test_queue_calls_survive_killed_mariadb_connections() -> None:
    """After KILL CONNECTION of the pool's MariaDB connections, queue calls succeed, one claim each."""
    async with server_store("mysql") as (url, _):
        async with await open_queue(url) as queue:
            await queue.submit_many([TaskSpec(prompt="p", task_id=f"t{i}") for i in range(2)])
            for step in range(2):
                await _kill_mariadb(queue)
                claim = await queue.claim(f"w{step}", 30)
                assert claim is not None
                await _kill_mariadb(queue)
                assert await queue.heartbeat(claim.task_id, claim.lease_token, 30)
                await _kill_mariadb(queue)
                await queue.settle(
                    claim.task_id, claim.lease_token, TaskStatus.COMPLETED, round=1, audit_rounds=1
                )
            rows = await queue.tasks()
            assert [(r.status, r.attempts) for r in rows] == [(TaskStatus.COMPLETED, 1)] * 2


async def test_an_idle_worker_forever_survives_connection_drops(tmp_path: Path) -> None:
    """An idle `audit work --forever` lives through five terminations, then works a new task once."""
    application = f"sl-{uuid.uuid4().hex[:10]}"
    async with server_store("postgres", application_name=application) as (url, _):
        base = url.split("?", 1)[0]
        async with await TaskBoard.open(url) as board:
            await board.submit(TaskSpec(prompt="Say done", task_id="first"))
        env = {**os.environ, "PYTHONPATH": str(HERE), "COLUMNS": "200"}
        worker = subprocess.Popen(
            [
                *[sys.executable, "-m", "steadyloop", "audit", "work", "--forever", "-s", url],
                *["--agent", "audit_cli_agent:agent", "--lease", "30"],
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            async with await TaskBoard.open(url, create=False) as board:
                deadline = time.monotonic() + 60
                while (await board.get("first")).status is not TaskStatus.COMPLETED:
                    assert time.monotonic() < deadline and worker.poll() is None
                    await asyncio.sleep(0.2)
                dropped = 0
                for _ in range(5):
                    dropped += await terminate_postgres(base, application)
                    await asyncio.sleep(0.6)
                    assert worker.poll() is None, "the worker died of a connection drop"
                assert dropped >= 5, "the worker's connections were terminated"
                await board.submit(TaskSpec(prompt="Say done", task_id="second"))
                deadline = time.monotonic() + 60
                while (await board.get("second")).status is not TaskStatus.COMPLETED:
                    assert time.monotonic() < deadline, "the worker did not pick up new work"
                    assert worker.poll() is None, "the worker died of a connection drop"
                    await asyncio.sleep(0.2)
                second = await board.get("second")
                assert second.attempts == 1, "a blip cost a claim"
        finally:
            worker.send_signal(signal.SIGKILL)
            output = worker.communicate(timeout=30)[0]
        assert "AdminShutdown" not in output, output


async def test_the_notification_listener_reconnects_after_a_drop() -> None:
    """After pg_terminate_backend of its LISTEN connection, an idle waiter is still woken by NOTIFY."""
    application = f"sl-{uuid.uuid4().hex[:10]}"
    async with server_store("postgres", application_name=application) as (url, _):
        base = url.split("?", 1)[0]
        async with await open_queue(url, poll=30) as waiter, await open_queue(url) as submitter:
            assert not await waiter.wait_for_task(0.5)  # listening now
            assert await terminate_postgres(base, application) >= 2
            await asyncio.sleep(1.0)
            started = time.monotonic()
            woken = asyncio.ensure_future(waiter.wait_for_task(60))
            await asyncio.sleep(0.5)
            await submitter.submit(TaskSpec(prompt="p", task_id="x"))
            assert await asyncio.wait_for(woken, 60)
            assert time.monotonic() - started < 20, "woken by the poll, not by NOTIFY"
