"""The Pydantic AI guard: intent before effect for an agent's function tools.

Pydantic AI executes the tool calls of a model response when the run reaches them. A
run that dies after a tool acted and before its return was kept is run again: from
the ``message_history`` the caller saved (the response that asked for the call is its
last message, so Pydantic AI executes that response's calls again), or by DBOS
(``pydantic_ai.durable_exec.dbos``), which re-executes the workflow, replays the model
responses it recorded as steps and calls the tools again. A guarded tool finds its own
record when that happens.

**What identifies a re-executed effect.** Only what the message history keeps stable:

``(conversation id, index of the model response among the history's responses, index of
the call among that response's parts)``

found by the call's ``tool_call_id`` in ``RunContext.messages``. Not the run id (a run
started again from a saved history gets a new one) and not the tool call id alone (a
model asked again after a crash, before its response was saved, issues new ids): the
position stays. A response asked again may name another tool or other arguments at
that position: the ledger compares both, so a `NEVER` effect is then unknown
(``arguments_changed``), asked about, never matched. The conversation id comes from the
history, or from the ``conversation_id`` argument of the run: give the first run one,
so that a run started again before anything was saved keys its effects the same way
(under DBOS it is derived from the workflow id).

**Unknown effects** stop the run through Pydantic AI's own human-in-the-loop mechanism:
a `NEVER` tool whose intent has no result raises ``ApprovalRequired``, so the run ends
with a ``DeferredToolRequests`` output (give the agent ``output_type=[..., DeferredToolRequests]``)
whose metadata for the call is the effect's question
([Unknown.to_json][steadyloop.effects.Unknown.to_json]). The caller finds out what happened,
records it with [PydanticAIGuard.decide][steadyloop.integrations.pydantic_ai.PydanticAIGuard.decide]
and runs the agent again with ``deferred_tool_results`` approving the call: a tool that
happened returns its recorded value, one that did not runs now, under a new intent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, cast

from steadyloop._errors import GuardError
from steadyloop.effects import Happened, NotHappened, Recorded, ReplayPolicy, Unknown
from steadyloop.integrations._guard import Guard, Raised, replayed
from steadyloop.journal import Journal
from steadyloop.records import JSONValue, RecordFactory, check_canonical

try:
    from pydantic_ai import ApprovalRequired, RunContext, Tool
    from pydantic_ai._function_schema import FunctionSchema
    from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "steadyloop.integrations.pydantic_ai needs Pydantic AI: install the extra "
        "'steadyloop[pydantic-ai]'"
    ) from exc

__all__ = ["PydanticAIGuard", "call_position"]


def call_position(
    messages: Sequence[ModelMessage], tool_call_id: str
) -> tuple[int, int, ToolCallPart]:
    """Where a tool call stands in a message history: (response index, part index, the call).

    The response index counts model responses only, so requests a caller adds (a
    deferred tool's result, a new prompt) do not shift it. The latest response holding
    the id wins (a provider may reuse ids across responses).

    Raises:
        GuardError: No model response in ``messages`` holds that call.
    """
    responses = [m for m in messages if isinstance(m, ModelResponse)]
    for r in range(len(responses) - 1, -1, -1):
        for p, part in enumerate(responses[r].parts):
            if isinstance(part, ToolCallPart) and part.tool_call_id == tool_call_id:
                return r, p, part
    raise GuardError(
        f"tool call {tool_call_id!r} is in no model response of the run's messages, so it "
        "has no position to key its effect by"
    )


def _arguments(tool: str, part: ToolCallPart) -> JSONValue:
    """The call's arguments as the model gave them (JSON), the form the intent records."""
    try:
        value = part.args_as_dict(raise_if_invalid=True)
        check_canonical(value)
    except ValueError as exc:
        raise GuardError(f"tool {tool!r}: its arguments are not JSON: {exc}") from None
    return cast(JSONValue, value)


class PydanticAIGuard(Guard):
    """Guards function tools of Pydantic AI agents with a Steadyloop journal.

    Args:
        url: The journal the intents and results go to (any Steadyloop backend).
        namespace: The journal namespace for them.
        wrap: Wraps the opened journal (test kits use it to model a crash).
        records: Where record ids and times come from.

    Examples:
        ```python
        guard = PydanticAIGuard("sqlite:effects.db")

        @guard.tool(ReplayPolicy.NEVER)
        def refund(ctx: RunContext[None], order: str, cents: int) -> str:
            return payments.refund(order, cents)

        agent = Agent(model, tools=[refund], output_type=[str, DeferredToolRequests])
        result = await agent.run("Refund order 17", conversation_id="ticket-17")
        ```
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "pydantic-ai",
        wrap: Callable[[Journal], Journal] | None = None,
        records: RecordFactory | None = None,
    ) -> None:
        super().__init__(url, namespace=namespace, wrap=wrap, records=records)

    def tool(
        self,
        policy: ReplayPolicy = ReplayPolicy.NEVER,
        *,
        name: str | None = None,
        not_happened_on: Raised = (),
        wait: float | None = None,
        **options: Any,
    ) -> Callable[[Callable[..., Any]], Tool[Any]]:
        """Make a guarded Pydantic AI tool of a function (as ``pydantic_ai.Tool`` does).

        The function may take a ``RunContext`` first, as any Pydantic AI tool. Its
        arguments and return value must be JSON values: they are recorded.

        Args:
            policy: `SAFE` (may run again when its result is missing) or `NEVER` (an
                intent without a result stops the run for a decision).
            name: The tool's name (the function's name by default).
            not_happened_on: Exception types the function raises only when it did not
                act: recorded as not happened, so the next call (a retry) runs it under
                a new intent. Any other exception of a `NEVER` tool stops the next call
                for a decision.
            wait: Seconds a call waits for a live process that holds the same effect to
                finish it; by default such a call raises
                [EffectBusy][steadyloop.integrations.EffectBusy] at once.
            **options: Passed on to ``pydantic_ai.Tool``.
        """

        def decorate(fn: Callable[..., Any]) -> Tool[Any]:
            plain: Tool[Any] = Tool(fn, name=name, **options)
            schema = plain.function_schema
            tool_name = plain.name
            guard = self

            @dataclasses.dataclass(kw_only=True)
            class _Guarded(FunctionSchema):
                async def call(self, args_dict: dict[str, Any], ctx: RunContext[Any]) -> Any:
                    return await guard._call(
                        tool_name,
                        policy,
                        ctx,
                        lambda: FunctionSchema.call(self, args_dict, ctx),
                        not_happened_on=not_happened_on,
                        wait=wait,
                    )

            guarded = _Guarded(
                **{f.name: getattr(schema, f.name) for f in dataclasses.fields(schema)}
            )
            return Tool(fn, name=name, function_schema=guarded, **options)

        return decorate

    def key(self, ctx: RunContext[Any]) -> tuple[str | int, ...]:
        """The effect key of the tool call ``ctx`` is for (see the module docstring)."""
        if ctx.tool_call_id is None or ctx.conversation_id is None:
            raise GuardError(
                f"tool {ctx.tool_name!r} was called without a tool call id or conversation "
                "id, so its effect has no key: call it from an agent run"
            )
        response, part, _ = call_position(ctx.messages, ctx.tool_call_id)
        return (ctx.conversation_id, response, part)

    async def _call(
        self,
        tool: str,
        policy: ReplayPolicy,
        ctx: RunContext[Any],
        call: Callable[[], Any],
        *,
        not_happened_on: Raised,
        wait: float | None,
    ) -> Any:
        assert ctx.tool_call_id is not None  # key() says so otherwise
        key = self.key(ctx)
        _, _, part = call_position(ctx.messages, ctx.tool_call_id)
        arguments = _arguments(tool, part)
        found = await self._bridge.run_async(
            self.ledger.begin(key, tool, policy, arguments, wait=wait)
        )
        if isinstance(found, Recorded):
            return replayed(tool, found)
        if isinstance(found, Unknown):
            # An approved call was decided (decide() recorded the outcome, so begin()
            # found it); one that is still unknown asks, whether approved or not.
            raise ApprovalRequired(metadata=found.to_json())
        return await self.perform_async(found, call, not_happened_on)

    async def unknown(self, call: ToolCallPart, metadata: Any) -> Unknown | None:
        """The unknown effect a deferred call stands for, or None if it is not one of ours.

        Args:
            call: One of ``DeferredToolRequests.approvals``.
            metadata: ``DeferredToolRequests.metadata[call.tool_call_id]``.
        """
        if not isinstance(metadata, dict) or metadata.get("steadyloop") != "effect_state_unknown":
            return None
        key = tuple(metadata["key"])
        found = await self._bridge.run_async(
            self.ledger.find(
                key, call.tool_name, ReplayPolicy.NEVER, _arguments(call.tool_name, call)
            )
        )
        return found if isinstance(found, Unknown) else None

    async def decide(
        self, call: ToolCallPart, metadata: Any, outcome: Happened | NotHappened
    ) -> None:
        """Record what really happened to the unknown effect of a deferred call.

        Then run the agent again with ``deferred_tool_results`` that approve the call:
        one that happened returns its recorded value, one that did not runs now. A
        call already decided (by an earlier, interrupted attempt) is left as it is.

        Args:
            call: One of ``DeferredToolRequests.approvals``.
            metadata: ``DeferredToolRequests.metadata[call.tool_call_id]``.
            outcome: What happened.

        Raises:
            GuardError: The call is not a deferred effect of this guard.
        """
        if not isinstance(metadata, dict) or metadata.get("steadyloop") != "effect_state_unknown":
            raise GuardError(
                f"call {call.tool_call_id!r} is not an effect of unknown outcome of this guard"
            )
        found = await self.unknown(call, metadata)
        if found is not None:
            await self._bridge.run_async(self.ledger.decide(found, outcome))
