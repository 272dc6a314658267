"""Private databases on the test servers for frameworks whose stores use fixed table names.

google-adk's `DatabaseSessionService` always writes to `sessions`, `events`, … so a
per-test table prefix (as `backends.py` gives Steadyloop's journals) cannot separate
runs. Each test gets a schema of its own on PostgreSQL (selected through the
connection's `search_path`) and a database of its own on MariaDB/MySQL, dropped
afterwards. Server reachability, skip and CI failure follow `backends.require_server`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import quote, urlsplit

from backends import CONNECT_TIMEOUT, _mysql_connect, require_server, unique_prefix


def _token() -> str:
    return f"sl_{uuid.uuid4().hex[:12]}"


@asynccontextmanager
async def postgres_schema() -> AsyncIterator[tuple[str, str]]:
    """Yield `(server URL, schema)` of a fresh PostgreSQL schema; drop it afterwards."""
    import psycopg
    from psycopg import sql

    url = await require_server("postgres")
    schema = _token()
    async with await psycopg.AsyncConnection.connect(
        url, autocommit=True, connect_timeout=CONNECT_TIMEOUT
    ) as conn:
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield url, schema
    finally:
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        ) as conn:
            await conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )


def sqlalchemy_postgres_url(server_url: str, schema: str) -> str:
    """The SQLAlchemy async URL (psycopg) of `server_url` with `search_path` set to `schema`."""
    parts = urlsplit(server_url)
    options = quote(f"-csearch_path={schema}", safe="")
    query = f"{parts.query}&options={options}" if parts.query else f"options={options}"
    return parts._replace(scheme="postgresql+psycopg", query=query).geturl()


@asynccontextmanager
async def mysql_database() -> AsyncIterator[tuple[str, str]]:
    """Yield `(server URL, database)` of a fresh MariaDB/MySQL database; drop it afterwards.

    The database takes the server's default character set and collation, as a user's
    `CREATE DATABASE` would (on this MariaDB: `utf8mb4_general_ci`).
    """
    url = await require_server("mysql")
    name = _token()
    conn: object = await _mysql_connect(url)
    try:
        async with conn.cursor() as cur:  # type: ignore[attr-defined]
            await cur.execute(f"CREATE DATABASE `{name}`")
    finally:
        conn.close()  # type: ignore[attr-defined]
    try:
        parts = urlsplit(url)
        yield parts._replace(path=f"/{name}").geturl(), name
    finally:
        conn = await _mysql_connect(url)
        try:
            async with conn.cursor() as cur:  # type: ignore[attr-defined]
                await cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            conn.close()  # type: ignore[attr-defined]


def sqlalchemy_mysql_url(database_url: str) -> str:
    """The SQLAlchemy async URL (asyncmy) of a MariaDB/MySQL database URL."""
    return urlsplit(database_url)._replace(scheme="mysql+asyncmy").geturl()


@asynccontextmanager
async def redis_prefix() -> AsyncIterator[tuple[str, str]]:
    """Yield `(server URL, key prefix)` no other test uses; delete its keys afterwards."""
    from backends import remove_prefix

    url = await require_server("redis")
    prefix = unique_prefix("redis")
    try:
        yield url, prefix
    finally:
        await remove_prefix("redis", url, prefix)


ADK_STORES = ["memory", "sqlite", "database+sqlite", "postgresql", "mysql"]
"""google-adk: InMemory, SqliteSessionService, DatabaseSessionService on three databases."""

OPENAI_AGENTS_STORES = ["memory", "sqlite", "sqlalchemy+sqlite", "postgresql", "mysql", "redis"]
"""openai-agents: SQLiteSession (memory, file), SQLAlchemySession x3, RedisSession."""

_SERVER_OF = {"postgresql": "postgres", "mysql": "mysql", "redis": "redis"}


def store_params(backends: list[str]) -> list[object]:
    """Parametrise over store backends, marking the ones on a server `server`."""
    import pytest

    return [
        pytest.param(b, id=b, marks=[pytest.mark.server] if b in _SERVER_OF else [])
        for b in backends
    ]


@asynccontextmanager
async def framework_store_url(
    framework: str, backend: str, directory: object, **options: str
) -> AsyncIterator[str]:
    """Yield a `FRAMEWORK+BACKEND://…` URL of a private store; remove it afterwards.

    Embedded stores are files under `directory` (`memory` needs no location); a
    PostgreSQL store gets a schema of its own, a MariaDB one a database of its own, a
    Redis one a key prefix of its own. `options` go into the URL's query.
    """
    from pathlib import Path

    from backends import with_options

    base = f"{framework}+{backend}"
    if backend == "memory":
        yield f"{base}://"
    elif backend in {"sqlite", "database+sqlite", "sqlalchemy+sqlite"}:
        path = Path(str(directory)) / f"{base.replace('+', '-')}-{uuid.uuid4().hex[:8]}.db"
        yield with_options(f"{base}:///{path}", **options) if options else f"{base}:///{path}"
    elif backend == "postgresql":
        async with postgres_schema() as (url, schema):
            target = with_options(url, options=f"-csearch_path={schema}", **options)
            yield f"{framework}+{target}"
    elif backend == "mysql":
        async with mysql_database() as (url, _):
            yield f"{framework}+{with_options(url, **options) if options else url}"
    elif backend == "redis":
        async with redis_prefix() as (url, prefix):
            yield f"{framework}+{with_options(url, key_prefix=prefix, **options)}"
    else:
        raise ValueError(f"unknown store backend {backend!r}")
