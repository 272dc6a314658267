"""CLI test fixtures."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from steadyloop.cli import _common


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Print tables wide enough that paths are not folded across lines."""
    monkeypatch.setattr(_common.console, "width", 300)
    monkeypatch.setattr(_common.err_console, "width", 300)


@pytest.fixture
def scripted_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], str]:
    """Write an importable agent module whose scripted model answers one text.

    Returns a function of the agent's name and its answer that gives the
    ``MODULE:ATTR`` to pass to ``steadyloop run``.
    """

    def write(name: str, answer: str) -> str:
        module = f"{name}_agent"
        (tmp_path / f"{module}.py").write_text(
            "from steadyloop import Agent, ScriptedModel\n"
            f"def make():\n    return Agent({name!r}, ScriptedModel([{answer!r}]))\n"
        )
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
        return f"{module}:make"

    return write
