"""A child process that drives a many-step run until it is killed or the run stops.

Usage: ``python sigkill_child.py URL RUN_ID SINK STEPS``. Prints ``ready`` once the
journal is open (the parent kills it at a random moment after that), then, if it
lives, one JSON line: the stop reason and the open intent.

Snapshots are written every 25 run records (not the default 1,000), and the session is
summarised (each summary carrying a session snapshot) before every fifth step's tool
call, so resumes start from both and kills land around both kinds of snapshot write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from loop_helpers import APP, counting_agent

from steadyloop._errors import RunFinished, RunNotFound
from steadyloop.journal import Journal, open_journal
from steadyloop.loop import Agent, Tool, ToolContext, ToolRegistry, _run, load_run, resume, run
from steadyloop.testing._crash_matrix import summarize_session

_run.SNAPSHOT_EVERY = 25
SUMMARIZE_EVERY = 5


def summarizing(agent: Agent, journal: Journal, session_id: str) -> Agent:
    """The agent, summarising its session before the tool call of every fifth step."""

    def wrap(tool: Tool) -> Callable[..., Awaitable[Any]]:
        async def wrapped(context: ToolContext, **arguments: Any) -> Any:
            if context.index == 0 and context.step % SUMMARIZE_EVERY == 0:
                await summarize_session(journal, APP, "user", session_id)
            return await tool.invoke(arguments, context)

        return wrapped

    registry = ToolRegistry()
    for tool in agent.tools:
        registry.add(dataclasses.replace(tool, function=wrap(tool)))
    return dataclasses.replace(agent, tools=registry)


async def main(url: str, run_id: str, sink: str, steps: int) -> None:
    async with await open_journal(url) as journal:
        agent = summarizing(counting_agent(steps, sink), journal, f"session-{run_id}")
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
