"""The Pydantic AI agent the crash tests use: lookup and two charges per response, then notify."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from steadyloop.loop import ReplayPolicy
from steadyloop.testing import PydanticProcess

PROMPT = "charge o-1 and o-2"


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Charge both orders in one response (two calls of the same NEVER tool), then notify, then answer."""
    shown = str(messages)
    if "done:charge/o-1" not in shown or "done:charge/o-2" not in shown:
        return ModelResponse(
            parts=[
                ToolCallPart("lookup", {"order": "o-1"}),
                ToolCallPart("charge", {"order": "o-1"}),
                ToolCallPart("charge", {"order": "o-2"}),
            ]
        )
    if "done:notify" not in shown:
        return ModelResponse(parts=[ToolCallPart("notify", {"order": "o-1"})])
    return ModelResponse(parts=[TextPart("charged and notified")])


def shop_agent(p: PydanticProcess) -> Agent[None, Any]:
    """The shop agent for one kit process."""

    @p.tool(ReplayPolicy.SAFE)
    def lookup(order: str) -> str:
        return p.effect("lookup", "safe", f"lookup/{order}")

    @p.tool(ReplayPolicy.NEVER)
    def charge(order: str) -> str:
        return p.effect("charge", "never", f"charge/{order}")

    @p.tool(ReplayPolicy.SAFE)
    def notify(order: str) -> str:
        return p.effect("notify", "safe", f"notify/{order}")

    return Agent(
        FunctionModel(respond),
        name="shop",
        tools=[lookup, charge, notify],
        output_type=[str, DeferredToolRequests],
        capabilities=p.capabilities(),
    )
