"""trpc-agent-py 1.2.0 session services, driven with plain framework code (no Steadyloop).

Each test is the minimal reproduction of one divergence the replay harness reports between a
trpc-agent-py session service and the framework's own ``InMemorySessionService``. Each asserts
the behaviour the pinned version really has, so a framework upgrade that changes it fails here
and the list of findings is revisited. Sessions are always read back through a new service
object (a restart), as an application would after a deploy.
"""

from __future__ import annotations

import unicodedata
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from backends import CONNECT_TIMEOUT, server_url
from trpc_stores import SQL_BACKENDS, event, redis_app, sql_url, texts, time_zone

pytest.importorskip("trpc_agent_sdk", reason="the trpc extra is not installed")

APP = "repro"

TIED_ORDER = {
    "sqlite": ["a", "c", "b"],  # appended b, c, a: reverse append order
    "postgres": ["a", "c", "b"],  # the same
    "mysql": ["c", "b", "a"],  # MariaDB: by event id descending, whatever the append order
}
"""How SqlSessionService returns three equal-time events appended as b, c, a, per database."""
NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")


@pytest.fixture
async def sql(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Callable[[], Any]]:
    """A factory of ``SqlSessionService`` clients on one private database (closed afterwards)."""
    from trpc_agent_sdk.sessions import SqlSessionService

    opened: list[Any] = []
    async with sql_url(request.param, tmp_path) as url:

        def open_service() -> Any:
            opened.append(SqlSessionService(db_url=url))
            return opened[-1]

        try:
            yield open_service
        finally:
            for service in opened:
                await service.close()


@pytest.fixture
async def redis() -> AsyncIterator[tuple[Callable[[], Any], str]]:
    """A factory of ``RedisSessionService`` clients, and a private app name."""
    from trpc_agent_sdk.sessions import RedisSessionService

    opened: list[Any] = []
    async with redis_app() as (url, app):

        def open_service() -> Any:
            opened.append(RedisSessionService(db_url=url))
            return opened[-1]

        try:
            yield open_service, app
        finally:
            for service in opened:
                await service.close()


def in_memory() -> Any:
    from trpc_agent_sdk.sessions import InMemorySessionService

    return InMemorySessionService()


# --- SQL ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sql", SQL_BACKENDS, indirect=True)
async def test_sql_reorders_events_by_timestamp(
    sql: Callable[[], Any], request: pytest.FixtureRequest
) -> None:
    """SqlSessionService sorts an earlier event first and returns equal-time ones reversed (SQLite, PostgreSQL) or by event id descending (MariaDB), never in append order."""
    service = sql()
    session = await service.create_session(app_name=APP, user_id="u", session_id="s")
    t = 1_750_000_000.25
    # Ids that do not rise with appends, so an order by id and an order by append differ.
    appended = [("b", t), ("c", t), ("a", t), ("early", t - 10)]
    for name, at in appended:
        await service.append_event(session, event(name, event_id=name, timestamp=at))
    back = await sql().get_session(app_name=APP, user_id="u", session_id="s")
    assert [e.id for e in back.events] == [
        "early",
        *TIED_ORDER[request.node.callspec.params["sql"]],
    ]

    memory = in_memory()
    session = await memory.create_session(app_name=APP, user_id="u", session_id="s")
    for name, at in appended:
        await memory.append_event(session, event(name, event_id=name, timestamp=at))
    back = await memory.get_session(app_name=APP, user_id="u", session_id="s")
    assert [e.id for e in back.events] == ["b", "c", "a", "early"]


@pytest.mark.parametrize("sql", SQL_BACKENDS, indirect=True)
async def test_sql_drops_empty_text_parts(sql: Callable[[], Any]) -> None:
    """SqlSessionService drops empty text parts, and an event made only of one comes back without content."""
    service = sql()
    session = await service.create_session(app_name=APP, user_id="u", session_id="s")
    await service.append_event(session, event(parts=[""]))
    await service.append_event(session, event(parts=["a", "", "b"]))
    back = await sql().get_session(app_name=APP, user_id="u", session_id="s")
    assert texts(back) == [None, ["a", "b"]]

    memory = in_memory()
    session = await memory.create_session(app_name=APP, user_id="u", session_id="s")
    await memory.append_event(session, event(parts=[""]))
    await memory.append_event(session, event(parts=["a", "", "b"]))
    back = await memory.get_session(app_name=APP, user_id="u", session_id="s")
    assert texts(back) == [[""], ["a", "", "b"]]


@pytest.mark.parametrize("sql", SQL_BACKENDS, indirect=True)
async def test_sql_refuses_the_same_event_twice(sql: Callable[[], Any]) -> None:
    """SqlSessionService raises IntegrityError on a repeated event id; InMemorySessionService stores it twice."""
    import sqlalchemy.exc

    service = sql()
    session = await service.create_session(app_name=APP, user_id="u", session_id="s")
    once = event("once", event_id="fixed")
    await service.append_event(session, once)
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        await service.append_event(session, once)
    back = await sql().get_session(app_name=APP, user_id="u", session_id="s")
    assert [e.id for e in back.events] == ["fixed"]

    memory = in_memory()
    session = await memory.create_session(app_name=APP, user_id="u", session_id="s")
    once = event("once", event_id="fixed")
    await memory.append_event(session, once)
    await memory.append_event(session, once)
    back = await memory.get_session(app_name=APP, user_id="u", session_id="s")
    assert [e.id for e in back.events] == ["fixed", "fixed"]


@pytest.mark.parametrize("sql", SQL_BACKENDS, indirect=True)
async def test_sql_second_create_merges_while_memory_replaces(sql: Callable[[], Any]) -> None:
    """A second create_session on an existing id keeps events and merges state on SQL, but wipes both in memory."""
    service = sql()
    session = await service.create_session(
        app_name=APP, user_id="u", session_id="s", state={"a": 1}
    )
    await service.append_event(session, event("first", delta={"b": 2}))
    await service.create_session(app_name=APP, user_id="u", session_id="s", state={"c": 3})
    back = await sql().get_session(app_name=APP, user_id="u", session_id="s")
    assert (len(back.events), back.state) == (1, {"a": 1, "b": 2, "c": 3})

    memory = in_memory()
    session = await memory.create_session(app_name=APP, user_id="u", session_id="s", state={"a": 1})
    await memory.append_event(session, event("first", delta={"b": 2}))
    await memory.create_session(app_name=APP, user_id="u", session_id="s", state={"c": 3})
    back = await memory.get_session(app_name=APP, user_id="u", session_id="s")
    assert (len(back.events), back.state) == (0, {"c": 3})


@pytest.mark.parametrize("sql", SQL_BACKENDS, indirect=True)
async def test_sql_shifts_an_event_in_the_repeated_dst_hour(sql: Callable[[], Any]) -> None:
    """Under a DST time zone, SqlSessionService reads an event of the repeated hour back one hour early."""
    first = 1_762_061_400.0  # 2025-11-02 01:30 EDT
    second = first + 3600  # 2025-11-02 01:30 EST: the same wall-clock time
    with time_zone("America/New_York"):
        service = sql()
        session = await service.create_session(app_name=APP, user_id="u", session_id="s")
        await service.append_event(session, event("a", event_id="a", timestamp=first))
        await service.append_event(session, event("b", event_id="b", timestamp=second))
        back = await sql().get_session(app_name=APP, user_id="u", session_id="s")
    assert sorted((e.id, e.timestamp) for e in back.events) == [("a", first), ("b", first)]


# --- PostgreSQL --------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.parametrize("sql", ["postgres"], indirect=True)
async def test_postgres_refuses_nul_and_stores_nothing(sql: Callable[[], Any]) -> None:
    """On PostgreSQL, a NUL in an event's text or state fails append_event with DataError and stores nothing."""
    import sqlalchemy.exc

    service = sql()
    session = await service.create_session(app_name=APP, user_id="u", session_id="s")
    with pytest.raises(sqlalchemy.exc.DataError, match="unsupported Unicode escape"):
        await service.append_event(session, event("a\x00b"))
    with pytest.raises(sqlalchemy.exc.DataError, match="unsupported Unicode escape"):
        await service.append_event(session, event("ok", delta={"k": "c\x00d"}))
    back = await sql().get_session(app_name=APP, user_id="u", session_id="s")
    assert (back.events, back.state) == ([], {})


@pytest.mark.server
@pytest.mark.parametrize("sql", ["postgres"], indirect=True)
async def test_postgres_turns_negative_zero_into_zero(sql: Callable[[], Any]) -> None:
    """On PostgreSQL (JSONB), a -0.0 session state value reads back as 0.0."""
    service = sql()
    session = await service.create_session(app_name=APP, user_id="u", session_id="s")
    await service.append_event(session, event("x", delta={"z": -0.0, "big": 2**63 + 1}))
    back = await sql().get_session(app_name=APP, user_id="u", session_id="s")
    assert repr(back.state["z"]) == "0.0"
    assert back.state["big"] == 2**63 + 1


@pytest.mark.server
@pytest.mark.parametrize("sql", ["postgres"], indirect=True)
async def test_postgres_turns_a_large_float_into_an_int(sql: Callable[[], Any]) -> None:
    """On PostgreSQL (JSONB), a 1e300 session state value reads back as the integer 10**300."""
    service = sql()
    session = await service.create_session(app_name=APP, user_id="u", session_id="s")
    await service.append_event(session, event("x", delta={"huge": 1e300, "f": 1.0}))
    back = await sql().get_session(app_name=APP, user_id="u", session_id="s")
    assert back.state["huge"] == 10**300
    assert type(back.state["huge"]) is int
    assert type(back.state["f"]) is float


# --- MariaDB -----------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.parametrize("sql", ["mysql"], indirect=True)
@pytest.mark.parametrize(("one", "other"), [("Sess", "sess"), (NFC, NFD)])
async def test_mysql_merges_sessions_whose_ids_collate_equal(
    sql: Callable[[], Any], one: str, other: str
) -> None:
    """On MariaDB, two session ids that differ by case or by Unicode normal form become one session."""
    service = sql()
    first = await service.create_session(app_name=APP, user_id="u", session_id=one)
    await service.append_event(first, event("first"))
    second = await service.create_session(app_name=APP, user_id="u", session_id=other)
    await service.append_event(second, event("second"))
    assert second.id == one  # the store answers with the other session's id
    reader = sql()
    for sid in (one, other):
        back = await reader.get_session(app_name=APP, user_id="u", session_id=sid)
        assert texts(back) == [["first"], ["second"]]
    listed = await reader.list_sessions(app_name=APP, user_id="u")
    assert [s.id for s in listed.sessions] == [one]


@pytest.mark.server
@pytest.mark.parametrize("sql", ["mysql"], indirect=True)
@pytest.mark.parametrize(("owner", "stranger"), [("Alice", "alice"), ("bob", "bob "), (NFC, NFD)])
async def test_mysql_shows_one_users_sessions_to_another(
    sql: Callable[[], Any], owner: str, stranger: str
) -> None:
    """On MariaDB, a user id that collates equal to another reads and lists that user's sessions."""
    service = sql()
    session = await service.create_session(app_name=APP, user_id=owner, session_id="s")
    await service.append_event(session, event("private", delta={"user:k": "v"}))
    reader = sql()
    back = await reader.get_session(app_name=APP, user_id=stranger, session_id="s")
    assert back is not None
    assert (back.user_id, texts(back), back.state) == (owner, [["private"]], {"user:k": "v"})
    listed = await reader.list_sessions(app_name=APP, user_id=stranger)
    assert [(s.user_id, s.id) for s in listed.sessions] == [(owner, "s")]


# --- Redis -------------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.parametrize("delta", [{"user:n": 1}, {"app:n": 1}])
async def test_redis_read_crashes_once_user_or_app_state_exists(
    redis: tuple[Callable[[], Any], str], delta: dict[str, Any]
) -> None:
    """RedisSessionService.get_session raises TypeError once any user: or app: state is stored."""
    open_service, app = redis
    service = open_service()
    session = await service.create_session(app_name=app, user_id="u", session_id="s")
    await service.append_event(session, event("x", delta=delta))
    with pytest.raises(TypeError, match="can only concatenate str"):
        await open_service().get_session(app_name=app, user_id="u", session_id="s")
    with pytest.raises(TypeError, match="can only concatenate str"):
        await open_service().list_sessions(app_name=app, user_id="u")


@pytest.mark.server
@pytest.mark.parametrize(
    ("deltas", "error"),
    [
        ([{"user:a": 1, "user:b": 2}], TypeError),
        ([{"app:a": 1}, {"app:b": 2}], TypeError),
        ([{"user:flag": True}], Exception),
        ([{"user:doc": {"k": [1]}}], Exception),
        ([{"app:none": None}], Exception),
    ],
)
async def test_redis_append_with_scoped_state_loses_the_event(
    redis: tuple[Callable[[], Any], str], deltas: list[dict[str, Any]], error: type[Exception]
) -> None:
    """RedisSessionService.append_event fails, and stores no event, once user:/app: state holds two keys or a non-scalar."""
    from redis.asyncio import Redis
    from redis.exceptions import DataError

    open_service, app = redis
    service = open_service()
    session = await service.create_session(app_name=app, user_id="u", session_id="s")
    *before, last = deltas
    for delta in before:
        await service.append_event(session, event("kept", delta=delta))
    with pytest.raises(error) as failure:
        await service.append_event(session, event("lost", delta=last))
    assert isinstance(failure.value, TypeError | AttributeError | DataError)
    client = Redis.from_url(server_url("redis"), socket_connect_timeout=CONNECT_TIMEOUT)
    try:
        stored = await client.get(f"session:{app}:u:s")
    finally:
        await client.aclose()
    assert b'"lost"' not in stored
    assert stored.count(b'"kept"') == len(before)


@pytest.mark.server
async def test_redis_ids_holding_the_separator_share_one_key(
    redis: tuple[Callable[[], Any], str],
) -> None:
    """On Redis, user "a:b" session "c" and user "a" session "b:c" are one key: the second replaces the first."""
    open_service, app = redis
    service = open_service()
    first = await service.create_session(app_name=app, user_id="a:b", session_id="c")
    await service.append_event(first, event("from user a:b"))
    second = await service.create_session(app_name=app, user_id="a", session_id="b:c")
    await service.append_event(second, event("from user a"))
    back = await open_service().get_session(app_name=app, user_id="a:b", session_id="c")
    assert (back.user_id, back.id, texts(back)) == ("a", "b:c", [["from user a"]])


@pytest.mark.server
@pytest.mark.parametrize(
    ("stranger", "seen"), [("*", ["alice:s", "bob:s"]), ("?ob", ["bob:s"]), ("al", ["al:ice:s"])]
)
async def test_redis_lists_other_users_sessions(
    redis: tuple[Callable[[], Any], str], stranger: str, seen: list[str]
) -> None:
    """RedisSessionService.list_sessions matches the user id as a glob prefix, listing other users' sessions."""
    open_service, app = redis
    service = open_service()
    owners = ["alice", "bob"] if stranger != "al" else ["al:ice"]
    for owner in owners:
        await service.create_session(app_name=app, user_id=owner, session_id="s")
    listed = await open_service().list_sessions(app_name=app, user_id=stranger)
    assert sorted(f"{s.user_id}:{s.id}" for s in listed.sessions) == seen


@pytest.mark.parametrize(
    "backend", ["memory", *SQL_BACKENDS, pytest.param("redis", marks=pytest.mark.server)]
)
async def test_every_service_strips_a_session_ids_blanks(backend: str, tmp_path: Path) -> None:
    r"""Every trpc session service creates session " s\t" as "s", so ids differing by blanks name one session."""
    from trpc_agent_sdk.sessions import RedisSessionService, SqlSessionService

    if backend == "memory":
        service, app = in_memory(), APP
        created = await service.create_session(app_name=app, user_id="u", session_id=" s\t")
        assert created.id == "s"
        return
    if backend == "redis":
        async with redis_app() as (url, app):
            service = RedisSessionService(db_url=url)
            try:
                created = await service.create_session(app_name=app, user_id="u", session_id=" s\t")
            finally:
                await service.close()
        assert created.id == "s"
        return
    async with sql_url(backend, tmp_path) as url:
        service = SqlSessionService(db_url=url)
        try:
            created = await service.create_session(app_name=APP, user_id="u", session_id=" s\t")
        finally:
            await service.close()
    assert created.id == "s"


@pytest.mark.server
@pytest.mark.parametrize("sql", ["mysql"], indirect=True)
async def test_mysql_finds_a_session_under_its_id_plus_a_trailing_space(
    sql: Callable[[], Any],
) -> None:
    """On MariaDB, get_session("s ") returns session "s"; the other services answer None."""
    service = sql()
    await service.create_session(app_name=APP, user_id="u", session_id="s")
    back = await sql().get_session(app_name=APP, user_id="u", session_id="s ")
    assert back is not None
    assert back.id == "s"
    memory = in_memory()
    await memory.create_session(app_name=APP, user_id="u", session_id="s")
    assert await memory.get_session(app_name=APP, user_id="u", session_id="s ") is None


# --- In memory ---------------------------------------------------------------------------


async def test_memory_store_keeps_the_callers_event_object() -> None:
    """InMemorySessionService stores the caller's Event object, so editing it after append_event edits the session."""
    service = in_memory()
    session = await service.create_session(app_name=APP, user_id="u", session_id="s")
    appended = event("original", delta={"k": "v"})
    await service.append_event(session, appended)
    appended.content.parts[0].text = "edited"
    appended.actions.state_delta["k"] = "edited"
    back = await service.get_session(app_name=APP, user_id="u", session_id="s")
    assert texts(back) == [["edited"]]
    assert back.events[0].actions.state_delta == {"k": "edited"}
    assert back.state == {"k": "v"}


async def test_second_create_replaces_the_session_in_memory() -> None:
    """InMemorySessionService.create_session on an existing id silently replaces it: events and state are gone."""
    service = in_memory()
    session = await service.create_session(app_name=APP, user_id="u", session_id="s")
    await service.append_event(session, event("kept?", delta={"k": 1}))
    await service.create_session(app_name=APP, user_id="u", session_id="s")
    back = await service.get_session(app_name=APP, user_id="u", session_id="s")
    assert (back.events, back.state) == ([], {})


@pytest.mark.server
async def test_second_create_replaces_the_session_on_redis(
    redis: tuple[Callable[[], Any], str],
) -> None:
    """RedisSessionService.create_session on an existing id silently replaces it: events and state are gone."""
    open_service, app = redis
    service = open_service()
    session = await service.create_session(app_name=app, user_id="u", session_id="s")
    await service.append_event(session, event("kept?", delta={"k": 1}))
    await service.create_session(app_name=app, user_id="u", session_id="s")
    back = await open_service().get_session(app_name=app, user_id="u", session_id="s")
    assert (back.events, back.state) == ([], {})


# --- Async mode, as the framework's documentation recommends -----------------------------


# The broken async paths leave un-awaited driver coroutines behind: the framework's, not ours.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("backend", SQL_BACKENDS)
async def test_sql_async_mode_fails_on_the_second_call(backend: str, tmp_path: Path) -> None:
    """SqlSessionService(is_async=True) fails after one append: MissingGreenlet (SQLite, PostgreSQL), TypeError (MariaDB)."""
    import sqlalchemy.exc
    from trpc_agent_sdk.sessions import SqlSessionService

    drivers = {"sqlite": "sqlite+aiosqlite", "postgres": "postgresql+psycopg"}
    async with sql_url(backend, tmp_path) as sync_url:
        rest = sync_url.split("://", 1)[1]
        async_url = f"{drivers.get(backend, 'mysql+aiomysql')}://{rest}"
        service = SqlSessionService(db_url=async_url, is_async=True)
        try:
            session = await service.create_session(app_name=APP, user_id="u", session_id="s")
            if backend == "mysql":
                with pytest.raises(TypeError, match="'str' object is not callable"):
                    await service.append_event(session, event("x"))
            else:
                await service.append_event(session, event("x"))
                with pytest.raises(sqlalchemy.exc.StatementError, match="MissingGreenlet"):
                    await service.get_session(app_name=APP, user_id="u", session_id="s")
        finally:
            await service.close()
