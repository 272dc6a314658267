"""``steadyloop journal show`` and ``steadyloop journal doctor``, end to end."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from steadyloop import RecordFactory, SequentialIds, StepClock, StreamWrite, open_journal
from steadyloop.cli import app
from steadyloop.journal import namespace_filename
from steadyloop.records import INTENT_KIND, RESULT_KIND

runner = CliRunner()


def _fill(url: str) -> None:
    async def go() -> None:
        make = RecordFactory(StepClock(), SequentialIds("r"))
        async with await open_journal(url) as j:
            await j.append("demo", StreamWrite("run-1", [make(INTENT_KIND, {"intent_id": "i1"})]))
            await j.append(
                "demo",
                StreamWrite(
                    "run-1",
                    [
                        make(RESULT_KIND, {"intent_id": "i1"}),
                        make(INTENT_KIND, {"intent_id": "i2"}),
                    ],
                ),
            )
            await j.append("other", StreamWrite("s", [make("note", {"text": "你好"})]))

    asyncio.run(go())


def test_show_prints_every_record(tmp_path: Path) -> None:
    """Show lists each stream's records with sequence, kind and payload."""
    url = f"sqlite://{tmp_path}/j.db"
    _fill(url)
    result = runner.invoke(app, ["journal", "show", url], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "demo / run-1" in result.output and "other / s" in result.output
    assert result.output.count(INTENT_KIND) == 2 and "你好" in result.output


def test_show_json_is_machine_readable(tmp_path: Path) -> None:
    """Show --json prints one JSON object per record, filtered by stream and namespace."""
    url = f"jsonl://{tmp_path}"
    _fill(url)
    result = runner.invoke(app, ["journal", "show", url, "run-1", "-n", "demo", "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [(x["seq"], x["kind"]) for x in lines] == [
        (1, INTENT_KIND),
        (2, RESULT_KIND),
        (3, INTENT_KIND),
    ]


def test_doctor_reports_open_intents_and_torn_tail_but_passes(tmp_path: Path) -> None:
    """Doctor warns about an intent without result and a torn tail, and exits 0."""
    url = f"jsonl://{tmp_path}"
    _fill(url)
    with (tmp_path / namespace_filename("demo")).open("ab") as fh:
        fh.write(b'{"batch":3,"index":0')
    result = runner.invoke(app, ["journal", "doctor", url], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert (
        "open-intent" in result.output and "'i2'" in result.output and "'i1'" not in result.output
    )
    assert "torn-tail" in result.output and "line 5 is not terminated" in result.output


def test_doctor_exits_1_on_corruption_naming_file_and_line(tmp_path: Path) -> None:
    """Doctor exits 1 and names the file and line of a garbled record."""
    url = f"jsonl://{tmp_path}"
    _fill(url)
    path = tmp_path / namespace_filename("demo")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = b"{garbage\n"
    path.write_bytes(b"".join(lines))
    result = runner.invoke(app, ["journal", "doctor", url], terminal_width=250)
    assert result.exit_code == 1, result.output
    assert f"{path}:2" in result.output and "corruption" in result.output


def test_doctor_exits_2_when_the_journal_cannot_be_opened(tmp_path: Path) -> None:
    """Doctor exits 2 with a one-line error, no traceback, for a bad URL or missing directory."""
    for url in ("nope://x", f"jsonl://{tmp_path}/missing"):
        proc = subprocess.run(
            [sys.executable, "-m", "steadyloop", "journal", "doctor", url],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and "error:" in proc.stderr


def test_doctor_on_a_damaged_sqlite_file_names_it(tmp_path: Path) -> None:
    """A file that is not a SQLite database is reported as corruption with its path."""
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a database" * 100)
    result = runner.invoke(app, ["journal", "doctor", f"sqlite://{bad}"])
    assert result.exit_code == 1
    assert str(bad) in result.output or str(bad) in (result.stderr or "")


def test_inspecting_a_journal_that_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    """Inspection commands on a missing SQLite file exit 2, saying so, and create no file."""
    url = f"sqlite://{tmp_path}/typo.db"
    for args in (
        ["journal", "show", url],
        ["journal", "doctor", url],
        ["runs", "list", "-j", url],
        ["runs", "show", "r1", "-j", url],
        ["runs", "cancel", "r1", "-j", url],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "no journal here" in result.output
    assert list(tmp_path.iterdir()) == []
