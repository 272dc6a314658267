"""The agent definition, and the parser that turns a model reply into a decision."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from steadyloop._errors import AgentLoadError, EncodingError
from steadyloop.loop._tools import ToolRegistry
from steadyloop.loop._types import (
    Budgets,
    Decision,
    FinalAnswer,
    ModelClient,
    ModelReply,
    ParseFailure,
    ReplayPolicy,
    ToolCalls,
)
from steadyloop.records import JSONValue, check_canonical

__all__ = ["Agent", "DecisionParser", "ToolCallParser", "load_agent"]


@runtime_checkable
class DecisionParser(Protocol):
    """Turns a model reply into a decision: tool calls, a final answer, or a failure.

    A parser must be deterministic: resume parses recorded replies again and must reach
    the same decisions.
    """

    def parse(self, reply: ModelReply, tools: ToolRegistry) -> Decision:
        """Interpret ``reply`` for an agent offering ``tools``."""
        ...


class ToolCallParser:
    """The default parser, for models with native tool calling.

    * tool calls present: each must name a registered tool and carry a JSON object as
      arguments, or the whole reply is a [`ParseFailure`][steadyloop.loop.ParseFailure];
    * otherwise non-blank text is the [`FinalAnswer`][steadyloop.loop.FinalAnswer];
    * otherwise (an empty reply) it is a [`ParseFailure`][steadyloop.loop.ParseFailure].
    """

    def parse(self, reply: ModelReply, tools: ToolRegistry) -> Decision:
        """Interpret ``reply``; see the class docstring."""
        if reply.tool_calls:
            calls: list[tuple[str, str, dict[str, JSONValue]]] = []
            for call in reply.tool_calls:
                problem = _call_id_problem(call.id, [c[0] for c in calls])
                if problem is not None:
                    return ParseFailure(problem)
                if not isinstance(call.name, str) or call.name not in tools:
                    known = ", ".join(sorted(t.name for t in tools)) or "none"
                    return ParseFailure(f"unknown tool {call.name!r}; the tools are: {known}")
                try:
                    args = json.loads(call.arguments) if call.arguments.strip() else {}
                except ValueError as exc:
                    return ParseFailure(
                        f"the arguments of tool call {call.id!r} ({call.name}) are not "
                        f"valid JSON: {exc}"
                    )
                try:
                    check_canonical(args)
                except EncodingError as exc:
                    return ParseFailure(
                        f"the arguments of tool call {call.id!r} ({call.name}) hold a value "
                        f"JSON cannot carry: {exc}"
                    )
                if not isinstance(args, dict):
                    return ParseFailure(
                        f"the arguments of tool call {call.id!r} ({call.name}) must be a "
                        f"JSON object, not {type(args).__name__}"
                    )
                calls.append((call.id, call.name, args))
            return ToolCalls(tuple(calls))
        if reply.text and reply.text.strip():
            return FinalAnswer(reply.text)
        return ParseFailure("the reply is empty: call a tool or give a final answer")


def _call_id_problem(call_id: object, earlier: list[str]) -> str | None:
    """Why a tool call id cannot tie a call to its result, or None if it can."""
    if not isinstance(call_id, str) or not call_id.strip():
        return f"a tool call id must be a non-empty string, not {call_id!r}"
    try:
        call_id.encode("utf-8")
    except UnicodeEncodeError:
        return "a tool call id must be valid Unicode, not " + ascii(call_id)
    if call_id in earlier:
        return f"the tool call id {call_id!r} is used twice in one reply"
    return None


@dataclass(frozen=True)
class Agent:
    """Everything that defines an agent: its model, tools, prompt and budgets.

    Attributes:
        name: Stored when a run starts; a run resumes only with an agent of that name.
        model: The model client.
        tools: The tools offered, each with its replay policy.
        system_prompt: The first message of every prompt (empty for none).
        budgets: Limits for runs started with this agent (stored with the run, so a
            resume uses the budgets the run started with).
        model_policy: The model call's replay policy. ``SAFE`` by default: asking
            again costs tokens but changes nothing outside.
        parser: Turns replies into decisions.
    """

    name: str
    model: ModelClient
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    system_prompt: str = ""
    budgets: Budgets = field(default_factory=Budgets)
    model_policy: ReplayPolicy = ReplayPolicy.SAFE
    parser: DecisionParser = field(default_factory=ToolCallParser)


def load_agent(path: str) -> Agent:
    """Import an agent given as ``module:attribute``.

    The attribute may be an [`Agent`][steadyloop.loop.Agent] or a function with no arguments
    returning one (a factory, so importing the module has no side effects).

    Raises:
        AgentLoadError: The path is malformed, the module does not import, the
            attribute is missing, or it is not an agent.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise AgentLoadError(f"agent {path!r} must be given as module:attribute")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise AgentLoadError(
            f"agent {path!r}: module {module_name!r} does not import: {type(exc).__name__}: {exc}"
        ) from exc
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AgentLoadError(
                f"agent {path!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not isinstance(obj, Agent) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise AgentLoadError(
                f"agent {path!r}: calling the factory failed: {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(obj, Agent):
        raise AgentLoadError(
            f"agent {path!r} is a {type(obj).__name__}, not a steadyloop Agent "
            "(or a function returning one)"
        )
    return obj
