"""The SQLite backend, Steadyloop's embedded default.

Durability: a returned ``append`` survives a process kill and power loss. The database
runs in WAL mode with ``synchronous=FULL``, so every commit syncs the write-ahead log
before it returns (one ``fsync`` per commit; checkpoints add an occasional one). The
directory is synced after the database file is created. Several processes may share
one file: writers take turns (``BEGIN IMMEDIATE`` with a busy timeout).

Group commit: the appends queued on the connection's thread together run in one
transaction, each checked and refused on its own, and share its one ``COMMIT``; each
returns only once that commit is durable. An append alone commits alone, at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from steadyloop._errors import (
    BackendUnavailable,
    CorruptionError,
    JournalLocked,
    StoreNotFound,
    UnknownBackend,
)
from steadyloop.journal._files import fsync_directory
from steadyloop.journal._protocol import PreparedBatch
from steadyloop.journal._sql import (
    Dialect,
    Plan,
    PlanJournal,
    Query,
    Row,
    group_append_plan,
    migrate_plan,
    run_sync,
)

_log = logging.getLogger(__name__)

__all__ = ["SQLiteJournal"]

T = TypeVar("T")


class SQLiteDialect(Dialect):
    """SQLite: ``?`` placeholders, TEXT compares bytes (BINARY collation), no row locks."""

    name_type = "TEXT"
    data_type = "TEXT"
    int_type = "INTEGER"
    # UPSERT … RETURNING arrived in SQLite 3.35; BEGIN IMMEDIATE already locks.
    head_upsert_returning = sqlite3.sqlite_version_info >= (3, 35, 0)


_GROUP_MAX = 256
"""The most append plans one group transaction takes (bounds a group's latency)."""

_STOP = object()


class _Call:
    """One queued call: its function, its caller's future and loop, and its group payload."""

    __slots__ = ("fn", "future", "grouped", "loop")

    def __init__(
        self,
        fn: Callable[[], Any],
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
        grouped: Any,
    ) -> None:
        self.fn = fn
        self.future = future
        self.loop = loop
        self.grouped = grouped


class _Worker:
    """One thread that owns the connection and runs calls on it, in order.

    A lean stand-in for a one-thread ``ThreadPoolExecutor``: a call is a queue put
    and, when it is done, one ``call_soon_threadsafe`` to the caller's event loop. The
    executor's ``concurrent.futures`` machinery (a work item, a future, and chaining it
    to an asyncio future) cost more than the SQLite transaction of a typical append.
    Semantics are the executor's: calls run one at a time, in submission order; a
    caller that is cancelled stops waiting, but a call that has started runs to its end.

    Group commit: a call submitted with a ``grouped`` payload (an append) may share its
    transaction with the groupable calls queued right behind it. When the worker takes
    such a call, it also takes every groupable call already waiting next in the queue
    (up to `_GROUP_MAX`; it never waits for more, so a call alone runs at once) and
    hands their payloads to ``run_group``, which returns one outcome per payload. The
    first call that is not groupable ends the group and runs after it, so the order of
    submission is kept.
    """

    def __init__(
        self,
        name: str,
        run_group: Callable[[list[Any]], list[tuple[Any, BaseException | None]]] | None = None,
    ) -> None:
        self._name = name
        self._run_group = run_group
        self._queue: queue.SimpleQueue[_Call | object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def submit(self, fn: Callable[[], Any], grouped: Any = None) -> asyncio.Future[Any]:
        """Queue ``fn``; the returned future (of the running loop) gets its outcome.

        Args:
            fn: What runs when the call runs alone.
            grouped: If not ``None``, the payload given to ``run_group`` when the call
                runs in a group instead.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._stopped:
                raise RuntimeError("cannot schedule new calls after shutdown")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put(_Call(fn, future, loop, grouped))
        return future

    def _run(self) -> None:
        held: _Call | object | None = None
        while True:
            item = held if held is not None else self._queue.get()
            held = None
            if item is _STOP:
                return
            assert isinstance(item, _Call)
            if item.future.cancelled():
                continue  # the caller gave up before it started: skip it, as an executor does
            group = [item]
            if item.grouped is not None and self._run_group is not None:
                while len(group) < _GROUP_MAX:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if not isinstance(nxt, _Call) or nxt.grouped is None:
                        held = nxt  # runs after the group, keeping the submission order
                        break
                    if not nxt.future.cancelled():
                        group.append(nxt)
            outcomes: list[tuple[Any, BaseException | None]]
            if len(group) == 1:
                try:
                    outcomes = [(item.fn(), None)]
                except BaseException as exc:  # handed to the caller, as an executor does
                    outcomes = [(None, exc)]
            else:
                assert self._run_group is not None
                try:
                    outcomes = self._run_group([call.grouped for call in group])
                except BaseException as exc:
                    outcomes = [(None, exc)] * len(group)
            if len(group) == 1:
                # RuntimeError: the caller's loop is closed, so nobody is waiting any more.
                with contextlib.suppress(RuntimeError):
                    item.loop.call_soon_threadsafe(_settle, item.future, *outcomes[0])
                continue
            # One wake-up per event loop for the whole group, not one per caller.
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, ...]]] = {}
            for call, (result, error) in zip(group, outcomes, strict=True):
                by_loop.setdefault(call.loop, []).append((call.future, result, error))
            for loop, settles in by_loop.items():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_settle_all, settles)

    def shutdown(self, *, wait: bool) -> None:
        """Run what is queued, then stop the thread; wait for it if ``wait``."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            thread = self._thread
            if thread is None:
                return
            self._queue.put(_STOP)
        if wait:
            thread.join()


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _settle_all(settles: list[tuple[Any, ...]]) -> None:
    for future, result, error in settles:
        _settle(future, result, error)


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
        create: Whether a missing file (or missing tables) is created; with ``False``
            opening raises [`StoreNotFound`][steadyloop.StoreNotFound] and creates nothing
            (for tools that only inspect).
        prefix: Table name prefix (ASCII letters, digits, ``_``; ``steadyloop_``), so
            several journals share one file (URL: ``?prefix=P``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        synchronous: str = "FULL",
        create: bool = True,
        prefix: str | None = None,
    ) -> None:
        super().__init__()
        self.path = str(path)
        self.create = create
        self.url = f"sqlite:///{self.path}" if self.path.startswith("/") else f"sqlite:{self.path}"
        if synchronous.upper() not in {"FULL", "NORMAL", "EXTRA", "OFF"}:
            raise ValueError(f"synchronous must be FULL, EXTRA, NORMAL or OFF, got {synchronous!r}")
        self.synchronous = synchronous.upper()
        try:
            self._dialect = SQLiteDialect(prefix)
        except ValueError as exc:
            raise UnknownBackend(f"{self.url}: {exc}") from None
        self._dialect.location_name = f"sqlite file {self.path}"
        self._busy_timeout = busy_timeout
        # One thread owns the connection; every operation is one call on it.
        self._executor = _Worker("steadyloop-sqlite", run_group=self._group_transaction)
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
                raise StoreNotFound(
                    f"{self.url}: no journal here: no such file; nothing was created"
                )
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
            self._transaction(migrate_plan(self._dialect, create=self.create))
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

    def _begin(self, write: bool) -> None:
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

    def _commit(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise BackendUnavailable(f"sqlite:{self.path}: commit failed: {exc}") from exc

    def _transaction(self, plan: Plan, *, write: bool = True) -> Any:
        conn = self._conn
        assert conn is not None
        self._begin(write)
        try:
            result = run_sync(plan, self._execute)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self._commit(conn)
        return result

    def _group_transaction(
        self, payloads: list[tuple[PreparedBatch, Callable[[], Plan]]]
    ) -> list[tuple[Any, BaseException | None]]:
        """Run a group of appends in one transaction; one ``COMMIT`` (one WAL sync).

        First set-based (`group_append_plan`): one statement per table for the whole
        group, each batch checked and refused on its own, as one append alone also runs.
        Should a statement of it fail (a record stored beyond its head, a driver
        error), nothing of it stays: the transaction is rolled back and the group runs
        again plan by plan (`_plans_transaction`), where the failing batch fails alone.
        A failed ``COMMIT`` fails every batch that had succeeded: none of them is
        reported durable.
        """
        conn = self._conn
        assert conn is not None
        self._begin(True)
        outcomes: list[tuple[Any, BaseException | None]]
        try:
            outcomes = run_sync(
                group_append_plan(self._dialect, [batch for batch, _ in payloads]), self._execute
            )
        except Exception as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            _log.debug(
                "a group of %d appends failed (%s); writing it plan by plan", len(payloads), exc
            )
            return self._plans_transaction([make for _, make in payloads])
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return self._committed(conn, outcomes)

    def _committed(
        self, conn: sqlite3.Connection, outcomes: list[tuple[Any, BaseException | None]]
    ) -> list[tuple[Any, BaseException | None]]:
        """Commit a group's transaction: a failed ``COMMIT`` fails every plan of it."""
        try:
            self._commit(conn)
        except BackendUnavailable as exc:
            return [(None, exc if error is None else error) for _, error in outcomes]
        return outcomes

    def _plans_transaction(
        self, makers: list[Callable[[], Plan]]
    ) -> list[tuple[Any, BaseException | None]]:
        """Run several append plans in one transaction; one ``COMMIT`` (one WAL sync).

        The plans run one after another, as they were queued, so each sees the batches
        before it. First without savepoints (a savepoint costs two more statements per
        plan): if every plan succeeds, that is the group. If one fails, the whole
        transaction is rolled back and the group runs again with each plan in its own
        savepoint, so the failing plan (a conflict, a reused key, a driver error) is
        rolled back to its savepoint and fails alone while the others commit. A failed
        ``COMMIT`` fails every plan that had succeeded: none of them is reported
        durable. Should SQLite roll back the whole transaction itself (it may after a
        full disk or an I/O error), the plans not yet settled run again one by one,
        each in its own transaction.
        """
        conn = self._conn
        assert conn is not None
        outcomes: list[tuple[Any, BaseException | None]] = []
        self._begin(True)
        try:
            for make in makers:
                try:
                    outcomes.append((run_sync(make(), self._execute), None))
                except Exception as exc:
                    if not conn.in_transaction:  # SQLite rolled the transaction back itself
                        return self._one_by_one(makers, [*outcomes, (None, exc)])
                    conn.execute("ROLLBACK")
                    outcomes = self._in_savepoints(makers)
                    if len(outcomes) < len(makers):
                        return self._one_by_one(makers, outcomes)
                    break
        except BaseException:
            # A savepoint statement failed, or the thread is being interrupted: nothing
            # of the group may stay half-done in an open transaction.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return self._committed(conn, outcomes)

    def _in_savepoints(
        self, makers: list[Callable[[], Plan]]
    ) -> list[tuple[Any, BaseException | None]]:
        """Run the plans in a new transaction, each in a savepoint of its own.

        Returns one outcome per plan, or fewer when SQLite rolled the whole
        transaction back after a plan's error (the last outcome is that error).
        """
        conn = self._conn
        assert conn is not None
        self._begin(True)
        outcomes: list[tuple[Any, BaseException | None]] = []
        for make in makers:
            conn.execute("SAVEPOINT steadyloop_batch")
            try:
                result = run_sync(make(), self._execute)
            except Exception as exc:
                outcomes.append((None, exc))
                if not conn.in_transaction:
                    return outcomes
                conn.execute("ROLLBACK TO steadyloop_batch")
            else:
                outcomes.append((result, None))
            conn.execute("RELEASE steadyloop_batch")
        return outcomes

    def _one_by_one(
        self, makers: list[Callable[[], Plan]], outcomes: list[tuple[Any, BaseException | None]]
    ) -> list[tuple[Any, BaseException | None]]:
        """Rerun, alone, the plans of a group whose transaction SQLite rolled back.

        The plans that had succeeded were rolled back with it, so they run again from
        fresh generators; those that failed keep their own error.
        """
        settled: list[tuple[Any, BaseException | None]] = []
        for k, make in enumerate(makers):
            if k < len(outcomes) and outcomes[k][1] is not None:
                settled.append(outcomes[k])
                continue
            try:
                settled.append((self._transaction(make()), None))
            except Exception as exc:
                settled.append((None, exc))
        return settled

    def _duplicate_row(self, exc: BaseException | None) -> bool:
        return isinstance(exc, sqlite3.IntegrityError)

    def transient(self, exc: BaseException) -> bool:
        """Another process held the write lock past the busy timeout: worth another try."""
        return isinstance(exc, JournalLocked) or (
            isinstance(exc, BackendUnavailable)
            and any(word in str(exc) for word in ("database is locked", "database is busy"))
        )

    async def _run_plan(
        self, make_plan: Callable[[], Plan], *, write: bool, pipelined: bool = True
    ) -> Any:
        try:
            return await self._call(lambda: self._transaction(make_plan(), write=write))
        except sqlite3.DatabaseError as exc:
            raise _classify(exc, self.path, "failed") from exc

    async def _run_append(self, make_plan: Callable[[], Plan], batch: PreparedBatch) -> Any:
        """Run an append; it may share one transaction with the appends queued with it."""
        payload = (batch, make_plan)

        def alone() -> Any:
            ((result, error),) = self._group_transaction([payload])
            if error is not None:
                raise error
            return result

        try:
            return await self._executor.submit(alone, grouped=payload)
        except sqlite3.DatabaseError as exc:
            raise _classify(exc, self.path, "failed") from exc

    async def _reclaim_space(self) -> str:
        def vacuum() -> str:
            conn = self._conn
            assert conn is not None
            if self.path == ":memory:":
                return "an in-memory SQLite database has no file to shrink"
            before = os.path.getsize(self.path)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")
            # VACUUM writes the rebuilt pages through the log: move them into the file
            # and empty the log, so no old page survives in either.
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            after = os.path.getsize(self.path)
            return f"sqlite:{self.path}: VACUUM, {before} -> {after} bytes; write-ahead log emptied"

        try:
            text: str = await self._call(vacuum)
        except sqlite3.DatabaseError as exc:
            raise _classify(exc, self.path, "VACUUM failed") from exc
        return text

    async def _close(self) -> None:
        def close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        try:
            await self._call(close)
        finally:
            self._executor.shutdown(wait=True)
