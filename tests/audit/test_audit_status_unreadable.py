"""`audit status` during a rolling upgrade: a row a newer version wrote is listed as unreadable, the rest as usual."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backends import CONNECT_TIMEOUT, server_store
from steadyloop.audit import QueuedTask, TaskSpec, UnreadableTask, open_queue
from steadyloop.cli import _common, app

runner = CliRunner()
NEWER = "future_field"


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Print tables wide enough that nothing folds."""
    monkeypatch.setattr(_common.console, "width", 300)
    monkeypatch.setattr(_common.err_console, "width", 300)


def _newer(spec: str) -> str:
    data = json.loads(spec)
    data[NEWER] = {"kind": "from-a-newer-version"}
    return json.dumps(data)


@asynccontextmanager
async def _store(backend: str, tmp_path: Path) -> AsyncIterator[tuple[str, Callable[..., None]]]:
    """A store URL and a function that rewrites one row as a newer version would."""
    if backend == "sqlite":
        path = tmp_path / "a.db"

        def rewrite_sqlite(task_id: str, status: str | None = None) -> None:
            with sqlite3.connect(path) as conn:
                (spec,) = conn.execute(
                    "SELECT spec FROM steadyloop_audit_tasks WHERE task_id = ?", (task_id,)
                ).fetchone()
                conn.execute(
                    "UPDATE steadyloop_audit_tasks SET spec = ?, status = COALESCE(?, status) "
                    "WHERE task_id = ?",
                    (_newer(spec), status, task_id),
                )
            conn.close()

        yield f"sqlite:///{path}", rewrite_sqlite
        return
    import psycopg

    async with server_store("postgres") as (url, prefix):
        conninfo = url.split("?", 1)[0]

        def rewrite_pg(task_id: str, status: str | None = None) -> None:
            with psycopg.connect(
                conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT
            ) as conn:
                row = conn.execute(
                    f"SELECT spec FROM {prefix}audit_tasks WHERE task_id = %s", (task_id,)
                ).fetchone()
                assert row is not None
                conn.execute(
                    f"UPDATE {prefix}audit_tasks SET spec = %s, status = COALESCE(%s, status) "
                    "WHERE task_id = %s",
                    (_newer(row[0]), status, task_id),
                )

        yield url, rewrite_pg


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_status_lists_a_newer_row_as_unreadable(backend: str, tmp_path: Path) -> None:
    """With one row holding a spec field from a newer version, status lists it as unreadable and the rest as usual, exit 0."""
    async with _store(backend, tmp_path) as (url, rewrite):
        async with await open_queue(url) as queue:
            for task_id in ("a", "b", "c"):
                await queue.submit(TaskSpec(prompt="p", task_id=task_id))
        rewrite("b")
        rewrite("c", status="paused")
        async with await open_queue(url, create=False) as queue:
            listed = await queue.listing()
        assert [type(t) for t in listed] == [QueuedTask, UnreadableTask, UnreadableTask]
        assert [t.task_id for t in listed] == ["a", "b", "c"]
        b, c = listed[1], listed[2]
        assert isinstance(b, UnreadableTask) and isinstance(c, UnreadableTask)
        assert f"unknown field '{NEWER}'" in b.reason and b.status == "queued"
        assert "'paused'" in c.reason and c.status == "paused"

        r = await asyncio.to_thread(runner.invoke, app, ["audit", "status", "-s", url])
        assert r.exit_code == 0, r.output
        rows = {line.split()[1]: line for line in r.stdout.splitlines() if line.startswith("│")}
        assert rows["a"].split()[3] == "queued"
        assert rows["b"].split()[3] == "unreadable" and f"unknown field '{NEWER}'" in rows["b"]
        assert rows["c"].split()[3] == "unreadable" and "'paused'" in rows["c"]
        assert "2 task(s) cannot be read" in r.stderr

        r = await asyncio.to_thread(runner.invoke, app, ["audit", "status", "-s", url, "--json"])
        assert r.exit_code == 0, r.output
        records = [json.loads(line) for line in r.stdout.splitlines()]
        assert [(x["task_id"], x["status"], "unreadable" in x) for x in records] == [
            ("a", "queued", False),
            ("b", "queued", True),
            ("c", "paused", True),
        ]
        assert set(records[1]) == {"task_id", "status", "unreadable"}
