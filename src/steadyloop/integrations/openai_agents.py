"""The OpenAI Agents SDK guard (extra ``openai-agents``).

See [AgentsGuard][steadyloop.integrations.openai_agents.AgentsGuard].
"""

from steadyloop.integrations._openai_agents import AgentsGuard

__all__ = ["AgentsGuard"]
