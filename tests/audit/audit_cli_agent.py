"""An agent for the CLI tests, loaded as ``audit_cli_agent:agent``."""

from steadyloop.loop import Agent, ScriptedModel

agent = Agent("cli-echo", ScriptedModel(["done"]))
