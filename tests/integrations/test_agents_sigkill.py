from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from sigkill_helpers import check_each_order_charged_once, kill_until

from backends import CONNECT_TIMEOUT, require_server, server_store

CHILD = Path(__file__).with_name("oa_sigkill_child.py")
SHAPES = pytest.mark.parametrize("handoff", [False, True], ids=["one-agent", "handoff"])


def _sqlite_command(tmp_path: Path, handoff: bool) -> Callable[[str, int], dict[str, object]]:
    def command(order: str, n: int) -> dict[str, object]:
        return {
            "store": f"sqlite:{tmp_path / 'conversations.db'}",
            "table": "unused",
            "guard": f"sqlite:///{tmp_path / 'guard.db'}",
            "sink": str(tmp_path / "effects.log"),
            "thread": order,
            "pause": 0.01,
            "handoff": handoff,
        }

    return command


@pytest.mark.slow
def test_sigkills_on_sqlite_never_charge_twice(tmp_path: Path) -> None:
    """Fifty real SIGKILLs at random moments of a guarded agent on SQLiteSession charge every order exactly once."""
    sink = tmp_path / "effects.log"
    command = _sqlite_command(tmp_path, False)
    kills, counts, orders = kill_until(CHILD, command, sink, target=50, seed=24, max_delay=0.15)
    print(f"{kills} kills over {orders} orders; effects: {sum(counts.values())}")
    assert kills >= 50
    check_each_order_charged_once(counts, orders)


@pytest.mark.slow
@pytest.mark.chaos
@pytest.mark.timeout(900)  # an aimed kill lands once per order: 30 orders to drive
@SHAPES
def test_aimed_sigkills_on_sqlite_never_charge_twice(handoff: bool, tmp_path: Path) -> None:
    """Thirty SIGKILLs landing within 30 ms after a charge, with or without a handoff, charge every order exactly once."""
    sink = tmp_path / "effects.log"
    command = _sqlite_command(tmp_path, handoff)
    kills, counts, orders = kill_until(
        CHILD,
        command,
        sink,
        target=30,
        seed=26,
        max_delay=0.15,
        aim="charge",
    )
    print(f"{kills} aimed kills over {orders} orders; effects: {sum(counts.values())}")
    assert kills >= 30
    check_each_order_charged_once(counts, orders)


@pytest.mark.slow
@pytest.mark.chaos
@pytest.mark.server
@pytest.mark.timeout(900)
@SHAPES
@pytest.mark.parametrize("aim", [None, "charge"], ids=["random", "aimed"])
async def test_sigkills_on_postgres_never_charge_twice(
    handoff: bool, aim: str | None, tmp_path: Path
) -> None:
    """Real SIGKILLs of an agent on the SQLAlchemy session, guarded in PostgreSQL, charge every order once."""
    import psycopg
    from psycopg import sql

    base = await require_server("postgres")
    table = f"oa_{uuid.uuid4().hex[:10]}"
    store = base.replace("postgresql://", "postgresql+psycopg://", 1)
    sink = tmp_path / "effects.log"
    target = 20 if aim is None else 15
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
                    "handoff": handoff,
                }

            kills, counts, orders = kill_until(
                CHILD, command, sink, target=target, seed=25, max_delay=0.35, aim=aim
            )
    finally:
        with psycopg.connect(base, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
            for suffix in ("messages", "sessions"):
                conn.execute(
                    sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(f"{table}_{suffix}"))
                )
    print(
        f"{kills} kills ({aim or 'random'}) over {orders} orders; effects: {sum(counts.values())}"
    )
    assert kills >= target
    check_each_order_charged_once(counts, orders)
