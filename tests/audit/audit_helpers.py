"""Helpers for audit tests: a manual clock, scripted agents, spec builders."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from steadyloop.audit import GoalSpec, TaskContext, TaskSpec, TaskState, VerifySpec
from steadyloop.loop import Agent, Message, ModelReply, ReplayPolicy, ScriptedModel, ToolRegistry

APP = "audit"


class ManualClock:
    """A clock that moves only when told to (leases expire on command)."""

    def __init__(self, start: int = 1_700_000_000_000_000) -> None:
        self.now = start

    def now_us(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1_000_000)


def goal_spec(task_id: str = "t1", budget: int = 3, **kw: Any) -> TaskSpec:
    """A goal-mode spec whose verify command is the in-process ``check``."""
    return TaskSpec(
        prompt=kw.pop("prompt", f"Write the answer for {task_id}."),
        task_id=task_id,
        goal=GoalSpec(
            goal="answer.txt holds 42", verify=VerifySpec(("check",)), round_budget=budget
        ),
        **kw,
    )


def first_user_text(messages: Sequence[Message]) -> str:
    return next((m.content or "" for m in messages if m.role == "user"), "")


Call = tuple[str, int, bool, int, str]
"""A logged model call: task, round, resumed?, call index, first user message text."""


def check_answer(cwd: Path) -> tuple[int, str]:
    """The in-process verify command: answer.txt must hold 42."""
    path = cwd / "answer.txt"
    if not path.exists():
        return 1, "answer.txt is missing"
    text = path.read_text()
    return (0, "ok") if text == "42" else (1, f"answer.txt holds {text!r}, expected '42'")


def writer_factory(
    fix_when_packet: bool = True, log: list[Call] | None = None, name: str = "writer"
) -> Callable[[TaskContext], Agent]:
    """Agents that write answer.txt: 41, or 42 once a packet says the verify command failed.

    The model is scripted by call index: call 0 writes, call 1 answers "done".
    """

    def make(ctx: TaskContext) -> Agent:
        tools = ToolRegistry()

        @tools.tool(policy=ReplayPolicy.SAFE)
        def write(text: str) -> str:
            """Write answer.txt."""
            (ctx.workdir / "answer.txt").write_text(text)
            return "written"

        def script(index: int, messages: Sequence[Message]) -> ModelReply | str:
            text = first_user_text(messages)
            if log is not None:
                log.append((ctx.task_id, ctx.round, ctx.resumed, index, text))
            if index == 0:
                good = fix_when_packet and "the verify command failed" in text
                return ModelReply.call("write", {"text": "42" if good else "41"})
            return "done"

        return Agent(name, ScriptedModel(script), tools)

    return make


def states_by_status() -> dict[str, TaskState]:
    """One trail state per status (and per round phase), built by legal transitions."""
    spec = goal_spec("t1").to_json()
    submitted = ("task.submitted", {"task_id": "t1", "spec": spec})
    claimed = ("task.claimed", {"worker": "w", "lease_token": "k", "attempt": 1})
    started = ("task.round_started", {"round": 1, "run_id": "t1.r1"})
    finished = ("task.run_finished", {"round": 1, "stop_reason": "completed"})
    verified = ("task.verified", {"round": 1, "passed": True})
    audited_ok = ("task.audited", {"round": 1, "audit_round": 1, "passed": True, "findings": []})
    blocker = {"id": "F1", "severity": "blocker", "kind": "deterministic", "gate": "verification"}
    failed = ("task.verified", {"round": 1, "passed": False})
    audited_bad = (
        "task.audited",
        {"round": 1, "audit_round": 1, "passed": False, "findings": [blocker]},
    )
    # The same task with a round budget of one: its first failed round spends the budget.
    spent = ("task.submitted", {"task_id": "t1", "spec": goal_spec("t1", budget=1).to_json()})
    paths: dict[str, list[tuple[str, dict[str, Any]]]] = {
        "new": [],
        "queued": [submitted],
        "running": [submitted, claimed],
        "running/running": [submitted, claimed, started],
        "running/ran": [submitted, claimed, started, finished],
        "running/verified": [submitted, claimed, started, finished, verified],
        "running/audited": [submitted, claimed, started, finished, verified, audited_ok],
        "running/failed": [submitted, claimed, started, finished, failed, audited_bad],
        "running/spent": [spent, claimed, started, finished, failed, audited_bad],
        "completed": [
            submitted,
            claimed,
            started,
            finished,
            verified,
            audited_ok,
            ("task.completed", {"round": 1}),
        ],
        "needs-human": [submitted, claimed, ("task.needs_human", {"reason": "x"})],
        "goal-unmet": [
            spent,
            claimed,
            started,
            finished,
            failed,
            audited_bad,
            ("task.goal_unmet", {"round": 1}),
        ],
        "blocked": [submitted, ("task.blocked", {"dependency": "d"})],
    }
    out = {}
    for name, events in paths.items():
        state = TaskState("t1")
        for kind, payload in events:
            state.apply(kind, payload)
        out[name] = state
    return out


def marked(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``marker``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        if marker.encode() in cmdline and stat[stat.rfind(")") + 2] != "Z":
            out.append(int(name))
    return out


def wait_for(predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def new_marker() -> str:
    return str(uuid.uuid4().int % 10**9).rjust(9, "1")
