"""Server backends under failure and contention: PostgreSQL, MariaDB/MySQL and Redis.

The conformance suite (test_conformance.py) holds every backend to the contract; these
tests add what only a server can show: a connection cut mid-batch, racing submissions
of one idempotency key, racing first opens, parallel writers on separate streams,
and the configuration the test run itself relies on (skip outside CI, fail in CI).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import redis.asyncio as aioredis

import backends
from backends import CONNECT_TIMEOUT, SERVER_BACKENDS, require_server, server_store, with_options
from steadyloop import BackendUnavailable, CorruptionError, InvalidBatch
from steadyloop.journal import StreamWrite, open_journal
from steadyloop.journal._mysql import MySQLJournal
from steadyloop.journal._postgres import PostgresJournal
from steadyloop.journal._redis import RedisJournal, encode_name
from steadyloop.journal._sql import Query
from steadyloop.records import RecordFactory, SequentialIds, StepClock

NS = "servers"


def _maker() -> RecordFactory:
    return RecordFactory(clock=StepClock(), ids=SequentialIds(f"r{uuid.uuid4().hex[:6]}"))


class Pause:
    """A point inside a transaction where a hooked journal stops until released."""

    def __init__(self, when: Callable[[Query], bool]) -> None:
        self.when = when
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.connection_id: int | None = None


def _postgres_with(pause: Pause) -> type[PostgresJournal]:
    class Hooked(PostgresJournal):
        async def _execute(self, conn: Any, query: Query) -> Any:  # type: ignore[override]
            rows = await PostgresJournal._execute(conn, query)
            if pause.when(query) and not pause.reached.is_set():
                # A fetch syncs the pipeline: everything queued so far ran on the server.
                cur = await conn.execute("SELECT pg_backend_pid()")
                pause.connection_id = (await cur.fetchone())[0]
                pause.reached.set()
                await pause.release.wait()
            return rows

    return Hooked


def _mysql_with(pause: Pause) -> type[MySQLJournal]:
    class Hooked(MySQLJournal):
        async def _execute(self, conn: Any, query: Query) -> Any:  # type: ignore[override]
            rows = await MySQLJournal._execute(conn, query)
            if pause.when(query) and not pause.reached.is_set():
                async with conn.cursor() as cur:
                    await cur.execute("SELECT CONNECTION_ID()")
                    pause.connection_id = (await cur.fetchone())[0]
                pause.reached.set()
                await pause.release.wait()
            return rows

    return Hooked


async def _kill(backend: str, connection_id: int) -> None:
    """Cut one server connection from a second connection."""
    base = backends.server_url(backend)
    if backend == "postgres":
        async with await psycopg.AsyncConnection.connect(
            base, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        ) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (connection_id,))
    else:
        admin: Any = await backends._mysql_connect(base)
        try:
            async with admin.cursor() as cur:
                await cur.execute(f"KILL CONNECTION {int(connection_id)}")
        finally:
            admin.close()


HOOKED = {"postgres": _postgres_with, "mysql": _mysql_with}


# -- connection failures ---------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://steadyloop:s3cret@127.0.0.1:9/test",
        "mysql://root:s3cret@127.0.0.1:9/test",
        "redis://:s3cret@127.0.0.1:9/0",
    ],
    ids=["postgres", "mysql", "redis"],
)
async def test_unreachable_server_raises_backend_unavailable_without_password(url: str) -> None:
    """A server that cannot be reached gives BackendUnavailable naming the URL, password hidden."""
    with pytest.raises(BackendUnavailable) as info:
        await open_journal(url, connect_timeout=2)
    message = str(info.value)
    assert "s3cret" not in message
    assert "***@127.0.0.1:9" in message


@pytest.mark.parametrize("ci", [False, True], ids=["local", "ci"])
async def test_missing_server_skips_locally_and_fails_in_ci(
    ci: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a server, tests skip with one line naming the variable; under CI they fail."""
    monkeypatch.setenv("STEADYLOOP_REDIS_URL", "redis://127.0.0.1:9/0")
    monkeypatch.setattr(backends, "IN_CI", ci)
    monkeypatch.setattr(backends, "_REACHABLE", {})
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome) as info:
        await require_server("redis")
    message = str(info.value)
    assert message.startswith("STEADYLOOP_REDIS_URL: no server at redis://127.0.0.1:9/0")
    assert "\n" not in message


# -- cutting the connection mid-batch ----------------------------------------------------


@pytest.mark.server
@pytest.mark.parametrize("backend", ["postgres", "mysql"])
async def test_connection_cut_mid_batch_is_all_or_nothing(backend: str) -> None:
    """Killing the connection inside the transaction writes nothing, and a keyed retry writes once."""
    make = _maker()
    async with server_store(backend) as (url, prefix):
        pause = Pause(lambda q: q.sql.startswith(f"INSERT INTO {prefix}records"))
        journal = await HOOKED[backend](pause).open(url)
        try:
            pause.reached.set()  # not yet: the first append passes the hook untouched
            await journal.append(NS, StreamWrite("a", [make("before")]))
            pause.reached.clear()
            batch = [StreamWrite("a", [make("x"), make("y")]), StreamWrite("b", [make("z")])]
            task = asyncio.create_task(journal.append(NS, batch, idempotency_key="k1"))
            await asyncio.wait_for(pause.reached.wait(), 10)
            assert pause.connection_id is not None
            await _kill(backend, pause.connection_id)
            pause.release.set()
            with pytest.raises(BackendUnavailable):
                await asyncio.wait_for(task, 10)
            assert await journal.head(NS, "a") == 1
            assert await journal.head(NS, "b") == 0
            assert await journal.streams(NS) == ["a"]
            retry = [StreamWrite("a", [make("x"), make("y")]), StreamWrite("b", [make("z")])]
            first = await journal.append(NS, retry, idempotency_key="k1")
            assert not first.duplicate
            assert first.positions == {"a": (2, 3), "b": (1, 1)}
            again = await journal.append(NS, retry, idempotency_key="k1")
            assert again.duplicate
            assert again.positions == first.positions
            assert [r.kind for r in await journal.read(NS, "a")] == ["before", "x", "y"]
        finally:
            pause.release.set()
            await journal.close()


async def _redis_clients(admin: Any, name: str) -> list[int]:
    listing = (await admin.execute_command("CLIENT", "LIST")).decode()
    return [
        int(fields["id"])
        for fields in (
            dict(item.split("=", 1) for item in line.split(" ") if "=" in item)
            for line in listing.splitlines()
        )
        if fields.get("name") == name
    ]


@pytest.mark.server
async def test_redis_connection_cut_before_script_runs_writes_nothing() -> None:
    """A batch whose connection is killed while queued is not written, not resent, and a keyed retry writes once."""
    make = _maker()
    name = f"victim-{uuid.uuid4().hex[:8]}"
    async with server_store("redis", client_name=name) as (url, _):
        admin = aioredis.Redis.from_url(
            backends.server_url("redis"), socket_connect_timeout=CONNECT_TIMEOUT
        )
        journal = await open_journal(url)
        try:
            await journal.append(NS, StreamWrite("a", [make("before")]))
            batch = [StreamWrite("a", [make("x"), make("y")]), StreamWrite("b", [make("z")])]
            await admin.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
            try:
                task = asyncio.create_task(journal.append(NS, batch, idempotency_key="k1"))
                await asyncio.sleep(0.3)  # the script is sent and held by the pause
                assert not task.done()
                victims = await _redis_clients(admin, name)
                assert victims
                for client_id in victims:
                    await admin.execute_command("CLIENT", "KILL", "ID", client_id)
            finally:
                await admin.execute_command("CLIENT", "UNPAUSE")
            with pytest.raises(BackendUnavailable):
                await asyncio.wait_for(task, 10)
            await asyncio.sleep(0.1)  # had the client resent it, it would land now
            assert await journal.head(NS, "a") == 1
            assert await journal.head(NS, "b") == 0
            first = await journal.append(NS, batch, idempotency_key="k1")
            assert not first.duplicate
            assert first.positions == {"a": (2, 3), "b": (1, 1)}
            assert (await journal.append(NS, batch, idempotency_key="k1")).duplicate
        finally:
            await journal.close()
            await admin.aclose()


@pytest.mark.server
async def test_redis_connection_cut_while_script_runs_is_all_or_nothing() -> None:
    """Killing the connection around a running script leaves the batch whole or absent, and a keyed retry never duplicates."""
    make = _maker()
    name = f"victim-{uuid.uuid4().hex[:8]}"
    streams = 2_000
    async with server_store("redis", client_name=name) as (url, _):
        admin = aioredis.Redis.from_url(
            backends.server_url("redis"), socket_connect_timeout=CONNECT_TIMEOUT
        )
        journal = await open_journal(url)
        outcomes: list[str] = []
        try:
            for attempt in range(4):
                ns = f"{NS}-{attempt}"
                await journal.head(ns, "warm-up")  # open a pooled connection to kill
                victims = await _redis_clients(admin, name)
                batch = [StreamWrite(f"s{i}", [make("n", {"i": i})]) for i in range(streams)]
                task = asyncio.create_task(journal.append(ns, batch, idempotency_key="k"))
                await asyncio.sleep(0.002 * attempt)
                for client_id in victims:
                    await admin.execute_command("CLIENT", "KILL", "ID", client_id)
                try:
                    await asyncio.wait_for(task, 30)
                    outcomes.append("acknowledged")
                except BackendUnavailable:
                    written = len(await journal.streams(ns))
                    assert written in (0, streams), f"half a batch: {written} streams"
                    outcomes.append("cut after write" if written else "cut before write")
                retry = await journal.append(ns, batch, idempotency_key="k")
                assert retry.duplicate == (outcomes[-1] != "cut before write")
                assert len(await journal.streams(ns)) == streams
                assert await journal.head(ns, "s0") == 1
                assert await journal.head(ns, f"s{streams - 1}") == 1
        finally:
            await journal.close()
            await admin.aclose()
        assert len(outcomes) == 4


@pytest.mark.server
async def test_redis_reply_lost_after_script_ran_is_whole_and_retry_is_duplicate() -> None:
    """When the reply of a script that ran is lost, the batch is whole, not resent, and a keyed retry is a duplicate."""
    make = _maker()
    streams = 10_000
    batch = [StreamWrite(f"s{i}", [make("n", {"i": i})]) for i in range(streams)]
    async with server_store("redis") as (url, _):
        # A reply deadline far shorter than the script: the client gives up waiting
        # while the server finishes the script.
        impatient = await open_journal(with_options(url, socket_timeout="0.02"))
        try:
            with pytest.raises(BackendUnavailable, match="Timeout"):
                await impatient.append(NS, batch, idempotency_key="k")
        finally:
            await impatient.close()
        async with await open_journal(url) as journal:
            for _ in range(100):  # the script finishes shortly after the timeout
                if len(await journal.streams(NS)) == streams:
                    break
                await asyncio.sleep(0.05)
            assert len(await journal.streams(NS)) == streams
            assert {await journal.head(NS, s) for s in ("s0", "s5000", f"s{streams - 1}")} == {1}
            retry = await journal.append(NS, batch, idempotency_key="k")
            assert retry.duplicate
            assert retry.positions["s0"] == (1, 1)
            assert await journal.head(NS, "s0") == 1


# -- contention ---------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.parametrize("backend", SERVER_BACKENDS)
async def test_racing_submissions_of_one_key_write_once(backend: str) -> None:
    """Eight concurrent submissions of one idempotency key write the batch once; the rest are duplicates."""
    make = _maker()
    batch = [StreamWrite("a", [make("x"), make("y")]), StreamWrite("b", [make("z")])]
    async with server_store(backend) as (url, _):
        journals = [await open_journal(url) for _ in range(2)]
        try:
            results = await asyncio.gather(
                *(journals[i % 2].append(NS, batch, idempotency_key="race") for i in range(8))
            )
            assert sorted(r.duplicate for r in results) == [False] + [True] * 7
            assert {tuple(sorted(r.positions.items())) for r in results} == {
                (("a", (1, 2)), ("b", (1, 1)))
            }
            assert await journals[0].head(NS, "a") == 2
            assert await journals[0].head(NS, "b") == 1
        finally:
            for j in journals:
                await j.close()


@pytest.mark.server
@pytest.mark.parametrize("backend", SERVER_BACKENDS)
async def test_racing_first_opens_all_succeed(backend: str) -> None:
    """Six processes' worth of simultaneous first opens on a fresh prefix all succeed."""
    async with server_store(backend) as (url, _):
        journals = await asyncio.gather(*(open_journal(url) for _ in range(6)))
        try:
            await journals[0].append(NS, StreamWrite("s", [_maker()("x")]))
            assert [await j.head(NS, "s") for j in journals] == [1] * 6
        finally:
            for j in journals:
                await j.close()


@pytest.mark.server
@pytest.mark.parametrize("backend", ["postgres", "mysql"])
async def test_a_connection_cut_while_the_tables_are_prepared_costs_no_failed_open(
    backend: str,
) -> None:
    """An open whose connection the server ends while it prepares the tables prepares them again and succeeds."""
    pause = Pause(lambda query: True)  # the first statement of the schema plan
    async with server_store(backend) as (url, _):
        opening = asyncio.create_task(HOOKED[backend](pause).open(url))
        await asyncio.wait_for(pause.reached.wait(), 10)
        assert pause.connection_id is not None
        await _kill(backend, pause.connection_id)
        pause.release.set()
        journal = await asyncio.wait_for(opening, 20)
        try:
            await journal.append(NS, StreamWrite("s", [_maker()("x")]))
            assert await journal.head(NS, "s") == 1
        finally:
            await journal.close()


@pytest.mark.server
@pytest.mark.parametrize("backend", ["postgres", "mysql"])
async def test_writers_on_other_streams_are_not_blocked(backend: str) -> None:
    """While one batch holds its stream's lock, a batch on another stream commits, and one on the same stream waits."""
    make = _maker()
    async with server_store(backend) as (url, _):
        held_name: Any = b"held" if backend == "mysql" else "held"
        pause = Pause(lambda q: "FOR UPDATE" in q.sql and held_name in q.params)
        journal = await HOOKED[backend](pause).open(url)
        try:
            holder = asyncio.create_task(journal.append(NS, StreamWrite("held", [make("1")])))
            await asyncio.wait_for(pause.reached.wait(), 10)
            same = asyncio.create_task(journal.append(NS, StreamWrite("held", [make("2")])))
            other = await asyncio.wait_for(journal.append(NS, StreamWrite("free", [make("f")])), 10)
            assert other.positions == {"free": (1, 1)}
            await asyncio.sleep(0.3)
            assert not same.done(), "a second writer on the locked stream did not wait"
            pause.release.set()
            assert (await asyncio.wait_for(holder, 10)).positions == {"held": (1, 1)}
            assert (await asyncio.wait_for(same, 10)).positions == {"held": (2, 2)}
        finally:
            pause.release.set()
            await journal.close()


# -- schema, prefixes, encodings ------------------------------------------------------------


async def _set_version(backend: str, prefix: str, version: int) -> None:
    base = backends.server_url(backend)
    if backend == "postgres":
        async with await psycopg.AsyncConnection.connect(
            base, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        ) as conn:
            await conn.execute(f"UPDATE {prefix}schema SET version = {version}")
    elif backend == "mysql":
        conn: Any = await backends._mysql_connect(base)
        try:
            async with conn.cursor() as cur:
                await cur.execute(f"UPDATE {prefix}schema SET version = {version}")
        finally:
            conn.close()
    else:
        client = aioredis.Redis.from_url(base, socket_connect_timeout=CONNECT_TIMEOUT)
        await client.set(f"{prefix}schema", str(version))
        await client.aclose()


@pytest.mark.server
@pytest.mark.parametrize("backend", SERVER_BACKENDS)
async def test_store_from_a_newer_version_is_refused(backend: str) -> None:
    """Opening a store whose schema version is newer than this code raises CorruptionError naming it."""
    async with server_store(backend) as (url, prefix):
        await (await open_journal(url)).close()
        await _set_version(backend, prefix, 99)
        with pytest.raises(CorruptionError, match="newer") as info:
            await open_journal(url)
        assert "schema" in info.value.location


@pytest.mark.server
@pytest.mark.parametrize("backend", SERVER_BACKENDS)
async def test_prefixes_keep_journals_apart(backend: str) -> None:
    """Two journals under different prefixes on one server never see each other's data."""
    make = _maker()
    async with server_store(backend) as (url1, _), server_store(backend) as (url2, _):
        async with await open_journal(url1) as j1, await open_journal(url2) as j2:
            await j1.append(NS, StreamWrite("s", [make("one")]))
            assert await j2.namespaces() == []
            assert await j2.head(NS, "s") == 0
            await j2.append(NS, StreamWrite("s", [make("two")]))
            assert [r.kind for r in await j1.read(NS, "s")] == ["one"]


@pytest.mark.server
async def test_redis_names_with_separators_map_to_distinct_keys() -> None:
    """Names holding ':' or '%' never share a key, and deleting a namespace removes all its keys."""
    make = _maker()
    pairs = [("a:b", "c"), ("a", "b:c"), ("a%3Ab", "c"), ("a", "b%3Ac"), ("{x}", "*?[]\\")]
    async with server_store("redis") as (url, prefix):
        async with await open_journal(url) as journal:
            for ns, stream in pairs:
                await journal.append(ns, StreamWrite(stream, [make("n", {"ns": ns, "s": stream})]))
            for ns, stream in pairs:
                got = await journal.read(ns, stream)
                assert [(r.payload["ns"], r.payload["s"]) for r in got] == [(ns, stream)]
            for ns, _ in pairs:
                await journal.delete_namespace(ns)
            assert await journal.namespaces() == []
        client = aioredis.Redis.from_url(
            backends.server_url("redis"), socket_connect_timeout=CONNECT_TIMEOUT
        )
        try:
            left = sorted([k.decode() async for k in client.scan_iter(match=f"{prefix}*")])
        finally:
            await client.aclose()
        assert left == [f"{prefix}schema"]
    assert encode_name("a:b%{c}") == "a%3Ab%25%7Bc%7D"


@pytest.mark.server
async def test_redis_damaged_keys_are_named_in_corruption_errors() -> None:
    """A key of the wrong type, or a record that does not decode, is reported with its key."""
    async with server_store("redis") as (url, prefix):
        async with await open_journal(url) as journal:
            await journal.append("ns", StreamWrite("ok", [_maker()("x")]))
            client = aioredis.Redis.from_url(
                backends.server_url("redis"), socket_connect_timeout=CONNECT_TIMEOUT
            )
            try:
                await client.set(f"{prefix}R:ns:s", "garbage")
                await client.rpush(f"{prefix}R:ns:t", "{not json")
            finally:
                await client.aclose()
            for stream in ("s", "t"):
                with pytest.raises(CorruptionError) as info:
                    await journal.read("ns", stream)
                assert f"'{prefix}R:ns:{stream}'" in info.value.location
            with pytest.raises(CorruptionError) as info:
                await journal.head("ns", "s")
            assert f"'{prefix}R:ns:s'" in info.value.location


@pytest.mark.server
async def test_redis_wait_aof_refused_without_aof() -> None:
    """Asking for WAITAOF on a server that keeps no append-only file fails clearly at open."""
    async with server_store("redis") as (url, _):
        probe = await open_journal(url)
        assert isinstance(probe, RedisJournal)
        settings = probe.server_settings
        await probe.close()
        if settings.get("appendonly") == "yes":
            pytest.skip("this Redis keeps an append-only file; nothing to refuse")
        with pytest.raises(BackendUnavailable, match="appendonly"):
            await open_journal(with_options(url, wait_aof="1"))


@pytest.mark.server
async def test_mysql_refuses_a_record_larger_than_the_packet_limit() -> None:
    """A record the server's max_allowed_packet cannot carry is refused whole, before writing."""
    make = _maker()
    async with server_store("mysql") as (url, _):
        async with await open_journal(url) as journal:
            assert isinstance(journal, MySQLJournal)
            journal.max_allowed_packet = 1 << 20  # as if the server allowed only 1 MiB
            big = make("big", {"blob": "x" * (1 << 20)})
            with pytest.raises(InvalidBatch, match="max_allowed_packet"):
                await journal.append(NS, [StreamWrite("a", [make("x")]), StreamWrite("b", [big])])
            assert await journal.namespaces() == []


@pytest.mark.server
async def test_mysql_sessions_are_strict_and_read_committed() -> None:
    """Every pooled MySQL session runs strict, with backslash escapes, at READ COMMITTED."""
    async with server_store("mysql") as (url, _):
        async with await open_journal(url) as journal:
            assert isinstance(journal, MySQLJournal)
            async with journal._pool.acquire() as conn, conn.cursor() as cur:
                await cur.execute("SELECT @@session.sql_mode, @@character_set_connection")
                mode, charset = await cur.fetchone()
                await cur.execute("SELECT @@tx_isolation")
                (isolation,) = await cur.fetchone()
            assert "STRICT_ALL_TABLES" in mode
            assert "NO_BACKSLASH_ESCAPES" not in mode
            assert charset == "utf8mb4"
            assert isolation == "READ-COMMITTED"


@pytest.mark.server
@pytest.mark.parametrize("backend", SERVER_BACKENDS)
async def test_durability_settings_are_reported(backend: str) -> None:
    """Each server backend reports the settings its durability depends on."""
    expected = {
        "postgres": {"fsync", "synchronous_commit"},
        "mysql": {"innodb_flush_log_at_trx_commit", "sync_binlog"},
        "redis": {"appendonly", "appendfsync", "save"},
    }[backend]
    async with server_store(backend) as (url, _):
        async with await open_journal(url) as journal:
            assert expected <= set(journal.server_settings)  # type: ignore[attr-defined]
