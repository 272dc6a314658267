"""The SQLite backend, Steadyloop's embedded default.

Durability: a returned ``append`` survives a process kill and power loss. The database
runs in WAL mode with ``synchronous=FULL``, so every commit syncs the write-ahead log
before it returns (one ``fsync`` per batch; checkpoints add an occasional one). The
directory is synced after the database file is created. Several processes may share
one file: writers take turns (``BEGIN IMMEDIATE`` with a busy timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from steadyloop._errors import BackendUnavailable, CorruptionError, JournalLocked
from steadyloop.journal._files import fsync_directory
from steadyloop.journal._sql import (
    Dialect,
    Plan,
    PlanJournal,
    Query,
    Row,
    migrate_plan,
    run_sync,
)

__all__ = ["SQLiteJournal"]

T = TypeVar("T")


class SQLiteDialect(Dialect):
    """SQLite: ``?`` placeholders, TEXT compares bytes (BINARY collation), no row locks."""

    name_type = "TEXT"
    data_type = "TEXT"
    int_type = "INTEGER"
    # UPSERT … RETURNING arrived in SQLite 3.35; BEGIN IMMEDIATE already locks.
    head_upsert_returning = sqlite3.sqlite_version_info >= (3, 35, 0)


class _Worker:
    """One thread that owns the connection and runs calls on it, in order.

    A lean stand-in for a one-thread ``ThreadPoolExecutor``: a call is a queue put
    and, when it is done, one ``call_soon_threadsafe`` to the caller's event loop. The
    executor's ``concurrent.futures`` machinery (a work item, a future, and chaining it
    to an asyncio future) cost more than the SQLite transaction of a typical append.
    Semantics are the executor's: calls run one at a time, in submission order; a
    caller that is cancelled stops waiting, but a call that has started runs to its end.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[
            tuple[Callable[[], Any], asyncio.Future[Any], asyncio.AbstractEventLoop] | None
        ] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def submit(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """Queue ``fn``; the returned future (of the running loop) gets its outcome."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._stopped:
                raise RuntimeError("cannot schedule new calls after shutdown")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put((fn, future, loop))
        return future

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, future, loop = item
            if future.cancelled():
                continue  # the caller gave up before it started: skip it, as an executor does
            try:
                result, error = fn(), None
            except BaseException as exc:  # handed to the caller, as an executor does
                result, error = None, exc
            # RuntimeError: the caller's loop is closed, so nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, result, error)

    def shutdown(self, *, wait: bool) -> None:
        """Run what is queued, then stop the thread; wait for it if ``wait``."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            thread = self._thread
            if thread is None:
                return
            self._queue.put(None)
        if wait:
            thread.join()


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _classify(exc: sqlite3.DatabaseError, path: str, doing: str) -> Exception:
    """Damaged files are corruption (naming the file); anything else is unavailability."""
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        return CorruptionError(f"the database is damaged: {text}", location=f"sqlite file {path}")
    return BackendUnavailable(f"sqlite:{path}: {doing}: {text}")


class SQLiteJournal(PlanJournal):
    """A journal in one SQLite file (the default backend).

    Durability: survives process kill and power loss (WAL, ``synchronous=FULL``).

    Args:
        path: The database file; created with its tables if missing. ``":memory:"``
            gives a private in-memory database that promises nothing.
        busy_timeout: Seconds to wait for another process's write to finish.
        synchronous: SQLite's ``synchronous`` setting. ``"FULL"`` (the default) is the
            only setting that survives power loss; ``"NORMAL"`` survives a process kill
            only. Weakening it is explicit, never silent.
        create: Whether a missing file is created; with ``False`` opening it raises
            [`BackendUnavailable`][steadyloop.BackendUnavailable] (for tools that only inspect).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        synchronous: str = "FULL",
        create: bool = True,
    ) -> None:
        super().__init__()
        self.path = str(path)
        self.create = create
        self.url = f"sqlite:///{self.path}" if self.path.startswith("/") else f"sqlite:{self.path}"
        if synchronous.upper() not in {"FULL", "NORMAL", "EXTRA", "OFF"}:
            raise ValueError(f"synchronous must be FULL, EXTRA, NORMAL or OFF, got {synchronous!r}")
        self.synchronous = synchronous.upper()
        self._dialect = SQLiteDialect()
        self._dialect.location_name = f"sqlite file {self.path}"
        self._busy_timeout = busy_timeout
        # One thread owns the connection; every operation is one call on it.
        self._executor = _Worker("steadyloop-sqlite")
        self._conn: sqlite3.Connection | None = None

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **options: Any) -> SQLiteJournal:
        """Open (and create if needed) a SQLite journal.

        Raises:
            BackendUnavailable: The file's directory is missing or not writable, or the
                file is not a database.
        """
        journal = cls(path, **options)
        try:
            await journal._call(journal._connect)
        except BaseException:
            journal._executor.shutdown(wait=False)
            raise
        return journal

    def _connect(self) -> None:
        if self.path != ":memory:":
            parent = Path(self.path).resolve().parent
            if not parent.is_dir():
                raise BackendUnavailable(f"sqlite:{self.path}: directory {parent} does not exist")
            if not os.access(parent, os.W_OK):
                raise BackendUnavailable(f"sqlite:{self.path}: directory {parent} is not writable")
            created = not os.path.exists(self.path)
            if created and not self.create:
                raise BackendUnavailable(f"{self.url}: no journal here: no such file")
        else:
            created = False
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
            self._conn = conn
            self._transaction(migrate_plan(self._dialect))
        except sqlite3.DatabaseError as exc:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            raise _classify(exc, self.path, "cannot open") from exc
        if created:
            fsync_directory(Path(self.path).resolve().parent)

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await self._executor.submit(lambda: fn(*args))

    def _execute(self, query: Query) -> list[Row]:
        assert self._conn is not None
        if query.many:
            self._conn.executemany(query.sql, query.params)
            return []
        cursor = self._conn.execute(query.sql, query.params)
        return cursor.fetchall() if query.fetch else []

    def _transaction(self, plan: Plan, *, write: bool = True) -> Any:
        conn = self._conn
        assert conn is not None
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise JournalLocked(
                    f"sqlite:{self.path}: another writer held the database for longer than "
                    f"{self._busy_timeout}s"
                ) from exc
            raise BackendUnavailable(f"sqlite:{self.path}: {exc}") from exc
        try:
            result = run_sync(plan, self._execute)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise BackendUnavailable(f"sqlite:{self.path}: commit failed: {exc}") from exc
        return result

    def _duplicate_row(self, exc: BaseException | None) -> bool:
        return isinstance(exc, sqlite3.IntegrityError)

    async def _run_plan(self, make_plan: Callable[[], Plan], *, write: bool) -> Any:
        try:
            return await self._call(lambda: self._transaction(make_plan(), write=write))
        except sqlite3.DatabaseError as exc:
            raise _classify(exc, self.path, "failed") from exc

    async def _close(self) -> None:
        def close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        try:
            await self._call(close)
        finally:
            self._executor.shutdown(wait=True)
