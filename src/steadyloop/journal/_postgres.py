"""The PostgreSQL backend: the shared SQL plans on psycopg 3, async and pooled.

URL: ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?prefix=P&pool_size=N&…]``
(``postgres://`` works too). ``prefix`` names the tables (``steadyloop_`` by default),
so several journals share one database; ``pool_size`` caps the connection pool
(10). Every other query parameter is passed to libpq (``sslmode``, ``connect_timeout``,
``application_name``, …). TCP keepalives and ``tcp_user_timeout`` are on unless the URL
sets them (``keepalives=1&keepalives_idle=10&keepalives_interval=5&keepalives_count=3&
tcp_user_timeout=20000``), so a query on a route that went dark fails in about 20 s
instead of waiting minutes for the kernel to give up.

Durability: a returned ``append`` has been committed, so it survives whatever the
server's configuration makes a commit survive. With PostgreSQL's defaults
(``fsync=on``, ``synchronous_commit=on``) that is a crash of the server process, of
this process and of the machine (power loss), because the commit record was flushed
to the write-ahead log before the server acknowledged it. A server configured with
``fsync=off`` or ``synchronous_commit=off`` loses recently acknowledged batches in a
server crash; `PostgresJournal.server_settings` shows what the server said. With
synchronous replication (``synchronous_standby_names``) an acknowledged batch also
survives the loss of the primary.

Concurrency: each operation is one transaction on a pooled connection. A batch locks
the head rows of its streams (``SELECT … FOR UPDATE``) in code-point order, so writers
on one stream queue up behind each other while writers on different streams run in
parallel. A transaction the server refuses — a serialisation failure, a deadlock, or
two submissions of one idempotency key racing to insert it — is run again from the
start, a bounded number of times; the rerun of the losing submission finds the
winner's key and returns its result with ``duplicate=True``.

Failure: a lost connection (server restart, ``pg_terminate_backend``, network) raises
[`BackendUnavailable`][steadyloop.BackendUnavailable]. An uncommitted transaction is rolled back by
the server, so the batch is all or nothing; if the connection died during ``COMMIT``
the caller cannot know which, and resubmitting with the same idempotency key is safe.
"""

from __future__ import annotations

import hashlib
import select
from collections.abc import AsyncIterator, Callable
from typing import Any

from steadyloop._errors import BackendUnavailable
from steadyloop._urls import URL, as_url, bad_url, redact_url
from steadyloop.journal._sql import (
    Dialect,
    Plan,
    PlanJournal,
    Query,
    Row,
    migrate_plan,
)
from steadyloop.journal._sql_async import (
    LostWhilePreparing,
    pool_options,
    prepare_retrying,
    retry_transaction,
    run_async,
)

try:
    import psycopg
    import psycopg.sql
    from psycopg import AsyncConnection
    from psycopg import errors as pg_errors
    from psycopg.pq import TransactionStatus
    from psycopg_pool import AsyncConnectionPool
except ImportError as exc:  # pragma: no cover - depends on the install
    raise BackendUnavailable(
        "the PostgreSQL driver is missing; install steadyloop[postgres] (psycopg and psycopg-pool)"
    ) from exc

__all__ = ["PostgresDialect", "PostgresJournal"]


def _one_line(exc: BaseException) -> str:
    """A driver error's text on one line: libpq adds hints on lines of their own."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


# Query parameters Steadyloop reads itself; the rest of the URL goes to libpq.
_OWN_OPTIONS = ("prefix", "pool_size", "retries")


class PostgresDialect(Dialect):
    r"""PostgreSQL: ``%s`` placeholders, names in the byte-order ``"C"`` collation, row locks.

    ``TEXT COLLATE "C"`` compares names byte for byte (no case folding, no padding), and
    sorts them in code-point order, the order in which a batch locks its streams.
    Records are the canonical JSON text (a NUL character is escaped as ``\u0000`` in
    JSON text, so ``TEXT``, which cannot hold NUL, stores every record).
    """

    placeholder = "%s"
    name_type = 'TEXT COLLATE "C"'
    data_type = "TEXT"
    int_type = "BIGINT"
    lock_suffix = " FOR UPDATE"
    location_name = "postgresql"
    serial_key = "seq BIGSERIAL PRIMARY KEY"
    skip_locked = " FOR UPDATE OF t SKIP LOCKED"
    now_expr = "(extract(epoch FROM statement_timestamp()) * 1000000)::bigint"
    tables_sql = (
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?"
    )
    notify_sql = "SELECT pg_notify(?, '')"
    migrate_lock_sql = "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))"


_TCP_DEFAULTS = (
    ("keepalives", "1"),
    ("keepalives_idle", "10"),
    ("keepalives_interval", "5"),
    ("keepalives_count", "3"),
    ("tcp_user_timeout", "20000"),
)
"""libpq options every connection gets unless its URL names them.

A route that goes dark (packets dropped, no reset) is noticed by the client's own TCP
timers alone. Without these, a query waiting on such a route waits for the kernel's
retransmissions to give up (about 15 minutes on Linux); with them, data unacknowledged
for 20 s (``tcp_user_timeout``, ms) or an idle connection whose keepalive probes go
unanswered for 10 + 3 × 5 s ends the connection, and the query fails with
`BackendUnavailable`, to be retried on a new one.
"""


def _split_url(url: URL) -> tuple[URL, dict[str, str]]:
    """Split a journal URL into the libpq connection URL and Steadyloop's own options."""
    if url.family != "postgresql" or url.driver or url.qualifiers:
        raise bad_url(url, "not a postgresql:// URL")
    return url.split_options(_OWN_OPTIONS)


def _conninfo(url: URL) -> str:
    """The libpq connection string of ``url``, with `_TCP_DEFAULTS` it does not name."""
    full = url.with_defaults(_TCP_DEFAULTS)
    return full.build(scheme="postgresql", query=full.query_items)


class _DeadOnArrival(Exception):
    """A pooled connection failed at its first statement: it was dead when handed out."""


async def _check_idle_connection(conn: AsyncConnection[tuple[Any, ...]]) -> None:
    """Raise if a pooled connection is dead, at no round trip when it looks healthy.

    An idle connection has nothing to read: no query of ours is outstanding. A server
    that ends it (``pg_terminate_backend``, a shutdown, an idle timeout) first sends a
    ``FATAL`` message, then closes it, so its socket turns readable. Only then is the
    round trip of `AsyncConnectionPool.check_connection` spent, and it raises for a
    dead connection, which the pool then replaces. (Checking every connection that
    way cost a round trip on every plan.)
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    try:
        poller = select.poll()
        poller.register(conn.pgconn.socket, select.POLLIN | select.POLLPRI)
        quiet = not poller.poll(0)
    except (AttributeError, OSError, psycopg.Error):  # no poll() here, or no socket
        quiet = False
    if not quiet:
        await AsyncConnectionPool.check_connection(conn)


def _lock_id(prefix: str) -> int:
    """A signed 64-bit advisory lock id for migrating the tables of ``prefix``."""
    digest = hashlib.sha256(f"steadyloop migrate {prefix}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresJournal(PlanJournal):
    """A journal in a PostgreSQL database, shared by every process that opens its URL.

    Durability: what a commit survives on the server — with the defaults (``fsync=on``,
    ``synchronous_commit=on``), a crash of either process and power loss of the server
    machine. See the module documentation.

    Args:
        url: A ``postgresql://`` URL (its ``prefix``, ``pool_size`` and ``retries``
            query parameters are read here; keyword arguments override them).
        prefix: Table name prefix (ASCII letters, digits, ``_``); ``steadyloop_``.
        pool_size: Most connections held open at once.
        retries: Most attempts of a transaction the server refuses (serialisation
            failure, deadlock, a racing idempotency key).
        connect_timeout: Seconds to wait for the server when connecting.
        create: Whether missing tables are created; with ``False`` opening a database
            without them raises [`StoreNotFound`][steadyloop.StoreNotFound] ("no journal
            here") and creates nothing (for tools that only inspect).
    """

    def __init__(
        self,
        url: str | URL,
        *,
        prefix: str | None = None,
        pool_size: int | None = None,
        retries: int | None = None,
        connect_timeout: float = 10.0,
        create: bool = True,
    ) -> None:
        super().__init__()
        self.create = create
        parsed = as_url(url)
        rest, own = _split_url(parsed)
        self._conninfo = _conninfo(rest)
        self.url = parsed.redacted
        self._dialect, self.pool_size, self._policy = pool_options(
            self.url, own, PostgresDialect, prefix=prefix, pool_size=pool_size, retries=retries
        )
        shown = rest.build(scheme="postgresql", query=rest.query_items)  # as the user wrote it
        self._dialect.location_name = f"postgresql {redact_url(shown)}"
        self._connect_timeout = connect_timeout
        self._pool: AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]] | None = None
        self.server_settings: dict[str, str] = {}
        """The server's ``fsync``, ``synchronous_commit`` and ``server_version``, read at open."""

    @property
    def prefix(self) -> str:
        """The table name prefix."""
        return self._dialect.prefix

    @classmethod
    async def open(cls, url: str | URL, **options: Any) -> PostgresJournal:
        """Connect, create or check the tables, and return the journal.

        Raises:
            BackendUnavailable: The server cannot be reached, refuses the login, or
                psycopg is not installed.
            CorruptionError: The tables were written by a newer Steadyloop.
        """
        journal = cls(url, **options)
        await journal._connect()
        return journal

    async def _connect(self) -> None:
        kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in self._conninfo:
            kwargs["connect_timeout"] = max(1, round(self._connect_timeout))
        # A connection the server ends while the tables are prepared (a restart,
        # pg_terminate_backend) rolls the preparation back: it runs again.
        await prepare_retrying(lambda: self._prepare(kwargs), self._connect_timeout)
        pool: AsyncConnectionPool[AsyncConnection[tuple[Any, ...]]] = AsyncConnectionPool(
            self._conninfo,
            kwargs=kwargs,
            min_size=1,
            max_size=self.pool_size,
            open=False,
            name=f"steadyloop-{self.prefix}",
            timeout=max(self._connect_timeout, 30.0),
            # A connection the server closed while it sat idle in the pool (a restart,
            # pg_terminate_backend, an idle timeout) is replaced before it is handed
            # out, instead of failing the transaction given to it.
            check=_check_idle_connection,
        )
        try:
            await pool.open(wait=True, timeout=self._connect_timeout)
        except psycopg.Error as exc:
            await pool.close()
            raise BackendUnavailable(
                f"{self.url}: cannot open a connection pool: {_one_line(exc)}"
            ) from exc
        self._pool = pool

    async def _prepare(self, kwargs: dict[str, Any]) -> None:
        """Create or check the tables and read the server's settings, on a connection of its own."""
        try:
            conn = await AsyncConnection.connect(self._conninfo, **kwargs)
        except psycopg.Error as exc:
            raise BackendUnavailable(f"{self.url}: cannot connect: {_one_line(exc)}") from exc
        try:
            async with conn:
                # Concurrent first opens take turns: CREATE TABLE IF NOT EXISTS is not
                # safe to race in PostgreSQL. The lock ends with the transaction.
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(self.prefix),))
                    await run_async(
                        migrate_plan(self._dialect, create=self.create),
                        lambda q: self._execute(conn, q),
                    )
                cur = await conn.execute(
                    "SELECT current_setting('fsync'), current_setting('synchronous_commit'), "
                    "current_setting('server_version')"
                )
                row = await cur.fetchone()
                assert row is not None
                self.server_settings = dict(
                    zip(("fsync", "synchronous_commit", "server_version"), row, strict=True)
                )
        except psycopg.Error as exc:
            error = BackendUnavailable(f"{self.url}: cannot prepare the tables: {_one_line(exc)}")
            if conn.broken:
                raise LostWhilePreparing(error) from exc
            raise error from exc

    # -- running plans ----------------------------------------------------------------

    @staticmethod
    async def _execute(conn: AsyncConnection[tuple[Any, ...]], query: Query) -> list[Row]:
        async with conn.cursor() as cur:
            if query.many:
                await cur.executemany(query.sql, query.params)
                return []
            await cur.execute(query.sql, query.params)
            return list(await cur.fetchall()) if query.fetch else []

    @staticmethod
    def _retryable(exc: BaseException) -> bool:
        return isinstance(
            exc,
            pg_errors.SerializationFailure | pg_errors.DeadlockDetected | pg_errors.UniqueViolation,
        )

    def _duplicate_row(self, exc: BaseException | None) -> bool:
        return isinstance(exc, pg_errors.UniqueViolation)

    def transient(self, exc: BaseException) -> bool:
        """A lost connection or a server shutting down or starting: worth another try."""
        cause = exc.__cause__ if isinstance(exc, BackendUnavailable) else exc
        return isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError)

    async def _run_plan(
        self, make_plan: Callable[[], Plan], *, write: bool, pipelined: bool = True
    ) -> Any:
        """Run a plan in one transaction (reads: one autocommit statement) and map errors."""
        pool = self._pool
        assert pool is not None

        async def attempt() -> Any:
            async with pool.connection() as conn:
                answered = False  # whether the server has answered a statement of ours
                in_pipeline = write and pipelined

                async def execute(query: Query) -> list[Row]:
                    nonlocal answered
                    rows = await self._execute(conn, query)
                    # In a pipeline only a fetch waits for the server's answer.
                    answered = answered or query.fetch or not in_pipeline
                    return rows

                try:
                    if not write:
                        return await run_async(make_plan(), execute)
                    if not pipelined:
                        async with conn.transaction():
                            return await run_async(make_plan(), execute)
                    # Pipeline mode sends statements whose rows the plan does not need
                    # without waiting for each reply: one round trip per fetched query.
                    async with conn.pipeline(), conn.transaction():
                        return await run_async(make_plan(), execute)
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    if not answered and conn.broken:
                        # The connection was dead when the pool handed it out (the
                        # server ended it while idle, too recently for the check to
                        # see): it failed at the first statement, before any COMMIT,
                        # so nothing was written and the plan runs on another one.
                        raise _DeadOnArrival() from exc
                    raise
                except BaseException:
                    if write and (
                        conn.pgconn.pipeline_status
                        or conn.info.transaction_status is not TransactionStatus.IDLE
                    ):
                        # Cancelled inside a pipeline, psycopg 3.3 can leave the
                        # connection in pipeline mode with the transaction still open on
                        # the server (and reporting IDLE), so the pool would hand it out
                        # again with the transaction's row locks held. Closed, the server
                        # rolls back what was not committed and the pool opens another.
                        await conn.close()
                    raise

        def should_retry(exc: BaseException) -> bool:
            return isinstance(exc, _DeadOnArrival) or self._retryable(exc)

        try:
            return await retry_transaction(attempt, should_retry, self._policy)
        except _DeadOnArrival as lost:
            exc = lost.__cause__
            assert isinstance(exc, psycopg.Error)
            raise BackendUnavailable(
                f"{self.url}: {type(exc).__name__}: {_one_line(exc) or 'connection failed'}"
            ) from exc
        except psycopg.Error as exc:
            raise BackendUnavailable(
                f"{self.url}: {type(exc).__name__}: {_one_line(exc) or 'connection failed'}"
            ) from exc

    async def listen(self, channel: str) -> AsyncIterator[None]:
        """Yield once listening on ``channel``, then once per notification on it.

        Uses a connection of its own (outside the pool), closed when the iteration
        ends. A lost connection ends the iteration with
        [`BackendUnavailable`][steadyloop.BackendUnavailable]; listen again to reconnect.
        """
        try:
            conn = await AsyncConnection.connect(
                self._conninfo,
                autocommit=True,
                connect_timeout=max(1, round(self._connect_timeout)),
            )
        except psycopg.Error as exc:
            raise BackendUnavailable(f"{self.url}: cannot listen: {_one_line(exc)}") from exc
        try:
            async with conn:
                await conn.execute(
                    psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel))
                )
                yield None
                async for _ in conn.notifies():
                    yield None
        except psycopg.Error as exc:
            raise BackendUnavailable(f"{self.url}: listening stopped: {_one_line(exc)}") from exc

    # -- backend hooks ----------------------------------------------------------------

    async def _reclaim_space(self) -> str:
        return (
            "PostgreSQL: deleted rows are freed by VACUUM, which is left to the operator "
            "(autovacuum, or VACUUM / VACUUM FULL)"
        )

    async def _close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()
