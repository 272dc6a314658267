"""The MySQL and MariaDB backend: the shared SQL plans on asyncmy, pooled.

URL: ``mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?prefix=P&pool_size=N]`` (or
``mariadb://…``); ``unix_socket=/path`` connects through a socket instead of TCP.
``prefix`` names the tables (``steadyloop_`` by default), so several journals share
one database; ``pool_size`` caps the connection pool (10).

Storage: tables are InnoDB in ``utf8mb4``. Namespaces, stream names and idempotency
keys are stored as ``VARBINARY(400)`` holding their UTF-8 bytes, because no text
collation of MySQL or MariaDB compares them exactly: the ``_ci`` collations fold case,
and MariaDB's ``utf8mb4_bin`` is ``PAD SPACE``, so ``"run"`` and ``"run "`` would be one
name. Records are canonical JSON text in ``LONGTEXT CHARACTER SET utf8mb4 COLLATE
utf8mb4_bin`` (astral-plane characters included; NUL is escaped in JSON text).
Every session runs with ``STRICT_ALL_TABLES`` (a value that does not fit is an error,
never silently truncated), without ``NO_BACKSLASH_ESCAPES``, and at ``READ COMMITTED``.

Limits: a statement, and so a single record, must fit the server's
``max_allowed_packet`` (16 MiB by default in MariaDB, 64 MiB in MySQL 8); a larger
record is refused with [`InvalidBatch`][steadyloop.InvalidBatch] before anything is written.
Multi-row inserts are split into statements of about 1 MB.

Durability: a returned ``append`` has been committed by InnoDB. With the default
``innodb_flush_log_at_trx_commit=1`` the redo log was flushed to disk before the commit
returned, so the batch survives a crash of either process and power loss of the server
machine; with ``2`` it survives a server process crash but not an OS crash or power
loss; with ``0`` up to a second of acknowledged batches can be lost even when only the
server process dies. `MySQLJournal.server_settings` shows what the server said.

Concurrency and failure: as for PostgreSQL. A batch locks its stream head rows in byte
order (``SELECT … FOR UPDATE``); deadlocks, lock wait timeouts and a racing insert of
one idempotency key rerun the whole transaction, a bounded number of times. A lost or
killed connection (``KILL CONNECTION``, a server restart) raises
[`BackendUnavailable`][steadyloop.BackendUnavailable]; InnoDB rolls back what was not committed,
so the batch is all or nothing, and resubmitting with the same idempotency key is safe.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from steadyloop._errors import BackendUnavailable, InvalidBatch, UnknownBackend
from steadyloop._urls import URL, as_url, bad_url
from steadyloop.journal._protocol import AppendResult, PreparedBatch
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

_log = logging.getLogger(__name__)

try:
    import asyncmy
    from asyncmy import errors as my_errors
except ImportError as exc:  # pragma: no cover - depends on the install
    raise BackendUnavailable(
        "the MySQL/MariaDB driver is missing; install steadyloop[mysql] (asyncmy)"
    ) from exc

__all__ = ["MySQLDialect", "MySQLJournal"]

_OWN_OPTIONS = ("prefix", "pool_size", "retries", "unix_socket")
_SQL_MODE = "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION"

# Server error codes.
_DUPLICATE_KEY = 1062
_LOCK_WAIT_TIMEOUT = 1205
_DEADLOCK = 1213
_RECORD_CHANGED = 1020
_CONNECTION_LOST = {2003, 2006, 2013, 1927, 1053}
"""Can't connect, server gone, lost during query, connection killed, server shutdown."""
_TABLE_EXISTS = 1050
"""A concurrent first open created the table first (DDL is not transactional): rerun."""
_RETRYABLE = {_DUPLICATE_KEY, _LOCK_WAIT_TIMEOUT, _DEADLOCK, _RECORD_CHANGED, _TABLE_EXISTS}
_STATEMENT_OVERHEAD = 4096
"""Bytes allowed for a single-row INSERT beyond its record and names."""


class MySQLDialect(Dialect):
    """MySQL and MariaDB: ``%s`` placeholders, names as UTF-8 bytes, InnoDB row locks."""

    placeholder = "%s"
    name_type = "VARBINARY(400)"
    data_type = "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    int_type = "BIGINT"
    lock_suffix = " FOR UPDATE"
    location_name = "mysql"
    serial_key = "seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY"
    table_suffix = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    # MariaDB (10.6+) and MySQL (8.0+) skip rows other claimers locked; the claim's
    # subquery reads without locks, so only the picked task row is locked.
    skip_locked = " FOR UPDATE SKIP LOCKED"
    now_expr = "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)"
    tables_sql = (
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND table_name = ?"
    )

    def bind_name(self, name: str) -> Any:
        """Bind a name as its UTF-8 bytes, compared byte for byte by ``VARBINARY``."""
        return name.encode("utf-8")

    def insert_ignore(self, table: str, columns: Sequence[str], conflict: Sequence[str]) -> str:
        """Insert unless the key exists, as ``ON DUPLICATE KEY UPDATE c = c``.

        Not ``INSERT IGNORE``: that turns every error of the statement (a value too
        long, a bad character) into a warning, and, on an existing row, takes a shared
        lock that the following ``SELECT … FOR UPDATE`` must upgrade, so two writers on
        one stream deadlock. A no-op update takes the exclusive lock at once and leaves
        other errors as errors.
        """
        cols = ", ".join(columns)
        marks = ", ".join("?" for _ in columns)
        keep = next((c for c in columns if c not in conflict), conflict[0])
        return self.sql(
            f"INSERT INTO {{p}}{table} ({cols}) VALUES ({marks}) "
            f"ON DUPLICATE KEY UPDATE {keep} = {keep}"
        )

    def create_statements(self) -> list[str]:
        """The shared schema, as InnoDB tables in ``utf8mb4``."""
        return [statement + self.table_suffix for statement in super().create_statements()]


def _lock_name(database: str, prefix: str) -> str:
    """A ``GET_LOCK`` name (at most 64 characters) for migrating ``prefix``'s tables."""
    digest = hashlib.sha256(f"{database}\0{prefix}".encode()).hexdigest()
    return f"steadyloop-migrate-{digest[:40]}"


class MySQLJournal(PlanJournal):
    """A journal in a MySQL or MariaDB database, shared by every process opening its URL.

    Durability: what an InnoDB commit survives — with the default
    ``innodb_flush_log_at_trx_commit=1``, a crash of either process and power loss of
    the server machine. See the module documentation.

    Args:
        url: A ``mysql://`` or ``mariadb://`` URL (its ``prefix``, ``pool_size``,
            ``retries`` and ``unix_socket`` query parameters are read; keyword
            arguments override them).
        prefix: Table name prefix (ASCII letters, digits, ``_``); ``steadyloop_``.
        pool_size: Most connections held open at once.
        retries: Most attempts of a transaction the server refuses.
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
        self.url = parsed.redacted
        if parsed.family != "mysql" or parsed.driver or parsed.qualifiers:
            raise bad_url(parsed, "not a mysql:// URL")
        own = parsed.query
        unknown = sorted(set(own) - set(_OWN_OPTIONS))
        if unknown:
            raise UnknownBackend(
                f"{self.url}: unknown option(s) {', '.join(unknown)}; "
                f"known: {', '.join(_OWN_OPTIONS)}"
            )
        self.database = parsed.database
        if not self.database:
            raise UnknownBackend(f"{self.url}: the URL names no database (mysql://host/DB)")
        port = parsed.port or 3306
        self._dialect, self.pool_size, self._policy = pool_options(
            self.url, own, MySQLDialect, prefix=prefix, pool_size=pool_size, retries=retries
        )
        self._dialect.location_name = f"mysql {parsed.where}"
        self._connect_args: dict[str, Any] = {
            "host": parsed.host or "127.0.0.1",
            "port": port,
            "user": parsed.user or "root",
            "password": parsed.password or "",
            "database": self.database,
            "charset": "utf8mb4",
            "autocommit": True,
            # asyncmy sends ``SET sql_mode=<value>`` verbatim, so the value carries quotes.
            "sql_mode": f"'{_SQL_MODE}'",
            "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            "binary_prefix": True,
            "connect_timeout": connect_timeout,
            "max_allowed_packet": 1 << 30,
        }
        if "unix_socket" in own:
            self._connect_args["unix_socket"] = own["unix_socket"]
        self._pool: Any = None
        self.max_allowed_packet = 16 << 20
        """The server's ``max_allowed_packet`` in bytes, read at open."""
        self.server_settings: dict[str, str] = {}
        """The server's version, ``innodb_flush_log_at_trx_commit`` and ``sync_binlog``."""

    @property
    def prefix(self) -> str:
        """The table name prefix."""
        return self._dialect.prefix

    @classmethod
    async def open(cls, url: str | URL, **options: Any) -> MySQLJournal:
        """Connect, create or check the tables, and return the journal.

        Raises:
            BackendUnavailable: The server cannot be reached or refuses the login.
            CorruptionError: The tables were written by a newer Steadyloop.
        """
        journal = cls(url, **options)
        await journal._connect()
        return journal

    async def _connect(self) -> None:
        # A connection the server ends while the tables are prepared (KILL, a restart)
        # leaves at most some of the idempotent DDL done: it runs again.
        await prepare_retrying(self._prepare, self._connect_args["connect_timeout"])
        try:
            self._pool = await asyncmy.create_pool(
                minsize=1, maxsize=self.pool_size, pool_recycle=3600, **self._connect_args
            )
        except (my_errors.MySQLError, OSError, TimeoutError) as exc:
            raise BackendUnavailable(
                f"{self.url}: cannot open a connection pool: {_describe(exc)}"
            ) from exc

    async def _prepare(self) -> None:
        """Create or check the tables and read the server's settings, on a connection of its own."""
        try:
            conn = await asyncmy.connect(**self._connect_args)
        except (my_errors.MySQLError, OSError, TimeoutError) as exc:
            raise BackendUnavailable(f"{self.url}: cannot connect: {_describe(exc)}") from exc
        try:
            await self._migrate(conn)
        except (my_errors.MySQLError, OSError, EOFError) as exc:
            error = BackendUnavailable(f"{self.url}: cannot prepare the tables: {_describe(exc)}")
            if self.transient(exc):
                raise LostWhilePreparing(error) from exc
            raise error from exc
        finally:
            conn.close()

    async def _migrate(self, conn: Any) -> None:
        """Create or check the tables, one opener at a time (DDL cannot be rolled back)."""
        name = _lock_name(self.database, self.prefix)
        execute: Callable[[Query], Any] = lambda q: self._execute(conn, q)  # noqa: E731
        rows = await execute(Query("SELECT GET_LOCK(%s, %s)", (name, 60), fetch=True))
        if not rows or rows[0][0] != 1:
            raise BackendUnavailable(
                f"{self.url}: another process held the schema lock {name} for 60 s"
            )
        try:
            await run_async(migrate_plan(self._dialect, create=self.create), execute)
        finally:
            await execute(Query("SELECT RELEASE_LOCK(%s)", (name,), fetch=True))
        rows = await execute(
            Query(
                "SELECT @@max_allowed_packet, VERSION(), @@innodb_flush_log_at_trx_commit, "
                "@@sync_binlog",
                fetch=True,
            )
        )
        packet, version, flush, sync_binlog = rows[0]
        self.max_allowed_packet = int(packet)
        self.server_settings = {
            "version": str(version),
            "innodb_flush_log_at_trx_commit": str(flush),
            "sync_binlog": str(sync_binlog),
        }

    # -- running plans ----------------------------------------------------------------

    @staticmethod
    async def _execute(conn: Any, query: Query) -> list[Row]:
        async with conn.cursor() as cur:
            if query.many:
                await cur.executemany(query.sql, query.params)
                return []
            await cur.execute(query.sql, query.params)
            return list(await cur.fetchall()) if query.fetch else []

    @staticmethod
    def _retryable(exc: BaseException) -> bool:
        return (
            isinstance(exc, my_errors.MySQLError) and bool(exc.args) and exc.args[0] in _RETRYABLE
        )

    def _duplicate_row(self, exc: BaseException | None) -> bool:
        return isinstance(exc, my_errors.MySQLError) and exc.args[:1] == (_DUPLICATE_KEY,)

    def transient(self, exc: BaseException) -> bool:
        """A lost or killed connection, or a server going away: worth another try."""
        cause = exc.__cause__ if isinstance(exc, BackendUnavailable) else exc
        if isinstance(cause, my_errors.MySQLError):
            code = cause.args[0] if cause.args else None
            return isinstance(cause, my_errors.OperationalError | my_errors.InterfaceError) or (
                code in _CONNECTION_LOST
            )
        return isinstance(cause, OSError | EOFError | ConnectionError)

    async def _run_plan(
        self, make_plan: Callable[[], Plan], *, write: bool, pipelined: bool = True
    ) -> Any:
        """Run a plan in one transaction (reads: one autocommit statement) and map errors."""
        pool = self._pool
        assert pool is not None

        async def attempt() -> Any:
            async with pool.acquire() as conn:
                # A connection the server closed while idle in the pool (KILL, a
                # restart, wait_timeout) reconnects here, before anything is sent.
                await conn.ping(reconnect=True)
                if not write:
                    return await run_async(make_plan(), lambda q: self._execute(conn, q))
                await conn.begin()
                try:
                    result = await run_async(make_plan(), lambda q: self._execute(conn, q))
                    await conn.commit()
                except BaseException:
                    try:
                        await conn.rollback()
                    except Exception as exc:
                        _log.info("MySQL rollback failed (%s); dropping the connection", exc)
                        conn.close()  # the pool drops a closed connection
                    raise
                return result

        try:
            return await retry_transaction(attempt, self._retryable, self._policy)
        except (my_errors.MySQLError, OSError, EOFError, RuntimeError) as exc:
            raise BackendUnavailable(f"{self.url}: {_describe(exc)}") from exc

    # -- backend hooks ----------------------------------------------------------------

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        limit = self.max_allowed_packet - _STATEMENT_OVERHEAD
        for write, texts in zip(batch.writes, batch.encoded, strict=True):
            for k, text in enumerate(texts):
                size = len(text.encode("utf-8"))
                if 2 * size > limit:  # escaping can double the bytes on the wire
                    raise InvalidBatch(
                        f"record {k} of stream {write.stream!r} is {size} bytes of JSON; the "
                        f"server's max_allowed_packet ({self.max_allowed_packet}) allows "
                        f"records up to {limit // 2} bytes; raise max_allowed_packet"
                    )
        return await super()._append(batch)

    async def _reclaim_space(self) -> str:
        return (
            "MySQL: deleted rows leave free space in the tables; OPTIMIZE TABLE, run by "
            "the operator, gives it back"
        )

    async def _close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.close()
            await pool.wait_closed()


def _describe(exc: BaseException) -> str:
    """A one-line description of a driver error."""
    if isinstance(exc, my_errors.MySQLError) and len(exc.args) >= 2:
        return f"{type(exc).__name__} {exc.args[0]}: {exc.args[1]}"
    return f"{type(exc).__name__}: {exc}".strip()
