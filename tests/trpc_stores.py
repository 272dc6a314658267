"""Private trpc-agent-py stores for the plain-framework reproductions.

Nothing here uses Steadyloop: each helper hands out what a user of trpc-agent-py 1.2.0 would
pass to its services (a SQLAlchemy URL, a Redis URL), on a store no other test touches, and
removes it afterwards. SQL stores get their own database file, PostgreSQL schema or MariaDB
database (the framework's table names are fixed); Redis stores get their own app name, since
every key the framework writes contains it.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from backends import CONNECT_TIMEOUT, require_server, with_options

SQL_BACKENDS = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.server),
    pytest.param("mysql", marks=pytest.mark.server),
]
"""The SQL databases ``SqlSessionService`` and ``SqlMemoryService`` run on."""

REDIS = "redis"


@asynccontextmanager
async def sql_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """Yield a SQLAlchemy URL of an empty private database on ``backend``; drop it afterwards."""
    name = f"trpc_{uuid.uuid4().hex[:12]}"
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path}/{name}.db"
        return
    base = await require_server(backend)
    parts = urlsplit(base)
    if backend == "postgres":
        import psycopg

        with psycopg.connect(base, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        try:
            url = parts._replace(scheme="postgresql+psycopg").geturl()
            yield with_options(url, options=f"-csearch_path={name}")
        finally:
            with psycopg.connect(base, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        return
    import pymysql

    def admin(statement: str) -> None:
        conn = pymysql.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=parts.username or "root",
            password=parts.password or "",
            connect_timeout=CONNECT_TIMEOUT,
        )
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
        finally:
            conn.close()

    # The server's default collation applies, as it does for a user's ``CREATE DATABASE``.
    admin(f"CREATE DATABASE `{name}`")
    try:
        url = parts._replace(scheme="mysql+pymysql", path=f"/{name}").geturl()
        yield with_options(url, charset="utf8mb4")
    finally:
        admin(f"DROP DATABASE IF EXISTS `{name}`")


@asynccontextmanager
async def redis_app() -> AsyncIterator[tuple[str, str]]:
    """Yield ``(Redis URL, app name)`` for a fresh app; delete every key naming it afterwards."""
    import redis.asyncio

    url = await require_server(REDIS)
    app = f"trpcrepro{uuid.uuid4().hex[:12]}"
    try:
        yield url, app
    finally:
        client = redis.asyncio.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT)
        try:
            keys = [k async for k in client.scan_iter(match=f"*{app}*", count=1000)]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()


@contextmanager
def time_zone(name: str) -> Iterator[None]:
    """Run the block with the process's local time zone set to ``name``, then restore it."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def event(
    text: str | None = "hello",
    *,
    delta: dict[str, Any] | None = None,
    event_id: str | None = None,
    timestamp: float | None = None,
    parts: list[str] | None = None,
) -> Any:
    """A user ``Event`` as trpc-agent-py builds one: text parts, a state delta, id and time."""
    from trpc_agent_sdk.events import Event
    from trpc_agent_sdk.types import Content, EventActions, Part

    texts = parts if parts is not None else ([] if text is None else [text])
    fields: dict[str, Any] = {}
    if event_id is not None:
        fields["id"] = event_id
    if timestamp is not None:
        fields["timestamp"] = timestamp
    return Event(
        invocation_id="inv-1",
        author="user",
        content=Content(role="user", parts=[Part(text=t) for t in texts]) if texts else None,
        actions=EventActions(state_delta=dict(delta or {})),
        **fields,
    )


def texts(session: Any) -> list[list[str | None] | None]:
    """Each event's text parts, ``None`` for an event that came back without content."""
    return [
        None if e.content is None else [p.text for p in e.content.parts or []]
        for e in session.events
    ]


TRPC_BACKENDS = [
    "memory",
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.server),
    pytest.param("mysql", marks=pytest.mark.server),
    pytest.param("redis", marks=pytest.mark.server),
]
"""Every trpc-agent-py backend the adapter serves."""


@asynccontextmanager
async def trpc_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """Yield a `trpc+…` store URL of a private store on ``backend``; remove it afterwards."""
    if backend == "memory":
        yield "trpc+memory://"
    elif backend == "redis":
        yield "trpc+" + await require_server(REDIS)
    else:
        async with sql_url(backend, tmp_path) as url:
            scheme = {"sqlite": "sqlite", "postgres": "postgresql", "mysql": "mysql"}[backend]
            yield f"trpc+{scheme}{url[url.index(':') :]}"
