"""``steadyloop run``, ``resume`` and ``runs …``, and the loop's answers to bad input."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from loop_helpers import APP, Effects, standard_agent
from typer.testing import CliRunner

from steadyloop._errors import AgentLoadError, CorruptionError
from steadyloop.cli import _common, app
from steadyloop.journal import JSONLJournal, SQLiteJournal, namespace_filename, open_journal
from steadyloop.loop import load_agent, resume, run
from steadyloop.testing import CrashingJournal, SimulatedCrash

runner = CliRunner()
AGENT = "loop_helpers:standard_agent"


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_common.console, "width", 300)
    monkeypatch.setattr(_common.err_console, "width", 300)


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output + (result.stderr or "")


def test_run_then_list_and_show(tmp_path: Path) -> None:
    """A run started from the CLI completes, and runs list / show report it."""
    url = f"sqlite:///{tmp_path}/j.db"
    code, out = cli("run", AGENT, "go", "-j", url, "--app", APP, "--run-id", "r1", "--user", "ada")
    assert code == 0, out
    assert "completed" in out and "all done" in out
    code, out = cli("runs", "list", "-j", url)
    assert code == 0, out
    assert "r1" in out and "completed" in out and "ada" in out
    code, out = cli("runs", "show", "r1", "-j", url, "--app", APP)
    assert code == 0, out
    assert out.count("effect.intent") == 9 and "run.ended" in out
    code, out = cli("runs", "show", "r1", "-j", url, "--app", APP, "--json")
    data = json.loads(out)
    assert (data["status"], data["steps"], len(data["records"])) == ("completed", 5, 21)


def test_resume_after_a_crash_and_resolve_from_the_cli(tmp_path: Path) -> None:
    """A run stopped at RESUME_STATE_UNKNOWN is resolved and finished from the CLI."""
    url = f"sqlite:///{tmp_path}/j.db"

    async def crash() -> None:
        async with await open_journal(url) as journal:
            with pytest.raises(SimulatedCrash):
                await run(
                    standard_agent(Effects()),
                    CrashingJournal(journal, 7, "before"),
                    APP,
                    "ada",
                    "s1",
                    "r1",
                    "go",
                )

    asyncio.run(crash())
    code, out = cli("runs", "list", "-j", url, "--app", APP, "--json")
    assert json.loads(out)["status"] == "interrupted"
    code, out = cli("resume", "r1", "--agent", AGENT, "-j", url, "--app", APP)
    assert code == 3, out  # its own exit code: a decision is needed
    assert "resume_state_unknown" in out and "runs resolve r1 r1/5" in out
    code, out = cli(
        "runs",
        "resolve",
        "r1",
        "r1/5",
        "--happened",
        '"sent"',
        "-j",
        url,
        "--app",
        APP,
        "--note",
        "seen in the outbox",
    )
    assert code == 0, out
    assert "steadyloop resume r1 --agent MODULE:ATTRIBUTE" in out, out
    code, out = cli("resume", "r1", "--agent", AGENT, "-j", url, "--app", APP, "--json")
    assert code == 0, out
    assert json.loads(out)["stop_reason"] == "completed"


def test_runs_cancel_ends_an_interrupted_run(tmp_path: Path) -> None:
    """A cancel request on a run nobody drives ends it CANCELLED when it is resumed."""
    url = f"sqlite:///{tmp_path}/j.db"

    async def crash() -> None:
        async with await open_journal(url) as journal:
            with pytest.raises(SimulatedCrash):
                await run(
                    standard_agent(),
                    CrashingJournal(journal, 4, "after"),
                    APP,
                    "ada",
                    "s1",
                    "r1",
                    "go",
                )

    asyncio.run(crash())
    assert cli("runs", "cancel", "r1", "-j", url, "--app", APP)[0] == 0
    code, out = cli("resume", "r1", "--agent", AGENT, "-j", url, "--app", APP)
    assert code == 1 and "cancelled" in out


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("no_such_module_xyz:agent", "does not import: ModuleNotFoundError"),
        ("loop_helpers:missing", "has no attribute 'missing'"),
        ("loop_helpers:APP", "is a str, not a steadyloop Agent"),
        ("no-colon", "must be given as module:attribute"),
    ],
)
def test_an_agent_path_that_does_not_load_exits_2_cleanly(path: str, message: str) -> None:
    """A bad AGENT gives AgentLoadError: one clear line, exit 2, no traceback."""
    with pytest.raises(AgentLoadError, match=message):
        load_agent(path)
    code, out = cli("run", path, "go", "-j", "memory://")
    assert code == 2
    assert message in out and "Traceback" not in out


def test_an_agent_module_that_raises_on_import_exits_2_in_a_real_process(tmp_path: Path) -> None:
    """A module raising on import is reported by name, exit 2, without a traceback."""
    (tmp_path / "broken_agent.py").write_text("raise RuntimeError('boom at import')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "steadyloop", "run", "broken_agent:agent", "hi", "-j", "memory://"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "boom at import" in proc.stderr and "Traceback" not in proc.stderr


def test_unknown_run_id_exits_2(tmp_path: Path) -> None:
    """Resuming or showing a run id that does not exist exits 2 naming it."""
    url = f"sqlite:///{tmp_path}/j.db"
    assert cli("run", AGENT, "go", "-j", url, "--run-id", "other")[0] == 0
    for args in (("resume", "ghost", "--agent", AGENT), ("runs", "show", "ghost")):
        code, out = cli(*args, "-j", url)
        assert code == 2
        assert "no run 'ghost'" in out


def test_a_full_disk_mid_run_exits_2_with_the_resume_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's "database or disk is full" during a run: exit 2, one line naming how to resume."""
    url = f"sqlite:///{tmp_path}/j.db"
    real = SQLiteJournal._execute
    inserts = 0

    def full(self: SQLiteJournal, query: Any) -> Any:
        nonlocal inserts
        if "INSERT INTO" in query.sql and "records" in query.sql:
            inserts += 1
            if inserts >= 4:
                raise sqlite3.OperationalError("database or disk is full")
        return real(self, query)

    monkeypatch.setattr(SQLiteJournal, "_execute", full)
    result = runner.invoke(app, ["run", AGENT, "go", "-j", url, "--app", APP, "--run-id", "r1"])
    assert result.exit_code == 2, result.output
    hint = f"steadyloop resume r1 --agent {AGENT} --journal {url} --app {APP}"
    (line,) = result.stderr.strip().splitlines()
    assert "disk is full" in line and line.endswith(f"resume the run with: {hint}")
    monkeypatch.setattr(SQLiteJournal, "_execute", real)
    code, out = cli(*hint.split()[1:])
    assert code == 0, out
    assert "completed" in out and "all done" in out


def test_resuming_a_finished_run_exits_1(tmp_path: Path) -> None:
    """Resuming a completed run is refused with RunFinished, exit 1."""
    url = f"sqlite:///{tmp_path}/j.db"
    assert cli("run", AGENT, "go", "-j", url, "--run-id", "r1")[0] == 0
    code, out = cli("resume", "r1", "--agent", AGENT, "-j", url)
    assert code == 1
    assert "cannot be resumed" in out


def test_a_corrupted_journal_is_reported_with_file_and_line(tmp_path: Path) -> None:
    """A garbled line in the middle of the run's file stops resume with its file:line."""
    effects = Effects()
    path = tmp_path / namespace_filename(APP)

    async def crash() -> None:
        async with await JSONLJournal.open(tmp_path) as journal:
            with pytest.raises(SimulatedCrash):
                await run(
                    standard_agent(effects),
                    CrashingJournal(journal, 6, "after"),
                    APP,
                    "ada",
                    "s1",
                    "r1",
                    "go",
                )

    async def resume_it() -> None:
        async with await JSONLJournal.open(tmp_path) as journal:
            await resume(standard_agent(effects), journal, APP, "r1")

    asyncio.run(crash())
    lines = path.read_bytes().splitlines(keepends=True)
    lines[4] = b'{"batch": oops\n'
    path.write_bytes(b"".join(lines))
    with pytest.raises(CorruptionError) as info:
        asyncio.run(resume_it())
    assert info.value.location == f"{path}:5"
    code, out = cli("resume", "r1", "--agent", AGENT, "-j", f"jsonl://{tmp_path}", "--app", APP)
    assert code == 1
    assert f"{path}:5" in out and "Traceback" not in out
    # Nothing was lost or written by the failed attempts.
    assert path.read_bytes() == b"".join(lines)


def test_runs_resolve_takes_over_from_another_host_only_with_takeover(tmp_path: Path) -> None:
    """A run claimed on another host: resolve says --takeover, and works with it."""
    from steadyloop.journal import StreamWrite
    from steadyloop.loop import Owner, load_run, run_stream
    from steadyloop.records import RecordFactory

    url = f"sqlite:///{tmp_path}/j.db"

    async def crash_and_claim() -> None:
        async with await open_journal(url) as journal:
            with pytest.raises(SimulatedCrash):
                await run(
                    standard_agent(Effects()),
                    CrashingJournal(journal, 7, "before"),  # type: ignore[arg-type]
                    APP,
                    "ada",
                    "s1",
                    "r1",
                    "go",
                )
        async with await open_journal(url) as journal:
            head = (await load_run(journal, APP, "r1")).state.head
            other = Owner(host="elsewhere", boot=None, pid=1, pid_start=None, token="x")
            rec = RecordFactory()("run.claimed", {"owner": other.to_json()})
            await journal.append(APP, StreamWrite(run_stream("r1"), [rec], head + 1))

    asyncio.run(crash_and_claim())
    args = ["runs", "resolve", "r1", "r1/5", "--happened", '"sent"', "-j", url, "--app", APP]
    code, out = cli(*args)
    assert code == 1 and "take the run over (--takeover)" in out, out
    code, out = cli(*args, "--takeover")
    assert code == 0, out
    code, out = cli("resume", "r1", "--agent", AGENT, "-j", url, "--app", APP, "--takeover")
    assert code == 0 and "completed" in out, out
