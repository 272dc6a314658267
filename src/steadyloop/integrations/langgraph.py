"""The LangGraph guard (extra ``langgraph``).

See [LangGraphGuard][steadyloop.integrations.langgraph.LangGraphGuard].
"""

from steadyloop.integrations._langgraph import LangGraphGuard

__all__ = ["LangGraphGuard"]
