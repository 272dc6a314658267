"""``steadyloop audit``: submit, work, status and show."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steadyloop.cli import _common, app

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Print tables wide enough that nothing folds."""
    monkeypatch.setattr(_common.console, "width", 300)
    monkeypatch.setattr(_common.err_console, "width", 300)


def test_submit_work_status_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Submitted tasks are worked to their ends by N workers; status tables them and show prints the trail."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    store = f"sqlite:///{tmp_path}/a.db"
    fail = f"{sys.executable} -c 'import sys; sys.exit(1)'"
    r = runner.invoke(
        app, ["audit", "submit", "-s", store, "-p", "Say done", "--id", "a1", "--key", "k1"]
    )
    assert r.exit_code == 0, r.output
    assert "a1  queued" in r.output
    r = runner.invoke(
        app, ["audit", "submit", "-s", store, "-p", "Say done", "--id", "a1", "--key", "k1"]
    )
    assert "a1  duplicate" in r.output
    r = runner.invoke(
        app,
        [
            "audit",
            "submit",
            "-s",
            store,
            "-p",
            "Check",
            "--id",
            "a2",
            "-d",
            "a1",
            "--goal",
            "it passes",
            "--verify",
            fail,
            "--rounds",
            "2",
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        [
            "audit",
            "work",
            "-s",
            store,
            "--agent",
            "audit_cli_agent:agent",
            "-n",
            "2",
            "--scratch",
            str(tmp_path / "scratch"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "done: 1 completed, 1 goal-unmet" in r.output
    r = runner.invoke(app, ["audit", "status", "-s", store])
    assert "completed" in r.output and "goal-unmet" in r.output
    r = runner.invoke(app, ["audit", "status", "-s", store, "--json"])
    rows = [json.loads(line) for line in r.output.splitlines()]
    assert [(x["task_id"], x["status"], x["round"]) for x in rows] == [
        ("a1", "completed", 1),
        ("a2", "goal-unmet", 2),
    ]
    r = runner.invoke(app, ["audit", "show", "a2", "-s", store])
    assert r.exit_code == 0, r.output
    for kind in (
        "submitted",
        "claimed",
        "round_started",
        "verified",
        "audited",
        "pushed_back",
        "goal_unmet",
    ):
        assert kind in r.output
    # The findings it ended with (round 2's, not the packet of round 1), with evidence.
    assert "[blocker] r2.verification.1" in r.output and "[blocker] r1." not in r.output
    assert "the task ended with" in r.output and "evidence:" in r.output
    assert "exited with status 1" in r.output
    r = runner.invoke(app, ["audit", "show", "a2", "-s", store, "--json"])
    kinds = [json.loads(line)["kind"] for line in r.output.splitlines()]
    assert kinds[0] == "task.submitted" and kinds[-1] == "task.goal_unmet"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-p", ""], "needs a prompt"),
        (
            ["-p", "x", "--goal", "g", "--verify", "true", "--rounds", "0"],
            "round budget must be a positive",
        ),
        (["-p", "x", "-d", "ghost"], "not a known task"),
        (["-p", "x", "--goal", "g"], "needs both --goal and --verify"),
    ],
)
def test_submit_refuses_bad_specs_with_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """A bad spec is refused with a clear message and exit code 2; nothing is queued."""
    store = f"sqlite:///{tmp_path}/a.db"
    r = runner.invoke(app, ["audit", "submit", "-s", store, *args])
    assert r.exit_code == 2
    assert message in r.output
    shown = runner.invoke(app, ["audit", "status", "-s", store]).output
    assert "no tasks" in shown or "no task store exists" in shown


def test_submit_from_a_jsonl_file_with_a_cycle_is_refused(tmp_path: Path) -> None:
    """A JSONL file whose tasks form a cycle is refused as a whole, naming the cycle."""
    f = tmp_path / "tasks.jsonl"
    f.write_text(
        json.dumps({"prompt": "a", "task_id": "a", "depends_on": ["b"]})
        + "\n"
        + json.dumps({"prompt": "b", "task_id": "b", "depends_on": ["a"]})
        + "\n"
    )
    r = runner.invoke(app, ["audit", "submit", "-s", f"sqlite:///{tmp_path}/a.db", "-f", str(f)])
    assert r.exit_code == 2 and "dependency cycle: a → b → a" in r.output


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"prompt": "x", "depends_on": 5}', "depends_on must be a list of task ids"),
        ('{"prompt": "x", "metadata": [1,2]}', "metadata must be an object"),
        (
            '{"prompt": "x", "goal": {"goal": "g", "verify": {"command": "true", "allow_env": 5}}}',
            "goal.verify.allow_env must be a list of names",
        ),
        ('{"prompt": "x"}\n{"prompt": ', "line 2 is not JSON"),
    ],
)
def test_submit_refuses_badly_typed_spec_files_with_exit_2(
    tmp_path: Path, line: str, message: str
) -> None:
    """A spec file with a badly typed field or a broken line exits 2 with a message naming it, no traceback."""
    f = tmp_path / "tasks.jsonl"
    f.write_text(line + "\n")
    r = runner.invoke(app, ["audit", "submit", "-s", f"sqlite:///{tmp_path}/a.db", "-f", str(f)])
    assert r.exit_code == 2 and message in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_submit_accepts_one_pretty_printed_json_spec(tmp_path: Path) -> None:
    """A file holding one pretty-printed JSON object is read as one task spec."""
    f = tmp_path / "task.json"
    f.write_text(json.dumps({"prompt": "hello", "task_id": "p1"}, indent=2) + "\n")
    store = f"sqlite:///{tmp_path}/a.db"
    r = runner.invoke(app, ["audit", "submit", "-s", store, "-f", str(f)])
    assert r.exit_code == 0, r.output
    assert "p1  queued" in r.output


def test_show_unknown_task_fails(tmp_path: Path) -> None:
    """Showing a task that does not exist exits 1 and says so."""
    store = f"sqlite:///{tmp_path}/a.db"
    assert runner.invoke(app, ["audit", "submit", "-s", store, "-p", "x"]).exit_code == 0
    r = runner.invoke(app, ["audit", "show", "nope", "-s", store])
    assert r.exit_code == 1 and "no task 'nope'" in r.output
