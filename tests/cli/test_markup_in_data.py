"""Stored text that looks like Rich markup is printed as it is, by every command."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steadyloop.cli import app

runner = CliRunner()
TEXT = "see [/b] and [red]this[/red] here"


@pytest.fixture
def agent_module(scripted_agent: Callable[[str, str], str]) -> str:
    return scripted_agent("brackets", TEXT)


def test_run_output_and_records_with_markup_print_verbatim(
    tmp_path: Path, agent_module: str
) -> None:
    """run, runs show, journal show and journal doctor print bracketed text unchanged, exit 0."""
    url = f"sqlite://{tmp_path}/j.db"
    ran = runner.invoke(app, ["run", agent_module, "[/x] hi", "-j", url, "--run-id", "[/r]"])
    assert ran.exit_code == 0, ran.output
    assert TEXT in ran.output and "[/r]" in ran.output
    for args in (["runs", "show", "[/r]", "-j", url], ["journal", "show", url]):
        shown = runner.invoke(app, args, terminal_width=400)
        assert shown.exit_code == 0, shown.output
        assert "[/b]" in shown.output and "[red]" in shown.output
    listed = runner.invoke(app, ["runs", "list", "-j", url], terminal_width=400)
    assert listed.exit_code == 0 and "[/r]" in listed.output
    assert runner.invoke(app, ["journal", "doctor", url]).exit_code == 0


def test_journal_show_json_is_canonical(tmp_path: Path, agent_module: str) -> None:
    """`journal show --json` prints each record as canonical JSON, one per line."""
    url = f"sqlite://{tmp_path}/j.db"
    assert runner.invoke(app, ["run", agent_module, "hi", "-j", url]).exit_code == 0
    shown = runner.invoke(app, ["journal", "show", url, "--json"])
    lines = shown.output.splitlines()
    assert shown.exit_code == 0 and lines
    for line in lines:
        data = json.loads(line)
        assert line == json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def test_replay_problems_and_differences_with_markup_print_verbatim(tmp_path: Path) -> None:
    """A case whose op or text holds markup is reported as written, with the right exit code."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"op":"case","case_id":"bad","description":"d"}\n{"op":"[/x]"}\n')
    checked = runner.invoke(app, ["replay", "check", str(bad)])
    assert checked.exit_code == 2 and "[/x]" in checked.output
    case = tmp_path / "textdiff.jsonl"
    expected = {"sessions": {"s1": {"events": [{"parts": [{"type": "text", "text": "[/b] x"}]}]}}}
    case.write_text(
        json.dumps({"op": "case", "case_id": "td", "description": "d", "expected": expected})
        + "\n"
        + '{"op":"create_session","session":"s1","user":"ada"}\n'
        + '{"op":"append_event","session":"s1","event_id":"e1","author":"user","text":"[/b] y"}\n'
    )
    report = tmp_path / "r.json"
    ran = runner.invoke(
        app,
        ["replay", "run", str(case), "-b", "memory", "--report", str(report)],
        terminal_width=400,
    )
    assert ran.exit_code == 1, ran.output
    assert "[/b] x" in ran.output and report.exists()


def test_resolve_refuses_happened_with_error(tmp_path: Path) -> None:
    """`runs resolve` with both --happened and --error is bad input (exit 2), nothing recorded."""
    url = f"sqlite://{tmp_path}/j.db"
    got = runner.invoke(
        app, ["runs", "resolve", "r", "r/1", "--happened", "1", "--error", "boom", "-j", url]
    )
    assert got.exit_code == 2 and "exactly one of" in got.output
    assert not (tmp_path / "j.db").exists()
