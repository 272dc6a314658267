"""The task queue: leases, heartbeats, priority, dependencies, idempotency keys, cancels.

The queue lives in the journal's database and runs on the journal's SQL stack: its
operations are driver-free plans (generators of `Query`, as in
`steadyloop.journal._sql`), run by the journal's own runner — SQLite's one worker
thread, or the PostgreSQL or MySQL/MariaDB connection pool — with the journal's retry
of refused transactions. One URL opens both; the dialect supplies the quirks:

* SQLite (the default): a file shared by the worker processes of one machine. Claims
  take turns under SQLite's write lock (``BEGIN IMMEDIATE``). Lease times come from
  each process's clock (`TaskQueue.clock`), so the workers of one machine share one
  clock.
* PostgreSQL, and MySQL 8 / MariaDB 10.6 or newer: workers on several machines share
  one queue. A claim locks the row it picks with ``FOR UPDATE … SKIP LOCKED``, so
  concurrent claimers never wait on, or pick, the same task. Lease times come from the
  **server's** clock, read in each transaction, so workers whose clocks disagree still
  agree on who holds a lease. PostgreSQL also wakes idle workers with ``NOTIFY``.

Apps: a queue is scoped to one *app*, the journal namespace its tasks' trails live in
(`TaskQueue.app`, [`DEFAULT_APP`][steadyloop.audit.DEFAULT_APP] unless another is named).
Every operation — submit, claim, heartbeat, settle, cancel, retry, status, the
dependency checks and the wake-ups — sees only the tasks of its own app, so a worker of
app ``other`` never claims, reads or writes the trail of a task of the default app.
A task is known by ``(app, task_id)``: the same task id may exist in two apps (they
are two tasks, with two trails in two namespaces), an idempotency key is one app's,
and a dependency names a task of the same app.

Schema, version `QUEUE_SCHEMA_VERSION` (prefix ``steadyloop_`` by default, the
journal's prefix)::

    {p}audit_schema(version)
    {p}audit_tasks(seq, app, task_id, idempotency_key, digest, spec, priority,
                   status, not_before, owner, lease_token, lease_expires, attempts,
                   round, audit_rounds, detail, submitted_at, updated_at,
                   cancel_requested, settled_token, submit_token, prev_owner, prev_token,
                   UNIQUE (app, task_id), UNIQUE (app, idempotency_key))
    {p}audit_deps(app, task_id, depends_on)

Older layouts are migrated in place on open, in one transaction where the database
allows DDL in one (SQLite, PostgreSQL): version 1 (no ``audit_schema`` table, none of
the columns from ``cancel_requested`` on) gains them; version 2 (no ``app``) is rebuilt
with the app in its keys, every existing task going to the default app. A newer
version is refused with one line.

Lost connections and a busy store: every operation is retried with bounded backoff
(`TaskQueue.reconnect_for` seconds in all). A transaction whose commit may or may
not have happened is rerun safely, because each plan recognises its own earlier work:
a claim by its lease token (made before the first attempt), a settle by the token it
recorded, a submission by its submission token. So a blip never costs a task a claim.

The queue is an index for picking work; the task's journal trail is the record of
what happened (see [`TaskBoard`][steadyloop.audit.TaskBoard]), and the board writes a
task change to both in one transaction: the row is a projection of the trail.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from steadyloop import _names
from steadyloop._errors import (
    CorruptionError,
    LeaseLost,
    TaskCancelled,
    TaskNotFound,
    TaskSpecError,
    UnknownBackend,
)
from steadyloop._urls import URL, as_url, parse_url, redact_url, without_passwords
from steadyloop.audit._tasks import TaskSpec, TaskStatus, check_dependencies, prepare_spec_model
from steadyloop.journal._sql import (
    Dialect,
    Plan,
    PlanJournal,
    Query,
    Row,
    no_store_here,
    table_exists_plan,
)
from steadyloop.journal._sql_async import RetryPolicy, retry_transaction
from steadyloop.records import Clock, IdSource, SystemClock, canonical_json, decode

__all__ = [
    "DEFAULT_APP",
    "QUEUE_SCHEMA_VERSION",
    "Claim",
    "MySQLQueue",
    "PostgresQueue",
    "QueuedTask",
    "SQLiteQueue",
    "SubmitResult",
    "TaskQueue",
    "UnreadableTask",
    "open_queue",
    "split_queue_url",
    "wait_event",
]

QUEUE_SCHEMA_VERSION = 3
"""The queue schema version this code writes and reads."""

DEFAULT_APP = "audit"
"""The journal namespace of tasks' trails and runs (and the queue's app), unless another
is named. Tasks of a queue written before apps existed (schema version 2) belong to it."""

_log = logging.getLogger(__name__)
RECONNECT = RetryPolicy(attempts=1000, base_delay=0.05, max_delay=2.0)
"""Pauses between attempts after a lost connection or a busy store (doubling, jittered)."""

_COLUMNS = (
    "seq, task_id, spec, priority, status, not_before, owner, lease_token, lease_expires, "
    "attempts, round, audit_rounds, detail, submitted_at, updated_at, cancel_requested"
)
_CLAIMABLE = (
    "t.app = ? AND ((t.status = 'queued' AND t.not_before <= {now}) OR (t.status = 'running' "
    "AND t.lease_expires < {now})) AND NOT EXISTS (SELECT 1 FROM {p}audit_deps d "
    "JOIN {p}audit_tasks u ON u.app = d.app AND u.task_id = d.depends_on "
    "WHERE d.app = t.app AND d.task_id = t.task_id AND u.status <> 'completed')"
)
_COPIED = (
    "seq, task_id, idempotency_key, digest, spec, priority, status, not_before, owner, "
    "lease_token, lease_expires, attempts, round, audit_rounds, detail, submitted_at, "
    "updated_at, cancel_requested, settled_token, submit_token, prev_owner, prev_token"
)
_ENDED_BADLY = "('needs-human', 'goal-unmet', 'blocked', 'cancelled')"


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
        cancel_requested: Why a cancel was asked for while it ran, if one was.
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
    cancel_requested: str | None = None

    @classmethod
    def from_row(cls, row: Row, d: Dialect | None = None) -> QueuedTask:
        """Build from a row of the columns the queue selects.

        Raises:
            CorruptionError: The row holds a status or spec this version does not know
                (the queue was written by another version of Steadyloop), naming the row.
        """
        task = cls.read_row(row, d)
        if isinstance(task, UnreadableTask):
            raise CorruptionError(f"task {task.task_id!r} {task.reason}", location=task.location)
        return task

    @classmethod
    def read_row(cls, row: Row, d: Dialect | None = None) -> QueuedTask | UnreadableTask:
        """Like `from_row`, with a row this version cannot read returned as an `UnreadableTask`."""
        task_id = d.load_name(row[1]) if d is not None else str(row[1])
        where = f"{d.location_name if d else 'queue'} table {d.prefix if d else ''}audit_tasks"
        location = f"{where}[task_id={task_id!r}]"
        try:
            status = TaskStatus(_text(row[4]))
        except ValueError:
            reason = (
                f"has status {_text(row[4])!r}, which this steadyloop does not know "
                "(written by another version?)"
            )
            return UnreadableTask(int(row[0]), task_id, _text(row[4]), reason, location)
        try:
            spec = TaskSpec.from_json(decode(_text(row[2])))
        except (ValueError, TypeError) as exc:
            reason = f"has a spec this steadyloop cannot read: {exc}"
            return UnreadableTask(int(row[0]), task_id, status.value, reason, location)
        return cls(
            seq=int(row[0]),
            task_id=task_id,
            spec=spec,
            priority=int(row[3]),
            status=status,
            not_before=int(row[5]),
            owner=_opt(row[6]),
            lease_token=_opt(row[7]),
            lease_expires=None if row[8] is None else int(row[8]),
            attempts=int(row[9]),
            round=int(row[10]),
            audit_rounds=int(row[11]),
            detail=_text(row[12] or ""),
            submitted_at=int(row[13]),
            updated_at=int(row[14]),
            cancel_requested=_opt(row[15]) if len(row) > 15 else None,
        )


@dataclass(frozen=True, slots=True)
class UnreadableTask:
    """A queue row this version cannot read: a status or spec field it does not know.

    During a rolling upgrade a newer Steadyloop may already have queued tasks with
    fields this one refuses; listings show them as unreadable instead of failing.

    Attributes:
        seq: Its submission order.
        task_id: The task's id.
        status: Its status as stored (possibly one this version does not know).
        reason: Why it cannot be read, short ("has a spec this steadyloop cannot read: …").
        location: The table and row, as a `CorruptionError` names it.
    """

    seq: int
    task_id: str
    status: str
    reason: str
    location: str


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
        cancel_requested: Why a cancel was asked for while the task ran (its worker
            was then lost): the claimer records it cancelled instead of working on it.
    """

    task_id: str
    spec: TaskSpec
    worker: str
    lease_token: str
    attempt: int
    lease_expires: int
    previous_owner: str | None = None
    previous_token: str | None = None
    cancel_requested: str | None = None


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8")
    return str(value)


def _opt(value: Any) -> str | None:
    return None if value is None else _text(value)


def _lease_us(seconds: float) -> int:
    if not seconds > 0:
        raise ValueError(f"a lease must last a positive number of seconds, got {seconds!r}")
    return int(seconds * 1_000_000)


# -- plans ----------------------------------------------------------------------------


def _table_statements(
    d: Dialect, tasks: str = "audit_tasks", deps: str = "audit_deps"
) -> list[str]:
    n, t, i, s = d.name_type, d.data_type, d.int_type, d.short_text
    suffix = d.table_suffix
    return [
        f"CREATE TABLE {{p}}{tasks} ({d.serial_key}, app {n} NOT NULL, task_id {n} NOT NULL, "
        f"idempotency_key {n}, digest {s} NOT NULL, spec {t} NOT NULL, "
        f"priority {i} NOT NULL, status {s} NOT NULL, not_before {i} NOT NULL, "
        f"owner {t}, lease_token {s}, lease_expires {i}, attempts {i} NOT NULL, "
        f"round {i} NOT NULL, audit_rounds {i} NOT NULL, detail {t} NOT NULL, "
        f"submitted_at {i} NOT NULL, updated_at {i} NOT NULL, cancel_requested {t}, "
        f"settled_token {s}, submit_token {s}, prev_owner {t}, prev_token {s}, "
        f"UNIQUE (app, task_id), UNIQUE (app, idempotency_key)){suffix}",
        f"CREATE TABLE {{p}}{deps} (app {n} NOT NULL, task_id {n} NOT NULL, "
        f"depends_on {n} NOT NULL, PRIMARY KEY (app, task_id, depends_on)){suffix}",
    ]


_INDEXES = [
    "CREATE INDEX {p}audit_pick ON {p}audit_tasks (app, status, priority DESC, seq)",
    "CREATE INDEX {p}audit_deps_on ON {p}audit_deps (app, depends_on)",
]


def _create_statements(d: Dialect) -> list[str]:
    return [*_table_statements(d), *_INDEXES]


def _version_3_rebuild(d: Dialect) -> list[str]:
    """Rebuild a version-2 queue with the app in its keys; its tasks go to the default app.

    SQLite cannot change a table's keys in place, so every dialect copies into new
    tables and swaps them in (MySQL in one atomic ``RENAME TABLE``). The scratch names
    (``{p}audit_nt``/``nd`` new, ``ot``/``od`` old, on MySQL) are shorter than the
    queue's own: PostgreSQL cuts names at 63 bytes and MySQL refuses longer ones, so a
    long prefix the queue works under must not make them collide with (or drop) its
    tables and indexes.
    """
    kind = type(d).__name__
    app = f"'{DEFAULT_APP}'"  # a constant name: safe as a literal
    out = [
        "DROP TABLE IF EXISTS {p}audit_nt",
        "DROP TABLE IF EXISTS {p}audit_nd",
        *_table_statements(d, "audit_nt", "audit_nd"),
        f"INSERT INTO {{p}}audit_nt (app, {_COPIED}) SELECT {app}, {_COPIED} FROM {{p}}audit_tasks",
        f"INSERT INTO {{p}}audit_nd (app, task_id, depends_on) SELECT {app}, task_id, "
        "depends_on FROM {p}audit_deps",
    ]
    if kind == "MySQLDialect":
        # MySQL commits each DDL statement: a crash after the swap and before the drops
        # leaves the old tables under their scratch names, so a rerun first drops them (the
        # swapped-in tables already hold every row).
        out[:0] = [
            "DROP TABLE IF EXISTS {p}audit_ot",
            "DROP TABLE IF EXISTS {p}audit_od",
        ]
        out += [
            "RENAME TABLE {p}audit_tasks TO {p}audit_ot, {p}audit_nt TO "
            "{p}audit_tasks, {p}audit_deps TO {p}audit_od, {p}audit_nd TO "
            "{p}audit_deps",
            "DROP TABLE {p}audit_ot",
            "DROP TABLE {p}audit_od",
        ]
    else:
        out += [
            "DROP TABLE {p}audit_deps",
            "DROP TABLE {p}audit_tasks",
            "ALTER TABLE {p}audit_nt RENAME TO {p}audit_tasks",
            "ALTER TABLE {p}audit_nd RENAME TO {p}audit_deps",
        ]
    out += _INDEXES
    if kind == "PostgresDialect":
        # The copied rows carry their own seq: the next submission numbers after them.
        out.append(
            "SELECT setval(pg_get_serial_sequence('{p}audit_tasks', 'seq'), "
            "COALESCE((SELECT MAX(seq) FROM {p}audit_tasks), 0) + 1, false)"
        )
    return out


def _version_2_columns(d: Dialect) -> list[str]:
    t, s = d.data_type, d.short_text
    return [
        f"ALTER TABLE {{p}}audit_tasks ADD COLUMN {name} {kind}"
        for name, kind in (
            ("cancel_requested", t),
            ("settled_token", s),
            ("submit_token", s),
            ("prev_owner", t),
            ("prev_token", s),
        )
    ]


def migrate_queue_plan(d: Dialect, *, create: bool) -> Plan:
    """Create the queue's tables, migrate an older layout, refuse a newer one.

    Raises:
        BackendUnavailable: With ``create=False``: no queue is here; nothing created.
        CorruptionError: The queue was written by a newer Steadyloop.
    """
    if d.migrate_lock_sql is not None:
        yield Query(
            d.sql(d.migrate_lock_sql), (f"steadyloop audit migrate {d.prefix}",), fetch=True
        )
    versioned = yield from table_exists_plan(d, "audit_schema")
    if versioned:
        rows = yield Query(d.sql("SELECT version FROM {p}audit_schema"), fetch=True)
        version = max((int(r[0]) for r in rows), default=0)
    elif (yield from table_exists_plan(d, "audit_tasks")):
        version = 1  # the layout before versions: the tables without the v2 columns
    elif not create:
        raise no_store_here(d, "task store", "audit_tasks")
    else:
        version = 0
    if version > QUEUE_SCHEMA_VERSION:
        raise CorruptionError(
            f"the task queue's schema version {version} is newer than this steadyloop's "
            f"({QUEUE_SCHEMA_VERSION}); upgrade steadyloop",
            location=d.location("audit_schema", version=version),
        )
    if version == QUEUE_SCHEMA_VERSION:
        return None
    if version == 0:
        statements = _create_statements(d)
    else:
        statements = (_version_2_columns(d) if version == 1 else []) + _version_3_rebuild(d)
    for statement in statements:
        yield Query(d.sql(statement), fetch=statement.startswith("SELECT"))
    if not versioned:
        yield Query(
            d.sql(f"CREATE TABLE {{p}}audit_schema (version {d.int_type} NOT NULL)")
            + d.table_suffix
        )
    yield Query(d.sql("DELETE FROM {p}audit_schema"))
    yield Query(d.sql("INSERT INTO {p}audit_schema (version) VALUES (?)"), (QUEUE_SCHEMA_VERSION,))
    return None


class TaskQueue:
    """A queue of tasks with leases, on the SQL database of a journal.

    Args:
        journal: The SQL journal whose database (and connection) holds the queue.
        app: The app whose tasks this queue sees (the journal namespace of their
            trails); every operation is scoped to it.
        clock: Where lease times come from on SQLite, or with ``server_clock=False``
            (the wall clock by default).
        ids: Where generated task ids come from (random by default).
        server_clock: On PostgreSQL and MySQL, read lease times from the server's
            clock (the default), so machines with skewed clocks agree on leases.
            ``False`` uses ``clock``, for tests that drive lease expiry by hand.
        poll: Seconds between looks at the queue while
            [`wait_for_task`][steadyloop.audit.TaskQueue.wait_for_task] waits
            (on PostgreSQL only when notifications are not available).
        reconnect_for: Seconds an operation keeps retrying a lost connection or a busy
            store before [`BackendUnavailable`][steadyloop.BackendUnavailable] escapes.
        owned: Close the journal when the queue is closed.
    """

    def __init__(
        self,
        journal: PlanJournal,
        *,
        app: str = DEFAULT_APP,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        server_clock: bool = True,
        poll: float = 0.2,
        reconnect_for: float = 30.0,
        owned: bool = False,
    ) -> None:
        if not isinstance(journal, PlanJournal):
            raise UnknownBackend(
                f"the task queue runs on a SQL journal (sqlite, postgresql, mysql), "
                f"not on {type(journal).__name__}"
            )
        if not poll > 0:
            raise ValueError(f"poll must be a positive number of seconds, got {poll!r}")
        problem = _names.app_problem(app)
        if problem is not None:
            raise TaskSpecError(problem, field="app")
        self.journal = journal
        self.dialect = journal.dialect
        self.app = app
        """The app whose tasks this queue sees."""
        self._app = self.dialect.bind_name(app)
        self.clock: Clock = clock or SystemClock()
        self.server_clock = server_clock
        self.poll = poll
        self.reconnect_for = reconnect_for
        self.url: str = journal.url
        """The URL the queue was opened with (secrets removed)."""
        self._ids = ids
        self._owned = owned
        self._wake: asyncio.Event | None = None
        self._listener: asyncio.Task[None] | None = None
        self._listening = False
        self._cancel_watchers: set[Callable[[], None]] = set()
        self._cancel_listener: asyncio.Task[None] | None = None
        self._cancel_listening = False

    @property
    def prefix(self) -> str:
        """The table name prefix."""
        return self.dialect.prefix

    async def migrate(self, *, create: bool = True) -> None:
        """Create or migrate the queue's tables ([`open_queue`][steadyloop.audit.open_queue] does).

        Raises:
            BackendUnavailable: With ``create=False``: no queue is here.
            CorruptionError: The tables were written by a newer Steadyloop.
        """
        await self._run(lambda _: migrate_queue_plan(self.dialect, create=create))

    async def close(self) -> None:
        """Stop listening; close the journal if the queue opened it. Closing twice is harmless."""
        for name in ("_listener", "_cancel_listener"):
            listener = getattr(self, name)
            setattr(self, name, None)
            if listener is not None:
                listener.cancel()
                try:
                    await listener
                except asyncio.CancelledError:
                    pass  # as asked
                except Exception as exc:
                    _log.debug("%s: the %s ended with %r", self.url, name.strip("_"), exc)
        if self._owned:
            await self.journal.close()

    async def __aenter__(self) -> TaskQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    # -- running plans -----------------------------------------------------------------

    async def _run(self, make: Callable[[bool], Plan], *, write: bool = True) -> Any:
        """Run a plan in one transaction, retrying a lost connection or a busy store.

        ``make(recovering)`` builds the plan; ``recovering`` is true on every attempt
        after one whose outcome is unknown, so the plan first looks for its own work.
        """
        attempts = 0

        async def once() -> Any:
            nonlocal attempts
            attempts += 1
            recovering = attempts > 1
            return await self.journal.run_plan(lambda: make(recovering), write=write)

        return await retry_transaction(
            once, self.journal.transient, RECONNECT, budget=self.reconnect_for
        )

    def _now(self) -> Plan:
        """The time leases are written and compared with (µs): the server's, if it has one."""
        expr = self._server_now()
        if expr is None:
            return self.clock.now_us()
        rows = yield Query(f"SELECT {expr}", fetch=True)
        return int(rows[0][0])

    def _server_now(self) -> str | None:
        """The SQL expression of the server's clock, when leases are measured by it."""
        d = self.dialect
        return d.now_expr if d.now_expr is not None and self.server_clock else None

    def _and_now(self, columns: str) -> str:
        """``columns``, plus the server's clock as the last one when it measures leases.

        Reading the clock with the row a plan selects (and locks) anyway saves a round
        trip to the server per operation.
        """
        expr = self._server_now()
        return columns if expr is None else f"{columns}, {expr}"

    def _row_now(self, row: Row) -> int:
        """The lease clock as read by `_and_now` with ``row`` (or the local clock)."""
        return self.clock.now_us() if self._server_now() is None else int(row[-1])

    def _notify(self, kind: str = "work") -> Plan:
        """Tell this app's listeners, at commit, that something happened.

        ``work``: idle workers, that a task may be claimable; ``cancel``: the workers
        holding its tasks, that a cancel was asked for.
        """
        d = self.dialect
        if d.notify_sql is not None:
            yield Query(d.sql(d.notify_sql), (self._channel(kind),))

    def _channel(self, kind: str = "work") -> str:
        """The notification channel of this app's ``kind`` of news (a PostgreSQL name).

        One per prefix, app and kind, so a worker is woken only by its own app's
        tasks. The app enters as a digest: any app name makes a valid channel name.
        """
        tag = "audit" if kind == "work" else "auditc"
        digest = hashlib.sha256(self.app.encode("utf-8")).hexdigest()
        name = f"{self.prefix}{tag}_{digest[:16]}"
        if len(name) > 63:  # PostgreSQL names are at most 63 bytes
            whole = hashlib.sha256(f"{self.prefix}\0{self.app}".encode()).hexdigest()
            name = f"steadyloop_{tag}_{whole[:32]}"
        return name

    def _new_id(self) -> str:
        return self._ids.new_id() if self._ids is not None else f"t-{uuid.uuid4().hex[:12]}"

    # -- submitting --------------------------------------------------------------------

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
        out: list[SubmitResult] = await self._run(self._submit_plan(specs))
        return out

    def _submit_plan(self, specs: Sequence[TaskSpec]) -> Callable[[bool], Plan]:
        """The plan of `submit_many`, to run alone or with the tasks' first trail records."""
        for spec in specs:
            if not isinstance(spec, TaskSpec):
                raise TaskSpecError(f"expected a TaskSpec, got {type(spec).__name__}")
        token = uuid.uuid4().hex
        chosen: dict[int, str] = {}  # generated ids, kept across attempts
        planned: list[list[SubmitResult]] = []
        d = self.dialect

        def plan(recovering: bool) -> Plan:
            if recovering and planned:
                rows = yield Query(
                    d.sql("SELECT 1 FROM {p}audit_tasks WHERE submit_token = ?"),
                    (token,),
                    fetch=True,
                )
                if rows:  # the attempt whose reply was lost did commit
                    return planned[-1]
            now = yield from self._now()
            results: list[SubmitResult] = []
            new: list[tuple[TaskSpec, str]] = []
            by_key: dict[str, tuple[str, str]] = {}
            ids_in_batch: set[str] = set()
            for index, spec in enumerate(specs):
                digest = spec.digest()
                key = spec.idempotency_key
                if key is not None:
                    seen = by_key.get(key)
                    if seen is None:
                        rows = yield Query(
                            d.sql(
                                "SELECT task_id, digest FROM {p}audit_tasks "
                                "WHERE idempotency_key = ? AND app = ?"
                            ),
                            (d.bind_name(key), self._app),
                            fetch=True,
                        )
                        seen = (d.load_name(rows[0][0]), _text(rows[0][1])) if rows else None
                    if seen is not None:
                        if seen[1] != digest:
                            raise TaskSpecError(
                                f"idempotency key {key!r} was already used for task {seen[0]!r} "
                                "with a different body; use a new key, or submit the same body",
                                field="idempotency_key",
                            )
                        results.append(SubmitResult(seen[0], duplicate=True))
                        continue
                if spec.task_id is not None:
                    task_id = spec.task_id
                else:
                    task_id = chosen.get(index) or chosen.setdefault(index, self._new_id())
                if task_id in ids_in_batch:
                    raise TaskSpecError(f"task id {task_id!r} appears twice", field="task_id")
                rows = yield Query(
                    d.sql("SELECT 1 FROM {p}audit_tasks WHERE task_id = ? AND app = ?"),
                    (d.bind_name(task_id), self._app),
                    fetch=True,
                )
                if rows:
                    raise TaskSpecError(f"task id {task_id!r} is already taken", field="task_id")
                ids_in_batch.add(task_id)
                if key is not None:
                    by_key[key] = (task_id, digest)
                new.append((spec.with_id(task_id), digest))
                results.append(SubmitResult(task_id))
            deps = sorted({dep for s, _ in new for dep in s.depends_on} - ids_in_batch)
            known: set[str] = set()
            for dep in deps:
                rows = yield Query(
                    d.sql("SELECT 1 FROM {p}audit_tasks WHERE task_id = ? AND app = ?"),
                    (d.bind_name(dep), self._app),
                    fetch=True,
                )
                if rows:
                    known.add(dep)
            check_dependencies([s for s, _ in new], known)
            if new:
                yield Query(
                    d.sql(
                        "INSERT INTO {p}audit_tasks (app, task_id, idempotency_key, digest, "
                        "spec, priority, status, not_before, attempts, round, audit_rounds, "
                        "detail, submitted_at, updated_at, submit_token) VALUES (?, ?, ?, ?, "
                        "?, ?, 'queued', ?, 0, 0, 0, '', ?, ?, ?)"
                    ),
                    [
                        (
                            self._app,
                            d.bind_name(str(spec.task_id)),
                            None
                            if spec.idempotency_key is None
                            else d.bind_name(spec.idempotency_key),
                            digest,
                            canonical_json(spec.to_json()),
                            spec.priority,
                            now,
                            now,
                            now,
                            token,
                        )
                        for spec, digest in new
                    ],
                    many=True,
                )
                edges = [
                    (self._app, d.bind_name(str(spec.task_id)), d.bind_name(dep))
                    for spec, _ in new
                    for dep in spec.depends_on
                ]
                if edges:
                    yield Query(
                        d.sql(
                            "INSERT INTO {p}audit_deps (app, task_id, depends_on) VALUES (?, ?, ?)"
                        ),
                        edges,
                        many=True,
                    )
                yield from self._notify()
            planned.append(results)
            return results

        return plan

    # -- claiming and leases -----------------------------------------------------------

    async def claim(self, worker: str, lease: float = 30.0) -> Claim | None:
        """Lease the next claimable task to ``worker``.

        Claimable: queued (and due), or running with an expired lease (its worker is
        presumed lost), with every dependency completed. Highest priority first, then
        submission order.

        Returns:
            The claim, or ``None`` when nothing is claimable now.
        """
        claim: Claim | None = await self._run(self._claim_plan(worker, lease))
        return claim

    def _claim_plan(self, worker: str, lease: float) -> Callable[[bool], Plan]:
        """The plan of `claim`: its lease token is made once, before the first attempt."""
        lease_us = _lease_us(lease)
        token = uuid.uuid4().hex
        d = self.dialect

        def plan(recovering: bool) -> Plan:
            if recovering:
                rows = yield Query(
                    d.sql(
                        "SELECT task_id, spec, attempts, lease_expires, prev_owner, prev_token, "
                        "cancel_requested FROM {p}audit_tasks WHERE lease_token = ? "
                        "AND status = 'running'"
                    ),
                    (token,),
                    fetch=True,
                )
                if rows:  # the attempt whose reply was lost did claim this task
                    task_id, spec, attempts, expires, prev_owner, prev_token, cancel = rows[0]
                    return Claim(
                        task_id=d.load_name(task_id),
                        spec=TaskSpec.from_json(decode(_text(spec))),
                        worker=worker,
                        lease_token=token,
                        attempt=int(attempts),
                        lease_expires=int(expires),
                        previous_owner=_opt(prev_owner),
                        previous_token=_opt(prev_token),
                        cancel_requested=_opt(cancel),
                    )
            expr = self._server_now()
            local = self.clock.now_us()
            columns = self._and_now(
                "t.task_id, t.spec, t.status, t.owner, t.lease_token, t.attempts, "
                "t.cancel_requested"
            )
            where = _CLAIMABLE.replace("{now}", "?" if expr is None else expr)
            rows = yield Query(
                d.sql(
                    f"SELECT {columns} FROM {{p}}audit_tasks t WHERE {where} "
                    "ORDER BY t.priority DESC, t.seq ASC LIMIT 1"
                )
                + d.skip_locked,
                (self._app, local, local) if expr is None else (self._app,),
                fetch=True,
            )
            if not rows:
                return None
            task_id, spec, status, owner, old_token, attempts, cancel = rows[0][:7]
            now = local if expr is None else int(rows[0][7])
            stolen = _text(status) == TaskStatus.RUNNING.value
            previous = (_opt(owner), _opt(old_token)) if stolen else (None, None)
            expires = now + lease_us
            yield Query(
                d.sql(
                    "UPDATE {p}audit_tasks SET status = 'running', owner = ?, lease_token = ?, "
                    "lease_expires = ?, attempts = attempts + 1, updated_at = ?, "
                    "prev_owner = ?, prev_token = ? WHERE task_id = ? AND app = ?"
                ),
                (worker, token, expires, now, previous[0], previous[1], task_id, self._app),
            )
            return Claim(
                task_id=d.load_name(task_id),
                spec=TaskSpec.from_json(decode(_text(spec))),
                worker=worker,
                lease_token=token,
                attempt=int(attempts) + 1,
                lease_expires=expires,
                previous_owner=previous[0],
                previous_token=previous[1],
                cancel_requested=_opt(cancel),
            )

        return plan

    def _held(self, task_id: str, lease_token: str, columns: str = "cancel_requested") -> Plan:
        """Lock the task's row if ``lease_token`` holds it; its ``columns``, or ``None``."""
        d = self.dialect
        rows = yield Query(
            d.sql(
                f"SELECT {columns} FROM {{p}}audit_tasks WHERE task_id = ? AND app = ? "
                "AND lease_token = ? AND status = 'running'"
            )
            + d.lock_suffix,
            (d.bind_name(task_id), self._app, lease_token),
            fetch=True,
        )
        return rows[0] if rows else None

    async def heartbeat(
        self,
        task_id: str,
        lease_token: str,
        lease: float = 30.0,
        *,
        counters: tuple[int, int] | None = None,
    ) -> bool:
        """Renew a lease for another ``lease`` seconds.

        Args:
            task_id: The task.
            lease_token: The lease.
            lease: Seconds from now.
            counters: ``(rounds started, audits done)`` to record in the row as well
                (shown by ``status`` while the task runs), in the same write.

        Returns:
            False when the lease is no longer this token's (it was taken over or
            settled): the worker must stop.

        Raises:
            TaskCancelled: Someone asked for the task to be cancelled (``audit cancel``).
                The lease was renewed all the same, so the worker still holds it while
                it stops, records the task cancelled and settles it.
        """
        lease_us = _lease_us(lease)
        d = self.dialect

        def plan(_: bool) -> Plan:
            row = yield from self._held(task_id, lease_token, self._and_now("cancel_requested"))
            if row is None:
                return False, None
            now = self._row_now(row)
            if counters is None:
                yield Query(
                    d.sql(
                        "UPDATE {p}audit_tasks SET lease_expires = ?, updated_at = ? "
                        "WHERE task_id = ? AND app = ?"
                    ),
                    (now + lease_us, now, d.bind_name(task_id), self._app),
                )
            else:
                yield Query(
                    d.sql(
                        "UPDATE {p}audit_tasks SET lease_expires = ?, updated_at = ?, round = ?, "
                        "audit_rounds = ? WHERE task_id = ? AND app = ?"
                    ),
                    (now + lease_us, now, *counters, d.bind_name(task_id), self._app),
                )
            return True, _opt(row[0])

        ok, cancel = await self._run(plan)
        if ok and cancel is not None:
            raise TaskCancelled(task_id, cancel)
        return bool(ok)

    async def cancel_requested(self, task_id: str, lease_token: str) -> str | None:
        """Why a cancel was asked for the task this lease holds, or ``None`` (one read).

        Raises:
            LeaseLost: The lease is no longer this token's.
        """

        def plan(_: bool) -> Plan:
            row = yield from self._held(task_id, lease_token)
            return row

        row = await self._run(plan, write=False)
        if row is None:
            raise LeaseLost(f"task {task_id!r}: the lease {lease_token[:8]}… is no longer held")
        return _opt(row[0])

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
        plan = self._settle_plan(
            task_id,
            lease_token,
            status,
            round=round,
            audit_rounds=audit_rounds,
            detail=detail,
            delay=delay,
        )
        if not await self._run(plan):
            raise LeaseLost(f"task {task_id!r}: the lease {lease_token[:8]}… is no longer held")

    def _settle_plan(
        self,
        task_id: str,
        lease_token: str,
        status: TaskStatus,
        *,
        round: int,
        audit_rounds: int,
        detail: str,
        delay: float,
    ) -> Callable[[bool], Plan]:
        """The plan of `settle` (True: settled), to run alone or with the trail's record."""
        if status is TaskStatus.RUNNING:
            raise ValueError("settle moves a task out of running")
        d = self.dialect

        def plan(recovering: bool) -> Plan:
            columns = self._and_now("lease_token, status, settled_token")
            rows = yield Query(
                d.sql(f"SELECT {columns} FROM {{p}}audit_tasks WHERE task_id = ? AND app = ?")
                + d.lock_suffix,
                (d.bind_name(task_id), self._app),
                fetch=True,
            )
            if not rows:
                return False
            now = self._row_now(rows[0])
            held, current, settled = (_opt(v) for v in rows[0][:3])
            if held != lease_token or current != TaskStatus.RUNNING.value:
                # A settle whose reply was lost did commit: the same outcome again.
                return recovering and settled == lease_token and current == status.value
            keep_cancel = "cancel_requested" if status is TaskStatus.QUEUED else "NULL"
            yield Query(
                d.sql(
                    "UPDATE {p}audit_tasks SET status = ?, owner = NULL, lease_token = NULL, "
                    "lease_expires = NULL, not_before = ?, round = ?, audit_rounds = ?, "
                    f"detail = ?, updated_at = ?, settled_token = ?, cancel_requested = "
                    f"{keep_cancel} WHERE task_id = ? AND app = ?"
                ),
                (
                    status.value,
                    now + int(delay * 1_000_000),
                    round,
                    audit_rounds,
                    detail,
                    now,
                    lease_token,
                    d.bind_name(task_id),
                    self._app,
                ),
            )
            yield from self._notify()
            return True

        return plan

    async def progress(
        self, task_id: str, lease_token: str, *, round: int, audit_rounds: int
    ) -> bool:
        """Record a running task's counters (for ``status``); False if the lease is gone."""
        d = self.dialect

        def plan(_: bool) -> Plan:
            row = yield from self._held(task_id, lease_token, self._and_now("cancel_requested"))
            if row is None:
                return False
            now = self._row_now(row)
            yield Query(
                d.sql(
                    "UPDATE {p}audit_tasks SET round = ?, audit_rounds = ?, updated_at = ? "
                    "WHERE task_id = ? AND app = ?"
                ),
                (round, audit_rounds, now, d.bind_name(task_id), self._app),
            )
            return True

        ok: bool = await self._run(plan)
        return ok

    # -- ending tasks that are not running ---------------------------------------------

    def _set_status(
        self, task_id: str, old: tuple[str, ...], new: TaskStatus, detail: str
    ) -> Callable[[bool], Plan]:
        """A plan moving a task from one of ``old`` statuses to ``new``; True if it did."""
        d = self.dialect

        def plan(recovering: bool) -> Plan:
            rows = yield Query(
                d.sql(
                    f"SELECT {self._and_now('status')} FROM {{p}}audit_tasks "
                    "WHERE task_id = ? AND app = ?"
                )
                + d.lock_suffix,
                (d.bind_name(task_id), self._app),
                fetch=True,
            )
            if not rows:
                raise TaskNotFound(f"no task {task_id!r} in app {self.app!r} of {self.url}")
            now = self._row_now(rows[0])
            current = _text(rows[0][0])
            if current not in old:
                return recovering and current == new.value
            yield Query(
                d.sql(
                    "UPDATE {p}audit_tasks SET status = ?, detail = ?, updated_at = ?, "
                    "not_before = ?, owner = NULL, lease_token = NULL, lease_expires = NULL, "
                    "cancel_requested = NULL WHERE task_id = ? AND app = ?"
                ),
                (new.value, detail, now, now, d.bind_name(task_id), self._app),
            )
            yield from self._notify()
            return True

        return plan

    async def block(self, task_id: str, detail: str) -> bool:
        """Mark a queued task blocked (a dependency ended without completing).

        Returns:
            False when the task was not queued.
        """
        ok: bool = await self._run(self._block_plan(task_id, detail))
        return ok

    async def cancel(self, task_id: str, reason: str, *, recorded: bool = False) -> TaskStatus:
        """Cancel a task in the queue: a queued one now, a running one through its worker.

        A queued task becomes ``cancelled``. A running one is marked, and the app's
        cancel watchers are notified (PostgreSQL; see
        [`watch_cancels`][steadyloop.audit.TaskQueue.watch_cancels]): its worker reads
        the mark at once (elsewhere it reads it every `poll` seconds), its next
        [`heartbeat`][steadyloop.audit.TaskQueue.heartbeat] raises
        [`TaskCancelled`][steadyloop.TaskCancelled] too, and a worker that
        takes it over after its lease expired finds `Claim.cancel_requested`.
        [`TaskBoard.cancel`][steadyloop.audit.TaskBoard.cancel] writes the trail; use that.

        Args:
            task_id: The task.
            reason: Why.
            recorded: The trail already says cancelled: a running row (a worker
                claimed it but could not record its claim) is cancelled too, its lease
                ended, so it is not held until the lease runs out.

        Returns:
            ``cancelled``, ``running`` (the cancel is requested), or the terminal
            status the task already had (nothing changed).

        Raises:
            TaskNotFound: No such task.
        """
        out: TaskStatus = await self._run(self._cancel_plan(task_id, reason, recorded=recorded))
        return out

    def _cancel_plan(self, task_id: str, reason: str, *, recorded: bool) -> Callable[[bool], Plan]:
        """The plan of `cancel`, to run alone or with the trail's ``cancelled`` record."""
        d = self.dialect

        def plan(_: bool) -> Plan:
            rows = yield Query(
                d.sql(
                    f"SELECT {self._and_now('status')} FROM {{p}}audit_tasks "
                    "WHERE task_id = ? AND app = ?"
                )
                + d.lock_suffix,
                (d.bind_name(task_id), self._app),
                fetch=True,
            )
            if not rows:
                raise TaskNotFound(f"no task {task_id!r} in app {self.app!r} of {self.url}")
            now = self._row_now(rows[0])
            status = TaskStatus(_text(rows[0][0]))
            if status is TaskStatus.QUEUED or (recorded and status is TaskStatus.RUNNING):
                yield Query(
                    d.sql(
                        "UPDATE {p}audit_tasks SET status = 'cancelled', detail = ?, "
                        "updated_at = ?, cancel_requested = NULL, owner = NULL, "
                        "lease_token = NULL, lease_expires = NULL WHERE task_id = ? AND app = ?"
                    ),
                    (reason, now, d.bind_name(task_id), self._app),
                )
                yield from self._notify()
                return TaskStatus.CANCELLED
            if status is TaskStatus.RUNNING:
                yield Query(
                    d.sql(
                        "UPDATE {p}audit_tasks SET cancel_requested = ?, updated_at = ? "
                        "WHERE task_id = ? AND app = ?"
                    ),
                    (reason, now, d.bind_name(task_id), self._app),
                )
                yield from self._notify("cancel")  # its worker stops now, not at a heartbeat
            return status

        return plan

    async def lease_expired(self, task_id: str) -> bool:
        """Whether the task is running on a lease that has run out (its worker is lost).

        Raises:
            TaskNotFound: No such task.
        """
        d = self.dialect

        def plan(_: bool) -> Plan:
            now = yield from self._now()
            rows = yield Query(
                d.sql(
                    "SELECT status, lease_expires FROM {p}audit_tasks WHERE task_id = ? AND app = ?"
                ),
                (d.bind_name(task_id), self._app),
                fetch=True,
            )
            if not rows:
                raise TaskNotFound(f"no task {task_id!r} in app {self.app!r} of {self.url}")
            status, expires = _text(rows[0][0]), rows[0][1]
            return status == TaskStatus.RUNNING.value and expires is not None and int(expires) < now

        out: bool = await self._run(plan, write=False)
        return out

    async def requeue(self, task_id: str, detail: str) -> bool:
        """Queue again a task that went to a person (needs-human, goal-unmet) or was blocked.

        [`TaskBoard.retry`][steadyloop.audit.TaskBoard.retry] writes the trail; use that.

        Returns:
            False when the task was in none of those statuses.

        Raises:
            TaskNotFound: No such task.
        """
        ok: bool = await self._run(self._requeue_plan(task_id, detail))
        return ok

    def _requeue_plan(self, task_id: str, detail: str) -> Callable[[bool], Plan]:
        """The plan of `requeue`, to run alone or with the trail's ``retried`` record."""
        return self._set_status(
            task_id, ("needs-human", "goal-unmet", "blocked"), TaskStatus.QUEUED, detail
        )

    def _block_plan(self, task_id: str, detail: str) -> Callable[[bool], Plan]:
        """The plan of `block`, to run alone or with the trail's ``blocked`` record."""
        return self._set_status(task_id, ("queued",), TaskStatus.BLOCKED, detail)

    # -- reading -----------------------------------------------------------------------

    async def doomed(self) -> list[tuple[str, str, str]]:
        """Queued tasks that can never run: a dependency ended without completing.

        Returns:
            ``(task, dependency, dependency's status)`` for each.
        """
        d = self.dialect

        def plan(_: bool) -> Plan:
            rows = yield Query(
                d.sql(
                    "SELECT t.task_id, u.task_id, u.status FROM {p}audit_tasks t "
                    "JOIN {p}audit_deps d ON d.app = t.app AND d.task_id = t.task_id "
                    "JOIN {p}audit_tasks u ON u.app = d.app AND u.task_id = d.depends_on "
                    f"WHERE t.app = ? AND t.status = 'queued' AND u.status IN "
                    f"{_ENDED_BADLY} ORDER BY t.seq"
                ),
                (self._app,),
                fetch=True,
            )
            return [(d.load_name(a), d.load_name(b), _text(c)) for a, b, c in rows]

        out: list[tuple[str, str, str]] = await self._run(plan, write=False)
        return out

    async def dependents(self, task_id: str) -> list[str]:
        """The tasks that depend on ``task_id``, in submission order."""
        d = self.dialect

        def plan(_: bool) -> Plan:
            rows = yield Query(
                d.sql(
                    "SELECT t.task_id FROM {p}audit_deps d JOIN {p}audit_tasks t "
                    "ON t.app = d.app AND t.task_id = d.task_id WHERE d.app = ? "
                    "AND d.depends_on = ? ORDER BY t.seq"
                ),
                (self._app, d.bind_name(task_id)),
                fetch=True,
            )
            return [d.load_name(r[0]) for r in rows]

        out: list[str] = await self._run(plan, write=False)
        return out

    async def get(self, task_id: str) -> QueuedTask:
        """Return one task.

        Raises:
            TaskNotFound: No such task.
            CorruptionError: Its row was written by another version (one line).
        """
        d = self.dialect

        def plan(_: bool) -> Plan:
            rows = yield Query(
                d.sql(f"SELECT {_COLUMNS} FROM {{p}}audit_tasks WHERE task_id = ? AND app = ?"),
                (d.bind_name(task_id), self._app),
                fetch=True,
            )
            return rows

        rows: list[Row] = await self._run(plan, write=False)
        if not rows:
            raise TaskNotFound(f"no task {task_id!r} in app {self.app!r} of {self.url}")
        return QueuedTask.from_row(rows[0], d)

    async def tasks(self, status: TaskStatus | None = None) -> list[QueuedTask]:
        """Every task (or those with ``status``), in submission order.

        Raises:
            CorruptionError: A row holds a status or spec this version cannot read
                (see `listing` for a list that goes on past it).
        """
        listed = await self.listing(status)
        for task in listed:
            if isinstance(task, UnreadableTask):
                raise CorruptionError(
                    f"task {task.task_id!r} {task.reason}", location=task.location
                )
        return [task for task in listed if isinstance(task, QueuedTask)]

    async def listing(self, status: TaskStatus | None = None) -> list[QueuedTask | UnreadableTask]:
        """Every task (or those with ``status``), in submission order, unreadable rows too.

        A row this version cannot read (written by a newer one) is listed as an
        `UnreadableTask` in its place instead of failing the whole listing. Asked for
        one ``status``, a row whose stored status this version does not know is never
        listed (it is no known status).
        """
        d = self.dialect

        def plan(_: bool) -> Plan:
            if status is None:
                rows = yield Query(
                    d.sql(f"SELECT {_COLUMNS} FROM {{p}}audit_tasks WHERE app = ? ORDER BY seq"),
                    (self._app,),
                    fetch=True,
                )
            else:
                rows = yield Query(
                    d.sql(
                        f"SELECT {_COLUMNS} FROM {{p}}audit_tasks WHERE app = ? AND status = ? "
                        "ORDER BY seq"
                    ),
                    (self._app, status.value),
                    fetch=True,
                )
            return rows

        rows: list[Row] = await self._run(plan, write=False)
        return [QueuedTask.read_row(r, d) for r in rows]

    async def counts(self) -> dict[TaskStatus, int]:
        """How many tasks are in each status (every status listed, zeros included).

        Raises:
            CorruptionError: The queue holds a status this version does not know.
        """
        d = self.dialect

        def plan(_: bool) -> Plan:
            rows = yield Query(
                d.sql("SELECT status, COUNT(*) FROM {p}audit_tasks WHERE app = ? GROUP BY status"),
                (self._app,),
                fetch=True,
            )
            return rows

        rows: list[Row] = await self._run(plan, write=False)
        out = dict.fromkeys(TaskStatus, 0)
        for status, n in rows:
            try:
                out[TaskStatus(_text(status))] = int(n)
            except ValueError:
                raise CorruptionError(
                    f"the queue holds {int(n)} task(s) with status {_text(status)!r}, which "
                    "this steadyloop does not know (written by another version?)",
                    location=d.location("audit_tasks", status=_text(status)),
                ) from None
        return out

    # -- waiting for work --------------------------------------------------------------

    async def _due(self) -> tuple[bool, float | None]:
        """Whether a task is claimable now, and else in how many seconds one may be."""
        d = self.dialect

        def plan(_: bool) -> Plan:
            now = yield from self._now()
            rows = yield Query(
                d.sql(
                    f"SELECT 1 FROM {{p}}audit_tasks t WHERE {_CLAIMABLE} LIMIT 1".replace(
                        "{now}", "?"
                    )
                ),
                (self._app, now, now),
                fetch=True,
            )
            if rows:
                return True, None
            rows = yield Query(
                d.sql(
                    "SELECT MIN(CASE WHEN status = 'queued' THEN not_before "
                    "ELSE lease_expires END) FROM {p}audit_tasks WHERE app = ? AND "
                    "((status = 'queued' AND not_before > ?) OR status = 'running')"
                ),
                (self._app, now),
                fetch=True,
            )
            nxt = rows[0][0] if rows else None
            return False, None if nxt is None else max(0.0, (int(nxt) - now) / 1_000_000)

        out: tuple[bool, float | None] = await self._run(plan, write=False)
        return out

    async def wait_for_task(self, timeout: float) -> bool:  # noqa: ASYNC109 - a wait, bounded
        """Wait until a task may be claimable, at most ``timeout`` seconds.

        On PostgreSQL an idle worker sleeps on ``LISTEN``: a submission, a push-back,
        a release, a retry or a settled dependency wakes it at once (``NOTIFY`` at
        commit), and a lease or delay running out wakes it when it is due. Elsewhere
        (and on PostgreSQL while the notification connection is down) it looks every
        `poll` seconds.

        Returns:
            True when a task is claimable (another worker may still claim it first),
            False when ``timeout`` passed.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        listen = self._start_listening()
        while True:
            if self._wake is not None:
                self._wake.clear()
            ready, due = await self._due()
            if ready:
                return True
            left = deadline - loop.time()
            if left <= 0:
                return False
            pause = left if listen and self._listening else min(left, self.poll)
            if due is not None:
                pause = min(pause, due + 0.001)
            if self._wake is None:
                await asyncio.sleep(pause)
                continue
            await wait_event(self._wake, pause)

    def _start_listening(self) -> bool:
        """Start the notification listener if the journal offers one; whether it does."""
        listen = getattr(self.journal, "listen", None)
        if listen is None or self.dialect.notify_sql is None:
            return False
        if self._listener is None:
            self._wake = wake = asyncio.Event()

            def heard(connected: bool) -> None:
                self._listening = connected
                wake.set()  # also after a loss: a notification may have been missed

            self._listener = asyncio.ensure_future(self._listen(listen, "work", heard))
        return True

    async def _listen(
        self, listen: Callable[[str], Any], kind: str, heard: Callable[[bool], None]
    ) -> None:
        """Listen on this app's ``kind`` channel, reconnecting with backoff.

        ``heard(True)`` is called per notification, ``heard(False)`` when the connection
        is lost.
        """
        failures = 0
        while True:
            try:
                async with contextlib.aclosing(listen(self._channel(kind))) as notes:
                    async for _ in notes:
                        failures = 0
                        heard(True)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                _log.info(
                    "listening for %s lost (%s: %s); listening again", kind, type(exc).__name__, exc
                )
            heard(False)
            await asyncio.sleep(RECONNECT.delay(min(failures, 8) or 1))

    def watch_cancels(self, callback: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``callback`` whenever a cancel of one of this app's running tasks may have come.

        On PostgreSQL the canceller's ``NOTIFY`` arrives at its commit.

        A worker holding a task watches, and on each call reads whether its own task
        is the one ([`cancel_requested`][steadyloop.audit.TaskQueue.cancel_requested]).
        ``callback`` is also called when the notification connection comes back after
        a loss (a cancel may have been missed meanwhile).

        Returns:
            The function that ends the watch; ``None`` when this store cannot notify
            (SQLite, MySQL) or is not listening now: the caller then looks by itself.
        """
        listen = getattr(self.journal, "listen", None)
        if listen is None or self.dialect.notify_sql is None:
            return None
        if self._cancel_listener is None:

            def heard(connected: bool) -> None:
                self._cancel_listening = connected
                for watcher in list(self._cancel_watchers):
                    watcher()

            self._cancel_listener = asyncio.ensure_future(self._listen(listen, "cancel", heard))
        self._cancel_watchers.add(callback)
        return lambda: self._cancel_watchers.discard(callback)

    @property
    def cancels_notified(self) -> bool:
        """Whether cancels reach watchers by notification now (the listener is connected)."""
        return self._cancel_listening


async def _open(journal: PlanJournal, *, create: bool, owned: bool, **options: Any) -> TaskQueue:
    try:
        kind = _CLASSES.get(parse_url(journal.url).family, TaskQueue)
    except UnknownBackend:  # a journal whose url is a description, not a URL
        kind = TaskQueue
    queue = kind(journal, owned=owned, **options)
    try:
        await queue.migrate(create=create)
    except BaseException:
        if owned:
            await journal.close()
        raise
    return queue


class SQLiteQueue(TaskQueue):
    """The queue in a SQLite file (WAL, ``synchronous=FULL``), shared by local processes."""

    @classmethod
    async def open(
        cls, path: str, *, busy_timeout: float = 30.0, create: bool = True, **options: Any
    ) -> TaskQueue:
        """Open (and, with ``create``, create) a queue in a SQLite file.

        Raises:
            BackendUnavailable: The directory is missing, the file is not a database,
                or (``create=False``) no queue is there.
        """
        from steadyloop.journal._sqlite import SQLiteJournal

        journal = await SQLiteJournal.open(path, busy_timeout=busy_timeout, create=create)
        return await _open(journal, create=create, owned=True, **options)


class PostgresQueue(TaskQueue):
    """The queue in PostgreSQL, shared by workers on several machines (``SKIP LOCKED``)."""

    @classmethod
    async def open(cls, url: str | URL, *, create: bool = True, **options: Any) -> TaskQueue:
        """Connect, and create or migrate the tables (with ``create``).

        Raises:
            BackendUnavailable: The server cannot be reached, or psycopg is missing.
        """
        return await open_queue(url, create=create, **options)


class MySQLQueue(TaskQueue):
    """The queue in MySQL 8 or MariaDB 10.6+, shared by workers on several machines."""

    @classmethod
    async def open(cls, url: str | URL, *, create: bool = True, **options: Any) -> TaskQueue:
        """Connect, and create or migrate the tables (with ``create``).

        Raises:
            BackendUnavailable: The server cannot be reached, or asyncmy is missing.
        """
        return await open_queue(url, create=create, **options)


# Keyed by URL family (steadyloop._urls.ALIASES maps postgres and mariadb there).
_CLASSES: dict[str, type[TaskQueue]] = {
    "sqlite": SQLiteQueue,
    "postgresql": PostgresQueue,
    "mysql": MySQLQueue,
}
_QUEUE_OPTIONS = ("app", "clock", "ids", "server_clock", "poll", "reconnect_for")


async def wait_event(event: asyncio.Event, timeout: float) -> bool:  # noqa: ASYNC109
    """Wait until ``event`` is set or ``timeout`` seconds pass; whether it was set.

    Not ``asyncio.wait_for``: on Python 3.11 it returns the event's result when the
    waiting task is cancelled just as the event is set, and the cancellation is lost
    (a helper task cancelled at the end of a claim then runs on, and whoever awaits it
    waits for ever). ``asyncio.timeout`` raises the cancellation.
    """
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


def split_queue_url(url: str | URL) -> tuple[URL, dict[str, Any]]:
    """Split a queue URL into the journal URL and the queue's own options (``poll``).

    Raises:
        UnknownBackend: The text is not a URL, its scheme is not one of a SQL journal,
            or ``poll`` is not a positive number of seconds.
    """
    try:
        parsed = as_url(url)
    except UnknownBackend:
        parsed = None
    if parsed is None or not parsed.is_sql or parsed.driver or parsed.qualifiers:
        named = parsed.scheme if parsed is not None else without_passwords(str(url))
        raise UnknownBackend(
            f"the task queue runs on sqlite, postgresql or mysql, not {named!r}; "
            "use sqlite:FILE, postgresql://… or mysql://…"
        )
    parsed, query = parsed.split_options({"poll"})
    own: dict[str, Any] = {}
    if "poll" in query:
        try:
            own["poll"] = float(query["poll"])
        except ValueError:
            own["poll"] = -1.0
        if not own["poll"] > 0:
            raise UnknownBackend(f"{redact_url(url)}: poll must be a positive number of seconds")
    return parsed, own


async def open_queue(
    url: str | URL, *, create: bool = True, journal: PlanJournal | None = None, **options: Any
) -> TaskQueue:
    """Open the task queue a URL names.

    URLs are journal URLs: ``sqlite:FILE``, ``sqlite:///FILE``, ``postgresql://…`` or
    ``mysql://…`` / ``mariadb://…`` (``?prefix=…`` to share a database; ``?poll=S``
    sets `TaskQueue.poll`). The queue's tables sit next to the journal's.

    Args:
        url: The queue URL; it may be the journal's URL.
        create: Whether a missing queue is created. Commands that only read or work
            on a queue pass ``False``: a mistyped path or prefix is then an error and
            nothing is created.
        journal: An open journal on ``url`` to share (its connection runs the queue's
            plans); the queue then does not close it.
        **options: ``app``, ``clock``, ``ids``, ``server_clock``, ``poll``, ``reconnect_for``;
            ``prefix`` and the backend's own options go to the journal.

    Raises:
        UnknownBackend: The scheme is not one of a SQL journal.
        BackendUnavailable: The store cannot be opened, or (``create=False``) no queue
            is there.
        CorruptionError: The queue was written by a newer Steadyloop.
    """
    from steadyloop.journal import open_journal

    prepare_spec_model()  # before any lease: a claim reads specs inside its transaction
    location, own = split_queue_url(url)
    mine = {k: options.pop(k) for k in _QUEUE_OPTIONS if k in options}
    for key, value in own.items():
        mine.setdefault(key, value)
    owned = journal is None
    if journal is None:
        opened = await open_journal(location, create=create, **options)
        if not isinstance(opened, PlanJournal):  # pragma: no cover - schemes are SQL ones
            await opened.close()
            raise UnknownBackend(f"{location.redacted}: not a SQL journal")
        journal = opened
    return await _open(journal, create=create, owned=owned, **mine)
