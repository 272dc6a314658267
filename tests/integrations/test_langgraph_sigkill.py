from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from backends import require_server, server_store, with_options
from steadyloop.testing import EffectSink

CHILD = Path(__file__).with_name("lg_sigkill_child.py")


@contextmanager
def zygote() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, str(CHILD)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()


def drive(
    proc: subprocess.Popen[str], cmd: dict[str, object], rng: random.Random, max_delay: float
) -> tuple[int, int]:
    """Run attempts of one thread, each SIGKILLed at a random moment, until one finishes.

    The kill lands uniformly within a window that widens after each kill in a row.

    Returns (kills, the finishing attempt's exit code).
    """
    assert proc.stdin is not None and proc.stdout is not None
    kills = 0
    window = max_delay
    for _ in range(200):
        proc.stdin.write(json.dumps(cmd) + "\n")
        proc.stdin.flush()
        pid = json.loads(proc.stdout.readline())["pid"]
        time.sleep(rng.uniform(0.0, window))
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        status = json.loads(proc.stdout.readline())["status"]
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            kills += 1
            window *= 1.3  # a slow machine still lets an attempt finish in the end
            continue
        return kills, os.WEXITSTATUS(status)
    raise AssertionError("the thread never finished")


def kill_until(
    tmp_path: Path,
    store_for: object,
    guard_url: str,
    *,
    target: int,
    seed: int,
    max_delay: float,
) -> tuple[int, Counter[str], int]:
    rng = random.Random(seed)
    sink = tmp_path / "effects.log"
    kills = threads = 0
    with zygote() as proc:
        while kills < target:
            thread = f"order-{threads}"
            threads += 1
            cmd = {
                "store": store_for(thread),  # type: ignore[operator]
                "guard": guard_url,
                "sink": str(sink),
                "thread": thread,
                "durability": "async" if threads % 2 else "sync",
                "pause": 0.01,
            }
            k, code = drive(proc, cmd, rng, max_delay)
            assert code == 0, f"thread {thread} ended with exit code {code}"
            kills += k
    counts = Counter(str(e["action"]) for e in EffectSink(sink).effects())
    return kills, counts, threads


def check(counts: Counter[str], threads: int) -> None:
    for n in range(threads):
        assert counts[f"charge/order-{n}"] == 1, (
            f"order-{n} charged {counts[f'charge/order-{n}']} times"
        )
        assert counts[f"lookup/order-{n}"] >= 1
        assert counts[f"notify/order-{n}"] >= 1


@pytest.mark.slow
def test_sigkills_on_sqlite_never_charge_twice(tmp_path: Path) -> None:
    """Fifty real SIGKILLs of a guarded graph on SQLite charge every order exactly once."""
    guard = f"sqlite:///{tmp_path / 'guard.db'}"
    kills, counts, threads = kill_until(
        tmp_path,
        lambda t: f"sqlite:{tmp_path / 'checkpoints.db'}",
        guard,
        target=50,
        seed=14,
        max_delay=0.15,
    )
    print(f"{kills} kills over {threads} threads; effects: {sum(counts.values())}")
    assert kills >= 50
    check(counts, threads)


@pytest.mark.slow
@pytest.mark.server
async def test_sigkills_on_postgres_never_charge_twice(tmp_path: Path) -> None:
    """Twenty real SIGKILLs of a guarded graph with PostgresSaver and a PostgreSQL guard charge every order once."""
    import psycopg
    from psycopg import sql

    base = await require_server("postgres")
    schema = f"lg_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    store = with_options(base, options=f"-csearch_path={schema}")
    try:
        async with server_store("postgres") as (guard_url, _):
            kills, counts, threads = kill_until(
                tmp_path, lambda t: store, guard_url, target=20, seed=15, max_delay=0.35
            )
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    print(f"{kills} kills over {threads} threads; effects: {sum(counts.values())}")
    assert kills >= 20
    check(counts, threads)
