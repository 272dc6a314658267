from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sigkill_helpers import check_each_order_charged_once, kill_until

from backends import require_server, server_store

CHILD = Path(__file__).with_name("oa_sigkill_child.py")


@pytest.mark.slow
def test_sigkills_on_sqlite_never_charge_twice(tmp_path: Path) -> None:
    """Fifty real SIGKILLs of a guarded agent on SQLiteSession charge every order exactly once."""
    sink = tmp_path / "effects.log"

    def command(order: str, n: int) -> dict[str, object]:
        return {
            "store": f"sqlite:{tmp_path / 'conversations.db'}",
            "table": "unused",
            "guard": f"sqlite:///{tmp_path / 'guard.db'}",
            "sink": str(sink),
            "thread": order,
            "pause": 0.01,
        }

    kills, counts, orders = kill_until(CHILD, command, sink, target=50, seed=24, max_delay=0.15)
    print(f"{kills} kills over {orders} orders; effects: {sum(counts.values())}")
    assert kills >= 50
    check_each_order_charged_once(counts, orders)


@pytest.mark.slow
@pytest.mark.server
async def test_sigkills_on_postgres_never_charge_twice(tmp_path: Path) -> None:
    """Twenty real SIGKILLs of an agent on the SQLAlchemy session, guarded in PostgreSQL, charge every order once."""
    import psycopg
    from psycopg import sql

    base = await require_server("postgres")
    table = f"oa_{uuid.uuid4().hex[:10]}"
    store = base.replace("postgresql://", "postgresql+psycopg://", 1)
    sink = tmp_path / "effects.log"
    try:
        async with server_store("postgres") as (guard_url, _):

            def command(order: str, n: int) -> dict[str, object]:
                return {
                    "store": store,
                    "table": table,
                    "guard": guard_url,
                    "sink": str(sink),
                    "thread": order,
                    "pause": 0.01,
                }

            kills, counts, orders = kill_until(
                CHILD, command, sink, target=20, seed=25, max_delay=0.35
            )
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            for suffix in ("messages", "sessions"):
                conn.execute(
                    sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(f"{table}_{suffix}"))
                )
    print(f"{kills} kills over {orders} orders; effects: {sum(counts.values())}")
    assert kills >= 20
    check_each_order_charged_once(counts, orders)
