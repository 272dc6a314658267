"""``steadyloop replay run`` exits 0 when all agree, 1 on a difference, 2 on bad input or backends."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from replay_helpers import replay_cli

from steadyloop.replay import bundled_cases, report_schema


def test_exit_0_when_every_backend_agrees(tmp_path: Path) -> None:
    """The bundled suite on the embedded backends exits 0 and writes a schema-valid report."""
    report = tmp_path / "report.json"
    out = replay_cli("run", "--backends", "memory,sqlite", "-b", "jsonl", "--report", str(report))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "single_turn" in out.stdout and "agree" in out.stdout
    data = json.loads(report.read_text(encoding="utf-8"))
    jsonschema.validate(data, report_schema())
    assert data["ok"] is True and data["backends"] == ["memory", "sqlite", "jsonl"]
    assert "timings" in data


def test_exit_1_on_an_unexpected_difference(tmp_path: Path) -> None:
    """A case whose expectation the stored data contradicts exits 1 and names the pointer."""
    source = (bundled_cases() / "single_turn.jsonl").read_text(encoding="utf-8").splitlines()
    source[0] = source[0].replace("It opens at 9:30.", "It opens at 10:00.")
    case = tmp_path / "wrong.jsonl"
    case.write_text("\n".join(source) + "\n", encoding="utf-8")
    report = tmp_path / "report.json"
    out = replay_cli(
        "run", str(case), "-b", "memory,sqlite", "--report", str(report), "--no-timings"
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "/sessions/s1/events/1/parts/0/text" in out.stdout
    data = json.loads(report.read_text(encoding="utf-8"))
    jsonschema.validate(data, report_schema())
    assert data["ok"] is False and "timings" not in data


def test_exit_2_on_an_invalid_case(tmp_path: Path) -> None:
    """An invalid case exits 2 with its file, line and field, and no traceback."""
    case = tmp_path / "bad.jsonl"
    case.write_text('{"op": "case", "case_id": "x", "description": "d"}\n{"op": "nope"}\n')
    out = replay_cli("run", str(case), "-b", "memory")
    assert out.returncode == 2
    assert f"{case}:2" in out.stderr and "/op" in out.stderr
    assert "Traceback" not in out.stderr


def test_exit_2_on_an_unreachable_or_unknown_backend() -> None:
    """An unreachable server, an unknown name or an unset server variable exits 2 before running."""
    out = replay_cli("run", "-b", "memory,redis://127.0.0.1:1/0")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    out = replay_cli("run", "-b", "oracle")
    assert out.returncode == 2 and "unknown backend" in out.stderr
    out = replay_cli("run", "-b", "postgres")
    assert out.returncode == 2 and "STEADYLOOP_POSTGRES_URL" in out.stderr


def test_exit_2_when_a_store_needs_a_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store whose framework is not installed exits 2 with one line naming the extra, no traceback."""
    from typer.testing import CliRunner

    from steadyloop.cli import app

    monkeypatch.setitem(sys.modules, "google.adk.sessions", None)
    out = CliRunner().invoke(app, ["replay", "run", "-b", "adk+memory"])
    assert out.exit_code == 2, out.output
    assert "steadyloop[adk]" in out.output
    assert out.exception is None or isinstance(out.exception, SystemExit)


def test_check_list_and_schema_commands() -> None:
    """The check command validates cases, list shows the suite, schema prints both schemas."""
    assert replay_cli("check").returncode == 0
    listed = replay_cli("list")
    assert listed.returncode == 0 and "loop_crash_resume" in listed.stdout
    for which in ("case", "report"):
        out = replay_cli("schema", which)
        assert out.returncode == 0
        jsonschema.Draft202012Validator.check_schema(json.loads(out.stdout))
    assert replay_cli("schema", "nope").returncode == 2


def test_exit_2_when_a_backend_is_lost_mid_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend that answers the probe and then stops answering exits 2, not 1, with no traceback."""
    from replay_helpers import vanishing_at
    from typer.testing import CliRunner

    from steadyloop.cli import app
    from steadyloop.journal import MemoryJournal

    report_module = importlib.import_module("steadyloop.replay._replay")
    store = "replay-cli-vanishing-test"
    real = report_module.resolve_stores

    def resolve(specs: Any, workdir: Any, environ: Any = None) -> list[Any]:
        return real(["sqlite", vanishing_at(f"memory://{store}", "flaky", 1)], workdir, environ)

    monkeypatch.setattr(report_module, "resolve_stores", resolve)
    try:
        out = CliRunner().invoke(app, ["replay", "run", "-b", "sqlite"])
    finally:
        MemoryJournal.forget(store)
    assert out.exit_code == 2, out.output
    assert "'flaky' became unreachable" in out.output
    assert out.exception is None or isinstance(out.exception, SystemExit)


def test_exit_2_on_an_unwritable_report_path(tmp_path: Path) -> None:
    """An unwritable --report path exits 2 with a one-line error before any case runs, and no traceback."""
    for target in (tmp_path / "missing" / "report.json", tmp_path):
        out = replay_cli("run", "-b", "memory", "--report", str(target))
        assert out.returncode == 2, out.stdout + out.stderr
        assert "Traceback" not in out.stderr
        assert "cannot write the report" in out.stderr
        assert out.stdout == ""  # nothing ran: no table, no summary
    assert not (tmp_path / "missing").exists()
