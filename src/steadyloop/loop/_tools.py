"""Tools, their replay policies, and the registry an agent offers the model."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from steadyloop.loop._types import ReplayPolicy, ToolSpec
from steadyloop.records import JSONValue

__all__ = ["Tool", "ToolContext", "ToolRegistry"]

ToolFunction = Callable[..., Awaitable[JSONValue] | JSONValue]


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may learn about the call it serves.

    A tool whose function has a parameter named ``context`` receives one. A
    never-repeat tool should pass
    [`idempotency_key`][steadyloop.loop.ToolContext.idempotency_key] to an external API that
    accepts one, so that even a caller's wrong "it did not happen" decision cannot double the
    effect there. Do not use [`intent_id`][steadyloop.loop.ToolContext] for that: a re-execution
    after [`NotHappened`][steadyloop.loop.NotHappened] is a new intent with a new id.

    Attributes:
        run_id: The run.
        intent_id: The id of the intent written, durably, before this call.
        step: The step (model call number) that asked for this action.
        index: The call's position among the tool calls of that step's reply.
        attempt: 1 for the first execution; higher when resume re-executes it.
    """

    run_id: str
    intent_id: str
    step: int
    index: int
    attempt: int

    @property
    def idempotency_key(self) -> str:
        """``run_id/step/index``: the same for every attempt at this one action."""
        return f"{self.run_id}/{self.step}/{self.index}"


@dataclass(frozen=True)
class Tool:
    """A tool the model may call.

    Attributes:
        name: Its name, as the model calls it.
        function: Called with the model's arguments as keyword arguments (and
            ``context=`` if it has such a parameter); sync or async; returns a JSON
            value, which becomes the observation. An exception it raises becomes the
            observation too (as an error), and the action counts as done.
        policy: May resume run it again if it may or may not have happened?
        description: What it does, for the model.
        parameters: A JSON Schema of its arguments.
        thread: Call a synchronous function in a worker thread (``asyncio.to_thread``),
            so that while it blocks the event loop goes on: other runs, and an audit
            worker's lease heartbeats. Off by default: the hop costs about 0.15 ms per
            call, and a function called inline may use the loop's objects. Turn it on
            for any sync tool that may block for long (I/O, ``subprocess.run``,
            ``time.sleep``); an async function is awaited either way.
    """

    name: str
    function: ToolFunction
    policy: ReplayPolicy
    description: str = ""
    parameters: Mapping[str, JSONValue] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    thread: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.policy, ReplayPolicy):
            raise TypeError(
                f"tool {self.name!r}: policy must be ReplayPolicy.SAFE or ReplayPolicy.NEVER"
            )

    @property
    def spec(self) -> ToolSpec:
        """How the tool is described to the model."""
        return ToolSpec(self.name, self.description, self.parameters)

    @functools.cached_property
    def wants_context(self) -> bool:
        """Whether the function takes a ``context`` parameter.

        Worked out once per tool (``inspect.signature`` is slow, and a tool is frozen:
        its function never changes).
        """
        try:
            return "context" in inspect.signature(self.function).parameters
        except (TypeError, ValueError):
            return False

    async def invoke(self, arguments: Mapping[str, JSONValue], context: ToolContext) -> Any:
        """Call the function with ``arguments`` (and ``context`` if it wants it)."""
        kwargs: dict[str, Any] = dict(arguments)
        if self.wants_context:
            kwargs["context"] = context
        if self.thread and not inspect.iscoroutinefunction(self.function):
            result = await asyncio.to_thread(self.function, **kwargs)
        else:
            result = self.function(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result


class ToolRegistry:
    """The tools of an agent, each with its replay policy.

    Examples:
        >>> tools = ToolRegistry()
        >>> @tools.tool(policy=ReplayPolicy.SAFE, description="Add two numbers.")
        ... def add(a: int, b: int) -> int:
        ...     return a + b
        >>> tools.get("add").policy
        <ReplayPolicy.SAFE: 'safe'>
    """

    def __init__(self, tools: Mapping[str, Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = dict(tools or {})

    def add(self, tool: Tool) -> Tool:
        """Register a tool.

        Raises:
            ValueError: A tool of that name is already registered.
        """
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def tool(
        self,
        *,
        policy: ReplayPolicy,
        name: str | None = None,
        description: str = "",
        parameters: Mapping[str, JSONValue] | None = None,
        thread: bool = False,
    ) -> Callable[[ToolFunction], ToolFunction]:
        """Decorate a function to register it as a tool; the policy must be stated.

        ``thread=True`` calls a synchronous function in a worker thread (see
        [`Tool`][steadyloop.loop.Tool]), so a tool that blocks does not stall the event loop.
        """

        def register(fn: ToolFunction) -> ToolFunction:
            self.add(
                Tool(
                    name=name or fn.__name__,
                    function=fn,
                    policy=policy,
                    description=description or (inspect.getdoc(fn) or ""),
                    parameters=parameters or {"type": "object", "properties": {}},
                    thread=thread,
                )
            )
            return fn

        return register

    def get(self, name: str) -> Tool:
        """Return a tool by name.

        Raises:
            KeyError: No such tool.
        """
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self) -> list[ToolSpec]:
        """The specs of every tool, in registration order."""
        return [t.spec for t in self._tools.values()]
