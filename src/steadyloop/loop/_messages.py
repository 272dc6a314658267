"""How session events become the messages a model sees, and replies become events."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from steadyloop.loop._types import (
    Decision,
    FinalAnswer,
    Message,
    ToolCall,
    ToolCalls,
)
from steadyloop.records import JSONValue, canonical_json
from steadyloop.sessions import (
    Event,
    Part,
    Session,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

__all__ = [
    "LOOP_AUTHOR",
    "TOOL_AUTHOR",
    "UNPARSED",
    "USER_AUTHOR",
    "decision_to_json",
    "event_messages",
    "reply_events_parts",
    "session_messages",
    "tool_result_text",
]

USER_AUTHOR = "user"
"""Author of the run's input event."""

TOOL_AUTHOR = "tool"
"""Author of tool-result events."""

LOOP_AUTHOR = "steadyloop"
"""Author of the loop's own feedback (why a reply was not used); shown as a user turn."""

UNPARSED = "_unparsed"
"""Key under which a tool call's unparseable argument text is kept in a session event."""


def decision_to_json(decision: Decision) -> dict[str, JSONValue]:
    """Return a decision as it is stored in a model call's result record."""
    if isinstance(decision, FinalAnswer):
        return {"kind": "final", "text": decision.text}
    if isinstance(decision, ToolCalls):
        return {"kind": "tool_calls", "calls": [[c, n, dict(a)] for c, n, a in decision.calls]}
    return {"kind": "parse_failure", "reason": decision.reason}


def reply_events_parts(
    reply: Mapping[str, Any], decision: Mapping[str, Any]
) -> tuple[list[Part], str | None]:
    """The parts of the session event that records a model reply, and loop feedback.

    Made straight from the reply and its decision as a model call's result record
    holds them ([`ModelReply.to_json`][steadyloop.loop.ModelReply.to_json] and
    `decision_to_json`), without rebuilding either object first.

    A reply that parsed is stored as text and tool calls. A reply that did not is
    stored as it came (broken argument text under `UNPARSED`), each of its tool
    calls answered with the parse error, so the conversation stays well formed; a reply
    without tool calls gets the error as feedback text instead (the second item).
    """
    parts: list[Part] = []
    text = reply.get("text")
    if text is not None and str(text):
        parts.append(TextPart(str(text)))
    kind = decision.get("kind")
    if kind == "tool_calls":
        calls = decision.get("calls") or ()
        parts.extend(ToolCallPart(str(c), str(n), dict(a)) for c, n, a in calls)
        return parts, None
    if kind == "final":
        return parts or [TextPart(str(decision.get("text") or ""))], None
    reason = str(decision.get("reason") or "unknown decision")
    tool_calls = [ToolCall.from_json(c) for c in reply.get("tool_calls") or ()]
    for call in tool_calls:
        parts.append(ToolCallPart(call.id or "call", call.name or "?", {UNPARSED: call.arguments}))
    for call in tool_calls:
        parts.append(
            ToolResultPart(call.id or "call", call.name or "?", None, f"not executed: {reason}")
        )
    if tool_calls:
        return parts, None
    return parts or [TextPart("")], f"Your last reply could not be used: {reason}"


def tool_result_text(part: ToolResultPart) -> str:
    """The text of a tool message: the response as JSON, or the error."""
    if part.error is not None:
        return f"error: {part.error}"
    response = part.response
    if isinstance(response, str):
        return response
    return canonical_json(response)


def _arguments_text(part: ToolCallPart) -> str:
    args = dict(part.arguments)
    raw = args.get(UNPARSED)
    if len(args) == 1 and isinstance(raw, str):
        return raw
    return "".join(_ARGUMENTS_ENCODER(args, 0))


def _make_arguments_encoder() -> Any:
    """The encoder ``json.dumps(args, ensure_ascii=False, sort_keys=True)`` builds, once.

    It checks no cycles: a part's arguments are a JSON copy, which holds none.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - not CPython
        return json.JSONEncoder(ensure_ascii=False, sort_keys=True).iterencode
    encode_str = json.encoder.encode_basestring
    return make(None, _no_json, encode_str, None, ": ", ", ", True, False, True)


def _no_json(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_ARGUMENTS_ENCODER = _make_arguments_encoder()


def event_messages(event: Event) -> list[Message]:
    """The messages one session event contributes to the model's prompt.

    ``user`` and ``steadyloop`` events are user turns; any other author's text and tool
    calls form an assistant turn, and its tool results follow as ``tool`` messages.
    """
    if event.author in (USER_AUTHOR, LOOP_AUTHOR):
        return [Message("user", event.text)]
    texts = [p.text for p in event.parts if isinstance(p, TextPart)]
    calls = tuple(
        ToolCall(p.call_id, p.name, _arguments_text(p))
        for p in event.parts
        if isinstance(p, ToolCallPart)
    )
    out: list[Message] = []
    if texts or calls:
        out.append(Message("assistant", "\n".join(texts) if texts else None, calls))
    out.extend(
        Message("tool", tool_result_text(p), tool_call_id=p.call_id)
        for p in event.parts
        if isinstance(p, ToolResultPart)
    )
    return out


def session_messages(system_prompt: str, session: Session) -> list[Message]:
    """The prompt for a session: system prompt, latest summary, then uncovered events."""
    messages: list[Message] = []
    if system_prompt:
        messages.append(Message("system", system_prompt))
    context = session.context()
    if context.summary_text:
        messages.append(
            Message("system", f"Summary of the earlier conversation:\n{context.summary_text}")
        )
    for event in context.events:
        messages.extend(event_messages(event))
    return messages


def messages_size(messages: Sequence[Message]) -> int:
    """The prompt size of ``messages`` in characters."""
    return sum(m.size for m in messages)
