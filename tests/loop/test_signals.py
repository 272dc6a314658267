"""Ctrl-C and SIGTERM on ``steadyloop run``/``resume``: stop, resumably, and say how to resume."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from steadyloop.journal import open_journal
from steadyloop.loop import load_run

HERE = Path(__file__).parent
APP = "sig"


def start(args: list[str], sink: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "steadyloop", *args],
        cwd=HERE,
        env={**os.environ, "SL_SINK": str(sink), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(sink: Path, text: str, child: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not (sink.exists() and text in sink.read_text()):
        if child.poll() is not None:
            out, err = child.communicate()
            pytest.fail(f"the child ended early ({child.returncode}):\n{out}\n{err}")
        if time.monotonic() > deadline:
            child.kill()
            pytest.fail(f"{text!r} never reached {sink}")
        time.sleep(0.02)


def finish(child: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        pytest.fail(f"the child did not stop:\n{out}\n{err}")
    return child.returncode, out + err


def status(url: str, run_id: str = "r1") -> str:
    async def go() -> str:
        async with await open_journal(url) as journal:
            return (await load_run(journal, APP, run_id)).status

    return asyncio.run(go())


def run_args(agent: str, url: str) -> list[str]:
    return ["run", f"signal_agents:{agent}", "go", "-j", url, "-a", APP, "-r", "r1"]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_the_first_signal_stops_at_the_next_write_and_the_run_resumes(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """One Ctrl-C (or SIGTERM) lets the tool finish, leaves the run resumable and prints how."""
    url = f"sqlite:///{tmp_path}/j.db"
    sink = tmp_path / "sink"
    child = start(run_args("threaded", url), sink, SL_SLEEP="0.5")
    wait_for(sink, "r1/2 started", child)
    child.send_signal(sig)
    rc, out = finish(child)
    assert rc == code, out
    assert "Traceback" not in out
    hint = f"steadyloop resume r1 --agent signal_agents:threaded --journal {url} --app {APP}"
    assert hint in out
    assert "r1/2 done" in sink.read_text()  # the effect in flight finished
    assert status(url) == "stopped"
    again = start(hint.split()[1:], sink)
    rc, out = finish(again)
    assert rc == 0, out
    assert "completed" in out and "did 3" in out
    lines = sink.read_text().splitlines()
    assert lines.count("r1/2 done") == 1  # its result was written: not done again


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_json_output_of_a_stopped_run_holds_its_resume_command(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """--json names the resume command; the SIGTERM notice does not speak of Ctrl-C again."""
    url = f"sqlite:///{tmp_path}/j.db"
    sink = tmp_path / "sink"
    child = start([*run_args("threaded", url), "--json"], sink, SL_SLEEP="0.5")
    wait_for(sink, "r1/2 started", child)
    child.send_signal(sig)
    out, err = child.communicate(timeout=60)
    assert child.returncode == code, out + err
    data = json.loads(out)
    assert data["stop_reason"] == "stopped"
    hint = f"steadyloop resume r1 --agent signal_agents:threaded --journal {url} --app {APP}"
    assert data["resume_command"] == hint
    if sig == signal.SIGTERM:
        assert "press Ctrl-C again" not in err
        assert "SIGTERM: stopping at the next write boundary" in err
        assert "a second SIGTERM or Ctrl-C stops" in err
    else:
        assert "press Ctrl-C again to stop at once" in err


def test_a_second_ctrl_c_abandons_a_hung_threaded_tool_and_the_run_stays_resumable(
    tmp_path: Path,
) -> None:
    """Two Ctrl-Cs end the command at once, though its threaded tool hangs; resume redoes it."""
    url = f"sqlite:///{tmp_path}/j.db"
    sink = tmp_path / "sink"
    child = start(run_args("threaded", url), sink, SL_SLEEP="600")
    wait_for(sink, "r1/2 started", child)
    child.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert child.poll() is None  # the first one waits for the tool
    child.send_signal(signal.SIGINT)
    rc, out = finish(child, timeout=30)
    assert rc == 130, out
    assert "Traceback" not in out and "steadyloop resume r1" in out
    assert status(url) == "stopped"
    args = ["resume", "r1", "--agent", "signal_agents:threaded", "-j", url, "-a", APP]
    rc, out = finish(start(args, sink, SL_SLEEP="0"))
    assert rc == 0, out
    assert "r1/2 done" not in sink.read_text()  # abandoned: it is done again, as r1/3
    assert "r1/3 done" in sink.read_text()
    assert "did 3" in out


def test_a_second_ctrl_c_stops_a_hung_never_tool_as_resume_state_unknown(tmp_path: Path) -> None:
    """A hung never-repeat tool abandoned by the second Ctrl-C leaves a decision, exit 3 later."""
    url = f"sqlite:///{tmp_path}/j.db"
    sink = tmp_path / "sink"
    child = start(run_args("never_threaded", url), sink, SL_SLEEP="600")
    wait_for(sink, "r1/2 started", child)
    child.send_signal(signal.SIGINT)
    time.sleep(0.3)
    child.send_signal(signal.SIGINT)
    rc, out = finish(child, timeout=30)
    assert rc == 130, out
    assert status(url) == "resume_state_unknown"
    args = ["resume", "r1", "--agent", "signal_agents:never_threaded", "-j", url, "-a", APP]
    rc, out = finish(start(args, sink))
    assert rc == 3, out
    assert "steadyloop runs resolve r1 r1/2" in out


def test_inline_the_first_ctrl_c_is_honoured_and_a_second_interrupts_the_tool(
    tmp_path: Path,
) -> None:
    """Inline tools: one Ctrl-C stops after the tool; a second interrupts a hung one."""
    url = f"sqlite:///{tmp_path}/j.db"
    sink = tmp_path / "sink"
    child = start(run_args("inline", url), sink, SL_SLEEP="0.5")
    wait_for(sink, "r1/2 started", child)
    child.send_signal(signal.SIGINT)
    rc, out = finish(child)
    assert rc == 130, out
    assert "Traceback" not in out
    assert status(url) == "stopped"
    assert "r1/2 done" in sink.read_text()

    args = ["resume", "r1", "--agent", "signal_agents:inline", "-j", url, "-a", APP]
    child = start(args, sink, SL_SLEEP="600")
    wait_for(sink, "r1/4 started", child)
    child.send_signal(signal.SIGINT)
    time.sleep(0.3)
    child.send_signal(signal.SIGINT)
    rc, out = finish(child, timeout=30)
    assert rc == 130, out
    assert "Traceback" not in out
    assert status(url) == "stopped"


def test_ctrl_c_during_start_up_prints_no_traceback(tmp_path: Path) -> None:
    """Ctrl-C while the agent module is still importing ends with exit 130 and one line."""
    (tmp_path / "slow_agent.py").write_text(
        "import pathlib, time\npathlib.Path('importing').write_text('')\ntime.sleep(60)\n"
    )
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "steadyloop",
            "run",
            "slow_agent:agent",
            "go",
            "-j",
            f"sqlite:///{tmp_path}/j.db",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "importing").exists():
        assert time.monotonic() < deadline and child.poll() is None
        time.sleep(0.02)
    child.send_signal(signal.SIGINT)
    rc, out = finish(child)
    assert rc == 130, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out


def test_ctrl_c_while_the_command_line_itself_is_loading_prints_no_traceback() -> None:
    """A KeyboardInterrupt during the CLI's own imports ends with exit 130 and one line."""
    code = (
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'typer':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from steadyloop._entry import main\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "interrupted\n"
