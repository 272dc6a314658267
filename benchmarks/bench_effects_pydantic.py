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
  after ``charge/o-1`` reached the (fsynced) sink.

Writes ``benchmarks/results/effects_pydantic.json``.
Run: ``uv run python benchmarks/bench_effects_pydantic.py [--kills N]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _measured
from steadyloop.testing import pydantic_aimed_kills, pydantic_crash_matrix

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "integrations"))
from pa_agents import PROMPT, shop_agent

RESULTS = Path(__file__).parent / "results" / "effects_pydantic.json"
SHAPES = [("dbos", False), ("dbos", True), ("alone", False), ("alone", True)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=30, help="aimed kills per shape")
    args = parser.parse_args()
    measured = _measured.start()
    rows: list[dict[str, Any]] = []
    for mode, guarded in SHAPES:
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            report = pydantic_crash_matrix(
                shop_agent, PROMPT, workdir=Path(tmp) / "m", mode=mode, guarded=guarded
            )
            aimed = pydantic_aimed_kills(
                shop_agent,
                PROMPT,
                workdir=Path(tmp) / "a",
                aim="charge/o-1",
                kills=args.kills,
                mode=mode,
                guarded=guarded,
            )
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
            "aimed": aimed.to_json(),
            "seconds": round(time.perf_counter() - started, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
        out = {  # written after each shape: a run cut short keeps what it measured
            "measured": measured.entry(),
            "shape": "one response: lookup (SAFE) + charge o-1, charge o-2 (NEVER); notify; answer",
            "aim": "charge/o-1",
            "aimed_window_s": 0.03,
            "dbos_effects": "unguarded: in DBOS steps; guarded: recorded by the guard, no step",
            "rows": rows,
        }
        RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
