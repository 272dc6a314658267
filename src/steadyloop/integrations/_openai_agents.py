"""The OpenAI Agents SDK guard: intent before effect for an agent's function tools.

The SDK saves a turn's items to the session after the turn's tools ran. A run that dies
in between is continued the SDK's way, by running the agent again over the session's
history; the model is asked again, and the tools it calls run again. A guarded tool
finds its own record when that happens.

**What identifies a re-executed effect.** Not the model's call id: a model asked again
issues new ids. What stays is the call's *position* in the conversation:

``(session id, items the session held when the call was made, tool name, occurrence)``

where the occurrence counts the calls of that tool within one model response (the
first is 0), and the items held leave out handoffs (the calls that transfer the
conversation to another agent, and their outputs). A run continued after a crash
starts again at the first agent, which hands off again: that adds a handoff to the
session, but no item that identifies an effect, so a call of the agent handed to
keeps its position. A turn whose items were saved is never executed again (the model
sees its outputs), so the same position is the same effect.

**Unknown effects** surface through the SDK's own approval mechanism: a `NEVER` tool
whose intent has no result asks for approval (``needs_approval``), so the run returns
with ``result.interruptions``. The caller finds out what happened, records it with
[AgentsGuard.decide][steadyloop.integrations.openai_agents.AgentsGuard.decide] (which
also approves the call) and runs the state again with
[AgentsGuard.run][steadyloop.integrations.openai_agents.AgentsGuard.run]: a tool that
happened returns its recorded value, one that did not runs now. While the run waits,
the call's id points to its key in the journal, so the decision can be made in another
process.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from steadyloop._errors import GuardError
from steadyloop.effects import Happened, NotHappened, Recorded, ReplayPolicy, Unknown
from steadyloop.integrations._guard import Guard, replayed
from steadyloop.journal import Journal, StreamWrite
from steadyloop.records import JSONValue, RecordFactory, canonical_json, check_canonical

try:
    from agents import Agent, FunctionTool, Handoff, Runner, function_tool
    from agents.items import ToolApprovalItem
    from agents.memory.session import Session
    from agents.result import RunResult
    from agents.run_state import RunState
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "steadyloop.integrations.openai_agents needs the OpenAI Agents SDK: install the "
        "extra 'steadyloop[openai-agents]'"
    ) from exc

__all__ = ["AgentsGuard"]

PENDING_KIND = "effect.pending"
"""A record that maps a waiting call's id to its effect key (payload ``call_id``, ``key``)."""


@dataclass
class _Scope:
    """One run of the agent: its session, and the keys of the calls seen so far."""

    session: Session
    handoffs: frozenset[str] = frozenset()
    """The tool names of every handoff reachable from the run's first agent."""
    calls: dict[str, tuple[str | int, ...]] = field(default_factory=dict)
    counts: Counter[tuple[int, str]] = field(default_factory=Counter)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Keys are given one call at a time, in the order the SDK asks (the response's)."""


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "steadyloop_agents_scope", default=None
)


class AgentsGuard(Guard):
    """Guards function tools of OpenAI Agents SDK agents with a Steadyloop journal.

    Args:
        url: The journal the intents and results go to (any Steadyloop backend).
        namespace: The journal namespace for them.
        wrap: Wraps the opened journal (test kits use it to model a crash).
        records: Where record ids and times come from.

    Examples:
        ```python
        guard = AgentsGuard("sqlite:effects.db")

        @guard.function_tool(policy=ReplayPolicy.NEVER)
        def refund(order: str, cents: int) -> str:
            return payments.refund(order, cents)

        agent = Agent(name="support", tools=[refund], model=...)
        session = SQLiteSession("ticket-17", "conversations.db")
        result = await guard.run(agent, "Refund order 17", session=session)
        # after a crash: run again over the session's history
        result = await guard.run(agent, [], session=session)
        for item in result.interruptions:  # an unknown refund waits for you
            state = result.to_state()
            await guard.decide(state, item, Happened(value="refunded"))
            result = await guard.run(agent, state, session=session)
        ```
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "openai-agents",
        wrap: Callable[[Journal], Journal] | None = None,
        records: RecordFactory | None = None,
    ) -> None:
        super().__init__(url, namespace=namespace, wrap=wrap, records=records)

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[Any] | RunState[Any],
        *,
        session: Session,
        **kwargs: Any,
    ) -> RunResult:
        """Run or continue an agent with ``Runner.run``; its guarded tools find their records.

        Args:
            agent: The agent.
            input: A new input, ``[]`` to continue a run that died over the session's
                history, or a [RunState] the caller approved calls in.
            session: The session the run keeps its items in (guarded tools key their
                effects by it).
            **kwargs: Passed on to ``Runner.run``.
        """
        token = _SCOPE.set(_Scope(session, handoff_names(agent)))
        try:
            return await Runner.run(agent, input, session=session, **kwargs)
        finally:
            _SCOPE.reset(token)

    async def continue_run(
        self, agent: Agent[Any], input: str | list[Any], *, session: Session, **kwargs: Any
    ) -> RunResult | None:
        """Continue a run that died, the SDK's way: run the agent again over the session's history.

        Args:
            agent: The agent.
            input: What the dead run was given: passed again only if the session
                never saved it (the process died before the SDK's first save).
            session: The run's session.
            **kwargs: Passed on to ``Runner.run``.

        Returns:
            The run's result; None if the session's last item is already the agent's
            answer (the run ended before it died; read the answer from the session).
        """
        history = await session.get_items(limit=sys.maxsize)
        if history and _is_answer(history[-1]):
            return None
        return await self.run(agent, input if not history else [], session=session, **kwargs)

    def function_tool(
        self,
        policy: ReplayPolicy = ReplayPolicy.NEVER,
        *,
        name: str | None = None,
        **options: Any,
    ) -> Callable[[Callable[..., Any]], FunctionTool]:
        """Make a guarded SDK function tool of a function (as ``agents.function_tool`` does).

        Its arguments and return value must be JSON values: they are recorded.

        Args:
            policy: `SAFE` (may run again when its result is missing) or `NEVER` (an
                intent without a result asks for approval until the caller decides).
            name: The tool's name (the function's name by default).
            **options: Passed on to ``agents.function_tool``; a ``needs_approval`` of
                yours is asked as well.
        """

        def decorate(fn: Callable[..., Any]) -> FunctionTool:
            theirs = options.pop("needs_approval", False)
            tool = function_tool(fn, name_override=name, **options)
            tool_name = tool.name
            inner = tool.on_invoke_tool

            async def needs_approval(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
                if policy is ReplayPolicy.NEVER and await self._unknown_call(
                    tool_name, call_id, params
                ):
                    return True
                if callable(theirs):
                    answer = theirs(ctx, params, call_id)
                    return bool(await answer if inspect.isawaitable(answer) else answer)
                return bool(theirs)

            async def invoke(ctx: ToolContext[Any], raw: str) -> Any:
                arguments = _arguments(tool_name, raw)
                key = await self._key(ctx.tool_call_id, tool_name)
                found = await self._bridge.run_async(
                    self.ledger.begin(key, tool_name, policy, arguments)
                )
                if isinstance(found, Recorded):
                    return replayed(tool_name, found)
                if isinstance(found, Unknown):
                    raise GuardError(
                        f"tool {tool_name!r} has an effect of unknown outcome (intent "
                        f"{found.intent_id!r}); it was not asked for approval, so it does not run"
                    )
                return await self.perform_async(found, lambda: inner(ctx, raw))

            return dataclasses.replace(tool, on_invoke_tool=invoke, needs_approval=needs_approval)

        return decorate

    async def unknown(self, item: ToolApprovalItem) -> Unknown | None:
        """The unknown effect an approval item stands for, or None if it is not one of ours."""
        call_id = getattr(item.raw_item, "call_id", None)
        if not isinstance(call_id, str):
            return None
        key = await self._bridge.run_async(self._pending(call_id))
        if key is None:
            return None
        found = await self._bridge.run_async(
            self.ledger.find(key, str(item.tool_name), ReplayPolicy.NEVER, _raw_args(item))
        )
        return found if isinstance(found, Unknown) else None

    async def decide(
        self, state: RunState[Any], item: ToolApprovalItem, outcome: Happened | NotHappened
    ) -> None:
        """Record what really happened to an unknown effect, and approve its call in ``state``.

        Then run ``state`` again with [run][steadyloop.integrations.openai_agents.AgentsGuard.run]:
        a call that happened returns its recorded value; one that did not runs now.

        Raises:
            GuardError: ``item`` is not an unknown effect of this guard.
        """
        call_id = getattr(item.raw_item, "call_id", None)
        key = await self._bridge.run_async(self._pending(str(call_id)))
        if key is None:
            raise GuardError(f"call {call_id!r} is not an effect of unknown outcome of this guard")
        found = await self._bridge.run_async(
            self.ledger.find(key, str(item.tool_name), ReplayPolicy.NEVER, _raw_args(item))
        )
        if isinstance(found, Unknown):
            await self._bridge.run_async(self.ledger.decide(found, outcome))
        state.approve(item)

    async def _unknown_call(self, tool: str, call_id: str, params: dict[str, Any]) -> bool:
        """Whether a `NEVER` call's effect is unknown; if so, remember its key by call id."""
        key = await self._key(call_id, tool)
        found = await self._bridge.run_async(
            self.ledger.find(key, tool, ReplayPolicy.NEVER, cast(JSONValue, params))
        )
        if not isinstance(found, Unknown):
            return False
        await self._bridge.run_async(self._remember(call_id, key))
        return True

    async def _key(self, call_id: str, tool: str) -> tuple[str | int, ...]:
        """The position of a call in its session (see the module docstring)."""
        scope = _SCOPE.get()
        if scope is None:
            raise GuardError(
                f"guarded tool {tool!r} was called outside AgentsGuard.run: run the agent "
                "with guard.run(agent, input, session=...)"
            )
        # The SDK runs a response's calls as concurrent tasks: without the lock, the
        # reads below finish in any order and the occurrences with them, so a call
        # run again could find another call's record.
        async with scope.lock:
            if call_id in scope.calls:
                return scope.calls[call_id]
            pending = await self._bridge.run_async(self._pending(call_id))
            if pending is not None:
                scope.calls[call_id] = pending
                return pending
            items = await scope.session.get_items(limit=sys.maxsize)
            key = await self._asked_again(items, tool, taken=set(scope.calls.values()))
            if key is None:
                held = len(without_handoffs(items, scope.handoffs))
                occurrence = scope.counts[(held, tool)]
                scope.counts[(held, tool)] += 1
                key = (str(scope.session.session_id), held, tool, occurrence)
            scope.calls[call_id] = key
            return key

    async def _asked_again(
        self, items: list[Any], tool: str, taken: set[tuple[str | int, ...]]
    ) -> tuple[str | int, ...] | None:
        """The key of a call of ours that a crash left without its output, if this call redoes it.

        When a run stops for approval, the SDK saves the turn's items, the waiting call
        among them. If the approved run dies before the next save, the session keeps
        that call without its output (the SDK leaves such a call out of what the model
        is shown), and the turn's other items moved the position. The model asked
        again issues the call anew: it takes the waiting call's key, the first one not
        taken yet in this run, as long as nothing but outputs and other such calls
        came after it (a later turn would have answered it).
        """
        raws = [_raw(item) for item in items]
        answered = {r.get("call_id") for r in raws if r.get("type") == "function_call_output"}

        def waiting(raw: dict[str, Any]) -> bool:
            return raw.get("type") == "function_call" and raw.get("call_id") not in answered

        for i, raw in enumerate(raws):
            if not (waiting(raw) and raw.get("name") == tool):
                continue
            if not all(waiting(r) or r.get("type") == "function_call_output" for r in raws[i:]):
                continue
            key = await self._bridge.run_async(self._pending(str(raw.get("call_id"))))
            if key is not None and key not in taken:
                return key
        return None

    def _pending_stream(self, call_id: str) -> str:
        return canonical_json(["pending", call_id])

    async def _remember(self, call_id: str, key: tuple[str | int, ...]) -> None:
        journal, ns = self.ledger.journal, self.ledger.namespace
        stream = self._pending_stream(call_id)
        if await journal.head(ns, stream) == 0:
            record = self.ledger.records(PENDING_KIND, {"call_id": call_id, "key": list(key)})
            await journal.append(ns, [StreamWrite(stream, [record], 1)])

    async def _pending(self, call_id: str) -> tuple[str | int, ...] | None:
        stored = await self.ledger.journal.read(
            self.ledger.namespace, self._pending_stream(call_id)
        )
        if not stored:
            return None
        return tuple(stored[0].record.payload["key"])  # type: ignore[arg-type]


def handoff_names(agent: Agent[Any]) -> frozenset[str]:
    """The tool names of the handoffs an agent and the agents it hands to can make.

    A handoff given as an agent is followed to that agent's own handoffs; one given as
    a [Handoff] object contributes its tool name (the agent behind it is not known
    until it runs).
    """
    names: set[str] = set()
    seen: set[int] = set()
    todo: list[Agent[Any]] = [agent]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for entry in getattr(current, "handoffs", ()):
            if isinstance(entry, Handoff):
                names.add(entry.tool_name)
            elif isinstance(entry, Agent):
                names.add(Handoff.default_tool_name(entry))
                todo.append(entry)
    return frozenset(names)


def without_handoffs(items: list[Any], names: frozenset[str]) -> list[dict[str, Any]]:
    """A session's items as dicts, without handoff calls and their outputs."""
    raws = [_raw(item) for item in items]
    if not names:
        return raws
    handoffs = {
        r.get("call_id")
        for r in raws
        if r.get("type") == "function_call" and r.get("name") in names
    }
    return [
        r
        for r in raws
        if r.get("type") not in ("function_call", "function_call_output")
        or r.get("call_id") not in handoffs
    ]


def _raw(item: Any) -> dict[str, Any]:
    """A session item as a dict."""
    return item if isinstance(item, dict) else getattr(item, "model_dump", dict)()


def _is_answer(item: Any) -> bool:
    """Whether a session item is an assistant message (the end of a run)."""
    raw = _raw(item)
    return raw.get("role") == "assistant" and raw.get("type", "message") == "message"


def _arguments(tool: str, raw: str) -> JSONValue:
    try:
        value = json.loads(raw) if raw else {}
        check_canonical(value)
    except ValueError as exc:
        raise GuardError(f"tool {tool!r}: its arguments are not JSON: {exc}") from None
    return cast(JSONValue, value)


def _raw_args(item: ToolApprovalItem) -> JSONValue:
    raw = getattr(item.raw_item, "arguments", "") or ""
    return _arguments(str(item.tool_name), raw)
