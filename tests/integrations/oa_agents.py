"""The OpenAI Agents SDK agent the crash tests use: lookup, charge, notify, each a counted effect."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from agents import Agent, SQLiteSession
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from steadyloop.loop import ReplayPolicy
from steadyloop.testing import AgentProcess

PLAN = [("lookup", "o-1"), ("charge", "o-1"), ("notify", "o-1")]


def next_call(shown: Any) -> list[Any]:
    """Call the first tool of the plan whose output the model has not been shown, with a fresh id."""
    text = json.dumps(shown, default=str)
    for tool, order in PLAN:
        if f"done:{tool}/{order}" not in text:
            return [function_call(tool, {"order": order}, call_id=f"call_{uuid.uuid4().hex[:12]}")]
    return [assistant_message("charged and notified")]


def next_calls_together(shown: Any) -> list[Any]:
    """Call lookup and charge in one response while either lacks its output, then notify."""
    text = json.dumps(shown, default=str)
    first = [(tool, order) for tool, order in PLAN[:2] if f"done:{tool}/{order}" not in text]
    if first:
        return [
            function_call(tool, {"order": order}, call_id=f"call_{uuid.uuid4().hex[:12]}")
            for tool, order in first
        ]
    return next_call(shown)


def shop_agent(p: AgentProcess, respond: Any = next_call) -> Agent[Any]:
    """The shop agent; ``respond`` is its model's (``next_call`` by default)."""

    @p.tool(ReplayPolicy.SAFE)
    def lookup(order: str) -> str:
        return p.effect("lookup", "safe", f"lookup/{order}")

    @p.tool(ReplayPolicy.NEVER)
    def charge(order: str) -> str:
        return p.effect("charge", "never", f"charge/{order}")

    @p.tool(ReplayPolicy.SAFE)
    def notify(order: str) -> str:
        return p.effect("notify", "safe", f"notify/{order}")

    model = ScriptedModel([ModelStep.respond(lambda call: respond(call.input)) for _ in range(50)])
    return Agent(
        name="shop", instructions="Charge the order.", tools=[lookup, charge, notify], model=model
    )


def sqlite_session(folder: Path) -> SQLiteSession:
    return SQLiteSession("conversation-1", str(folder / "conversation.db"))


def hand_off(shown: Any) -> list[Any]:
    """The triage model: hand the conversation to the shop agent, whatever it was shown."""
    return [function_call("transfer_to_shop", {}, call_id=f"call_{uuid.uuid4().hex[:12]}")]


def triage_agent(p: AgentProcess, respond: Any = next_call) -> Agent[Any]:
    """A triage agent that hands every conversation off to the shop agent (``respond`` is the shop's model)."""
    model = ScriptedModel([ModelStep.respond(lambda call: hand_off(call.input)) for _ in range(50)])
    return Agent(
        name="triage",
        instructions="Hand the customer to the shop.",
        handoffs=[shop_agent(p, respond)],
        model=model,
    )
