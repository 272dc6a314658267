from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sigkill_helpers import check_each_order_charged_once, kill_until

from backends import CONNECT_TIMEOUT, require_server, server_store, with_options

CHILD = Path(__file__).with_name("lg_sigkill_child.py")


@pytest.mark.slow
def test_sigkills_on_sqlite_never_charge_twice(tmp_path: Path) -> None:
    """Fifty real SIGKILLs of a guarded graph on SQLite charge every order exactly once."""
    sink = tmp_path / "effects.log"

    def command(order: str, n: int) -> dict[str, object]:
        return {
            "store": f"sqlite:{tmp_path / 'checkpoints.db'}",
            "guard": f"sqlite:///{tmp_path / 'guard.db'}",
            "sink": str(sink),
            "thread": order,
            "durability": "async" if n % 2 else "sync",
            "pause": 0.01,
        }

    kills, counts, orders = kill_until(CHILD, command, sink, target=50, seed=14, max_delay=0.15)
    print(f"{kills} kills over {orders} orders; effects: {sum(counts.values())}")
    assert kills >= 50
    check_each_order_charged_once(counts, orders)


@pytest.mark.slow
@pytest.mark.chaos
@pytest.mark.server
async def test_sigkills_on_postgres_never_charge_twice(tmp_path: Path) -> None:
    """Twenty real SIGKILLs of a graph on PostgresSaver, guarded in PostgreSQL, charge every order once."""
    import psycopg
    from psycopg import sql

    base = await require_server("postgres")
    schema = f"lg_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    store = with_options(base, options=f"-csearch_path={schema}")
    sink = tmp_path / "effects.log"
    try:
        async with server_store("postgres") as (guard_url, _):

            def command(order: str, n: int) -> dict[str, object]:
                return {
                    "store": store,
                    "guard": guard_url,
                    "sink": str(sink),
                    "thread": order,
                    "durability": "async" if n % 2 else "sync",
                    "pause": 0.01,
                }

            kills, counts, orders = kill_until(
                CHILD, command, sink, target=20, seed=15, max_delay=0.35
            )
    finally:
        with psycopg.connect(base, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    print(f"{kills} kills over {orders} orders; effects: {sum(counts.values())}")
    assert kills >= 20
    check_each_order_charged_once(counts, orders)
