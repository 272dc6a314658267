"""Where a Pydantic AI `NEVER` tool runs twice: crash points and aimed kills, alone and on DBOS.

The shop agent of the tests (``tests/integrations/pa_agents.py``: one model response with
a lookup and two charges of the same `NEVER` tool, then a notify, then the answer) runs:

* ``alone``: the caller saves ``message_history`` after each model response and runs the
  agent again from it after a crash;
* ``dbos``: under ``DBOSDurability``, in a DBOS workflow on embedded SQLite; its effects
  run in DBOS steps.

Each with and without the guard, two measurements:

* ``matrix``: ``steadyloop.testing.pydantic_crash_matrix``, a forked process killed
  (SIGKILL of itself) before and after every write boundary: the sink, the guard's
  journal, the history file, DBOS's system database;
* ``aimed``: ``steadyloop.testing.pydantic_aimed_kills``, a SIGKILL landing within 30 ms
  after ``charge/o-1`` reached the (fsynced) sink; with ``--postgres URL``, the guarded
  shapes are killed again with the guard's journal on that server (``aimed_postgresql``).
  The unguarded shapes keep nothing on a server: Pydantic AI's history is the caller's
  file, and DBOS runs on embedded SQLite.

Writes ``benchmarks/results/effects_pydantic.json``.
Run: ``uv run python benchmarks/bench_effects_pydantic.py [--kills N] [--postgres URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import _measured
from steadyloop.testing import pydantic_aimed_kills, pydantic_crash_matrix

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "integrations"))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from pa_agents import PROMPT, shop_agent

from backends import remove_prefix, with_options

SUMMARY_ZH = (
    "Pydantic AI 的 `NEVER` 工具在哪里会执行两次：单独运行和在 DBOS 上运行时的崩溃点与定点杀进程。"
)
"""The first line of this docstring in Chinese, for the performance page."""

RESULTS = Path(__file__).parent / "results" / "effects_pydantic.json"
SHAPES = [("dbos", False), ("dbos", True), ("alone", False), ("alone", True)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=30, help="aimed kills per shape")
    parser.add_argument("--postgres", help="a PostgreSQL URL for the guard's journal")
    parser.add_argument("--postgres-kills", type=int, default=15)
    args = parser.parse_args()
    measured = _measured.start()
    rows: list[dict[str, Any]] = []
    prefix = f"pa{uuid.uuid4().hex[:8]}_"  # every table this run makes on the server
    try:
        for mode, guarded in SHAPES:
            rows.append(_shape(mode, guarded, args, prefix))
            _write(measured, rows)
    finally:
        if args.postgres:
            asyncio.run(remove_prefix("postgres", args.postgres, prefix))
    print(f"wrote {RESULTS}")


def _shape(mode: str, guarded: bool, args: argparse.Namespace, prefix: str) -> dict[str, Any]:
    """Measure one shape: the crash points, then the aimed kills on each backend."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        report = pydantic_crash_matrix(
            shop_agent, PROMPT, workdir=root / "m", mode=mode, guarded=guarded
        )

        def aimed(kills: int, backend: str, guard_url: Any = None) -> dict[str, Any]:
            return pydantic_aimed_kills(
                shop_agent,
                PROMPT,
                workdir=root / f"a-{backend}",
                aim="charge/o-1",
                kills=kills,
                mode=mode,
                guarded=guarded,
                guard_url=guard_url,
            ).to_json()

        summary = report.summary()
        row = {
            "mode": mode,
            "guarded": guarded,
            "boundaries": len(report.boundaries),
            "crash_points": summary["crash_points"],
            "points_with_never_repeats": summary["points_with_never_repeats"],
            "points_with_losses": summary["points_with_losses"],
            "wrong_final_state": summary["wrong_final_state"],
            "unfinished": summary["unfinished"],
            "decisions": summary["interrupts"],
            "aimed": aimed(args.kills, "sqlite"),
        }
        if args.postgres and guarded:
            tag = f"{prefix}{mode}_"  # each run's journal under a prefix of its own
            row["aimed_postgresql"] = aimed(
                args.postgres_kills,
                "postgresql",
                lambda d: with_options(args.postgres, prefix=f"{tag}{d.name.replace('-', '_')}_"),
            )
    row["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(row), flush=True)
    return row


def _write(measured: Any, rows: list[dict[str, Any]]) -> None:
    """Write the result; called after each shape, so a run cut short keeps what it measured."""
    out = {
        "measured": measured.entry(),
        "shape": "one response: lookup (SAFE) + charge o-1, charge o-2 (NEVER); notify; answer",
        "aim": "charge/o-1",
        "aimed_window_s": 0.03,
        "dbos_effects": "unguarded: in DBOS steps; guarded: recorded by the guard, no step",
        "postgresql": "guarded shapes only: the guard's journal on the server",
        "rows": rows,
    }
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
