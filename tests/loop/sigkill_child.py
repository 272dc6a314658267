"""A child process that drives a many-step run until it is killed or the run stops.

Usage: ``python sigkill_child.py URL RUN_ID SINK STEPS``. Prints ``ready`` once the
journal is open (the parent kills it at a random moment after that), then, if it
lives, one JSON line: the stop reason and the open intent.

Snapshots are written every 25 run records (not the default 1,000), so resumes start
from one and kills land around snapshot writes.
"""

from __future__ import annotations

import asyncio
import json
import sys

from loop_helpers import APP, counting_agent

from steadyloop._errors import RunFinished, RunNotFound
from steadyloop.journal import open_journal
from steadyloop.loop import _run, load_run, resume, run

_run.SNAPSHOT_EVERY = 25


async def main(url: str, run_id: str, sink: str, steps: int) -> None:
    agent = counting_agent(steps, sink)
    async with await open_journal(url) as journal:
        print("ready", flush=True)
        try:
            result = await resume(agent, journal, APP, run_id)
        except RunNotFound:
            result = await run(agent, journal, APP, "user", f"session-{run_id}", run_id, "go")
        except RunFinished:
            ended = (await load_run(journal, APP, run_id)).state.ended
            assert ended is not None
            result = ended
    print(json.dumps({"stop_reason": result.stop_reason.value, "open_intent": result.open_intent}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
