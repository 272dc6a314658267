"""The PostgreSQL pool hands out live connections without a round trip per plan.

A connection the server ended while it sat idle (``pg_terminate_backend``) must not
fail the call given to it: the pool's check replaces it when its socket shows the
server's goodbye, and one that dies too recently for that fails at its first statement,
before any COMMIT, and the plan runs again on another connection.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import backends
from backends import CONNECT_TIMEOUT, server_store, terminate_postgres
from steadyloop.journal import StreamWrite, _postgres, open_journal
from steadyloop.journal._postgres import PostgresJournal
from steadyloop.records import Record

pytestmark = pytest.mark.server

NS = "pool"


def rec(i: int) -> Record:
    return Record(kind="test.item", payload={"i": i}, id=f"r{i}", time=1)


async def test_a_healthy_idle_connection_is_handed_out_without_a_round_trip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Twenty reads on live pooled connections run the round-trip check not once."""
    checks = 0
    real = AsyncConnectionPool.check_connection

    async def counting(conn: Any) -> None:
        nonlocal checks
        checks += 1
        await real(conn)

    monkeypatch.setattr(AsyncConnectionPool, "check_connection", staticmethod(counting))
    async with server_store("postgres") as (url, _):
        async with await open_journal(url) as journal:
            await journal.append(NS, StreamWrite("s", [rec(0)]))
            for _ in range(20):
                assert await journal.head(NS, "s") == 1
    assert checks == 0


async def test_a_connection_the_server_ended_while_idle_is_refused_by_the_check() -> None:
    """Once the server ended an idle connection, the pool's check raises for it."""
    application = f"sl-{uuid.uuid4().hex[:10]}"
    base = await backends.require_server("postgres")
    conn = await psycopg.AsyncConnection.connect(
        base, autocommit=True, application_name=application, connect_timeout=CONNECT_TIMEOUT
    )
    try:
        await _postgres._check_idle_connection(conn)  # alive: passes
        assert (
            await terminate_postgres(backends.server_url("postgres"), application, wait_ms=5000)
            == 1
        )
        with pytest.raises(psycopg.OperationalError):
            await _postgres._check_idle_connection(conn)
    finally:
        await conn.close()


async def test_connections_ended_while_idle_cost_no_failed_call() -> None:
    """Right after every pooled connection is terminated, appends and reads still succeed, once each."""
    # (Each call after a termination waits for the pool to connect anew: seconds.)
    application = f"sl-{uuid.uuid4().hex[:10]}"
    async with server_store("postgres", application_name=application) as (url, _):
        journal = await open_journal(url)
        assert isinstance(journal, PostgresJournal)
        try:
            # Fill the pool with several connections, all idle afterwards.
            await asyncio.gather(
                *(journal.append(NS, StreamWrite(f"w{i}", [rec(i)])) for i in range(4))
            )
            for k in range(1, 3):
                assert (
                    await terminate_postgres(
                        backends.server_url("postgres"), application, wait_ms=5000
                    )
                    >= 1
                )
                result = await journal.append(NS, StreamWrite("s", [rec(k)], expected_next=k))
                assert result.positions == {"s": (k, k)}
                assert (
                    await terminate_postgres(
                        backends.server_url("postgres"), application, wait_ms=5000
                    )
                    >= 1
                )
                assert await journal.head(NS, "s") == k
            assert [r.record.payload["i"] for r in await journal.read(NS, "s")] == [1, 2]
        finally:
            await journal.close()


async def test_a_write_cancelled_as_its_pipeline_opens_leaves_no_transaction_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An append cancelled just as its pipeline opens (psycopg 3.3 then leaves the connection in pipeline mode, its BEGIN queued) leaves no transaction open on the server, even after a read: the connection is closed, not handed out again."""
    application = f"sl-{uuid.uuid4().hex[:10]}"
    real = psycopg.AsyncConnection.pipeline
    armed = False

    def pipeline(self: psycopg.AsyncConnection[Any]) -> Any:
        nonlocal armed
        if armed:
            armed = False
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # lands at the pipeline's first wait, as a worker's interrupt can
        return real(self)

    monkeypatch.setattr(psycopg.AsyncConnection, "pipeline", pipeline)
    async with server_store("postgres", application_name=application) as (url, _):
        journal = await open_journal(url, pool_size=1)  # every call reuses the connection
        try:
            await journal.append(NS, StreamWrite("s", [rec(0)]))
            armed = True
            with pytest.raises(asyncio.CancelledError):
                await asyncio.create_task(journal.append(NS, StreamWrite("s", [rec(1)])))
            # A read on the same pooled connection would run inside the left-over BEGIN
            # and keep that transaction open (with whatever it locked) after it returns.
            assert await journal.head(NS, "s") == 1
            base = await backends.require_server("postgres")
            async with await psycopg.AsyncConnection.connect(
                base, autocommit=True, connect_timeout=CONNECT_TIMEOUT
            ) as admin:
                cur = await admin.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE application_name = %s AND state <> 'idle'",
                    (application,),
                )
                assert await cur.fetchone() == (0,)
            result = await asyncio.wait_for(journal.append(NS, StreamWrite("s", [rec(2)])), 10)
            assert result.positions == {"s": (2, 2)}
            assert await journal.head(NS, "s") == 2
        finally:
            await journal.close()
