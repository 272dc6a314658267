"""The task queue: leases, heartbeats, priority, dependencies and idempotency keys.

Two backends share one set of SQL statements:

* [`SQLiteQueue`][steadyloop.audit.SQLiteQueue] (the default): a file shared by the worker
  processes of one machine. Claims take turns under SQLite's write lock (``BEGIN IMMEDIATE``).
* [`PostgresQueue`][steadyloop.audit.PostgresQueue]: workers on several machines share one
  queue. A claim locks the row it picks with ``FOR UPDATE … SKIP LOCKED``, so concurrent
  claimers never wait on, or pick, the same task.

Schema (prefix ``steadyloop_`` by default, so the queue can live next to a journal in
the same database)::

    {p}audit_tasks(seq, task_id UNIQUE, idempotency_key UNIQUE, digest, spec, priority,
                   status, not_before, owner, lease_token, lease_expires, attempts,
                   round, audit_rounds, detail, submitted_at, updated_at)
    {p}audit_deps(task_id, depends_on)

The queue is an index for picking work; the task's journal trail is the record of
what happened (see `steadyloop.audit._board`). Times are integer microseconds
from the queue's clock on SQLite, so a test can drive lease expiry by hand; on
PostgreSQL they come from the server's clock, read in each transaction, so workers on
machines whose clocks disagree still agree on who holds a lease.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from steadyloop._errors import (
    BackendUnavailable,
    LeaseLost,
    TaskNotFound,
    TaskSpecError,
    UnknownBackend,
)
from steadyloop.audit._tasks import TaskSpec, TaskStatus, check_dependencies
from steadyloop.records import Clock, IdSource, SystemClock, decode

__all__ = [
    "Claim",
    "PostgresQueue",
    "QueuedTask",
    "SQLiteQueue",
    "SubmitResult",
    "TaskQueue",
    "open_queue",
]

Row = tuple[Any, ...]
Execute = Callable[[str, Sequence[Any]], Awaitable[list[Row]]]

_COLUMNS = (
    "seq, task_id, spec, priority, status, not_before, owner, lease_token, lease_expires, "
    "attempts, round, audit_rounds, detail, submitted_at, updated_at"
)


@dataclass(frozen=True, slots=True)
class SubmitResult:
    """Where a submitted spec went.

    Attributes:
        task_id: The task's id (the first task's, for a resubmitted idempotency key).
        duplicate: True when the idempotency key was already used for the same body:
            nothing new was queued.
    """

    task_id: str
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class QueuedTask:
    """A task as the queue holds it.

    Attributes:
        seq: Submission order.
        task_id: The task.
        spec: Its spec, as submitted.
        priority: Higher runs first.
        status: Its status, as the queue last recorded it.
        not_before: Not claimable before this time (µs).
        owner: The worker holding it, while running.
        lease_token: The lease's token, while running.
        lease_expires: When the lease ends unless renewed (µs).
        attempts: How many times it was claimed.
        round: Rounds started (as of the last settle).
        audit_rounds: Audits done (as of the last settle).
        detail: Why it is where it is (the last decision).
        submitted_at: When it was submitted (µs).
        updated_at: When the row last changed (µs).
    """

    seq: int
    task_id: str
    spec: TaskSpec
    priority: int
    status: TaskStatus
    not_before: int
    owner: str | None
    lease_token: str | None
    lease_expires: int | None
    attempts: int
    round: int
    audit_rounds: int
    detail: str
    submitted_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Row) -> QueuedTask:
        """Build from a row of the columns the queue selects."""
        return cls(
            seq=int(row[0]),
            task_id=str(row[1]),
            spec=TaskSpec.from_json(decode(row[2])),
            priority=int(row[3]),
            status=TaskStatus(row[4]),
            not_before=int(row[5]),
            owner=row[6],
            lease_token=row[7],
            lease_expires=None if row[8] is None else int(row[8]),
            attempts=int(row[9]),
            round=int(row[10]),
            audit_rounds=int(row[11]),
            detail=str(row[12] or ""),
            submitted_at=int(row[13]),
            updated_at=int(row[14]),
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """A lease on a task, held by one worker until it expires or is settled.

    Attributes:
        task_id: The task.
        spec: Its spec.
        worker: The worker holding the lease.
        lease_token: Proof of the lease; every later call on the task passes it.
        attempt: How many times the task has been claimed, this one included.
        lease_expires: When the lease ends unless renewed (µs).
        previous_owner: When the task was taken over from a worker whose lease expired:
            that worker.
        previous_token: And its lease token.
    """

    task_id: str
    spec: TaskSpec
    worker: str
    lease_token: str
    attempt: int
    lease_expires: int
    previous_owner: str | None = None
    previous_token: str | None = None


def _lease_us(seconds: float) -> int:
    if not seconds > 0:
        raise ValueError(f"a lease must last a positive number of seconds, got {seconds!r}")
    return int(seconds * 1_000_000)


class TaskQueue(ABC):
    """A queue of tasks with leases; the SQL is shared, the transactions are the backend's.

    Args:
        prefix: Table name prefix (ASCII letters, digits, ``_``).
        clock: Where times come from (the wall clock by default).
        ids: Where generated task ids come from (random by default).
    """

    placeholder = "?"
    lock_clause = ""
    name_type = "TEXT"

    url: str = ""
    """The URL the queue was opened with (secrets removed)."""

    def __init__(
        self, *, prefix: str | None = None, clock: Clock | None = None, ids: IdSource | None = None
    ) -> None:
        prefix = "steadyloop_" if prefix is None else prefix
        if not prefix.replace("_", "").isalnum() or not prefix.isascii():
            raise UnknownBackend(f"table prefix {prefix!r} must be ASCII letters, digits or _")
        self.prefix = prefix
        self.clock: Clock = clock or SystemClock()
        self._ids = ids

    # -- backend hooks -----------------------------------------------------------------

    @abstractmethod
    def _transaction(self) -> Any:
        """An async context manager giving an `Execute` inside one transaction."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections. Closing twice is harmless."""

    def _unique_violation(self, exc: BaseException) -> bool:
        return False

    async def _now(self, ex: Execute) -> int:
        """The time (µs since the epoch) that leases are written and compared with."""
        return self.clock.now_us()

    # -- helpers -----------------------------------------------------------------------

    def _sql(self, text: str) -> str:
        return text.replace("{p}", self.prefix).replace("?", self.placeholder)

    def _schema(self) -> list[str]:
        n = self.name_type
        seq = (
            "seq INTEGER PRIMARY KEY AUTOINCREMENT"
            if self.placeholder == "?"
            else "seq BIGSERIAL PRIMARY KEY"
        )
        return [
            f"CREATE TABLE IF NOT EXISTS {{p}}audit_tasks ({seq}, task_id {n} NOT NULL UNIQUE, "
            f"idempotency_key {n} UNIQUE, digest TEXT NOT NULL, spec TEXT NOT NULL, "
            "priority BIGINT NOT NULL, status TEXT NOT NULL, not_before BIGINT NOT NULL, "
            "owner TEXT, lease_token TEXT, lease_expires BIGINT, attempts BIGINT NOT NULL, "
            "round BIGINT NOT NULL, audit_rounds BIGINT NOT NULL, detail TEXT NOT NULL, "
            "submitted_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {{p}}audit_deps (task_id {n} NOT NULL, "
            f"depends_on {n} NOT NULL, PRIMARY KEY (task_id, depends_on))",
            "CREATE INDEX IF NOT EXISTS {p}audit_pick ON {p}audit_tasks "
            "(status, priority DESC, seq)",
            "CREATE INDEX IF NOT EXISTS {p}audit_deps_on ON {p}audit_deps (depends_on)",
        ]

    def _new_id(self) -> str:
        return self._ids.new_id() if self._ids is not None else f"t-{uuid.uuid4().hex[:12]}"

    async def _run(self, body: Callable[[Execute], Awaitable[Any]]) -> Any:
        """Run ``body`` in one transaction, again if a racing insert made it fail."""
        for attempt in range(5):
            try:
                async with self._transaction() as ex:
                    return await body(ex)
            except Exception as exc:
                if attempt < 4 and self._unique_violation(exc):
                    await asyncio.sleep(0.005 * (attempt + 1))
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    # -- public API --------------------------------------------------------------------

    async def submit(self, spec: TaskSpec) -> SubmitResult:
        """Submit one task; see [`submit_many`][steadyloop.audit.TaskQueue.submit_many]."""
        return (await self.submit_many([spec]))[0]

    async def submit_many(self, specs: Sequence[TaskSpec]) -> list[SubmitResult]:
        """Submit tasks in one transaction: all are queued, or none is.

        Dependencies may name tasks already queued or tasks of the same batch (which then
        need explicit ids).

        Returns:
            One result per spec, in order.

        Raises:
            TaskSpecError: A spec is invalid: an unknown dependency, a dependency cycle,
                a task id already taken, or an idempotency key already used for a
                different body. Nothing was queued.
        """
        for spec in specs:
            if not isinstance(spec, TaskSpec):
                raise TaskSpecError(f"expected a TaskSpec, got {type(spec).__name__}")

        async def body(ex: Execute) -> list[SubmitResult]:
            now = await self._now(ex)
            results: list[SubmitResult] = []
            new: list[tuple[TaskSpec, str]] = []
            by_key: dict[str, tuple[str, str]] = {}
            ids_in_batch: set[str] = set()
            for spec in specs:
                digest = spec.digest()
                key = spec.idempotency_key
                if key is not None:
                    seen = by_key.get(key)
                    if seen is None:
                        rows = await ex(
                            self._sql(
                                "SELECT task_id, digest FROM {p}audit_tasks "
                                "WHERE idempotency_key = ?"
                            ),
                            (key,),
                        )
                        seen = (str(rows[0][0]), str(rows[0][1])) if rows else None
                    if seen is not None:
                        if seen[1] != digest:
                            raise TaskSpecError(
                                f"idempotency key {key!r} was already used for task {seen[0]!r} "
                                "with a different body; use a new key, or submit the same body",
                                field="idempotency_key",
                            )
                        results.append(SubmitResult(seen[0], duplicate=True))
                        continue
                task_id = spec.task_id or self._new_id()
                if task_id in ids_in_batch:
                    raise TaskSpecError(f"task id {task_id!r} appears twice", field="task_id")
                rows = await ex(
                    self._sql("SELECT 1 FROM {p}audit_tasks WHERE task_id = ?"), (task_id,)
                )
                if rows:
                    raise TaskSpecError(f"task id {task_id!r} is already taken", field="task_id")
                ids_in_batch.add(task_id)
                if key is not None:
                    by_key[key] = (task_id, digest)
                new.append((spec.with_id(task_id), digest))
                results.append(SubmitResult(task_id))
            deps = sorted({d for s, _ in new for d in s.depends_on} - ids_in_batch)
            known: set[str] = set()
            for dep in deps:
                if await ex(self._sql("SELECT 1 FROM {p}audit_tasks WHERE task_id = ?"), (dep,)):
                    known.add(dep)
            check_dependencies([s for s, _ in new], known)
            for spec, digest in new:
                await ex(
                    self._sql(
                        "INSERT INTO {p}audit_tasks (task_id, idempotency_key, digest, spec, "
                        "priority, status, not_before, attempts, round, audit_rounds, detail, "
                        "submitted_at, updated_at) VALUES (?, ?, ?, ?, ?, 'queued', ?, 0, 0, 0, "
                        "'', ?, ?)"
                    ),
                    (
                        spec.task_id,
                        spec.idempotency_key,
                        digest,
                        _canonical(spec),
                        spec.priority,
                        now,
                        now,
                        now,
                    ),
                )
                for dep in spec.depends_on:
                    await ex(
                        self._sql("INSERT INTO {p}audit_deps (task_id, depends_on) VALUES (?, ?)"),
                        (spec.task_id, dep),
                    )
            return results

        result: list[SubmitResult] = await self._run(body)
        return result

    async def claim(self, worker: str, lease: float = 30.0) -> Claim | None:
        """Lease the next claimable task to ``worker``.

        Claimable: queued (and due), or running with an expired lease (its worker is
        presumed lost), with every dependency completed. Highest priority first, then
        submission order.

        Returns:
            The claim, or ``None`` when nothing is claimable now.
        """
        lease_us = _lease_us(lease)
        token = uuid.uuid4().hex

        async def body(ex: Execute) -> Claim | None:
            now = await self._now(ex)
            rows = await ex(
                self._sql(
                    "SELECT t.task_id, t.spec, t.status, t.owner, t.lease_token, t.attempts "
                    "FROM {p}audit_tasks t WHERE ((t.status = 'queued' AND t.not_before <= ?) "
                    "OR (t.status = 'running' AND t.lease_expires < ?)) AND NOT EXISTS ("
                    "SELECT 1 FROM {p}audit_deps d JOIN {p}audit_tasks u "
                    "ON u.task_id = d.depends_on WHERE d.task_id = t.task_id "
                    "AND u.status <> 'completed') ORDER BY t.priority DESC, t.seq ASC LIMIT 1"
                )
                + self.lock_clause,
                (now, now),
            )
            if not rows:
                return None
            task_id, spec, status, owner, old_token, attempts = rows[0]
            expires = now + lease_us
            await ex(
                self._sql(
                    "UPDATE {p}audit_tasks SET status = 'running', owner = ?, lease_token = ?, "
                    "lease_expires = ?, attempts = attempts + 1, updated_at = ? WHERE task_id = ?"
                ),
                (worker, token, expires, now, task_id),
            )
            stolen = status == TaskStatus.RUNNING.value
            return Claim(
                task_id=str(task_id),
                spec=TaskSpec.from_json(decode(spec)),
                worker=worker,
                lease_token=token,
                attempt=int(attempts) + 1,
                lease_expires=expires,
                previous_owner=owner if stolen else None,
                previous_token=old_token if stolen else None,
            )

        claim: Claim | None = await self._run(body)
        return claim

    async def heartbeat(self, task_id: str, lease_token: str, lease: float = 30.0) -> bool:
        """Renew a lease for another ``lease`` seconds.

        Returns:
            False when the lease is no longer this token's (it was taken over or
                settled): the worker must stop.
        """
        lease_us = _lease_us(lease)

        async def body(ex: Execute) -> bool:
            now = await self._now(ex)
            rows = await ex(
                self._sql(
                    "UPDATE {p}audit_tasks SET lease_expires = ?, updated_at = ? WHERE task_id = ? "
                    "AND lease_token = ? AND status = 'running' RETURNING task_id"
                ),
                (now + lease_us, now, task_id, lease_token),
            )
            return bool(rows)

        ok: bool = await self._run(body)
        return ok

    async def settle(
        self,
        task_id: str,
        lease_token: str,
        status: TaskStatus,
        *,
        round: int,
        audit_rounds: int,
        detail: str = "",
        delay: float = 0.0,
    ) -> None:
        """Record where a leased task went and give the lease up.

        Args:
            task_id: The task.
            lease_token: The lease being given up.
            status: ``queued`` (pushed back or released) or a terminal status.
            round: Rounds started.
            audit_rounds: Audits done.
            detail: Why.
            delay: Seconds before a re-queued task may be claimed again.

        Raises:
            LeaseLost: The lease is no longer this token's; nothing was changed.
        """
        if status is TaskStatus.RUNNING:
            raise ValueError("settle moves a task out of running")

        async def body(ex: Execute) -> bool:
            now = await self._now(ex)
            rows = await ex(
                self._sql(
                    "UPDATE {p}audit_tasks SET status = ?, owner = NULL, lease_token = NULL, "
                    "lease_expires = NULL, not_before = ?, round = ?, audit_rounds = ?, "
                    "detail = ?, updated_at = ? WHERE task_id = ? AND lease_token = ? "
                    "RETURNING task_id"
                ),
                (
                    status.value,
                    now + int(delay * 1_000_000),
                    round,
                    audit_rounds,
                    detail,
                    now,
                    task_id,
                    lease_token,
                ),
            )
            return bool(rows)

        if not await self._run(body):
            raise LeaseLost(f"task {task_id!r}: the lease {lease_token[:8]}… is no longer held")

    async def progress(
        self, task_id: str, lease_token: str, *, round: int, audit_rounds: int
    ) -> bool:
        """Record a running task's counters (for ``status``); False if the lease is gone."""

        async def body(ex: Execute) -> bool:
            rows = await ex(
                self._sql(
                    "UPDATE {p}audit_tasks SET round = ?, audit_rounds = ?, updated_at = ? "
                    "WHERE task_id = ? AND lease_token = ? RETURNING task_id"
                ),
                (round, audit_rounds, await self._now(ex), task_id, lease_token),
            )
            return bool(rows)

        ok: bool = await self._run(body)
        return ok

    async def block(self, task_id: str, detail: str) -> bool:
        """Mark a queued task blocked (a dependency ended without completing).

        Returns:
            False when the task was not queued.
        """

        async def body(ex: Execute) -> bool:
            now = await self._now(ex)
            rows = await ex(
                self._sql(
                    "UPDATE {p}audit_tasks SET status = 'blocked', detail = ?, updated_at = ? "
                    "WHERE task_id = ? AND status = 'queued' RETURNING task_id"
                ),
                (detail, now, task_id),
            )
            return bool(rows)

        ok: bool = await self._run(body)
        return ok

    async def doomed(self) -> list[tuple[str, str, str]]:
        """Queued tasks that can never run: a dependency ended without completing.

        Returns:
            ``(task, dependency, dependency's status)`` for each.
        """

        async def body(ex: Execute) -> list[tuple[str, str, str]]:
            rows = await ex(
                self._sql(
                    "SELECT t.task_id, u.task_id, u.status FROM {p}audit_tasks t "
                    "JOIN {p}audit_deps d ON d.task_id = t.task_id JOIN {p}audit_tasks u "
                    "ON u.task_id = d.depends_on WHERE t.status = 'queued' AND u.status IN "
                    "('needs-human', 'goal-unmet', 'blocked') ORDER BY t.seq"
                ),
                (),
            )
            return [(str(a), str(b), str(c)) for a, b, c in rows]

        out: list[tuple[str, str, str]] = await self._run(body)
        return out

    async def get(self, task_id: str) -> QueuedTask:
        """Return one task.

        Raises:
            TaskNotFound: No such task.
        """

        async def body(ex: Execute) -> list[Row]:
            return await ex(
                self._sql(f"SELECT {_COLUMNS} FROM {{p}}audit_tasks WHERE task_id = ?"), (task_id,)
            )

        rows: list[Row] = await self._run(body)
        if not rows:
            raise TaskNotFound(f"no task {task_id!r} in {self.url}")
        return QueuedTask.from_row(rows[0])

    async def tasks(self, status: TaskStatus | None = None) -> list[QueuedTask]:
        """Every task (or those with ``status``), in submission order."""

        async def body(ex: Execute) -> list[Row]:
            if status is None:
                return await ex(
                    self._sql(f"SELECT {_COLUMNS} FROM {{p}}audit_tasks ORDER BY seq"), ()
                )
            return await ex(
                self._sql(f"SELECT {_COLUMNS} FROM {{p}}audit_tasks WHERE status = ? ORDER BY seq"),
                (status.value,),
            )

        rows: list[Row] = await self._run(body)
        return [QueuedTask.from_row(r) for r in rows]

    async def counts(self) -> dict[TaskStatus, int]:
        """How many tasks are in each status (every status listed, zeros included)."""

        async def body(ex: Execute) -> list[Row]:
            return await ex(
                self._sql("SELECT status, COUNT(*) FROM {p}audit_tasks GROUP BY status"), ()
            )

        rows: list[Row] = await self._run(body)
        out = dict.fromkeys(TaskStatus, 0)
        for status, n in rows:
            out[TaskStatus(status)] = int(n)
        return out

    async def __aenter__(self) -> TaskQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"


def _canonical(spec: TaskSpec) -> str:
    from steadyloop.records import canonical_json

    return canonical_json(spec.to_json())


class SQLiteQueue(TaskQueue):
    """The queue in a SQLite file (WAL, ``synchronous=FULL``), shared by local processes.

    Args:
        path: The database file; may be the journal's file (the tables differ).
        busy_timeout: Seconds to wait for another process's write.
        **options: ``prefix``, ``clock``, ``ids`` (see [`TaskQueue`][steadyloop.audit.TaskQueue]).
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0, **options: Any):
        super().__init__(**options)
        self.path = str(path)
        self.url = f"sqlite:///{self.path}" if self.path.startswith("/") else f"sqlite:{self.path}"
        self._busy_timeout = busy_timeout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="steadyloop-queue")
        self._lock = asyncio.Lock()
        self._conn: sqlite3.Connection | None = None

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **options: Any) -> SQLiteQueue:
        """Open (and create if needed) a queue in a SQLite file.

        Raises:
            BackendUnavailable: The directory is missing or the file is not a database.
        """
        queue = cls(path, **options)
        try:
            await queue._call(queue._connect)
        except BaseException:
            queue._executor.shutdown(wait=False)
            raise
        return queue

    def _connect(self) -> None:
        parent = Path(self.path).resolve().parent
        if not parent.is_dir():
            raise BackendUnavailable(f"{self.url}: directory {parent} does not exist")
        try:
            conn = sqlite3.connect(
                self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for stmt in self._schema():
                    conn.execute(self._sql(stmt))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise BackendUnavailable(f"{self.url}: cannot open the queue: {exc}") from exc
        self._conn = conn

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _exec(self, sql: str, params: Sequence[Any]) -> list[Row]:
        assert self._conn is not None
        return list(self._conn.execute(sql, tuple(params)).fetchall())

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Execute]:
        if self._conn is None:
            raise BackendUnavailable(f"{self.url}: the queue is closed")
        conn = self._conn

        async def ex(sql: str, params: Sequence[Any]) -> list[Row]:
            rows: list[Row] = await self._call(self._exec, sql, params)
            return rows

        async with self._lock:
            try:
                await self._call(conn.execute, "BEGIN IMMEDIATE")
            except sqlite3.DatabaseError as exc:
                raise BackendUnavailable(f"{self.url}: cannot begin: {exc}") from exc
            except asyncio.CancelledError:
                # BEGIN goes on in the queue's thread and may still open a transaction:
                # roll it back there, after it (one thread, in order), without waiting.
                self._executor.submit(self._rollback_if_open, conn)
                raise
            try:
                yield ex
            except asyncio.CancelledError:
                self._executor.submit(self._rollback_if_open, conn)
                raise
            except BaseException:
                await self._call(conn.execute, "ROLLBACK")
                raise
            try:
                await self._call(conn.execute, "COMMIT")
            except sqlite3.DatabaseError as exc:
                if conn.in_transaction:
                    await self._call(conn.execute, "ROLLBACK")
                raise BackendUnavailable(f"{self.url}: commit failed: {exc}") from exc

    @staticmethod
    def _rollback_if_open(conn: sqlite3.Connection) -> None:
        """Roll back a transaction a cancelled caller left open (runs in the thread)."""
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def _unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError)

    async def close(self) -> None:
        """Close the connection."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._call(conn.close)
        self._executor.shutdown(wait=False)


def _lock_id(prefix: str) -> int:
    digest = hashlib.sha256(f"steadyloop audit migrate {prefix}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresQueue(TaskQueue):
    """The queue in PostgreSQL, shared by workers on several machines.

    A claim picks its row with ``SELECT … FOR UPDATE OF t SKIP LOCKED``: rows another
    claimer has locked are skipped, not waited for, so no two claimers ever hold the
    same task, and none blocks the others.

    Args:
        url: A ``postgresql://`` URL; its ``prefix`` and ``pool_size`` query parameters
            are read here, the rest goes to libpq.
        **options: ``prefix``, ``clock``, ``ids`` (see
            [`TaskQueue`][steadyloop.audit.TaskQueue]). Queue times (leases, ``not_before``,
            timestamps) come from the server's clock, not from ``clock``, so machines with
            skewed clocks still agree on leases.
        server_clock: Read times from the server (the default). ``False`` uses
            ``clock`` instead, for tests that drive lease expiry by hand on one machine.
    """

    placeholder = "%s"
    lock_clause = " FOR UPDATE OF t SKIP LOCKED"
    name_type = 'TEXT COLLATE "C"'

    def __init__(self, url: str, *, server_clock: bool = True, **options: Any) -> None:
        self.server_clock = server_clock
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        own = {k: v for k, v in query if k in ("prefix", "pool_size")}
        rest = [(k, v) for k, v in query if k not in ("prefix", "pool_size")]
        options.setdefault("prefix", own.get("prefix"))
        super().__init__(**options)
        self._conninfo = parts._replace(scheme="postgresql", query=urlencode(rest)).geturl()
        from steadyloop.journal import redact_url

        self.url = redact_url(url)
        try:
            self.pool_size = int(own.get("pool_size", 4))
        except ValueError:
            raise UnknownBackend(f"{self.url}: pool_size must be an integer") from None
        self._pool: Any = None

    @classmethod
    async def open(cls, url: str, **options: Any) -> PostgresQueue:
        """Connect and create the tables if needed.

        Raises:
            BackendUnavailable: The server cannot be reached, or psycopg is missing.
        """
        queue = cls(url, **options)
        await queue._connect()
        return queue

    async def _connect(self) -> None:
        try:
            import psycopg
            from psycopg_pool import AsyncConnectionPool
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise BackendUnavailable(
                "the PostgreSQL driver is missing; install steadyloop[postgres]"
            ) from exc
        try:
            conn = await psycopg.AsyncConnection.connect(
                self._conninfo, autocommit=True, connect_timeout=10
            )
            async with conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(self.prefix),))
                for stmt in self._schema():
                    await conn.execute(self._sql(stmt))
        except psycopg.Error as exc:
            raise BackendUnavailable(f"{self.url}: cannot prepare the queue: {exc}") from exc
        pool: Any = AsyncConnectionPool(
            self._conninfo,
            kwargs={"autocommit": True},
            min_size=1,
            max_size=self.pool_size,
            open=False,
            name=f"steadyloop-audit-{self.prefix}",
        )
        try:
            await pool.open(wait=True, timeout=10)
        except psycopg.Error as exc:
            await pool.close()
            raise BackendUnavailable(f"{self.url}: cannot open a connection pool: {exc}") from exc
        self._pool = pool

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Execute]:
        import psycopg

        if self._pool is None:
            raise BackendUnavailable(f"{self.url}: the queue is closed")
        try:
            async with self._pool.connection() as conn, conn.transaction():

                async def ex(sql: str, params: Sequence[Any]) -> list[Row]:
                    async with conn.cursor() as cur:
                        await cur.execute(sql, tuple(params))
                        if cur.description is None:
                            return []
                        return list(await cur.fetchall())

                yield ex
        except psycopg.OperationalError as exc:
            raise BackendUnavailable(f"{self.url}: {type(exc).__name__}: {exc}") from exc

    async def _now(self, ex: Execute) -> int:
        """The server's clock, read in the transaction: one clock for every machine.

        Workers on several machines compare leases against the same time, so a worker
        whose clock runs ahead cannot take a lease that is still live.
        """
        if not self.server_clock:
            return self.clock.now_us()
        rows = await ex("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint", ())
        return int(rows[0][0])

    def _unique_violation(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(
            exc,
            psycopg.errors.UniqueViolation
            | psycopg.errors.SerializationFailure
            | psycopg.errors.DeadlockDetected,
        )

    async def close(self) -> None:
        """Close the connection pool."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


def _sqlite_path(url: str) -> str:
    rest = url[len("sqlite:") :].split("?", 1)[0]
    if rest.startswith("//"):
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise UnknownBackend(f"{url!r}: a sqlite URL takes a path, not a host")
        path = unquote(parts.path)
    else:
        path = unquote(rest)
    if not path:
        raise UnknownBackend(f"{url!r}: the sqlite URL names no path")
    return os.path.expanduser(path)


async def open_queue(url: str, **options: Any) -> TaskQueue:
    """Open the task queue a URL names.

    URLs: ``sqlite:FILE``, ``sqlite:///FILE`` or ``postgresql://…`` (with
    ``?prefix=…`` to share a database).

    Args:
        url: The queue URL; it may be the journal's URL (the tables differ).
        **options: ``clock``, ``ids``, ``prefix``.

    Raises:
        UnknownBackend: The scheme is not sqlite or postgresql.
        BackendUnavailable: The store cannot be opened.
    """
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "sqlite":
        prefix = dict(parse_qsl(urlsplit(url).query)).get("prefix")
        if prefix is not None:
            options.setdefault("prefix", prefix)
        return await SQLiteQueue.open(_sqlite_path(url), **options)
    if scheme in ("postgresql", "postgres"):
        return await PostgresQueue.open(url, **options)
    raise UnknownBackend(
        f"the task queue runs on sqlite or postgresql, not {scheme or url!r}; "
        "use sqlite:FILE or postgresql://…"
    )
