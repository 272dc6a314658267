"""A worker process for the chaos test; the test SIGKILLs it at random moments.

Usage: python audit_chaos_worker.py URL NAME LOG SCRATCH [subprocess [LEASE [HEARTBEAT]]]

With ``subprocess``, verify commands run as real processes (the spec's command) under
the plain executor, so the test can look for orphaned and overlapping ones.

Every model call is logged (one JSON line, one ``write``) with the driver it belongs
to, so the test can check what each resumed first turn carried.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from steadyloop.audit import (
    PREAMBLE_OPEN,
    InProcessExecutor,
    SubprocessExecutor,
    TaskBoard,
    TaskContext,
    Verifier,
    Worker,
    WorkerEvent,
)
from steadyloop.loop import Agent, Message, ModelReply, ReplayPolicy, ScriptedModel, ToolRegistry


def check(cwd: Path) -> tuple[int, str]:
    path = cwd / "answer.txt"
    text = path.read_text() if path.exists() else "<missing>"
    return (0, "ok") if text == "42" else (1, f"answer.txt holds {text!r}, expected '42'")


def main(  # noqa: PLR0917 - the command line, in order
    url: str,
    name: str,
    log_path: str,
    scratch: str,
    executor: str = "",
    lease: str = "1.0",
    heartbeat: str = "0.2",
) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(entry: dict[str, Any]) -> None:
        os.write(fd, (json.dumps(entry) + "\n").encode())

    def factory(ctx: TaskContext) -> Agent:
        driver = uuid.uuid4().hex
        tools = ToolRegistry()

        @tools.tool(policy=ReplayPolicy.SAFE)
        def write(text: str) -> str:
            """Write answer.txt."""
            time.sleep(0.15)
            (ctx.workdir / "answer.txt").write_text(text)
            return "written"

        @tools.tool(policy=ReplayPolicy.SAFE)
        def note() -> str:
            """Take a note."""
            time.sleep(0.15)
            return "noted"

        def script(index: int, messages: Sequence[Message]) -> ModelReply | str:
            first = next(m.content or "" for m in messages if m.role == "user")
            log(
                {
                    "pid": os.getpid(),
                    "driver": driver,
                    "task": ctx.task_id,
                    "round": ctx.round,
                    "resumed": ctx.resumed,
                    "index": index,
                    "preambles": sum((m.content or "").count(PREAMBLE_OPEN) for m in messages),
                    "first_has": first.count(PREAMBLE_OPEN),
                    "resume_note": "Resume note:" in first,
                }
            )
            if index == 0:
                good = "EASY" in first or (
                    "FIXABLE" in first and "the verify command failed" in first
                )
                return ModelReply.call("write", {"text": "42" if good else "41"})
            if index == 1:
                return ModelReply.call("note", {})
            return "done"

        return Agent("chaos", ScriptedModel(script, record=False), tools)

    def on_event(event: WorkerEvent) -> None:
        if event.kind == "error":
            log({"error": event.detail, "task": event.task_id, "pid": os.getpid()})
        elif event.kind in ("round", "verified", "completed", "needs-human", "goal-unmet"):
            # Emitted once the event's trail record was acknowledged: it must survive.
            log({"ack": event.kind, "task": event.task_id, "worker": name, "time": time.time()})
        elif event.kind == "lease-lost":
            log({"event": event.kind, "task": event.task_id, "worker": name, "time": time.time()})

    async def work() -> None:
        async with await TaskBoard.open(url) as board:
            worker = Worker(
                board,
                factory,
                worker_id=name,
                verifier=Verifier(
                    SubprocessExecutor()
                    if executor == "subprocess"
                    else InProcessExecutor({"check": check})
                ),
                scratch_root=scratch,
                lease=float(lease),
                heartbeat=float(heartbeat),
                poll=0.05,
                on_event=on_event,
            )
            await worker.run()

    asyncio.run(work())


if __name__ == "__main__":
    main(*sys.argv[1:8])
