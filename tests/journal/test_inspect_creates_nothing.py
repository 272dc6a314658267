"""Inspecting commands on a server URL with a mistyped prefix say "no journal here" and create nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from backends import (
    CONNECT_TIMEOUT,
    remove_prefix,
    require_server,
    server_store,
    unique_prefix,
    with_options,
)
from steadyloop import StoreNotFound
from steadyloop.journal import StreamWrite, open_journal
from steadyloop.records import RecordFactory

pytestmark = pytest.mark.server

SERVERS = ["postgres", "mysql", "redis"]
AGENTS = Path(__file__).parent.parent / "audit"

# Every command that only inspects (or continues) a journal, with the URL in its place.
COMMANDS = [
    ["journal", "doctor", "{url}"],
    ["journal", "show", "{url}"],
    ["runs", "list", "-j", "{url}"],
    ["runs", "show", "r1", "-j", "{url}"],
    ["resume", "r1", "--agent", "audit_cli_agent:agent", "-j", "{url}"],
]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(AGENTS), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "steadyloop", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


async def _holds_anything(backend: str, base: str, prefix: str) -> bool:
    """Whether anything (a table, a key) exists under ``prefix`` on the server."""
    if backend == "postgres":
        import psycopg

        async with await psycopg.AsyncConnection.connect(
            base, connect_timeout=CONNECT_TIMEOUT
        ) as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_tables WHERE starts_with(tablename, %s)", (prefix,)
            )
            row = await cur.fetchone()
            return bool(row and row[0])
    if backend == "redis":
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(base, socket_connect_timeout=CONNECT_TIMEOUT)
        try:
            return bool([k async for k in client.scan_iter(match=f"{prefix}*")])
        finally:
            await client.aclose()
    from asyncmy import connect  # type: ignore[import-untyped]

    conn = await connect(host="127.0.0.1", port=3306, user="root", database="test")
    try:
        async with conn.cursor() as cur:
            await cur.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() "
                "AND LEFT(table_name, %s) = %s",
                (len(prefix), prefix),
            )
            row = await cur.fetchone()
            return bool(row and row[0])
    finally:
        conn.close()


@pytest.mark.parametrize("backend", SERVERS)
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
async def test_an_inspecting_command_on_a_mistyped_prefix_creates_nothing(
    backend: str, command: list[str]
) -> None:
    """The command exits 2 saying there is no journal here, and no table or key appears."""
    base = await require_server(backend)
    prefix = unique_prefix(backend)
    url = with_options(base, prefix=prefix)
    try:
        done = _cli(*(part.format(url=url) for part in command))
        assert done.returncode == 2, done.stdout + done.stderr
        assert "no journal here" in done.stderr
        assert not await _holds_anything(backend, base, prefix)
    finally:
        await remove_prefix(backend, base, prefix)


@pytest.mark.parametrize("backend", SERVERS)
async def test_open_journal_with_create_false_refuses_and_then_opens_what_exists(
    backend: str,
) -> None:
    """create=False raises StoreNotFound on a missing prefix and opens the journal once it exists."""
    async with server_store(backend) as (url, prefix):
        base = await require_server(backend)
        with pytest.raises(StoreNotFound, match="no journal here"):
            await open_journal(url, create=False)
        assert not await _holds_anything(backend, base, prefix)
        async with await open_journal(url) as journal:
            await journal.append("ns", StreamWrite("s", [RecordFactory()("note")]))
        async with await open_journal(url, create=False) as journal:
            assert await journal.head("ns", "s") == 1


async def test_mariadb_commands_print_nothing_on_stderr() -> None:
    """Opening an existing MariaDB journal or task store prints no 'already exists' note on stderr."""
    async with server_store("mysql") as (url, _):
        async with await open_journal(url) as journal:
            await journal.append("ns", StreamWrite("s", [RecordFactory()("note")]))
        commands = [
            ["journal", "doctor", url],
            ["runs", "list", "-j", url],
            ["audit", "submit", "-s", url, "-p", "hi", "--id", "a"],
            ["audit", "status", "-s", url],
            ["audit", "show", "a", "-s", url],
        ]
        for command in commands:
            done = _cli(*command)
            assert done.returncode == 0, done.stdout + done.stderr
            assert done.stderr == ""
