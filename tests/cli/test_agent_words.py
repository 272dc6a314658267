"""How ``run``, ``resume`` and ``runs resolve`` name the agent a reader passes."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from steadyloop.cli import _runs, app

runner = CliRunner()


@pytest.mark.parametrize("command", ["run", "resume"])
def test_agent_help_names_the_form_and_the_tutorials_agent(command: str) -> None:
    """The help of run and resume says module:attribute and gives shop:agent as the example."""
    result = runner.invoke(app, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = re.sub(r"[\s│]+", " ", result.output)
    assert "module:attribute" in text and "shop:agent" in text, text
    assert "MODULE:ATTR " not in text, "the placeholder is spelled out, as the tutorial reads"


def test_resume_shows_the_placeholder_runs_resolve_prints() -> None:
    """The metavar of resume's --agent is the placeholder that runs resolve prints."""
    result = runner.invoke(app, ["resume", "--help"], terminal_width=200)
    assert _runs.AGENT_METAVAR in result.output
    assert re.fullmatch(r"[A-Z]+:[A-Z]+", _runs.AGENT_METAVAR)
