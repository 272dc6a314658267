"""Adapters to other frameworks' session stores, each behind an optional extra.

Each adapter is a private module here (`_adk`, `_openai_agents`, `_trpc`) whose
`open_store` the `steadyloop.replay_stores` entry points name; it imports its framework
only when a store of it is selected. The protocol they implement is
[`SessionStore`][steadyloop.replay.SessionStore].
"""

__all__: list[str] = []
