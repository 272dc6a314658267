"""trpc-agent-py 1.2.0 memory services, driven with plain framework code (no Steadyloop).

Each test is the minimal reproduction of one divergence the replay harness reports between a
trpc-agent-py memory service and the framework's own ``InMemoryMemoryService``, asserting the
behaviour the pinned version really has. A memory is searched by ``save_key``, which the
framework builds as ``"{app_name}/{user_id}"``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from trpc_stores import SQL_BACKENDS, event, redis_app, sql_url, time_zone

pytest.importorskip("trpc_agent_sdk", reason="the trpc extra is not installed")

APP = "repro"
T0 = 1_750_000_000.0


def session(user: str, sid: str, lines: list[str], app: str = APP) -> Any:
    """A session of one event per line, one second apart from ``T0``, as the memory stores it."""
    from trpc_agent_sdk.sessions import Session

    return Session(
        id=sid,
        app_name=app,
        user_id=user,
        save_key=f"{app}/{user}",
        events=[
            event(line, event_id=f"{sid}-{i}", timestamp=T0 + i) for i, line in enumerate(lines)
        ],
    )


@pytest.fixture
async def sql_memory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], Any]]:
    """A factory of ``SqlMemoryService`` clients on one private database (closed afterwards)."""
    from trpc_agent_sdk.memory import SqlMemoryService

    opened: list[Any] = []
    async with sql_url(request.param, tmp_path) as url:

        def open_service() -> Any:
            opened.append(SqlMemoryService(db_url=url, enabled=True))
            return opened[-1]

        try:
            yield open_service
        finally:
            for service in opened:
                await service.close()


def in_memory() -> Any:
    from trpc_agent_sdk.memory import InMemoryMemoryService

    return InMemoryMemoryService(enabled=True)


OLD_MATCH = ["the needle is here", *(f"filler line {i}" for i in range(12))]
"""One match followed by twelve newer entries that do not match."""


@pytest.mark.parametrize("sql_memory", SQL_BACKENDS, indirect=True)
async def test_sql_memory_searches_only_the_ten_newest_entries(
    sql_memory: Callable[[], Any],
) -> None:
    """SqlMemoryService.search_memory misses a match older than the ten newest entries; the in-memory service finds it."""
    await sql_memory().store_session(session("u", "s", OLD_MATCH))
    found = await sql_memory().search_memory(key=f"{APP}/u", query="needle")
    assert found.memories == []

    memory = in_memory()
    await memory.store_session(session("u", "s", OLD_MATCH))
    found = await memory.search_memory(key=f"{APP}/u", query="needle")
    assert [m.content.parts[0].text for m in found.memories] == ["the needle is here"]


@pytest.mark.parametrize("sql_memory", SQL_BACKENDS, indirect=True)
async def test_sql_memory_search_rewrites_the_stored_time(sql_memory: Callable[[], Any]) -> None:
    """SqlMemoryService.search_memory overwrites each match's stored time with the database's now(), in UTC read as local time."""
    with time_zone("Asia/Shanghai"):
        await sql_memory().store_session(session("u", "s", ["needle"]))
        first = await sql_memory().search_memory(key=f"{APP}/u", query="needle")
        second = await sql_memory().search_memory(key=f"{APP}/u", query="needle")
        stored = datetime.fromtimestamp(T0).isoformat()
        assert first.memories[0].timestamp == stored
        rewritten = datetime.fromisoformat(second.memories[0].timestamp)
        local_now = datetime.now()
    assert second.memories[0].timestamp != stored
    # The database's clock is UTC; the framework reads it as Shanghai time (UTC+8).
    assert abs((local_now - rewritten).total_seconds() - 8 * 3600) < 600


@pytest.mark.server
@pytest.mark.parametrize("sql_memory", ["mysql"], indirect=True)
async def test_mysql_memory_shows_one_users_memories_to_another(
    sql_memory: Callable[[], Any],
) -> None:
    """On MariaDB, searching user "alice" returns the memories of user "Alice"."""
    await sql_memory().store_session(session("Alice", "s", ["secret of Alice"]))
    found = await sql_memory().search_memory(key=f"{APP}/alice", query="secret")
    assert [m.content.parts[0].text for m in found.memories] == ["secret of Alice"]


@pytest.mark.server
@pytest.mark.parametrize(("stranger", "seen"), [("a", 1), ("*", 2)])
async def test_redis_memory_shows_other_users_memories(stranger: str, seen: int) -> None:
    """RedisMemoryService matches the key as a glob prefix: user "a" sees "a:b"'s memories, "*" sees everyone's."""
    from trpc_agent_sdk.memory import RedisMemoryService

    async with redis_app() as (url, app):
        service = RedisMemoryService(db_url=url, enabled=True)
        try:
            await service.store_session(session("a:b", "c", ["private of a:b"], app=app))
            await service.store_session(session("zed", "s", ["private of zed"], app=app))
            found = await service.search_memory(key=f"{app}/{stranger}", query="private")
        finally:
            await service.close()
    assert len(found.memories) == seen

    memory = in_memory()
    await memory.store_session(session("a:b", "c", ["private of a:b"]))
    found = await memory.search_memory(key=f"{APP}/{stranger}", query="private")
    assert found.memories == []
