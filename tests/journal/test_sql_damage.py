"""SQL backends facing damaged tables: rows deleted or added behind the journal's back.

A SQL journal keeps each stream's head in one table and its records in another. When
the two disagree (a restore that lost the last rows, a hand-made insert), reads and
appends must say so with a located :class:`~steadyloop.CorruptionError`, and never read
past the damage, report it as an outage, or write anything.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

import backends
from backends import CONNECT_TIMEOUT, server_store
from steadyloop import BackendUnavailable, CorruptionError
from steadyloop.journal import StreamWrite, open_journal
from steadyloop.records import RecordFactory, SequentialIds, StepClock

SQL_BACKENDS = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.server),
    pytest.param("mysql", marks=pytest.mark.server),
]
NS = "damage"


@asynccontextmanager
async def _store(backend: str, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """Yield ``(journal URL, table prefix)`` of a fresh SQL store."""
    if backend == "sqlite":
        yield f"sqlite://{tmp_path}/journal-{uuid.uuid4().hex[:8]}.db", "steadyloop_"
        return
    async with server_store(backend) as (url, prefix):
        yield url, prefix


async def _execute(backend: str, url: str, statement: str, params: tuple[Any, ...]) -> None:
    """Run one statement on the store's database directly, as damage from outside."""
    if backend == "sqlite":
        conn = sqlite3.connect(url.removeprefix("sqlite://"))
        with conn:
            conn.execute(statement, params)
        conn.close()
    elif backend == "postgres":
        base = backends.server_url("postgres")
        async with await psycopg.AsyncConnection.connect(
            base, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        ) as pg:
            await pg.execute(statement.replace("?", "%s"), params)
    else:
        my: Any = await backends._mysql_connect(backends.server_url("mysql"))
        try:
            async with my.cursor() as cur:
                await cur.execute(statement.replace("?", "%s"), params)
            await my.commit()
        finally:
            my.close()


async def _three_records(url: str) -> None:
    make = RecordFactory(clock=StepClock(), ids=SequentialIds("d"))
    async with await open_journal(url) as journal:
        await journal.append(NS, StreamWrite("s", [make("a"), make("b"), make("c")]))


@pytest.mark.parametrize("backend", SQL_BACKENDS)
async def test_records_missing_at_the_end_are_corruption(backend: str, tmp_path: Path) -> None:
    """A stream whose last records vanished raises CorruptionError naming the first missing one."""
    async with _store(backend, tmp_path) as (url, prefix):
        await _three_records(url)
        await _execute(backend, url, f"DELETE FROM {prefix}records WHERE seq >= ?", (2,))
        async with await open_journal(url) as journal:
            with pytest.raises(CorruptionError, match="head is 3, but its records end at 1") as e:
                await journal.read(NS, "s")
            assert "seq=2" in e.value.location and f"{prefix}records" in e.value.location
            with pytest.raises(CorruptionError, match="records end at 1"):
                await journal.read(NS, "s", start=1, limit=2)
            assert [r.kind for r in await journal.read(NS, "s", start=1, limit=1)] == ["a"]
            assert await journal.read(NS, "s", start=4) == []


@pytest.mark.parametrize("backend", SQL_BACKENDS)
async def test_a_record_beyond_the_head_is_corruption_on_read_and_append(
    backend: str, tmp_path: Path
) -> None:
    """A record stored past the head fails reads and appends with CorruptionError; nothing is written."""
    async with _store(backend, tmp_path) as (url, prefix):
        await _three_records(url)
        await _execute(
            backend,
            url,
            f"INSERT INTO {prefix}records (namespace, stream, seq, data) VALUES (?, ?, ?, ?)",
            (NS, "s", 4, '{"id":"x","kind":"stray","payload":{},"time":0}'),
        )
        make = RecordFactory(clock=StepClock(), ids=SequentialIds("e"))
        # Few retries: a clash that outlasts them is diagnosed, whatever their number.
        fast = url if backend == "sqlite" else backends.with_options(url, retries="2")
        async with await open_journal(fast) as journal:
            with pytest.raises(CorruptionError, match="record 4 lies beyond the stream's head 3"):
                await journal.read(NS, "s")
            with pytest.raises(CorruptionError, match="holds record 4 beyond its head 3") as e:
                await journal.append(NS, StreamWrite("s", [make("d")]), idempotency_key="k")
            assert not isinstance(e.value, BackendUnavailable)
            assert "seq=4" in e.value.location
            assert await journal.head(NS, "s") == 3
            assert [r.kind for r in await journal.read(NS, "s", limit=3)] == ["a", "b", "c"]
            # Other streams are untouched by the damage.
            await journal.append(NS, StreamWrite("t", [make("fine")]))
            assert [r.kind for r in await journal.read(NS, "t")] == ["fine"]
