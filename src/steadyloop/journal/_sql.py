"""SQL logic shared by every SQL backend, written once.

The operations are *plans*: generators that yield `Query` objects and receive
their rows back. A plan holds the whole logic of an operation (the expected-sequence
check, the idempotency check, the inserts) and knows nothing about drivers, so the
same plan runs on SQLite's synchronous driver and on asynchronous server drivers.
Each dialect only supplies its quirks: the SQL text (placeholders, column types,
row locking), how values are bound, and how driver errors are classified.

Schema (prefix ``steadyloop_`` by default)::

    {p}schema   (version)                                       -- migration level
    {p}streams  (namespace, stream, head)                       -- last seq per stream
    {p}records  (namespace, stream, seq, data)                  -- canonical JSON text
    {p}keys     (namespace, idem_key, digest, result)           -- idempotency keys

Locking: a batch locks the head rows of its streams in sorted order (so two batches
never deadlock), checks every ``expected_next`` before writing anything, and commits
the records, heads and key in one transaction.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from steadyloop._errors import (
    BackendUnavailable,
    ConflictError,
    CorruptionError,
    IdempotencyKeyReused,
    StoreNotFound,
)
from steadyloop._seal import damaged_snapshot
from steadyloop.journal._protocol import AppendResult, Journal, PreparedBatch, StoredKey
from steadyloop.records import Record, StoredRecord, canonical_json, decode

__all__ = [
    "SCHEMA_VERSION",
    "Dialect",
    "Plan",
    "PlanJournal",
    "Query",
    "Row",
    "append_plan",
    "delete_namespace_plan",
    "delete_stream_plan",
    "group_append_plan",
    "head_plan",
    "keys_plan",
    "migrate_plan",
    "namespaces_plan",
    "no_store_here",
    "read_plan",
    "restore_key_plan",
    "run_sync",
    "streams_plan",
    "table_exists_plan",
]

_VANISHED_RETRIES = 5
"""How often an append re-creates a stream row that a concurrent delete removed."""

SCHEMA_VERSION = 1
"""The schema version this code writes and reads."""

Row: TypeAlias = Sequence[Any]


@dataclass(frozen=True, slots=True)
class Query:
    """One statement for a runner to execute.

    Attributes:
        sql: The statement, in the dialect's placeholder style.
        params: One parameter tuple, or a list of them when ``many`` is true.
        many: Execute once per parameter tuple (``executemany``).
        fetch: Whether the plan wants the rows back.
    """

    sql: str
    params: Any = ()
    many: bool = False
    fetch: bool = False


Plan: TypeAlias = Generator[Query, list[Row], Any]
"""A generator that yields queries, receives their rows, and returns its result."""


class Dialect:
    """The quirks of one SQL database. Subclasses override what differs.

    Attributes:
        prefix: Table name prefix, so several journals (or test runs) share a database.
        placeholder: The driver's parameter marker (``?`` or ``%s``).
        name_type: Column type of namespaces, streams and keys; must compare bytes
            exactly (no case folding, no trailing-space padding).
        data_type: Column type of canonical JSON text.
        int_type: A 64-bit integer type.
        lock_suffix: Appended to the head ``SELECT`` to lock rows (``FOR UPDATE``).
        location_name: How errors name the database, e.g. a file path.
    """

    prefix = "steadyloop_"
    placeholder = "?"
    name_type = "TEXT"
    data_type = "TEXT"
    int_type = "BIGINT"
    lock_suffix = ""
    location_name = "database"
    short_text = "VARCHAR(128)"
    """Column type of short ASCII values that are indexed (statuses, lease tokens)."""
    serial_key = "seq INTEGER PRIMARY KEY AUTOINCREMENT"
    """The column definition of an auto-numbered primary key named ``seq``."""
    skip_locked = ""
    """Appended to a claim's ``SELECT`` so that rows another claimer locked are skipped
    (``FOR UPDATE SKIP LOCKED``); empty where a transaction already excludes others."""
    now_expr: str | None = None
    """An SQL expression of the server's clock in integer microseconds since the epoch,
    so machines whose clocks disagree agree on leases; ``None``: the caller's clock."""
    tables_sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?"
    """A query returning a row when the table named by its one parameter exists."""
    table_suffix = ""
    """Appended to every ``CREATE TABLE`` (MySQL: the engine and character set)."""
    migrate_lock_sql: str | None = None
    """A statement taking a lock, held to the end of the transaction, on the name given
    as its one parameter, so concurrent first opens create tables one at a time
    (PostgreSQL ``pg_advisory_xact_lock``); ``None``: the transaction already excludes
    others, or the dialect's refusals are retried."""
    notify_sql: str | None = None
    """A statement that wakes listeners on the channel named by its one parameter when
    the transaction commits (PostgreSQL ``pg_notify``); ``None``: listeners poll."""
    head_upsert_returning = False
    """Whether one ``INSERT … ON CONFLICT … DO UPDATE … RETURNING`` may create a
    stream's head row if missing, advance it by the batch's records and return it, in
    place of an insert-if-missing, a ``SELECT`` and an ``UPDATE``. A batch refused for a
    conflict is rolled back whole, the advanced heads with it."""

    def __init__(self, prefix: str | None = None) -> None:
        if prefix is not None:
            if not prefix.replace("_", "").isalnum() or not prefix.isascii():
                raise ValueError(f"table prefix {prefix!r} must be ASCII letters, digits or _")
            self.prefix = prefix

    # -- text helpers -----------------------------------------------------------

    def sql(self, template: str) -> str:
        """Fill ``{p}`` with the table prefix and ``?`` with the driver's placeholder."""
        cache: dict[str, str] | None = self.__dict__.get("_sql_cache")
        if cache is None:
            cache = self.__dict__["_sql_cache"] = {}
        text = cache.get(template)
        if text is None:
            text = template.replace("{p}", self.prefix)
            if self.placeholder != "?":
                text = text.replace("?", self.placeholder)
            # The text depends only on the template and on the prefix and placeholder,
            # which are fixed once the dialect is built; plans ask for the same few.
            if len(cache) < 256:
                cache[template] = text
        return text

    def _head_advance(self) -> str:
        """Create a head row if missing, advance it by a count, and return the new head.

        One statement for what takes three otherwise (insert-if-missing, select, update).
        """
        return self.sql(
            "INSERT INTO {p}streams (namespace, stream, head) VALUES (?, ?, ?) "
            "ON CONFLICT (namespace, stream) DO UPDATE SET head = head + excluded.head "
            "RETURNING head"
        )

    def _streams_upsert(self) -> str:
        """The ``INSERT`` that creates a stream's head row if missing (cached)."""
        text: str | None = self.__dict__.get("_streams_upsert_sql")
        if text is None:
            text = self.insert_ignore(
                "streams", ("namespace", "stream", "head"), ("namespace", "stream")
            )
            self.__dict__["_streams_upsert_sql"] = text
        return text

    def bind_name(self, name: str) -> Any:
        """Turn a name into a parameter value (MySQL binds bytes)."""
        return name

    def load_name(self, value: Any) -> str:
        """Turn a stored name back into text."""
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value).decode("utf-8")
        return str(value)

    def insert_ignore(self, table: str, columns: Sequence[str], conflict: Sequence[str]) -> str:
        """An ``INSERT`` that does nothing when the key exists (standard SQL form)."""
        cols = ", ".join(columns)
        marks = ", ".join("?" for _ in columns)
        keys = ", ".join(conflict)
        return self.sql(
            f"INSERT INTO {{p}}{table} ({cols}) VALUES ({marks}) ON CONFLICT ({keys}) DO NOTHING"
        )

    def create_statements(self) -> list[str]:
        """The statements that create the schema at `SCHEMA_VERSION`."""
        n, d, i = self.name_type, self.data_type, self.int_type
        return [
            self.sql(
                f"CREATE TABLE IF NOT EXISTS {{p}}streams (namespace {n} NOT NULL, "
                f"stream {n} NOT NULL, head {i} NOT NULL, PRIMARY KEY (namespace, stream))"
            ),
            self.sql(
                f"CREATE TABLE IF NOT EXISTS {{p}}records (namespace {n} NOT NULL, "
                f"stream {n} NOT NULL, seq {i} NOT NULL, data {d} NOT NULL, "
                "PRIMARY KEY (namespace, stream, seq))"
            ),
            self.sql(
                f"CREATE TABLE IF NOT EXISTS {{p}}keys (namespace {n} NOT NULL, "
                f"idem_key {n} NOT NULL, digest {self.name_type} NOT NULL, "
                f"result {d} NOT NULL, PRIMARY KEY (namespace, idem_key))"
            ),
        ]

    def location(self, table: str, **key: object) -> str:
        """Name a row for a [`CorruptionError`][steadyloop.CorruptionError]."""
        inner = ", ".join(f"{k}={v!r}" for k, v in key.items())
        return f"{self.location_name} table {self.prefix}{table}[{inner}]"


def table_exists_plan(d: Dialect, name: str) -> Generator[Query, list[Row], bool]:
    """Whether the table ``{prefix}{name}`` exists (a sub-plan: ``yield from`` it)."""
    rows = yield Query(d.sql(d.tables_sql), (d.prefix + name,), fetch=True)
    return bool(rows)


def no_store_here(d: Dialect, what: str, table: str) -> StoreNotFound:
    """The error of an inspecting open that finds no store (and creates none)."""
    return StoreNotFound(
        f"{d.location_name}: no {what} here: table {d.prefix}{table} does not exist "
        "(check the URL and its prefix); nothing was created"
    )


def migrate_plan(d: Dialect, *, create: bool = True) -> Plan:
    """Create the schema if missing; refuse a database written by a newer version.

    The tables are created only when missing (so no server warns that one already
    exists), and with ``create=False`` not at all: a missing schema is then
    [`StoreNotFound`][steadyloop.StoreNotFound] saying there is no journal here.
    """
    exists = yield from table_exists_plan(d, "schema")
    if not exists:
        if not create:
            raise no_store_here(d, "journal", "schema")
        yield Query(d.sql(f"CREATE TABLE {{p}}schema (version {d.int_type} NOT NULL)"))
        rows: list[Row] = []
    else:
        rows = yield Query(d.sql("SELECT version FROM {p}schema"), fetch=True)
    version = max((int(r[0]) for r in rows), default=0)
    if version > SCHEMA_VERSION:
        raise CorruptionError(
            f"schema version {version} is newer than this steadyloop ({SCHEMA_VERSION}); "
            "upgrade steadyloop",
            location=d.location("schema", version=version),
        )
    if version < 1:
        for statement in d.create_statements():
            yield Query(statement)
        yield Query(d.sql("DELETE FROM {p}schema"))
        yield Query(d.sql("INSERT INTO {p}schema (version) VALUES (?)"), (SCHEMA_VERSION,))
    # Future upgrades go here: `if version < 2: ...`, each step in the same transaction.
    return None


def append_plan(d: Dialect, batch: PreparedBatch) -> Plan:
    """Write a batch: check the key, lock and check heads, insert, commit by the runner."""
    ns = d.bind_name(batch.namespace)
    advance = d.head_upsert_returning
    if batch.idempotency_key is not None and advance:
        # Advancing heads writes them, so the key must be checked first; the dialects
        # that advance (SQLite) run one writer at a time, so nothing can slip between.
        found = yield from _lookup_key(d, batch)
        if found is not None:
            return found
    heads: dict[str, int] = {}
    order = sorted(range(len(batch.writes)), key=lambda i: batch.writes[i].stream)
    for i in order:
        stream = batch.writes[i].stream
        if advance:
            count = len(batch.encoded[i])
            rows = yield Query(d._head_advance(), (ns, d.bind_name(stream), count), fetch=True)
            heads[stream] = int(rows[0][0]) - count
            continue
        for _ in range(_VANISHED_RETRIES):
            yield Query(d._streams_upsert(), (ns, d.bind_name(stream), 0))
            rows = yield Query(
                d.sql("SELECT head FROM {p}streams WHERE namespace = ? AND stream = ?")
                + d.lock_suffix,
                (ns, d.bind_name(stream)),
                fetch=True,
            )
            if rows:  # else a concurrent delete_stream removed the row we just saw
                break
        else:
            raise BackendUnavailable(
                f"stream {stream!r} in namespace {batch.namespace!r} was deleted "
                f"{_VANISHED_RETRIES} times while this batch tried to lock it; nothing written"
            )
        heads[stream] = int(rows[0][0])
    if batch.idempotency_key is not None and not advance:
        # Checked with the heads locked: a concurrent submission of the same key has
        # either committed (and is found) or waits behind us, so a resubmission is
        # reported as a duplicate rather than as a conflict with itself.
        found = yield from _lookup_key(d, batch)
        if found is not None:
            return found
    for w in batch.writes:
        if w.expected_next is not None and w.expected_next != heads[w.stream] + 1:
            raise ConflictError(batch.namespace, w.stream, w.expected_next, heads[w.stream] + 1)
    positions: dict[str, tuple[int, int]] = {}
    rows_to_insert: list[tuple[Any, ...]] = []
    for w, texts in zip(batch.writes, batch.encoded, strict=True):
        first = heads[w.stream] + 1
        positions[w.stream] = (first, first + len(texts) - 1)
        sname = d.bind_name(w.stream)
        rows_to_insert.extend((ns, sname, first + k, t) for k, t in enumerate(texts))
    yield Query(
        d.sql("INSERT INTO {p}records (namespace, stream, seq, data) VALUES (?, ?, ?, ?)"),
        rows_to_insert,
        many=True,
    )
    if not advance:
        yield Query(
            d.sql("UPDATE {p}streams SET head = ? WHERE namespace = ? AND stream = ?"),
            [(last, ns, d.bind_name(s)) for s, (_, last) in positions.items()],
            many=True,
        )
    result = AppendResult(namespace=batch.namespace, positions=positions)
    if batch.idempotency_key is not None:
        yield Query(
            d.sql("INSERT INTO {p}keys (namespace, idem_key, digest, result) VALUES (?, ?, ?, ?)"),
            (
                ns,
                d.bind_name(batch.idempotency_key),
                batch.digest,
                canonical_json(result.to_dict()),
            ),
        )
    return result


_GROUP_PARAMS = 999
"""The most parameters one statement of a group binds (SQLite's oldest limit)."""

Outcome: TypeAlias = tuple[Any, BaseException | None]
"""One batch's outcome in a group: its result, or the error that refused it alone."""


def _values(d: Dialect, head: str, width: int, rows: int, tail: str = "") -> str:
    """``head VALUES (?, …), (?, …) tail``: one statement for ``rows`` rows (text cached)."""
    cache: dict[tuple[str, int, int, str], str] | None = d.__dict__.get("_values_cache")
    if cache is None:
        cache = d.__dict__["_values_cache"] = {}
    text = cache.get((head, width, rows, tail))
    if text is None:
        one = "(" + ", ".join("?" * width) + ")"
        text = d.sql(f"{head} VALUES " + ", ".join([one] * rows) + tail)
        if len(cache) < 512:
            cache[(head, width, rows, tail)] = text
    return text


def _chunks(rows: list[tuple[Any, ...]], width: int) -> list[list[tuple[Any, ...]]]:
    step = max(1, _GROUP_PARAMS // width)
    return [rows[k : k + step] for k in range(0, len(rows), step)]


def group_append_plan(
    d: Dialect, batches: Sequence[PreparedBatch]
) -> Generator[Query, list[Row], list[Outcome]]:
    """Write a group of batches with one statement per table, each checked on its own.

    The set-based form of `append_plan` for a group that shares one transaction and one
    commit: one ``SELECT`` of every touched stream's head (and one of every key the
    group names), then, in order, each batch is checked against the heads as the
    batches before it in the group leave them (its key, its ``expected_next``) and is
    refused alone, writing nothing; finally one ``INSERT`` of all records, one upsert of
    all heads and one ``INSERT`` of all keys. A key written by an earlier batch of the
    group makes a later batch with it that batch's duplicate. The rows written are the
    ones `append_plan` writes for the same batches one by one.

    Only for a dialect whose write transaction excludes every other writer from its
    start (SQLite's ``BEGIN IMMEDIATE``): the heads are read without row locks. A
    statement that fails (a record already stored beyond its head, a driver error)
    fails the whole plan; the runner then rolls back and runs the batches one by one.

    Returns:
        One outcome per batch, in order.
    """
    pairs: dict[tuple[str, str], int] = {}
    for batch in batches:
        for w in batch.writes:
            pairs.setdefault((batch.namespace, w.stream), 0)
    rows: list[Row] = []
    for chunk in _chunks([(d.bind_name(ns), d.bind_name(s)) for ns, s in pairs], 2):
        rows += yield Query(
            _values(
                d,
                "SELECT namespace, stream, head FROM {p}streams WHERE (namespace, stream) IN (",
                2,
                len(chunk),
                ")",
            ),
            [v for pair in chunk for v in pair],
            fetch=True,
        )
    for ns_value, stream_value, head in rows:
        pairs[(d.load_name(ns_value), d.load_name(stream_value))] = int(head)
    stored: dict[tuple[str, str], tuple[str, str]] = {}
    keyed = {(b.namespace, b.idempotency_key) for b in batches if b.idempotency_key is not None}
    binds = [(d.bind_name(ns), d.bind_name(k)) for ns, k in keyed if k is not None]
    for chunk in _chunks(binds, 2):
        found = yield Query(
            _values(
                d,
                "SELECT namespace, idem_key, digest, result FROM {p}keys "
                "WHERE (namespace, idem_key) IN (",
                2,
                len(chunk),
                ")",
            ),
            [v for pair in chunk for v in pair],
            fetch=True,
        )
        for ns_value, key_value, digest, result in found:
            key = (d.load_name(ns_value), d.load_name(key_value))
            stored[key] = (d.load_name(digest), d.load_name(result))
    heads = dict(pairs)
    outcomes: list[Outcome] = []
    records: list[tuple[Any, ...]] = []
    keys: list[tuple[Any, ...]] = []
    for batch in batches:
        ns = batch.namespace
        if batch.idempotency_key is not None:
            earlier = stored.get((ns, batch.idempotency_key))
            if earlier is not None:
                if earlier[0] != batch.digest:
                    outcomes.append((None, IdempotencyKeyReused(ns, batch.idempotency_key)))
                else:
                    outcomes.append(
                        (AppendResult.from_dict(decode(earlier[1]), duplicate=True), None)
                    )
                continue
        refused = next(
            (
                ConflictError(ns, w.stream, w.expected_next, heads[(ns, w.stream)] + 1)
                for w in batch.writes
                if w.expected_next is not None and w.expected_next != heads[(ns, w.stream)] + 1
            ),
            None,
        )
        if refused is not None:
            outcomes.append((None, refused))
            continue
        bound_ns = d.bind_name(ns)
        positions: dict[str, tuple[int, int]] = {}
        for w, texts in zip(batch.writes, batch.encoded, strict=True):
            first = heads[(ns, w.stream)] + 1
            positions[w.stream] = (first, first + len(texts) - 1)
            heads[(ns, w.stream)] += len(texts)
            sname = d.bind_name(w.stream)
            records.extend((bound_ns, sname, first + k, t) for k, t in enumerate(texts))
        result = AppendResult(namespace=ns, positions=positions)
        if batch.idempotency_key is not None:
            text = canonical_json(result.to_dict())
            stored[(ns, batch.idempotency_key)] = (batch.digest, text)
            keys.append((bound_ns, d.bind_name(batch.idempotency_key), batch.digest, text))
        outcomes.append((result, None))
    for chunk in _chunks(records, 4):
        yield Query(
            _values(d, "INSERT INTO {p}records (namespace, stream, seq, data)", 4, len(chunk)),
            [v for row in chunk for v in row],
        )
    moved = [
        (d.bind_name(ns), d.bind_name(s), h) for (ns, s), h in heads.items() if h != pairs[(ns, s)]
    ]
    for chunk in _chunks(moved, 3):
        yield Query(
            _values(
                d,
                "INSERT INTO {p}streams (namespace, stream, head)",
                3,
                len(chunk),
                " ON CONFLICT (namespace, stream) DO UPDATE SET head = excluded.head",
            ),
            [v for row in chunk for v in row],
        )
    for chunk in _chunks(keys, 4):
        yield Query(
            _values(d, "INSERT INTO {p}keys (namespace, idem_key, digest, result)", 4, len(chunk)),
            [v for row in chunk for v in row],
        )
    return outcomes


def _lookup_key(d: Dialect, batch: PreparedBatch) -> Generator[Query, list[Row], Any]:
    assert batch.idempotency_key is not None
    rows = yield Query(
        d.sql("SELECT digest, result FROM {p}keys WHERE namespace = ? AND idem_key = ?"),
        (d.bind_name(batch.namespace), d.bind_name(batch.idempotency_key)),
        fetch=True,
    )
    if not rows:
        return None
    digest, result = d.load_name(rows[0][0]), rows[0][1]
    if digest != batch.digest:
        raise IdempotencyKeyReused(batch.namespace, batch.idempotency_key)
    return AppendResult.from_dict(decode(result), duplicate=True)


def read_plan(d: Dialect, namespace: str, stream: str, start: int, limit: int | None) -> Plan:
    """Read a stream from ``start``, checking its records against its head.

    One statement reads the head with the records, so both come from one snapshot: a
    gap, a record missing at the end, or a record beyond the head is damage, raised as
    [`CorruptionError`][steadyloop.CorruptionError] naming the row, never read past in silence.
    """
    sql = (
        "SELECT s.head, r.seq, r.data FROM {p}streams s LEFT JOIN {p}records r "
        "ON r.namespace = s.namespace AND r.stream = s.stream AND r.seq >= ? "
        "WHERE s.namespace = ? AND s.stream = ? ORDER BY r.seq"
    )
    params: tuple[Any, ...] = (start, d.bind_name(namespace), d.bind_name(stream))
    if limit is not None:
        sql += " LIMIT ?"
        params += (limit,)
    rows = yield Query(d.sql(sql), params, fetch=True)
    if not rows:
        return []  # no head row: the stream is empty
    head = int(rows[0][0])
    out: list[StoredRecord] = []
    expected = start
    for _, seq_value, data in rows:
        if seq_value is None:
            break  # the head row matched no record
        seq = int(seq_value)
        where = d.location("records", namespace=namespace, stream=stream, seq=seq)
        if seq != expected:
            raise CorruptionError(
                f"sequence gap: expected {expected}, found {seq} (the stream's head is {head})",
                location=d.location("records", namespace=namespace, stream=stream, seq=expected),
            )
        if seq > head:
            message = f"record {seq} lies beyond the stream's head {head}"
            raise CorruptionError(message, location=where)
        out.append(StoredRecord(stream=stream, seq=seq, record=decode_row(data, where)))
        expected += 1
    last = head if limit is None else min(head, start + limit - 1)
    if expected <= last:
        raise CorruptionError(
            f"records missing: the stream's head is {head}, but its records end at {expected - 1}",
            location=d.location("records", namespace=namespace, stream=stream, seq=expected),
        )
    return out


def overrun_plan(d: Dialect, namespace: str, streams: Sequence[str]) -> Plan:
    """Find a stream holding records beyond its head (damage that blocks every append).

    Returns:
        A [`CorruptionError`][steadyloop.CorruptionError] naming the first such record, or ``None``.
    """
    for stream in sorted(set(streams)):
        rows = yield Query(
            d.sql(
                "SELECT COALESCE(MAX(s.head), 0), MAX(r.seq) FROM {p}records r "
                "LEFT JOIN {p}streams s ON s.namespace = r.namespace AND s.stream = r.stream "
                "WHERE r.namespace = ? AND r.stream = ?"
            ),
            (d.bind_name(namespace), d.bind_name(stream)),
            fetch=True,
        )
        head, top = (int(rows[0][0]), rows[0][1]) if rows else (0, None)
        if top is not None and int(top) > head:
            return CorruptionError(
                f"stream {stream!r} holds record {int(top)} beyond its head {head}; the next "
                "append cannot take its sequence number",
                location=d.location("records", namespace=namespace, stream=stream, seq=head + 1),
            )
    return None


def decode_row(data: Any, where: str) -> Record:
    """Decode a stored record, turning any damage into a located CorruptionError.

    A snapshot record whose payload no longer parses is read as a stand-in that every
    reader refuses as a snapshot (`steadyloop._seal.damaged_snapshot`): the records
    before it hold all it held, so a reader folds them instead of stopping.
    """
    if isinstance(data, bytes | bytearray | memoryview):
        data = bytes(data).decode("utf-8", errors="strict")
    try:
        return Record.from_json(data)
    except (ValueError, TypeError) as exc:
        stand_in = damaged_snapshot(data, str(exc)) if isinstance(data, str) else None
        if stand_in is not None:
            return stand_in
        raise CorruptionError(f"stored record does not decode: {exc}", location=where) from None


def head_plan(d: Dialect, namespace: str, stream: str) -> Plan:
    """Return the last sequence number of a stream."""
    rows = yield Query(
        d.sql("SELECT head FROM {p}streams WHERE namespace = ? AND stream = ?"),
        (d.bind_name(namespace), d.bind_name(stream)),
        fetch=True,
    )
    return int(rows[0][0]) if rows else 0


def streams_plan(d: Dialect, namespace: str) -> Plan:
    """List the non-empty streams of a namespace."""
    rows = yield Query(
        d.sql("SELECT stream FROM {p}streams WHERE namespace = ? AND head > 0"),
        (d.bind_name(namespace),),
        fetch=True,
    )
    return [d.load_name(r[0]) for r in rows]


def namespaces_plan(d: Dialect) -> Plan:
    """List namespaces holding a non-empty stream."""
    rows = yield Query(
        d.sql("SELECT DISTINCT namespace FROM {p}streams WHERE head > 0"), fetch=True
    )
    return [d.load_name(r[0]) for r in rows]


def delete_stream_plan(d: Dialect, namespace: str, stream: str) -> Plan:
    """Delete a stream's records and head."""
    params = (d.bind_name(namespace), d.bind_name(stream))
    # Lock the head first, so an append in flight on this stream finishes (or waits)
    # before the records go; otherwise its records could outlive the head row.
    yield Query(
        d.sql("SELECT head FROM {p}streams WHERE namespace = ? AND stream = ?") + d.lock_suffix,
        params,
        fetch=True,
    )
    yield Query(d.sql("DELETE FROM {p}records WHERE namespace = ? AND stream = ?"), params)
    yield Query(d.sql("DELETE FROM {p}streams WHERE namespace = ? AND stream = ?"), params)
    return None


def delete_namespace_plan(d: Dialect, namespace: str) -> Plan:
    """Delete everything of a namespace, keys included."""
    params = (d.bind_name(namespace),)
    yield Query(
        d.sql("SELECT stream FROM {p}streams WHERE namespace = ? ORDER BY stream") + d.lock_suffix,
        params,
        fetch=True,
    )
    for table in ("records", "streams", "keys"):
        yield Query(d.sql(f"DELETE FROM {{p}}{table} WHERE namespace = ?"), params)
    return None


def keys_plan(d: Dialect, namespace: str) -> Plan:
    """List a namespace's idempotency keys with their digests and first results."""
    rows = yield Query(
        d.sql("SELECT idem_key, digest, result FROM {p}keys WHERE namespace = ?"),
        (d.bind_name(namespace),),
        fetch=True,
    )
    out: list[StoredKey] = []
    for key_value, digest, raw in rows:
        key = d.load_name(key_value)
        text = d.load_name(raw)
        try:
            stored = AppendResult.from_dict(decode(text), duplicate=True)
        except (ValueError, TypeError, KeyError, AssertionError) as exc:
            raise CorruptionError(
                f"idempotency entry does not decode: {exc}",
                location=d.location("keys", namespace=namespace, idem_key=key),
            ) from None
        out.append(StoredKey(key, d.load_name(digest), dict(stored.positions)))
    return out


def restore_key_plan(d: Dialect, namespace: str, key: StoredKey) -> Plan:
    """Insert an idempotency key unless one of that name is there."""
    result = AppendResult(namespace=namespace, positions=dict(key.positions or {}))
    yield Query(
        d.insert_ignore(
            "keys", ("namespace", "idem_key", "digest", "result"), ("namespace", "idem_key")
        ),
        (
            d.bind_name(namespace),
            d.bind_name(key.key),
            key.digest,
            canonical_json(result.to_dict()),
        ),
    )
    return None


def run_sync(plan: Plan, execute: Callable[[Query], list[Row]]) -> Any:
    """Drive a plan with a synchronous ``execute`` and return the plan's result."""
    try:
        query = next(plan)
        while True:
            query = plan.send(execute(query))
    except StopIteration as stop:
        return stop.value


class PlanJournal(Journal):
    """A journal whose every operation is one of the shared plans above.

    A SQL backend sets ``_dialect`` and implements `_run_plan`, which runs one
    plan in one transaction on its driver (retrying, if the driver needs to, by
    calling ``make_plan`` again for a fresh generator). Everything else is here once.
    """

    _dialect: Dialect

    @abstractmethod
    async def _run_plan(
        self, make_plan: Callable[[], Plan], *, write: bool, pipelined: bool = True
    ) -> Any:
        """Run the plan ``make_plan()`` returns in one transaction; return its result.

        ``pipelined``: a hint that the plan sends statements whose rows it does not need,
        which a server backend may send without waiting for each reply.
        """

    @property
    def dialect(self) -> Dialect:
        """The SQL dialect (table prefix, placeholders, quirks) of this journal's database."""
        return self._dialect

    async def run_plan(
        self, make_plan: Callable[[], Plan], *, write: bool = True, pipelined: bool = False
    ) -> Any:
        """Run another layer's plan on this journal's connection, in one transaction.

        The audit queue keeps its tables next to the journal's and runs its plans here,
        on the same SQLite thread or server pool, with the same retry of refused
        transactions. ``pipelined`` says the plan sends many statements whose rows it
        does not need (as an append does); plans that read back most of what they send
        run faster without it on PostgreSQL.

        Raises:
            JournalClosed: The journal is closed.
            BackendUnavailable: The database failed; `transient` says whether
                trying again later may succeed.
        """
        self._check_open()
        return await self._run_plan(make_plan, write=write, pipelined=pipelined)

    def transient(self, exc: BaseException) -> bool:
        """Whether an error from `run_plan` is a lost connection or a busy store.

        Such a failure may go away by itself; the transaction may or may not have been
        committed, so only a plan that recognises its own earlier work may be rerun.
        """
        return False

    def _duplicate_row(self, exc: BaseException | None) -> bool:
        """Whether a driver error is a unique-key violation (each backend knows its own)."""
        return False

    async def _run_append(self, make_plan: Callable[[], Plan], batch: PreparedBatch) -> Any:
        """Run ``batch``'s append plan (a backend that commits appends in groups overrides this).

        However appends are grouped, each caller gets its own plan's result or error,
        and only once its batch is committed.
        """
        return await self._run_plan(make_plan, write=True)

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        try:
            result: AppendResult = await self._run_append(
                lambda: append_plan(self._dialect, batch), batch
            )
        except BackendUnavailable as exc:
            # With the heads locked, a key clash that outlasts the retries is either a
            # race still going on or a record stored beyond its head; tell them apart.
            if not self._duplicate_row(exc.__cause__):
                raise
            streams = [w.stream for w in batch.writes]
            damage = await self._run_plan(
                lambda: overrun_plan(self._dialect, batch.namespace, streams), write=False
            )
            if damage is None:
                raise
            raise damage from exc
        return result

    async def _read(
        self, namespace: str, stream: str, start: int, limit: int | None
    ) -> list[StoredRecord]:
        rows: list[StoredRecord] = await self._run_plan(
            lambda: read_plan(self._dialect, namespace, stream, start, limit), write=False
        )
        return rows

    async def _head(self, namespace: str, stream: str) -> int:
        head: int = await self._run_plan(
            lambda: head_plan(self._dialect, namespace, stream), write=False
        )
        return head

    async def _streams(self, namespace: str) -> list[str]:
        names: list[str] = await self._run_plan(
            lambda: streams_plan(self._dialect, namespace), write=False
        )
        return names

    async def _namespaces(self) -> list[str]:
        names: list[str] = await self._run_plan(lambda: namespaces_plan(self._dialect), write=False)
        return names

    async def _delete_stream(self, namespace: str, stream: str) -> None:
        await self._run_plan(
            lambda: delete_stream_plan(self._dialect, namespace, stream), write=True
        )

    async def _delete_namespace(self, namespace: str) -> None:
        await self._run_plan(lambda: delete_namespace_plan(self._dialect, namespace), write=True)

    async def _idempotency_keys(self, namespace: str) -> list[StoredKey]:
        keys: list[StoredKey] = await self._run_plan(
            lambda: keys_plan(self._dialect, namespace), write=False
        )
        return keys

    async def _restore_key(self, namespace: str, key: StoredKey) -> None:
        await self._run_plan(lambda: restore_key_plan(self._dialect, namespace, key), write=True)
