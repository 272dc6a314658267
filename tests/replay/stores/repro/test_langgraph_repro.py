"""Minimal reproductions of LangGraph checkpointer and store divergences.

At langgraph 1.2.24, langgraph-checkpoint 4.3.2, langgraph-checkpoint-sqlite 3.1.2 and
langgraph-checkpoint-postgres 3.2.0. Plain LangGraph code, no Steadyloop. Each test
asserts what the framework really does at the pinned versions; the docstring says what
a careful user would expect instead, and whether the divergence loses or leaks data.
When one starts failing, LangGraph changed: update the divergence list in the replay
docs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from framework_dbs import postgres_schema

HUGE, NEG_ZERO = 1e300, -0.0


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema of this test's own."""
    from backends import with_options

    async with postgres_schema() as (url, schema):
        yield with_options(url, options=f"-csearch_path={schema}")


@contextmanager
def pg_conn(url: str) -> Iterator[Any]:
    import psycopg
    from psycopg.rows import dict_row

    conn = psycopg.Connection.connect(
        url, autocommit=True, prepare_threshold=0, row_factory=dict_row, connect_timeout=30
    )
    try:
        yield conn
    finally:
        conn.close()


def _checkpoint(saver: Any, values: dict[str, Any]) -> tuple[Any, Any, Any]:
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint = empty_checkpoint()
    versions = {k: saver.get_next_version(None, None) for k in values}
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = versions
    config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    return config, checkpoint, versions


def _round_trip(make: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Put one checkpoint with `values` on a saver, read it back on a new one."""
    saver = make()
    config, checkpoint, versions = _checkpoint(saver, values)
    saver.put(config, checkpoint, {"source": "input", "step": -1}, versions)
    got = make().get_tuple({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}})
    assert got is not None
    return dict(got.checkpoint["channel_values"])


def test_sqlite_and_memory_savers_keep_floats_and_nul(tmp_path: Path) -> None:
    """Baseline: InMemorySaver and SqliteSaver read back 1e300, -0.0 and a NUL string unchanged."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    memory = InMemorySaver()
    conn = sqlite3.connect(tmp_path / "cp.db", check_same_thread=False)

    def sqlite_saver() -> Any:
        saver = SqliteSaver(conn)
        saver.setup()
        return saver

    values = {"huge": HUGE, "neg_zero": NEG_ZERO, "nul": "a\x00b"}
    for make in (lambda: memory, sqlite_saver):
        got = _round_trip(make, values)
        assert type(got["huge"]) is float and got["huge"] == HUGE
        assert str(got["neg_zero"]) == "-0.0"
        assert got["nul"] == "a\x00b"
    conn.close()


@pytest.mark.server
def test_postgres_saver_turns_a_float_channel_into_an_integer_and_drops_the_sign_of_zero(
    pg_url: str,
) -> None:
    """PostgresSaver keeps a primitive channel value inline in JSONB: 1e300 reads back as an int and -0.0 as 0.0 (LOSES: the type and sign a graph wrote); one expects the float it put."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with pg_conn(pg_url) as conn:

        def make() -> Any:
            saver = PostgresSaver(conn)
            saver.setup()
            return saver

        got = _round_trip(make, {"huge": HUGE, "neg_zero": NEG_ZERO, "in_list": [NEG_ZERO]})
    assert type(got["huge"]) is int and got["huge"] == 10**300
    assert str(got["neg_zero"]) == "0.0"
    # A non-primitive value goes to a msgpack blob, which keeps the sign.
    assert str(got["in_list"][0]) == "-0.0"


@pytest.mark.server
def test_postgres_saver_refuses_a_string_channel_holding_nul(pg_url: str) -> None:
    """PostgresSaver cannot checkpoint a state whose string channel holds NUL (JSONB refuses U+0000), while InMemorySaver and SqliteSaver keep it (REFUSES: the put raises, nothing is lost silently, but the graph step fails in production only)."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    with pg_conn(pg_url) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        config, checkpoint, versions = _checkpoint(saver, {"nul": "a\x00b"})
        with pytest.raises(psycopg.errors.UntranslatableCharacter):
            saver.put(config, checkpoint, {"source": "input", "step": -1}, versions)
        assert saver.get_tuple(config) is None


def _store_round_trip(store: Any, value: dict[str, Any]) -> dict[str, Any]:
    store.put(("ns",), "k", value)
    item = store.get(("ns",), "k")
    assert item is not None
    return dict(item.value)


@pytest.mark.server
def test_postgres_store_changes_float_values(pg_url: str, tmp_path: Path) -> None:
    """PostgresStore keeps item values as JSONB: 1e300 reads back as an int and -0.0 as 0.0 (LOSES: the type and sign), where InMemoryStore and SqliteStore give back the floats."""
    from langgraph.store.memory import InMemoryStore
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.sqlite import SqliteStore

    value = {"huge": HUGE, "neg_zero": NEG_ZERO}
    sqlite_store = SqliteStore(sqlite3.connect(tmp_path / "s.db", isolation_level=None))
    sqlite_store.setup()
    for store in (InMemoryStore(), sqlite_store):
        got = _store_round_trip(store, value)
        assert type(got["huge"]) is float and str(got["neg_zero"]) == "-0.0"
    with pg_conn(pg_url) as conn:
        store = PostgresStore(conn)
        store.setup()
        got = _store_round_trip(store, value)
    assert type(got["huge"]) is int and str(got["neg_zero"]) == "0.0"


@pytest.mark.server
def test_postgres_store_refuses_a_value_holding_nul(pg_url: str) -> None:
    """PostgresStore refuses any value with NUL in a string, which InMemoryStore and SqliteStore keep (REFUSES: the put raises; nothing is lost silently)."""
    import psycopg
    from langgraph.store.postgres import PostgresStore

    with pg_conn(pg_url) as conn:
        store = PostgresStore(conn)
        store.setup()
        with pytest.raises(psycopg.errors.UntranslatableCharacter):
            store.put(("ns",), "k", {"text": "before\x00after"})
        assert store.get(("ns",), "k") is None


@pytest.mark.server
def test_postgres_store_search_pages_differ_from_the_in_memory_store(
    pg_url: str, tmp_path: Path
) -> None:
    """Without a query, InMemoryStore and SqliteStore (within one second) search in the order items were put, PostgresStore newest first: the same `limit` gives other items (neither loses nor leaks: a different page, so code tested in memory reads other items in production)."""
    from langgraph.store.memory import InMemoryStore
    from langgraph.store.postgres import PostgresStore
    from langgraph.store.sqlite import SqliteStore

    def first_two(store: Any) -> list[str]:
        for key in ("a", "b", "c"):
            store.put(("ns",), key, {"v": key})
        return [item.key for item in store.search(("ns",), limit=2)]

    sqlite_store = SqliteStore(sqlite3.connect(tmp_path / "s.db", isolation_level=None))
    sqlite_store.setup()
    assert first_two(InMemoryStore()) == ["a", "b"]
    assert first_two(sqlite_store) == ["a", "b"]
    with pg_conn(pg_url) as conn:
        store = PostgresStore(conn)
        store.setup()
        assert first_two(store) == ["c", "b"]


def test_sqlite_store_search_pages_by_the_second_items_were_put(tmp_path: Path) -> None:
    """Without a query, SqliteStore searches newest first by `updated_at`, which it keeps to the second (`CURRENT_TIMESTAMP`), and in put order within one second; InMemoryStore keeps put order: items put in a later second come first, so the same `limit` gives other items depending on when the clock turned (neither loses nor leaks: a different page)."""
    import time

    from langgraph.store.memory import InMemoryStore
    from langgraph.store.sqlite import SqliteStore

    def first_two(store: Any) -> list[str]:
        time.sleep(1.0 - time.time() % 1.0 + 0.01)  # just after a second starts
        store.put(("ns",), "a", {"v": "a"})
        store.put(("ns",), "b", {"v": "b"})
        time.sleep(1.0 - time.time() % 1.0 + 0.01)  # the next second
        store.put(("ns",), "c", {"v": "c"})
        return [item.key for item in store.search(("ns",), limit=2)]

    sqlite_store = SqliteStore(sqlite3.connect(tmp_path / "s.db", isolation_level=None))
    sqlite_store.setup()
    assert first_two(InMemoryStore()) == ["a", "b"]
    assert first_two(sqlite_store) == ["c", "a"]


def test_in_memory_store_keeps_the_callers_dict(tmp_path: Path) -> None:
    """InMemoryStore stores the very dict it was given: changing it after `put` changes the stored item, which SqliteStore does not (LEAKS into the reference: a write that was never put is read back in tests and lost in production)."""
    from langgraph.store.memory import InMemoryStore
    from langgraph.store.sqlite import SqliteStore

    sqlite_store = SqliteStore(sqlite3.connect(tmp_path / "s.db", isolation_level=None))
    sqlite_store.setup()
    seen = {}
    for name, store in (("memory", InMemoryStore()), ("sqlite", sqlite_store)):
        value = {"events": [{"text": "original"}]}
        store.put(("ns",), "k", value)
        value["events"][0]["text"] = "edited after put"
        item = store.get(("ns",), "k")
        assert item is not None
        seen[name] = item.value["events"][0]["text"]
    assert seen == {"memory": "edited after put", "sqlite": "original"}


# -- found by the checkpointer pack (the saver_* ops) -----------------------------------


def _put(saver: Any, thread: str, ns: str, cid: str, metadata: dict[str, Any]) -> None:
    """One checkpoint with the given id and metadata, as a graph's step puts it."""
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint = empty_checkpoint()
    checkpoint["id"] = cid
    versions = {"x": saver.get_next_version(None, None)}
    checkpoint["channel_values"] = {"x": cid}
    checkpoint["channel_versions"] = versions
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    saver.put(config, checkpoint, metadata, versions)


def _ids(saver: Any, config: Any = None, **kwargs: Any) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list(config, **kwargs)]


@contextmanager
def _sqlite_saver(tmp_path: Path) -> Iterator[Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(tmp_path / "cp.db", check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        yield saver
    finally:
        conn.close()


@contextmanager
def _pg_saver(url: str) -> Iterator[Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    with pg_conn(url) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        yield saver


NAMESPACED = [("", "c1"), ("parent:1", "c2"), ("", "c3"), ("parent:1", "c4")]


def _namespaced(saver: Any) -> list[str]:
    for ns, cid in NAMESPACED:
        _put(saver, "t1", ns, cid, {"step": int(cid[1])})
    return _ids(saver, {"configurable": {"thread_id": "t1"}}, limit=2)


def test_listing_every_namespace_sqlite_orders_by_id_memory_by_namespace(tmp_path: Path) -> None:
    """`list` of a thread without `checkpoint_ns`: InMemorySaver gives namespace by namespace (each newest first), SqliteSaver newest first across namespaces, so the same `limit` returns other checkpoints (neither loses nor leaks: a different page)."""
    from langgraph.checkpoint.memory import InMemorySaver

    assert _namespaced(InMemorySaver()) == ["c3", "c1"]
    with _sqlite_saver(tmp_path) as saver:
        assert _namespaced(saver) == ["c4", "c3"]


@pytest.mark.server
def test_listing_every_namespace_postgres_orders_by_id(pg_url: str) -> None:
    """PostgresSaver orders like SqliteSaver (newest first across namespaces), unlike InMemorySaver (see above)."""
    with _pg_saver(pg_url) as saver:
        assert _namespaced(saver) == ["c4", "c3"]


NESTED = {"nested": {"v": "é"}}


def test_sqlite_saver_filter_on_a_nested_non_ascii_value_never_matches(tmp_path: Path) -> None:
    """SqliteSaver stores metadata with `ensure_ascii=False` but writes a filter's object ASCII-escaped (`json.dumps` default): a filter on a nested value holding a non-ASCII character matches nothing, where InMemorySaver finds the checkpoint (LOSES: the checkpoint is missing from the listing)."""
    from langgraph.checkpoint.memory import InMemorySaver

    memory = InMemorySaver()
    _put(memory, "t1", "", "c1", dict(NESTED))
    assert _ids(memory, None, filter=NESTED) == ["c1"]
    with _sqlite_saver(tmp_path) as saver:
        _put(saver, "t1", "", "c1", dict(NESTED))
        assert _ids(saver, None, filter={"nested": {"v": "e"}}) == []
        assert _ids(saver, None, filter=NESTED) == []
        _put(saver, "t2", "", "c2", {"nested": {"v": "e"}})
        assert _ids(saver, None, filter={"nested": {"v": "e"}}) == ["c2"]  # ASCII matches


FILTERED = [
    ("c0", {"flag": True, "tags": ["red", "blue"], "obj": {"k": 1, "extra": 2}, "none": None}),
    ("c1", {"flag": 1, "tags": ["red"], "obj": {"k": 1}}),
]
QUERIES = {
    "flag_true": {"flag": True},
    "flag_one": {"flag": 1},
    "tags_red": {"tags": ["red"]},
    "obj_k": {"obj": {"k": 1}},
    "none": {"none": None},
}


def _filtered(saver: Any) -> dict[str, list[str]]:
    for cid, metadata in FILTERED:
        _put(saver, "t1", "", cid, metadata)
    return {name: sorted(_ids(saver, None, filter=q)) for name, q in QUERIES.items()}


def test_memory_and_sqlite_filters_compare_by_equality_true_equal_to_one(tmp_path: Path) -> None:
    """InMemorySaver and SqliteSaver match a filter by equality, where `true` equals `1` and `null` matches a missing key (LEAKS: a checkpoint whose flag is 1 is listed for flag true)."""
    from langgraph.checkpoint.memory import InMemorySaver

    want = {
        "flag_true": ["c0", "c1"],
        "flag_one": ["c0", "c1"],
        "tags_red": ["c1"],
        "obj_k": ["c1"],
        "none": ["c0", "c1"],
    }
    assert _filtered(InMemorySaver()) == want
    with _sqlite_saver(tmp_path) as saver:
        assert _filtered(saver) == want


@pytest.mark.server
def test_postgres_saver_filters_by_jsonb_containment(pg_url: str) -> None:
    """PostgresSaver filters with JSONB containment (`@>`): a list or object filter also matches a value that holds more (LEAKS: c0 is listed for tags ['red'] and obj {'k': 1}), `true` is not `1`, and `null` only matches a key that is there (LOSES c1, which InMemorySaver lists)."""
    with _pg_saver(pg_url) as saver:
        assert _filtered(saver) == {
            "flag_true": ["c0"],
            "flag_one": ["c1"],
            "tags_red": ["c0", "c1"],
            "obj_k": ["c0", "c1"],
            "none": ["c0"],
        }


@pytest.mark.server
def test_postgres_saver_list_with_a_nul_in_the_filter_raises(pg_url: str) -> None:
    """A NUL in a filter value makes PostgresSaver's `list` raise `UntranslatableCharacter`; InMemorySaver and SqliteSaver just match nothing (REFUSES: an error where the reference lists)."""
    import psycopg

    with _pg_saver(pg_url) as saver:
        _put(saver, "t1", "", "c1", {"kind": "a"})
        with pytest.raises(psycopg.errors.UntranslatableCharacter):
            _ids(saver, None, filter={"kind": "a\x00b"})


def test_every_saver_drops_a_nul_from_a_top_level_metadata_string(tmp_path: Path) -> None:
    """LangGraph's `get_checkpoint_metadata` removes U+0000 from top-level metadata strings on every saver, while a nested string keeps it (LOSES: the metadata read back is not what was put)."""
    from langgraph.checkpoint.memory import InMemorySaver

    metadata = {"top": "a\x00b", "nested": {"s": "a\x00b"}}
    memory = InMemorySaver()
    with _sqlite_saver(tmp_path) as sqlite_saver:
        for saver in (memory, sqlite_saver):
            _put(saver, "t1", "", "c1", dict(metadata))
            got = saver.get_tuple({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}})
            assert got.metadata["top"] == "ab"
            assert got.metadata["nested"] == {"s": "a\x00b"}


@pytest.mark.server
def test_postgres_saver_refuses_a_nul_nested_in_metadata(pg_url: str) -> None:
    """A NUL in a nested metadata string (which LangGraph does not strip) makes PostgresSaver's `put` raise, where InMemorySaver and SqliteSaver keep it (REFUSES: the step fails in production only)."""
    import psycopg

    with _pg_saver(pg_url) as saver:
        with pytest.raises(psycopg.errors.UntranslatableCharacter):
            _put(saver, "t1", "", "c1", {"nested": {"s": "a\x00b"}})


@pytest.mark.server
def test_postgres_saver_changes_floats_in_metadata(pg_url: str) -> None:
    """PostgresSaver keeps metadata as JSONB: 1e300 reads back as an int and -0.0 as 0.0 (LOSES: the type and sign), where InMemorySaver gives back the floats."""
    from langgraph.checkpoint.memory import InMemorySaver

    metadata = {"huge": HUGE, "neg_zero": NEG_ZERO}
    config = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    memory = InMemorySaver()
    _put(memory, "t1", "", "c1", dict(metadata))
    got = memory.get_tuple(config).metadata
    assert type(got["huge"]) is float and str(got["neg_zero"]) == "-0.0"
    with _pg_saver(pg_url) as saver:
        _put(saver, "t1", "", "c1", dict(metadata))
        got = saver.get_tuple(config).metadata
    assert type(got["huge"]) is int and str(got["neg_zero"]) == "0.0"


def test_in_memory_saver_refuses_deep_metadata_the_sqlite_saver_keeps(tmp_path: Path) -> None:
    """Metadata nested 300 levels: InMemorySaver's `put` raises (msgpack's recursion limit) while SqliteSaver keeps it as JSON (the reference REFUSES what production keeps: a case passing on SQLite cannot be tested in memory)."""
    from langgraph.checkpoint.memory import InMemorySaver

    deep: dict[str, Any] = {"leaf": True}
    for _ in range(300):
        deep = {"d": deep}
    with pytest.raises(TypeError, match="Recursion limit"):
        _put(InMemorySaver(), "t1", "", "c1", {"deep": deep})
    with _sqlite_saver(tmp_path) as saver:
        _put(saver, "t1", "", "c1", {"deep": deep})
        got = saver.get_tuple({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}})
        assert got.metadata["deep"] == deep


# -- TTL of the LangGraph stores (probed; InMemoryStore has none) -----------------------
#
# Expiry runs on the database's clock (`CURRENT_TIMESTAMP`, `NOW()`; SqliteStore's `put`
# also reads Python's clock), so no fixed clock reaches it. These probes age an item
# instead: they move its `expires_at` into the past with SQL, as time would.


def test_in_memory_store_refuses_a_ttl() -> None:
    """InMemoryStore has no TTL: a `put` with `ttl` raises NotImplementedError, so a TTL case has no reference store and needs an expectation."""
    from langgraph.store.memory import InMemoryStore

    store = InMemoryStore()
    assert store.supports_ttl is False
    with pytest.raises(NotImplementedError, match="TTL is not supported"):
        store.put(("ns",), "k", {"v": 1}, ttl=1.0)


def _expired_until_swept(store: Any, age: Any) -> tuple[Any, Any, int, Any]:
    store.put(("ns",), "k", {"v": 1}, ttl=1.0)
    store.put(("ns",), "kept", {"v": 2}, ttl=None)
    age()
    before = store.get(("ns",), "k", refresh_ttl=False)
    found = [i.key for i in store.search(("ns",), refresh_ttl=False)]
    swept = store.sweep_ttl()
    return before, found, swept, store.get(("ns",), "k", refresh_ttl=False)


def test_sqlite_store_reads_back_an_expired_item_until_swept(tmp_path: Path) -> None:
    """SqliteStore's `get` and `search` return an item past its TTL until `sweep_ttl` runs (LEAKS: an expired item is read back), then it is gone; an item put with `ttl=None` stays."""
    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(tmp_path / "s.db", isolation_level=None, check_same_thread=False)
    store = SqliteStore(conn, ttl={"default_ttl": 1.0})
    store.setup()

    def age() -> None:
        conn.execute("UPDATE store SET expires_at = '2000-01-01 00:00:00' WHERE key = 'k'")

    before, found, swept, after = _expired_until_swept(store, age)
    assert before is not None and before.value == {"v": 1}
    assert sorted(found) == ["k", "kept"]
    assert (swept, after) == (1, None)
    assert store.get(("ns",), "kept") is not None
    conn.close()


@pytest.mark.server
def test_postgres_store_reads_back_an_expired_item_until_swept(pg_url: str) -> None:
    """PostgresStore, like SqliteStore, returns an item past its TTL until `sweep_ttl` runs (LEAKS: an expired item is read back)."""
    from langgraph.store.postgres import PostgresStore

    with pg_conn(pg_url) as conn:
        store = PostgresStore(conn, ttl={"default_ttl": 1.0})
        store.setup()

        def age() -> None:
            conn.execute("UPDATE store SET expires_at = now() - interval '1 hour' WHERE key = 'k'")

        before, found, swept, after = _expired_until_swept(store, age)
    assert before is not None and before.value == {"v": 1}
    assert sorted(found) == ["k", "kept"]
    assert (swept, after) == (1, None)


def _left_after_refresh(store: Any, left: Any) -> float:
    store.put(("ns",), "k", {"v": 1}, ttl=1.5)
    store.get(("ns",), "k", refresh_ttl=True)
    return float(left())


def test_sqlite_store_refreshes_a_ttl_to_its_minutes(tmp_path: Path) -> None:
    """SqliteStore keeps a TTL's minutes as REAL: a read with `refresh_on_read` sets 1.5 minutes again (90 s, to the second)."""
    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(tmp_path / "s.db", isolation_level=None, check_same_thread=False)
    store = SqliteStore(conn, ttl={"refresh_on_read": True})
    store.setup()
    query = "SELECT (julianday(expires_at) - julianday(CURRENT_TIMESTAMP)) * 86400 FROM store"
    left = _left_after_refresh(store, lambda: conn.execute(query).fetchone()[0])
    assert 88 <= left <= 91
    conn.close()


@pytest.mark.server
def test_postgres_store_rounds_a_ttl_to_whole_minutes_on_refresh(pg_url: str) -> None:
    """PostgresStore keeps a TTL's minutes in an INTEGER column: a read with `refresh_on_read` turns 1.5 minutes into 2 (LEAKS: kept 30 s longer) and 0.4 into 0 (LOSES: expired at once), where SqliteStore refreshes to 1.5."""
    from langgraph.store.postgres import PostgresStore

    with pg_conn(pg_url) as conn:
        store = PostgresStore(conn, ttl={"refresh_on_read": True})
        store.setup()
        query = "SELECT extract(epoch FROM expires_at - now()) AS s FROM store WHERE key = 'k'"
        left = _left_after_refresh(store, lambda: conn.execute(query).fetchone()["s"])
        assert 118 <= left <= 121
        store.put(("ns",), "short", {"v": 1}, ttl=0.4)
        store.get(("ns",), "short", refresh_ttl=True)
        row = conn.execute(
            "SELECT ttl_minutes, expires_at <= now() AS gone FROM store WHERE key = 'short'"
        ).fetchone()
        assert row["ttl_minutes"] == 0 and row["gone"] is True
        assert store.sweep_ttl() == 1
