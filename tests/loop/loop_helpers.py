"""Agents and journal wrappers shared by the loop tests."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from steadyloop.journal import AppendResult, ForwardingJournal, Journal, StreamWrite
from steadyloop.journal._protocol import PreparedBatch
from steadyloop.loop import (
    Agent,
    Budgets,
    Message,
    ModelReply,
    ReplayPolicy,
    ScriptedModel,
    ToolContext,
    ToolRegistry,
)
from steadyloop.records import RecordFactory, SequentialIds, StepClock, StoredRecord

APP = "loop-test"


def deterministic() -> RecordFactory:
    """Records with a step clock and sequential ids."""
    return RecordFactory(clock=StepClock(), ids=SequentialIds("rec"))


@dataclass
class Effects:
    """Counts of what the tools did, kept outside the journal."""

    emails: list[str] = field(default_factory=list)
    lookups: int = 0


def standard_agent(effects: Effects | None = None, *, budgets: Budgets | None = None) -> Agent:
    """An agent whose run covers every kind of step.

    Replies: a safe lookup; a safe add and a never-repeat e-mail in one reply; a broken
    tool call (parse failure); a tool that raises; then the final answer.
    """
    fx = effects if effects is not None else Effects()
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.SAFE, description="Look a word up.")
    def lookup(word: str) -> dict[str, str]:
        fx.lookups += 1
        return {"word": word, "meaning": word.upper()}

    @tools.tool(policy=ReplayPolicy.SAFE)
    def add(a: int, b: int) -> int:
        return a + b

    @tools.tool(policy=ReplayPolicy.NEVER, description="Send an e-mail (irreversible).")
    def send_email(to: str, context: ToolContext) -> str:
        fx.emails.append(f"{context.intent_id}:{to}")
        return f"sent to {to}"

    @tools.tool(policy=ReplayPolicy.SAFE)
    def explode() -> None:
        raise ValueError("the tool broke")

    script: list[ModelReply | str] = [
        ModelReply.call("lookup", {"word": "steady"}, id="c1"),
        ModelReply(
            text="two things at once",
            tool_calls=(
                ModelReply.call("add", {"a": 2, "b": 3}, id="c2").tool_calls[0],
                ModelReply.call("send_email", {"to": "ada@example.com"}, id="c3").tool_calls[0],
            ),
        ),
        ModelReply.call("add", '{"a": 1,', id="c4"),  # broken JSON: a parse failure
        ModelReply.call("explode", {}, id="c5"),
        "all done",
    ]
    return Agent(
        name="standard",
        model=ScriptedModel(script),
        tools=tools,
        system_prompt="You are a careful agent.",
        budgets=budgets or Budgets(),
    )


def counting_agent(
    steps: int, sink: str | None = None, *, policy: ReplayPolicy = ReplayPolicy.NEVER
) -> Agent:
    """An agent that calls ``send(n)`` for n = 1..steps, then answers.

    It counts by the last observation, so it works in a session that is summarised.

    With ``sink``, ``send`` appends ``<intent id> <n>`` to that file (O_APPEND, fsync)
    before returning: a record the journal's process cannot take back.
    """
    tools = ToolRegistry()

    @tools.tool(policy=policy)
    def send(n: int, context: ToolContext) -> dict[str, int]:
        if sink is not None:
            fd = os.open(sink, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{context.intent_id} {n}\n".encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        return {"sent": n}

    def script(index: int, messages: Sequence[Message]) -> ModelReply | str:
        # The last observation says how many were sent, even after a summary hid the
        # turns before it (the assistant turns the index counts).
        last = messages[-1] if messages else None
        if last is not None and last.role == "tool" and (last.content or "").startswith('{"sent"'):
            index = int(json.loads(last.content or "")["sent"])
        if index < steps:
            return ModelReply.call("send", {"n": index + 1}, id=f"c{index + 1}")
        return f"sent {steps}"

    return Agent(
        name="counting",
        model=ScriptedModel(script, record=False),
        tools=tools,
        budgets=Budgets(max_steps=steps + 5, max_actions=steps + 5, max_prompt_chars=10**9),
    )


class RecordingJournal(ForwardingJournal):
    """Writes through to another journal and remembers every batch."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.batches: list[list[tuple[str, list[str]]]] = []

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        result = await super()._append(batch)
        self.batches.append([(w.stream, [r.kind for r in w.records]) for w in batch.writes])
        return result


async def all_records(journal: Journal) -> list[StoredRecord]:
    """Every record of every stream of every namespace."""
    out: list[StoredRecord] = []
    for ns in await journal.namespaces():
        for stream in await journal.streams(ns):
            out.extend(await journal.read(ns, stream))
    return out


__all__ = [
    "APP",
    "Effects",
    "RecordingJournal",
    "StreamWrite",
    "all_records",
    "counting_agent",
    "deterministic",
    "standard_agent",
]
