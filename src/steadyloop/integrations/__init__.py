"""Intent before effect for agents built on other runtimes: LangGraph, the OpenAI Agents SDK.

A guard wraps an agent's tool (or a node's effect) with a replay policy, as
Steadyloop's own loop does: before the effect an intent is durable in a Steadyloop
journal, after it its result. When the runtime executes the effect again after a
crash, the guard finds its record: a recorded result is returned without acting
again; a `SAFE` effect whose result is missing runs again; a `NEVER` one stops the
agent through the runtime's own human-in-the-loop mechanism until the caller says
what really happened.

* [LangGraphGuard][steadyloop.integrations.langgraph.LangGraphGuard], in
  `steadyloop.integrations.langgraph` (extra ``langgraph``);
* [AgentsGuard][steadyloop.integrations.openai_agents.AgentsGuard], in
  `steadyloop.integrations.openai_agents` (extra ``openai-agents``).

Each guard keeps its effects in the one effect ledger,
[EffectLedger][steadyloop.effects.EffectLedger]: its records are the loop's own
(`effect.intent`, `effect.result`), so `steadyloop journal show` and `journal doctor`
read them like any run.
"""

from steadyloop._errors import EffectBusy, EffectFailed, GuardError
from steadyloop.effects import current_intent, decision_from
from steadyloop.integrations._guard import Guard

__all__ = [
    "EffectBusy",
    "EffectFailed",
    "Guard",
    "GuardError",
    "current_intent",
    "decision_from",
]
