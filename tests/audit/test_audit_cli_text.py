"""``steadyloop audit``: text from tasks reaches the terminal escaped, and ``--json`` stays one record a line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steadyloop.cli import _common, app
from steadyloop.cli._common import json_line, printable

runner = CliRunner()

# Any character a terminal acts on or a line splitter breaks at, newline aside.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")

COLOUR = "red\x1b[31mX"
# A newline, then what a status row of another task looks like.
FORGED = "a1\nforged  completed  9  1  1  1  someone  all good"
NEL = "nel\x85next"
LSEP = "ls\u2028next\u2029para"
CSI = "csi\x9b2J"
IDS = [COLOUR, FORGED, NEL, LSEP, CSI]


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Print tables wide enough that nothing folds."""
    monkeypatch.setattr(_common.console, "width", 300)
    monkeypatch.setattr(_common.err_console, "width", 300)


def _submit_all(store: str) -> list[str]:
    lines = []
    for task_id in IDS:
        r = runner.invoke(app, ["audit", "submit", "-s", store, "-p", "Say done", "--id", task_id])
        assert r.exit_code == 0, r.output
        lines += r.output.splitlines()
    return lines


def test_printable_escapes_controls_and_keeps_other_text() -> None:
    """C0 (newline, tab), DEL, C1, U+2028/9 and bidi controls become visible escapes; other text is unchanged."""
    assert printable("a\x1b[31m\n\t\r\x00\x7f\x85\x9b\u2028\u2029\u202e") == (
        "a\\x1b[31m\\n\\t\\r\\x00\\x7f\\x85\\x9b\\u2028\\u2029\\u202e"
    )
    assert printable("C:\\tmp — ünïcode [red]x[/red]") == "C:\\tmp — ünïcode [red]x[/red]"
    assert printable("one\ntwo\x1b", lines=True) == "one\ntwo\\x1b"
    line = json_line({"k": "\x85\u2028\u2029\x9b\x7f é\n"})
    assert len(line.splitlines()) == 1 and not RAW.search(line) and "é" in line
    assert json.loads(line) == {"k": "\x85\u2028\u2029\x9b\x7f é\n"}


def test_submit_and_status_escape_task_ids(tmp_path: Path) -> None:
    """`audit submit` prints a line and `audit status` a row per task, every control character escaped."""
    store = f"sqlite:///{tmp_path}/a.db"
    submitted = _submit_all(store)
    assert len(submitted) == len(IDS)
    assert submitted[0] == "red\\x1b[31mX  queued"
    assert submitted[1].startswith("a1\\nforged  completed") and submitted[1].endswith("queued")
    assert submitted[2:] == [
        "nel\\x85next  queued",
        "ls\\u2028next\\u2029para  queued",
        "csi\\x9b2J  queued",
    ]
    r = runner.invoke(app, ["audit", "status", "-s", store])
    assert r.exit_code == 0, r.output
    assert not RAW.search(r.output), r.output
    rows = [line for line in r.output.splitlines() if "queued" in line]
    assert len(rows) == len(IDS), r.output
    # The forged "completed" row does not exist: it is part of one escaped id.
    assert [line for line in r.output.splitlines() if "completed" in line] == [
        line for line in rows if "a1\\nforged" in line
    ]
    for task_id in IDS:
        assert sum(printable(task_id) in row for row in rows) == 1


def test_status_and_show_json_are_one_record_a_line(tmp_path: Path) -> None:
    """`status --json` and `show --json` split into one record a line with str.splitlines, values exact."""
    store = f"sqlite:///{tmp_path}/a.db"
    _submit_all(store)
    r = runner.invoke(app, ["audit", "status", "-s", store, "--json"])
    assert r.exit_code == 0, r.output
    assert not RAW.search(r.output)
    lines = r.output.splitlines()
    assert len(lines) == len(IDS)
    assert sorted(json.loads(line)["task_id"] for line in lines) == sorted(IDS)
    r = runner.invoke(app, ["audit", "show", LSEP, "-s", store, "--json"])
    assert r.exit_code == 0, r.output
    (line,) = r.output.splitlines()
    assert json.loads(line)["payload"]["spec"]["task_id"] == LSEP


def test_show_cancel_and_work_escape_task_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """show, cancel, work and a refusal print task ids escaped: no control character reaches the terminal."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    store = f"sqlite:///{tmp_path}/a.db"
    _submit_all(store)
    r = runner.invoke(app, ["audit", "show", COLOUR, "-s", store])
    assert r.exit_code == 0, r.output
    assert not RAW.search(r.output) and "task red\\x1b[31mX: queued" in r.output
    r = runner.invoke(app, ["audit", "cancel", FORGED, "-s", store])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [
        "a1\\nforged  completed  9  1  1  1  someone  all good  cancelled"
    ]
    r = runner.invoke(app, ["audit", "cancel", FORGED, "-s", store])
    assert r.exit_code == 2 and not RAW.search(r.output) and len(r.output.splitlines()) == 1
    r = runner.invoke(
        app,
        [
            "audit",
            "work",
            "-s",
            store,
            "--agent",
            "audit_cli_agent:agent",
            "--scratch",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 0, r.output
    assert not RAW.search(r.output), r.output
    assert (
        "red\\x1b[31mX: completed" in r.output and "ls\\u2028next\\u2029para: completed" in r.output
    )
