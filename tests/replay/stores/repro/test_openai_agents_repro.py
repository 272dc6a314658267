"""Minimal reproductions of openai-agents session store divergences (openai-agents 0.24.0).

Plain framework code, no Steadyloop. Each test asserts what the framework really does at
the pinned version; the docstring says what goes wrong for a user. When one starts
failing, the framework changed: update the divergence list in the notes and the docs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from framework_dbs import (
    mysql_database,
    postgres_schema,
    redis_prefix,
    sqlalchemy_mysql_url,
    sqlalchemy_postgres_url,
)

pytestmark = pytest.mark.server


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.fixture
async def mariadb_engine() -> AsyncIterator[Any]:
    """An async SQLAlchemy engine on a fresh MariaDB database (server default collation)."""
    from sqlalchemy.ext.asyncio import create_async_engine

    async with mysql_database() as (url, _):
        engine = create_async_engine(sqlalchemy_mysql_url(url))
        try:
            yield engine
        finally:
            await engine.dispose()


async def create_tables_with_id_length(engine: Any) -> None:
    """Create the SDK's own tables, with the one change MySQL needs: `VARCHAR(190)` ids.

    `create_tables` defaults to False "for production use": users create the tables
    themselves. This is the SDK's `Table` metadata with a length on the two
    `session_id` columns (the length the open upstream fix proposes), nothing else.
    """
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy import String

    template = SQLAlchemySession("template", engine=engine)
    for table in (template._sessions, template._messages):
        table.c.session_id.type = String(190)
    async with engine.begin() as conn:
        await conn.run_sync(template._metadata.create_all)


async def test_sqlalchemy_session_cannot_create_its_tables_on_mariadb(mariadb_engine: Any) -> None:
    """SQLAlchemySession(create_tables=True) on MariaDB fails on every call: its `session_id` is a `String` without length."""
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy.exc import CompileError

    session = SQLAlchemySession("s", engine=mariadb_engine, create_tables=True)
    with pytest.raises(CompileError, match="VARCHAR requires a length on dialect mysql"):
        await session.add_items([msg("hello")])
    with pytest.raises(CompileError, match="VARCHAR requires a length on dialect mysql"):
        await session.get_items()


@pytest.mark.parametrize(("first", "second"), [("sess", "SESS"), ("sess", "sess ")])
async def test_mariadb_merges_session_ids_and_clears_both(
    mariadb_engine: Any, first: str, second: str
) -> None:
    """With the SDK's tables on MariaDB, ids differing by case or a trailing space are one conversation: each reads the other's items, and clearing one clears both."""
    from agents.extensions.memory import SQLAlchemySession

    await create_tables_with_id_length(mariadb_engine)
    a = SQLAlchemySession(first, engine=mariadb_engine)
    b = SQLAlchemySession(second, engine=mariadb_engine)
    await a.add_items([msg("one")])
    await b.add_items([msg("two")])
    assert await a.get_items() == [msg("one"), msg("two")]
    assert await b.get_items() == [msg("one"), msg("two")]
    await a.clear_session()
    assert await b.get_items() == []


async def test_mariadb_refuses_an_item_over_64_kib_and_loses_its_batch(
    mariadb_engine: Any,
) -> None:
    """With the SDK's tables on MariaDB, `message_data` is a 64 KiB `TEXT`: a 100 KB item is refused and the whole `add_items` batch with it."""
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy.exc import DataError

    await create_tables_with_id_length(mariadb_engine)
    session = SQLAlchemySession("s", engine=mariadb_engine)
    with pytest.raises(DataError, match="Data too long for column 'message_data'"):
        await session.add_items([msg("small"), msg("z" * 100_000)])
    assert await session.get_items() == []


async def test_postgresql_refuses_a_session_id_with_nul() -> None:
    """SQLAlchemySession on PostgreSQL refuses a session id holding NUL, on write and on read (SQLite and Redis keep it)."""
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.ext.asyncio import create_async_engine

    async with postgres_schema() as (url, schema):
        engine = create_async_engine(sqlalchemy_postgres_url(url, schema))
        try:
            session = SQLAlchemySession("a\x00b", engine=engine, create_tables=True)
            with pytest.raises(DBAPIError, match="cannot contain NUL"):
                await session.add_items([msg("x")])
            with pytest.raises(DBAPIError, match="cannot contain NUL"):
                await session.get_items()
        finally:
            await engine.dispose()


async def test_redis_session_ids_collide_with_another_sessions_keys() -> None:
    """RedisSession builds keys as `PREFIX:ID:messages`, so `a:messages` is refused once `a` exists, `b` cannot be read once `b:messages` exists, and `d` cannot be cleared once `d:counter` exists."""
    from agents.extensions.memory import RedisSession
    from redis.exceptions import ResponseError

    async with redis_prefix() as (url, prefix):
        sessions: list[Any] = []

        def session(sid: str) -> Any:
            s = RedisSession.from_url(sid, url=url, key_prefix=prefix)
            sessions.append(s)
            return s

        try:
            await session("a").add_items([msg("a")])
            with pytest.raises(ResponseError, match="WRONGTYPE"):
                await session("a:messages").add_items([msg("lost")])
            assert await session("a:messages").get_items() == []

            await session("b:messages").add_items([msg("b-messages")])
            with pytest.raises(ResponseError, match="WRONGTYPE"):
                await session("b").get_items()

            await session("d:counter").add_items([msg("dc")])
            await session("d").add_items([msg("d")])
            with pytest.raises(ResponseError, match="WRONGTYPE"):
                await session("d").clear_session()
            assert await session("d").get_items() == [msg("d")]
        finally:
            for s in sessions:
                await s.close()


async def test_postgresql_orders_items_by_the_clients_local_time() -> None:
    """SQLAlchemySession on PostgreSQL orders items by `created_at`, a `TIMESTAMP WITHOUT TIME ZONE` filled with the connection's local time: two clients in different time zones (e.g. `PGTZ`) reorder one conversation."""
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy.ext.asyncio import create_async_engine

    async with postgres_schema() as (url, schema):
        base = sqlalchemy_postgres_url(url, schema)
        utc = create_async_engine(base + "%20-ctimezone%3DUTC")
        kathmandu = create_async_engine(base + "%20-ctimezone%3DAsia/Kathmandu")
        try:
            a = SQLAlchemySession("s", engine=utc, create_tables=True)
            b = SQLAlchemySession("s", engine=kathmandu, create_tables=True)
            await a.add_items([msg("1 from UTC")])
            await b.add_items([msg("2 from Kathmandu")])
            await a.add_items([msg("3 from UTC")])
            order = [m["content"] for m in await a.get_items()]
            assert order == ["1 from UTC", "3 from UTC", "2 from Kathmandu"]
        finally:
            await utc.dispose()
            await kathmandu.dispose()
