"""The loop's vocabulary: messages, model replies, decisions, policies, budgets, results.

Everything here is plain data. Messages follow the shape of chat-completion APIs
(``system``, ``user``, ``assistant``, ``tool``), since that is what model clients speak.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from steadyloop.effects import ReplayPolicy
from steadyloop.records import JSONValue

__all__ = [
    "Budgets",
    "Decision",
    "FinalAnswer",
    "Message",
    "ModelClient",
    "ModelReply",
    "ParseFailure",
    "ReplayPolicy",
    "RunResult",
    "StopReason",
    "ToolCall",
    "ToolCalls",
    "ToolSpec",
]


class StopReason(enum.StrEnum):
    """Why a run stopped.

    Every reason but [`RESUME_STATE_UNKNOWN`][steadyloop.loop.StopReason] and
    [`STOPPED`][steadyloop.loop.StopReason] is final: the run's end record is written
    and resuming it raises [`RunFinished`][steadyloop.RunFinished].

    Attributes:
        COMPLETED: The model gave a final answer.
        BUDGET_EXHAUSTED: A budget (steps, actions or prompt size) ran out.
        PARSE_FAILURES: Too many consecutive model replies did not parse.
        RESUME_STATE_UNKNOWN: A never-repeat effect may or may not have happened; the
            run waits for [`resolve`][steadyloop.loop.resolve].
        STOPPED: A stop was requested (the ``stop`` event of ``run``/``resume``; on
            the command line, Ctrl-C or SIGTERM): the run stopped at a write boundary
            and can be resumed.
        CANCELLED: The caller cancelled the run.
        ERROR: The model call failed, or the run could not go on.
    """

    COMPLETED = "completed"
    BUDGET_EXHAUSTED = "budget_exhausted"
    PARSE_FAILURES = "parse_failures"
    RESUME_STATE_UNKNOWN = "resume_state_unknown"
    STOPPED = "stopped"
    CANCELLED = "cancelled"
    ERROR = "error"

    @property
    def final(self) -> bool:
        """Whether the run can never continue after stopping for this reason."""
        return self not in (StopReason.RESUME_STATE_UNKNOWN, StopReason.STOPPED)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call as the model asked for it.

    Attributes:
        id: The model's id for the call (echoed back with the result).
        name: The tool's name.
        arguments: The arguments as the model wrote them: JSON text, possibly broken.
    """

    id: str
    name: str
    arguments: str

    def to_json(self) -> dict[str, JSONValue]:
        """Return the call as a JSON object."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCall:
        """Rebuild a call from [`to_json`][steadyloop.loop.ToolCall.to_json] output."""
        return cls(id=str(data["id"]), name=str(data["name"]), arguments=str(data["arguments"]))


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the conversation the model sees.

    Attributes:
        role: ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.
        content: The text (``None`` for an assistant turn that only calls tools).
        tool_calls: The tool calls of an assistant turn.
        tool_call_id: For a ``tool`` message, the id of the call it answers.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None

    @property
    def size(self) -> int:
        """The message's size in characters, as the prompt budget counts it."""
        n = len(self.content or "")
        for call in self.tool_calls:
            n += len(call.name) + len(call.arguments)
        return n

    def to_json(self) -> dict[str, JSONValue]:
        """Return the message as a JSON object (the chat-completions shape)."""
        out: dict[str, JSONValue] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_json() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What a model call returned, before it is interpreted.

    Attributes:
        text: The reply's text, if any.
        tool_calls: The tool calls it asked for, with their raw argument text.
        usage: Token counts or other metadata the API reported (stored; keep secrets
            out of it).
    """

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Mapping[str, JSONValue] = field(default_factory=dict)

    @classmethod
    def final(cls, text: str) -> ModelReply:
        """A reply that answers with ``text`` and calls nothing."""
        return cls(text=text)

    @classmethod
    def call(
        cls, name: str, arguments: Mapping[str, JSONValue] | str | None = None, *, id: str = ""
    ) -> ModelReply:
        """A reply that calls one tool.

        Args:
            name: The tool.
            arguments: A mapping (encoded as JSON) or raw argument text, which may be
                deliberately broken to test the parser.
            id: The call id; ``"call-<name>"`` when empty.
        """
        text = arguments if isinstance(arguments, str) else _dumps(dict(arguments or {}))
        return cls(tool_calls=(ToolCall(id=id or f"call-{name}", name=name, arguments=text),))

    def to_json(self) -> dict[str, JSONValue]:
        """Return the reply as a JSON object (as stored in its result record)."""
        return {
            "text": self.text,
            "tool_calls": [c.to_json() for c in self.tool_calls],
            "usage": dict(self.usage),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelReply:
        """Rebuild a reply from [`to_json`][steadyloop.loop.ModelReply.to_json] output."""
        text = data.get("text")
        return cls(
            text=None if text is None else str(text),
            tool_calls=tuple(ToolCall.from_json(c) for c in data.get("tool_calls") or ()),
            usage=dict(data.get("usage") or {}),
        )


def _not_json(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_DUMPS_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
if _DUMPS_ENCODER is not None:  # the encoder json.dumps builds on every call, built once
    _DUMPS_ENCODER = _DUMPS_ENCODER(
        None, _not_json, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )


def _dumps(arguments: dict[str, Any]) -> str:
    """``json.dumps(arguments)``: the same text, without a new encoder per call.

    It checks no cycles (``json.dumps`` raises ``ValueError`` for one); a mapping that
    holds itself ends in ``RecursionError`` here instead.
    """
    if _DUMPS_ENCODER is None:  # pragma: no cover - not CPython
        return json.dumps(arguments)
    return "".join(_DUMPS_ENCODER(arguments, 0))


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """How a tool is described to the model.

    Attributes:
        name: The tool's name.
        description: What it does, for the model.
        parameters: A JSON Schema of its arguments (an object schema).
    """

    name: str
    description: str
    parameters: Mapping[str, JSONValue]

    def to_json(self) -> dict[str, JSONValue]:
        """Return the spec in the chat-completions ``tools`` shape."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@runtime_checkable
class ModelClient(Protocol):
    """A chat model.

    Implementations: [`ScriptedModel`][steadyloop.loop.ScriptedModel],
    [`OpenAIChatModel`][steadyloop.loop.OpenAIChatModel].

    A client must keep secrets (API keys, headers) to itself: nothing it returns in a
    [`ModelReply`][steadyloop.loop.ModelReply] may contain them, since replies are journaled.
    """

    name: str
    """A name for the model, stored in the run's intents (never a secret)."""

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """Ask the model for the next turn of ``messages``, offering ``tools``."""
        ...


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    """The model answered; the run is complete.

    Attributes:
        text: The answer.
    """

    text: str


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """The model asked for actions, to be executed in order.

    Attributes:
        calls: Each call as ``(call id, tool name, parsed arguments)``.
    """

    calls: tuple[tuple[str, str, dict[str, JSONValue]], ...]


@dataclass(frozen=True, slots=True)
class ParseFailure:
    """The reply could not be understood; the model is told why and asked again.

    Attributes:
        reason: What was wrong, as the model will read it.
    """

    reason: str


Decision: TypeAlias = FinalAnswer | ToolCalls | ParseFailure
"""What a decision parser makes of a model reply."""


@dataclass(frozen=True, slots=True)
class Budgets:
    """Limits on one run.

    A run that would exceed one stops with ``BUDGET_EXHAUSTED`` (or ``PARSE_FAILURES``),
    writing which.

    Attributes:
        max_steps: Model calls, in total.
        max_actions: Tool calls, in total.
        max_parse_failures: Model replies in a row that do not parse.
        max_prompt_chars: Characters of the prompt (system prompt, messages, tool
            specs) sent to one model call.
    """

    max_steps: int = 20
    max_actions: int = 50
    max_parse_failures: int = 3
    max_prompt_chars: int = 200_000

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_actions", "max_parse_failures", "max_prompt_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    def to_json(self) -> dict[str, JSONValue]:
        """Return the budgets as a JSON object (stored when a run starts)."""
        return {
            "max_steps": self.max_steps,
            "max_actions": self.max_actions,
            "max_parse_failures": self.max_parse_failures,
            "max_prompt_chars": self.max_prompt_chars,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Budgets:
        """Rebuild budgets from [`to_json`][steadyloop.loop.Budgets.to_json] output."""
        return cls(**{k: int(v) for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run stopped.

    Attributes:
        run_id: The run.
        stop_reason: Why it stopped.
        output: The final answer, when ``COMPLETED``.
        detail: A sentence on why it stopped (which budget, which error, which intent).
        steps: Model calls made (with results).
        actions: Tool calls made (with results).
        parse_failures: Model replies that did not parse, in total.
        open_intent: With ``RESUME_STATE_UNKNOWN``: the intent id the caller must
            [`resolve`][steadyloop.loop.resolve].
        ended_at: When the end record was written (microseconds; the injected clock).
    """

    run_id: str
    stop_reason: StopReason
    output: str | None = None
    detail: str = ""
    steps: int = 0
    actions: int = 0
    parse_failures: int = 0
    open_intent: str | None = None
    ended_at: int = 0

    def comparable(self) -> dict[str, JSONValue]:
        """The result without wall times, for comparing a resumed run with a clean one."""
        return {
            "run_id": self.run_id,
            "stop_reason": self.stop_reason.value,
            "output": self.output,
            "detail": self.detail,
            "steps": self.steps,
            "actions": self.actions,
            "parse_failures": self.parse_failures,
            "open_intent": self.open_intent,
        }
