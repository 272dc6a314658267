"""A zygote for real SIGKILLs of a guarded OpenAI Agents SDK agent (see lg_sigkill_child.py).

Commands (JSON): ``{"store": "sqlite:PATH" | "postgresql+psycopg://...", "table": NAME,
"guard": URL, "sink": PATH, "thread": ORDER, "pause": seconds, "handoff": bool}``. Each
attempt continues the order's run the SDK's way and answers an unknown charge with what
the sink says. With ``handoff``, a triage agent hands the conversation to the shop
agent first (and again on every continued run, as the SDK starts at the first agent).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from agents import Agent, SQLiteSession
from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from sigkill_helpers import serve

from steadyloop.integrations import current_intent
from steadyloop.integrations.openai_agents import AgentsGuard
from steadyloop.loop import Happened, NotHappened, ReplayPolicy
from steadyloop.testing import EffectSink


def agent(
    guard: AgentsGuard, sink: EffectSink, order: str, pause: float, handoff: bool
) -> Agent[Any]:
    def act(tool: str, policy: str) -> str:
        action = f"{tool}/{order}"
        time.sleep(pause)  # widen the windows a kill can land in
        sink.record(tool, policy, action, intent_id=current_intent())
        time.sleep(pause)
        return f"done:{action}"

    @guard.function_tool(ReplayPolicy.SAFE)
    def lookup(order: str) -> str:
        return act("lookup", "safe")

    @guard.function_tool(ReplayPolicy.NEVER)
    def charge(order: str) -> str:
        return act("charge", "never")

    @guard.function_tool(ReplayPolicy.SAFE)
    def notify(order: str) -> str:
        return act("notify", "safe")

    def next_call(shown: Any) -> list[Any]:
        text = json.dumps(shown, default=str)
        for tool in ("lookup", "charge", "notify"):
            if f"done:{tool}/{order}" not in text:
                fresh = f"call_{os.urandom(6).hex()}"
                return [function_call(tool, {"order": order}, call_id=fresh)]
        return [assistant_message(f"{order} charged and notified")]

    model = ScriptedModel([ModelStep.respond(lambda c: next_call(c.input)) for _ in range(20)])
    shop = Agent(
        name="shop", instructions="Charge it.", tools=[lookup, charge, notify], model=model
    )
    if not handoff:
        return shop

    def transfer(shown: Any) -> list[Any]:
        return [function_call("transfer_to_shop", {}, call_id=f"call_{os.urandom(6).hex()}")]

    triage = ScriptedModel([ModelStep.respond(lambda c: transfer(c.input)) for _ in range(20)])
    return Agent(name="triage", instructions="Hand off.", handoffs=[shop], model=triage)


async def attempt(
    *,
    store: str,
    table: str,
    guard: str,
    sink: str,
    thread: str,
    pause: float,
    handoff: bool = False,
) -> int:
    effects = EffectSink(sink)
    if store.startswith("sqlite:"):
        session: Any = SQLiteSession(thread, store[len("sqlite:") :])
    else:
        session = SQLAlchemySession.from_url(
            thread,
            url=store,
            create_tables=True,
            sessions_table=f"{table}_sessions",
            messages_table=f"{table}_messages",
        )
    with AgentsGuard(guard) as g:
        shop = agent(g, effects, thread, pause, handoff)
        result = await g.continue_run(shop, f"buy {thread}", session=session)
        for _ in range(10):
            if result is None or not result.interruptions:
                break
            state = result.to_state()
            for item in result.interruptions:
                unknown = await g.unknown(item)
                assert unknown is not None, item
                done = any(e.get("intent_id") == unknown.intent_id for e in effects.effects())
                outcome = Happened(value=f"done:charge/{thread}") if done else NotHappened()
                await g.decide(state, item, outcome)
            result = await g.run(shop, state, session=session)
        items = await session.get_items()
    last = json.dumps(items[-1], default=str) if items else ""
    return 0 if f"{thread} charged and notified" in last else 3


if __name__ == "__main__":
    serve(lambda **cmd: asyncio.run(attempt(**cmd)))
