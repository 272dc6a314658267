"""Which frameworks repeat effects: every shape, crashed at every write and killed for real.

For each shape people build (``tests/integrations/lg_graphs.py``'s LangGraph ``SHAPES``,
and the OpenAI Agents SDK with two tool calls per model response, alone and after a
handoff), with the guard and without it:

* **crash points**: the crash kit (``langgraph_crash_matrix`` / ``agents_crash_matrix``)
  crashes the run before and after every write of the framework's store (and of the
  guard's journal), resumes it the framework's documented way, and counts the points
  where a `NEVER` charge happened twice or never;
* **aimed kills**: a real process runs the shape (``tests/integrations/shape_child.py``)
  and is SIGKILLed within 30 ms after a charge reaches the fsynced effect sink, the
  moment between an effect and the writes that record it; at most as many kills per
  order as the shape has charges, then the attempt runs to its end. On SQLite (≥ 30
  kills) and on PostgreSQL (≥ 15 kills, when ``--postgres`` is given a URL).

Repeats are `NEVER` charges that happened more than once for an order; losses are
charges of the uninterrupted run that never happened. Writes
``benchmarks/results/repeats.json``; the page "Which frameworks repeat effects" is
drawn from it. Run: ``uv run python benchmarks/bench_repeats.py [--postgres URL]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from typing import Any

import _measured

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "integrations"))
from lg_graphs import SHAPES, sqlite_saver
from oa_agents import next_calls_together, shop_agent, sqlite_session, triage_agent
from sigkill_helpers import _alive, zygote

from steadyloop.testing import EffectSink, agents_crash_matrix, langgraph_crash_matrix

SUMMARY_ZH = "哪些框架会重复执行副作用：每种形态都在每个写入边界上崩溃一次，并被真实地杀死。"
"""The first line of this docstring in Chinese, for the performance page."""

RESULTS = Path(__file__).parent / "results" / "repeats.json"
CHILD = Path(__file__).parents[1] / "tests" / "integrations" / "shape_child.py"
AIMED_WINDOW = 0.03
"""A kill lands uniformly within this many seconds after the charge it aims at."""
AGENT_SHAPES: dict[str, tuple[str, Any, int]] = {
    "agents-together": (
        "two tool calls per response",
        lambda p: shop_agent(p, next_calls_together),
        1,
    ),
    "agents-handoff": (
        "two calls per response, after a handoff",
        lambda p: triage_agent(p, next_calls_together),
        1,
    ),
}


def crash_points(name: str, workdir: Path, guarded: bool) -> dict[str, Any]:
    """The crash kit's counts for one shape, guarded or not."""
    if name in AGENT_SHAPES:
        report = agents_crash_matrix(
            AGENT_SHAPES[name][1], sqlite_session, "buy o-1", workdir=workdir, guarded=guarded
        )
    else:
        shape = SHAPES[name]
        report = langgraph_crash_matrix(
            shape.build,
            sqlite_saver,
            shape.graph_input(),
            workdir=workdir,
            durability=shape.durability,
            guarded=guarded,
        )
    s = report.summary()
    return {
        "points": s["crash_points"],
        "points_with_never_repeats": s["points_with_never_repeats"],
        "never_repeats": sum(r.count - 1 for p in report.points for r in p.repeated_never),
        "points_with_losses": s["points_with_losses"],
        "wrong_final_state": s["wrong_final_state"],
        "unfinished": s["unfinished"],
        "interrupts": s["interrupts"],
    }


def _charges(sink: EffectSink, thread: str) -> Counter[str]:
    prefix = f"{thread}/"
    return Counter(
        str(e["action"])[len(prefix) :]
        for e in sink.effects()
        if str(e.get("action", "")).startswith(prefix) and e.get("policy") == "never"
    )


def aimed_kills(
    name: str, *, store: Any, guard: Any, folder: Path, target: int, rng: random.Random
) -> dict[str, Any]:
    """Kill real attempts of a shape right after its charges until ``target`` kills landed.

    Args:
        name: The shape.
        store: The framework store for an order (a function of the order's number).
        guard: The guard's journal URL, or None for an unguarded run.
        folder: Where the sink lives (its name also names the threads, which must be
            new to the store).
        target: How many kills must land.
        rng: Seeds where in the window each kill lands.
    """
    path = folder / "effects.log"
    sink = EffectSink(path)
    charges = AGENT_SHAPES[name][2] if name in AGENT_SHAPES else SHAPES[name].charges
    kills = orders = 0
    expected: Counter[str] = Counter()
    repeats = lost = unfinished = 0
    with zygote(CHILD) as proc:
        assert proc.stdin is not None and proc.stdout is not None

        def run(thread: str, n: int, aim: bool) -> tuple[bool, int]:
            before = sum(_charges(sink, thread).values())
            cmd = {"shape": name, "store": store(n), "guard": guard, "sink": str(path)}
            cmd |= {"thread": thread, "pause": 0.005}
            proc.stdin.write(json.dumps(cmd) + "\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            pid = json.loads(proc.stdout.readline())["pid"]  # type: ignore[union-attr]
            if aim:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and _alive(pid):
                    if sum(_charges(sink, thread).values()) > before:
                        time.sleep(rng.uniform(0.0, AIMED_WINDOW))
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                        break
                    time.sleep(0.001)
            status = json.loads(proc.stdout.readline())["status"]  # type: ignore[union-attr]
            killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
            return killed, 0 if killed else os.WEXITSTATUS(status)

        reference = f"{folder.parent.name}-{folder.name}-reference"
        _, code = run(reference, 0, aim=False)
        expected = _charges(sink, reference)
        assert code == 0 and expected, f"{name}: the uninterrupted run ended with {code}"
        while kills < target:
            thread = f"{folder.parent.name}-{folder.name}-{orders}"
            landed = 0
            for _ in range(50):
                killed, code = run(thread, orders + 1, aim=landed < charges)
                if not killed:
                    break
                landed += 1
            unfinished += code != 0
            got = _charges(sink, thread)
            repeats += sum(max(0, c - 1) for c in got.values())
            lost += sum(1 for action in expected if got[action] == 0)
            kills += landed
            orders += 1
            print(f"  {name} {thread}: {landed} kills, charges {dict(got)}", file=sys.stderr)
    return {
        "kills": kills,
        "orders": orders,
        "never_repeats": repeats,
        "lost": lost,
        "unfinished": unfinished,
    }


def _pg_stores(base: str, schema: str, prefix: str) -> tuple[str, str, str]:
    """The framework stores in a PostgreSQL schema, and a guard journal under ``prefix``."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
    from backends import with_options

    lg = with_options(base, options=f"-csearch_path={schema}")
    agents = with_options(
        base.replace("postgresql://", "postgresql+psycopg://", 1),
        options=f"-csearch_path={schema}",
    )
    return lg, agents, with_options(lg, prefix=prefix)  # in the schema, dropped with it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sqlite-kills", type=int, default=30)
    parser.add_argument("--postgres-kills", type=int, default=15)
    parser.add_argument("--postgres", help="a PostgreSQL URL; without it, SQLite only")
    parser.add_argument("--shapes", nargs="*", default=[*SHAPES, *AGENT_SHAPES])
    args = parser.parse_args()
    measured = _measured.start()
    rng = random.Random(18)
    rows = []
    schema = f"repeats_{uuid.uuid4().hex[:8]}"
    if args.postgres:
        import psycopg

        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            for name in args.shapes:
                agents = name in AGENT_SHAPES
                title = AGENT_SHAPES[name][0] if agents else SHAPES[name].title
                row: dict[str, Any] = {
                    "shape": name,
                    "framework": "openai-agents" if agents else "langgraph",
                    "title": title,
                }
                for guarded in (False, True):
                    tag = "with_guard" if guarded else "without_guard"
                    folder = root / f"{name}-{tag}"
                    folder.mkdir()
                    row[f"crash_points_{tag}"] = crash_points(name, folder / "kit", guarded)
                    for backend in ("sqlite", "postgresql"):
                        if backend == "postgresql" and not args.postgres:
                            continue
                        sub = folder / backend
                        sub.mkdir()
                        if backend == "sqlite":
                            target = args.sqlite_kills
                            db = sub / "store.db"
                            guard = f"sqlite:///{sub / 'guard.db'}" if guarded else None
                            store: Any = lambda n, db=db: f"sqlite:{db}"  # noqa: E731
                        else:
                            target = args.postgres_kills
                            prefix = f"{schema}_{name.replace('-', '_')}_"
                            lg, oa, guard_url = _pg_stores(args.postgres, schema, prefix)
                            guard = guard_url if guarded else None
                            store = (lambda n, u=oa: u) if agents else (lambda n, u=lg: u)
                        row[f"aimed_{backend}_{tag}"] = aimed_kills(
                            name, store=store, guard=guard, folder=sub, target=target, rng=rng
                        )
                rows.append(row)
                print(json.dumps(row, sort_keys=True), flush=True)
    finally:
        if args.postgres:
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    data = {
        "versions": {p: version(p) for p in ("langgraph", "openai-agents")},
        "aimed_window_s": AIMED_WINDOW,
        "rows": rows,
        "measured": measured.entry(),
    }
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
