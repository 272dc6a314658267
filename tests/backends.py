"""Which journal backends the tests run on, and how each test gets a private store.

Embedded backends (memory, jsonl, sqlite) always run. Server backends (postgres, redis,
mysql) run against the servers named by ``STEADYLOOP_POSTGRES_URL``,
``STEADYLOOP_REDIS_URL`` and ``STEADYLOOP_MYSQL_URL`` (by default the local servers on
their standard ports). Each test works under its own table or key prefix and removes
only what that prefix holds. Without a server, a run outside CI skips with one line
naming the variable; under ``CI=true`` a missing server fails the test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from steadyloop.journal import MemoryJournal, redact_url

EMBEDDED_BACKENDS = ["memory", "jsonl", "sqlite"]
SERVER_BACKENDS: list[str] = ["postgres", "redis", "mysql"]
ALL_BACKENDS = EMBEDDED_BACKENDS + SERVER_BACKENDS
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

SERVER_ENV = {
    "postgres": ("STEADYLOOP_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    "redis": ("STEADYLOOP_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "mysql": ("STEADYLOOP_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
}
"""Per server backend: the environment variable naming its server, and the default."""

CONNECT_TIMEOUT = 30
"""Seconds the fixtures' own connections wait for a server: enough on a 2-core machine at
load 30. The probe's answer holds for the whole run, so one slow connect must not read
as a server that is down."""

_REACHABLE: dict[str, str | None] = {}


def server_url(backend: str) -> str:
    """The base URL of a server backend's server (from its variable, or the default)."""
    variable, default = SERVER_ENV[backend]
    return os.environ.get(variable) or default


def with_options(url: str, **options: str) -> str:
    """Return ``url`` with query parameters added (replacing any of the same name)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in options]
    query.extend(options.items())
    return parts._replace(query=urlencode(query)).geturl()


async def _probe(backend: str, url: str) -> None:
    """Connect to a server once with its driver; raise if it cannot be reached."""
    if backend == "postgres":
        import psycopg

        conn = await psycopg.AsyncConnection.connect(url, connect_timeout=CONNECT_TIMEOUT)
        await conn.close()
    elif backend == "redis":
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT)
        try:
            await client.ping()
        finally:
            await client.aclose()
    elif backend == "mysql":
        conn = await _mysql_connect(url)
        conn.close()


async def _mysql_connect(url: str) -> object:
    from asyncmy import connect  # type: ignore[import-untyped]

    parts = urlsplit(url)
    return await connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        database=parts.path.lstrip("/") or None,
        connect_timeout=CONNECT_TIMEOUT,
        autocommit=True,
    )


async def require_server(backend: str) -> str:
    """Return the server's base URL, or skip (outside CI) / fail (in CI) if it is down."""
    variable, _ = SERVER_ENV[backend]
    url = server_url(backend)
    if backend not in _REACHABLE:
        try:
            await _probe(backend, url)
            _REACHABLE[backend] = None
        except Exception as exc:
            _REACHABLE[backend] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    problem = _REACHABLE[backend]
    if problem is not None:
        message = f"{variable}: no server at {redact_url(url)} ({problem})"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return url


async def terminate_postgres(base: str, application: str, *, wait_ms: int = 0) -> int:
    """End every PostgreSQL connection whose ``application_name`` is ``application``.

    ``wait_ms`` > 0 waits (that long at most) until each one is gone. Returns how many
    were ended.
    """
    import psycopg

    async with await psycopg.AsyncConnection.connect(
        base, autocommit=True, connect_timeout=CONNECT_TIMEOUT
    ) as conn:
        cur = await conn.execute(
            "SELECT count(pg_terminate_backend(pid, %s)) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (wait_ms, application),
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


def unique_prefix(backend: str) -> str:
    """A prefix no other test uses: lower-case table prefix, or a Redis key prefix."""
    token = uuid.uuid4().hex[:12]
    return f"steadyloop-test:{token}:" if backend == "redis" else f"t{token}_"


async def remove_prefix(backend: str, url: str, prefix: str) -> None:
    """Delete exactly what the store under ``prefix`` holds: its tables or its keys."""
    if backend == "postgres":
        import psycopg
        from psycopg import sql

        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        ) as conn:
            cur = await conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "AND starts_with(tablename, %s)",
                (prefix,),
            )
            for (table,) in await cur.fetchall():
                await conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
    elif backend == "redis":
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT)
        try:
            pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + "*"
            keys = [k async for k in client.scan_iter(match=pattern, count=1000)]
            for i in range(0, len(keys), 1000):
                await client.delete(*keys[i : i + 1000])
        finally:
            await client.aclose()
    elif backend == "mysql":
        conn: object = await _mysql_connect(url)
        try:
            async with conn.cursor() as cur:  # type: ignore[attr-defined]
                await cur.execute(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = DATABASE() AND LEFT(table_name, %s) = %s",
                    (len(prefix), prefix),
                )
                for (table,) in await cur.fetchall():
                    await cur.execute(f"DROP TABLE IF EXISTS `{table}`")
        finally:
            conn.close()  # type: ignore[attr-defined]


@asynccontextmanager
async def server_store(backend: str, **options: str) -> AsyncIterator[tuple[str, str]]:
    """Yield ``(journal URL, prefix)`` of a fresh store on a server; remove it afterwards."""
    base = await require_server(backend)
    prefix = unique_prefix(backend)
    try:
        yield with_options(base, prefix=prefix, **options), prefix
    finally:
        await remove_prefix(backend, base, prefix)


@asynccontextmanager
async def store_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """Yield a URL for a fresh, private store on ``backend``; remove it afterwards.

    Every ``open_journal`` of the URL reaches the same store, so tests can reopen.
    """
    if backend == "memory":
        name = f"test-{uuid.uuid4().hex}"
        try:
            yield f"memory://{name}"
        finally:
            MemoryJournal.forget(name)
    elif backend == "jsonl":
        directory = tmp_path / f"jsonl-{uuid.uuid4().hex[:8]}"
        directory.mkdir()
        yield f"jsonl://{directory}"
    elif backend == "sqlite":
        yield f"sqlite://{tmp_path}/journal-{uuid.uuid4().hex[:8]}.db"
    elif backend in SERVER_ENV:
        async with server_store(backend) as (url, _):
            yield url
    else:
        raise ValueError(f"unknown backend {backend!r}")
