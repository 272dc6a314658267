"""Tools, their replay policies, and the registry an agent offers the model."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import math
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from steadyloop._errors import ToolTimeout
from steadyloop.loop._types import ReplayPolicy, ToolSpec
from steadyloop.records import JSONValue

__all__ = ["Tool", "ToolContext", "ToolRegistry", "inline_tool_running"]

ToolFunction = Callable[..., Awaitable[JSONValue] | JSONValue]

_inline_calls = 0
"""How many synchronous tool functions are being called inline right now."""


def inline_tool_running() -> bool:
    """Whether the event loop's thread is inside a synchronous tool function.

    A signal handler that finds it so may raise into the tool to stop it: nothing else
    can, since the event loop does not run until the function returns.
    """
    return _inline_calls > 0


async def _in_thread(fn: Callable[..., Any], kwargs: dict[str, Any], name: str) -> Any:
    """Call ``fn`` in a daemon thread of its own and await its outcome.

    Not ``asyncio.to_thread``: the default executor's threads are joined when the
    event loop closes and when the interpreter exits, so a hung tool would keep the
    process alive after its run stopped. A daemon thread is abandoned instead; if it
    finishes after its caller gave up, its outcome is dropped.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(value: Any, exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is None:
            done.set_result(value)
        else:
            done.set_exception(exc)

    def work() -> None:
        try:
            value, exc = ctx.run(fn, **kwargs), None
        except BaseException as caught:  # handed to the awaiting task
            value, exc = None, caught
        # A closed event loop refuses (RuntimeError): nobody waits for the outcome then.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, exc)

    threading.Thread(target=work, name=f"steadyloop-tool-{name}", daemon=True).start()
    return await done


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
        thread: Call a synchronous function in a thread of its own, so that while it
            blocks the event loop goes on: other runs, an audit worker's lease
            heartbeats, a stop request. Off by default: the hop costs about 0.1 ms per
            call, and a function called inline may use the loop's objects. Turn it on
            for any sync tool that may block for long (I/O, ``subprocess.run``,
            ``time.sleep``); an async function is awaited either way. A run that
            stops while such a thread hangs abandons it (it is a daemon thread).
        timeout: Seconds the call may take, or ``None`` for no limit. A call that
            takes longer is given up: for a ``SAFE`` tool the observation is an error
            saying so; for a ``NEVER`` tool the run stops with
            ``RESUME_STATE_UNKNOWN``, its intent left without a result, exactly as
            after a crash (its thread may still act). Needs an async function or
            ``thread=True``: a synchronous function called inline cannot be given up.
    """

    name: str
    function: ToolFunction
    policy: ReplayPolicy
    description: str = ""
    parameters: Mapping[str, JSONValue] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    thread: bool = False
    timeout: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.policy, ReplayPolicy):
            raise TypeError(
                f"tool {self.name!r}: policy must be ReplayPolicy.SAFE or ReplayPolicy.NEVER"
            )
        if self.timeout is None:
            return
        t = self.timeout
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0:
            raise ValueError(
                f"tool {self.name!r}: timeout must be a positive number of seconds, not {t!r}"
            )
        if not self.thread and not inspect.iscoroutinefunction(self.function):
            raise ValueError(
                f"tool {self.name!r}: a timeout needs an async function or thread=True; "
                "a synchronous function called inline cannot be given up"
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
        """Call the function with ``arguments`` (and ``context`` if it wants it).

        Raises:
            ToolTimeout: The call took longer than its ``timeout``.
        """
        if self.timeout is None:
            return await self._call(arguments, context)
        scope = asyncio.timeout(self.timeout)
        try:
            async with scope:
                return await self._call(arguments, context)
        except TimeoutError:
            if not scope.expired():
                raise  # the tool's own TimeoutError: its outcome
            raise ToolTimeout(
                f"tool {self.name!r} did not finish within its timeout of {self.timeout:g} s"
            ) from None

    async def _call(self, arguments: Mapping[str, JSONValue], context: ToolContext) -> Any:
        global _inline_calls  # noqa: PLW0603 - read by signal handlers, see inline_tool_running
        kwargs: dict[str, Any] = dict(arguments)
        if self.wants_context:
            kwargs["context"] = context
        if self.thread and not inspect.iscoroutinefunction(self.function):
            return await _in_thread(self.function, kwargs, self.name)
        _inline_calls += 1
        try:
            result = self.function(**kwargs)
        finally:
            _inline_calls -= 1
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
        timeout: float | None = None,
    ) -> Callable[[ToolFunction], ToolFunction]:
        """Decorate a function to register it as a tool; the policy must be stated.

        ``thread=True`` calls a synchronous function in a thread of its own, so a tool
        that blocks does not stall the event loop; ``timeout`` gives the call up after
        that many seconds (see [`Tool`][steadyloop.loop.Tool]).
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
                    timeout=timeout,
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
