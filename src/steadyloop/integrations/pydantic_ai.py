"""The Pydantic AI guard (extra ``pydantic-ai``).

See [PydanticAIGuard][steadyloop.integrations.pydantic_ai.PydanticAIGuard].
"""

from steadyloop.integrations._pydantic_ai import PydanticAIGuard, call_position

__all__ = ["PydanticAIGuard", "call_position"]
