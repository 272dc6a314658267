"""Stored text holding control characters reaches the terminal escaped, from every command."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steadyloop.cli import app

runner = CliRunner()
OUTPUT = "first\x1b[31m\x85line\nsecond\u2028line"
RUN_ID = "r\nforged-run  completed"
# Any character a terminal acts on or a line splitter breaks at, newline aside.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


@pytest.fixture
def agent_module(scripted_agent: Callable[[str, str], str]) -> str:
    return scripted_agent("controls", OUTPUT)


def test_run_runs_and_journal_escape_control_characters(tmp_path: Path, agent_module: str) -> None:
    """Run, runs list/show and journal show print no raw control character; --json is one record a line."""
    url = f"sqlite://{tmp_path}/j.db"
    ran = runner.invoke(app, ["run", agent_module, "hi", "-j", url, "--run-id", RUN_ID])
    assert ran.exit_code == 0, ran.output
    assert not RAW.search(ran.output), ran.output
    assert "first\\x1b[31m\\x85line\nsecond\\u2028line" in ran.output
    assert "run r\\nforged-run  completed: completed" in ran.output
    listed = runner.invoke(app, ["runs", "list", "-j", url], terminal_width=400)
    assert listed.exit_code == 0 and not RAW.search(listed.output), listed.output
    assert not [line for line in listed.output.splitlines() if line.startswith("forged")]
    for args in (["runs", "show", RUN_ID, "-j", url], ["journal", "show", url]):
        shown = runner.invoke(app, args, terminal_width=400)
        assert shown.exit_code == 0, shown.output
        assert not RAW.search(shown.output), shown.output
    listed = runner.invoke(app, ["runs", "list", "-j", url, "--json"])
    assert listed.exit_code == 0 and not RAW.search(listed.output), listed.output
    assert [json.loads(line)["output"] for line in listed.output.splitlines()] == [OUTPUT]
    shown = runner.invoke(app, ["journal", "show", url, "--json"])
    assert shown.exit_code == 0 and not RAW.search(shown.output), shown.output
    records = [json.loads(line) for line in shown.output.splitlines()]
    assert len(records) == shown.output.count("\n") >= 3
    assert OUTPUT in _strings(records)


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value
    return [s for v in items for s in _strings(v)] if isinstance(value, dict | list) else []
