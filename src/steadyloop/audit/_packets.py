"""Findings packets, and the preamble that carries them (and resume notes) to the agent.

When the auditor pushes a task back, its findings become a [`Packet`][steadyloop.audit.Packet],
stored in the ``pushed_back`` record of the task's trail. The next round shows the agent a
*preamble* — the packet's findings with evidence and acceptance, and, when a round resumes after
its worker was lost, a resume note — put before the prompt and goal.

The preamble lives in memory only: the stored prompt and goal never change, and
nothing the loop journals contains it. It is shown on the first model call a worker
makes for a round (the round's start, or the start of a resume), and applying it to
a text that already carries it does not repeat it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from steadyloop.audit._auditor import Finding
from steadyloop.loop import Message, ModelClient, ModelReply, ToolSpec
from steadyloop.records import JSONValue

__all__ = [
    "PREAMBLE_CLOSE",
    "PREAMBLE_OPEN",
    "Packet",
    "PreambleModel",
    "apply_preamble",
    "apply_to_messages",
    "compose_preamble",
    "count_preambles",
]

PREAMBLE_OPEN = "<<steadyloop preamble>>"
"""The first line of every preamble."""

PREAMBLE_CLOSE = "<<end of steadyloop preamble>>"
"""The last line of every preamble."""


@dataclass(frozen=True)
class Packet:
    """The findings of one audit, sent back with the task.

    Attributes:
        task_id: The task.
        round: The round that was audited.
        audit_round: Which audit it was.
        findings: What was found (the blocking ones first).
    """

    task_id: str
    round: int
    audit_round: int
    findings: tuple[Finding, ...]

    @property
    def id(self) -> str:
        """``<task>/p<audit round>``: unique within the task."""
        return f"{self.task_id}/p{self.audit_round}"

    def text(self) -> str:
        """The findings as the agent reads them."""
        lines = [
            f"Audit {self.audit_round} of this task (after round {self.round}) pushed it back "
            f"with {len(self.findings)} finding(s). Fix each one; the acceptance line says "
            "what counts as fixed.",
        ]
        for n, f in enumerate(self.findings, 1):
            lines.append(
                f"{n}. [{f.id}] {f.title or f.gate.value} — {f.severity.value}, "
                f"{f.kind.value}, gate {f.gate.value}"
            )
            lines.append("   evidence: " + f.evidence.replace("\n", "\n   "))
            lines.append(f"   reproduction: {f.reproduction}")
            lines.append(f"   acceptance: {f.acceptance}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, JSONValue]:
        """Return the packet as a JSON object (as stored in ``pushed_back``)."""
        return {
            "id": self.id,
            "task_id": self.task_id,
            "round": self.round,
            "audit_round": self.audit_round,
            "findings": [f.to_json() for f in self.findings],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Packet:
        """Rebuild a packet from [`to_json`][steadyloop.audit.Packet.to_json] output."""
        return cls(
            task_id=str(data["task_id"]),
            round=int(data["round"]),
            audit_round=int(data["audit_round"]),
            findings=tuple(Finding.from_json(f) for f in data.get("findings") or ()),
        )


def compose_preamble(
    packet: Packet | None = None,
    *,
    resume_round: int | None = None,
    lost_worker: str | None = None,
) -> str | None:
    """The preamble for a round: a resume note and/or a packet, or ``None`` for neither.

    Args:
        packet: The findings of the last push-back, if any.
        resume_round: When the round resumes after its worker was lost: its number.
        lost_worker: The worker that was lost, if known.
    """
    parts: list[str] = []
    if resume_round is not None:
        who = f" (worker {lost_worker} stopped)" if lost_worker else ""
        parts.append(
            f"Resume note: round {resume_round} of this task was interrupted{who} and resumes "
            "from the journal. The conversation below is what already happened; continue "
            "from there and do not redo finished steps."
        )
    if packet is not None:
        parts.append(packet.text())
    if not parts:
        return None
    return "\n".join([PREAMBLE_OPEN, *parts, PREAMBLE_CLOSE])


def _strip(text: str) -> str:
    if text.startswith(PREAMBLE_OPEN):
        end = text.find(PREAMBLE_CLOSE)
        if end >= 0:
            rest = text[end + len(PREAMBLE_CLOSE) :]
            return rest[2:] if rest.startswith("\n\n") else rest.lstrip("\n")
    return text


def apply_preamble(text: str, preamble: str | None) -> str:
    """Put ``preamble`` before ``text``; a preamble already there is replaced, not repeated.

    ``apply_preamble(apply_preamble(t, p), p) == apply_preamble(t, p)``.
    """
    if preamble is None:
        return text
    if text.startswith(f"{preamble}\n\n"):
        return text
    return f"{preamble}\n\n{_strip(text)}"


def count_preambles(text: str) -> int:
    """How many preambles ``text`` carries (for tests and audits of what a model saw)."""
    return text.count(PREAMBLE_OPEN)


def apply_to_messages(messages: Sequence[Message], preamble: str | None) -> list[Message]:
    """A copy of ``messages`` with the preamble before the first user message's text."""
    out = list(messages)
    if preamble is None:
        return out
    for i, m in enumerate(out):
        if m.role == "user":
            out[i] = Message(
                "user", apply_preamble(m.content or "", preamble), m.tool_calls, m.tool_call_id
            )
            return out
    out.insert(0, Message("user", preamble))
    return out


class PreambleModel:
    """A model client that shows a preamble on its first call only, in memory.

    Wraps the agent's model for one worker's drive of one round. The messages the loop
    holds (and journals) are never changed; only the list handed to the inner model on
    the first call carries the preamble.

    Args:
        inner: The agent's model.
        preamble: The preamble (``None``: a plain pass-through).

    Attributes:
        calls: Calls made through this wrapper.
    """

    def __init__(self, inner: ModelClient, preamble: str | None) -> None:
        self.inner = inner
        self.preamble = preamble
        self.name = inner.name
        self.calls = 0

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """Call the inner model, with the preamble on the first call."""
        self.calls += 1
        if self.calls == 1 and self.preamble is not None:
            messages = apply_to_messages(messages, self.preamble)
        return await self.inner.complete(messages, tools)
