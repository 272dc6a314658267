"""Executors and the verifier: exit codes, timeouts, missing programs, huge output, scrubbed env."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest
from audit_helpers import marked, new_marker, wait_for

from steadyloop.audit import (
    InProcessExecutor,
    SubprocessExecutor,
    Verification,
    Verifier,
    VerifySpec,
    cap_text,
)
from steadyloop.loop import ReplayPolicy

PY = sys.executable


async def test_non_zero_exit_fails_verification_with_its_output(tmp_path: Path) -> None:
    """A verify command exiting 3 fails; the evidence has its stdout and stderr and the code."""
    spec = VerifySpec(
        (PY, "-c", "import sys; print('out'); print('bad', file=sys.stderr); sys.exit(3)")
    )
    v = await Verifier().verify(spec, tmp_path)
    assert not v.passed
    assert (v.status, v.exit_code) == ("exited", 3)
    assert "exited with status 3" in v.summary
    assert "out" in v.evidence and "bad" in v.evidence
    assert v.cut == 0


async def test_passing_command_passes(tmp_path: Path) -> None:
    """A verify command exiting 0 passes, and runs in the given directory."""
    (tmp_path / "marker").write_text("x")
    v = await Verifier().verify(
        VerifySpec((PY, "-c", "import os; assert os.path.exists('marker')")), tmp_path
    )
    assert v.passed and v.cwd == str(tmp_path)


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    """A command past its timeout is killed with its children and reported as a timeout, promptly."""
    script = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    v = await Verifier().verify(VerifySpec((PY, "-c", script), timeout=1.0), tmp_path)
    elapsed = time.monotonic() - started
    assert not v.passed and v.status == "timeout" and v.exit_code is None
    assert "killed after its timeout" in v.summary
    assert "started" in v.evidence
    assert elapsed < 30  # not the 60 s the command and its child sleep


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, just not reaped


@pytest.mark.parametrize("lead", ["", "sleep 0.3; "])
async def test_exit_with_a_background_child_holding_stdout(tmp_path: Path, lead: str) -> None:
    """A command that exits 0 leaving a background child on its stdout is "exited 0" at once, and the child is killed."""
    marker = new_marker()  # the child is found by its command line: $! is a pid of the
    # command's own PID namespace, not of the test's
    script = f"{lead}sleep 31.{marker} & echo done; exit 0"
    r = await SubprocessExecutor(timeout=4).run(["sh", "-c", script], cwd=tmp_path)
    assert (r.status, r.exit_code, r.ok) == ("exited", 0, True)
    assert "done" in r.stdout  # "exited", not "timeout": it did not wait for the child
    assert await asyncio.to_thread(wait_for, lambda: not marked(marker), 2), marked(marker)


async def test_missing_executable_is_a_result_not_a_crash(tmp_path: Path) -> None:
    """A verify command naming no existing program fails with status missing and says so."""
    v = await Verifier().verify(VerifySpec(("no-such-program-xyz", "--check")), tmp_path)
    assert not v.passed and v.status == "missing" and v.exit_code is None
    assert "no-such-program-xyz" in v.summary and "not found" in v.summary


async def test_missing_working_directory_is_an_error_result(tmp_path: Path) -> None:
    """A command run in a folder that does not exist fails with status error, naming the folder."""
    result = await SubprocessExecutor().run((PY, "-c", "pass"), cwd=tmp_path / "gone")
    assert result.status == "error" and "does not exist" in result.stderr


async def test_huge_output_is_capped_and_says_how_much_was_cut(tmp_path: Path) -> None:
    """Ten megabytes of output are capped; the evidence keeps head and tail and states the bytes cut."""
    script = "import sys; sys.stdout.write('H' * 1000 + 'x' * 10_000_000 + 'T' * 1000)"
    executor = SubprocessExecutor(max_output=8192)
    result = await executor.run((PY, "-c", script), cwd=tmp_path)
    assert result.ok
    total = 10_002_000
    assert result.stdout_cut == total - 8192
    assert result.stdout.startswith("H" * 1000) and result.stdout.endswith("T" * 1000)
    assert f"{total - 8192} bytes cut" in result.stdout and f"of {total} bytes" in result.stdout
    v = await Verifier(executor, evidence_limit=2000).verify(
        VerifySpec((PY, "-c", script + "; sys.exit(1)")), tmp_path
    )
    assert not v.passed
    assert len(v.evidence.encode()) < 2300
    assert "bytes cut" in v.evidence
    assert v.cut > total - 8192


async def test_environment_is_scrubbed_unless_allowed_by_name(tmp_path: Path) -> None:
    """Secrets in the worker's environment do not reach the command unless allowed by name."""
    source = {"PATH": "/usr/bin:/bin", "API_TOKEN": "s3cret", "OK_VAR": "fine"}
    show = (PY, "-c", "import os, json; print(json.dumps(dict(os.environ)))")
    plain = await SubprocessExecutor(source_env=source).run(show, cwd=tmp_path)
    assert "s3cret" not in plain.stdout and "OK_VAR" not in plain.stdout
    assert '"HOME": "' + str(tmp_path) in plain.stdout
    executor = SubprocessExecutor(source_env=source, allow_env=["OK_VAR"])
    allowed = await executor.run(show, cwd=tmp_path, allow_env=["OK_VAR"], env={"EXTRA": "1"})
    assert '"OK_VAR": "fine"' in allowed.stdout and '"EXTRA": "1"' in allowed.stdout
    assert "s3cret" not in allowed.stdout
    assert executor.environment(allow_env=["OK_VAR"]) == {"PATH": "/usr/bin:/bin", "OK_VAR": "fine"}


async def test_a_task_sees_only_the_variables_it_asked_for_and_the_worker_allows(
    tmp_path: Path,
) -> None:
    """A variable the worker allows reaches only the commands that ask for it by name."""
    source = {"PATH": "/usr/bin:/bin", "OK_VAR": "fine", "OTHER": "also allowed"}
    executor = SubprocessExecutor(source_env=source, allow_env=["OK_VAR", "OTHER"])
    show = (PY, "-c", "import os, json; print(json.dumps(dict(os.environ)))")
    silent = await executor.run(show, cwd=tmp_path)
    assert "fine" not in silent.stdout and "also allowed" not in silent.stdout
    asked = await executor.run(show, cwd=tmp_path, allow_env=["OK_VAR"])
    assert '"OK_VAR": "fine"' in asked.stdout and "also allowed" not in asked.stdout
    assert executor.environment() == {"PATH": "/usr/bin:/bin"}


async def test_a_command_cannot_widen_the_workers_allow_list(tmp_path: Path) -> None:
    """A verify spec that names a variable the worker does not allow fails without running."""
    source = {"PATH": os.environ["PATH"], "API_TOKEN": "s3cret"}
    executor = SubprocessExecutor(source_env=source, allow_env=["OK_VAR"])
    marker = tmp_path / "ran"
    spec = VerifySpec(
        (PY, "-c", f"import os; open({str(marker)!r}, 'w').write(os.environ.get('API_TOKEN', ''))"),
        allow_env=("API_TOKEN", "OK_VAR"),
    )
    verification = await Verifier(executor).verify(spec, tmp_path)
    assert not verification.passed and verification.status == "error"
    assert not marker.exists()
    assert "asks to inherit API_TOKEN, which this worker does not allow" in verification.evidence
    assert "--allow-env API_TOKEN" in verification.evidence
    assert "s3cret" not in json.dumps(verification.to_json())
    with pytest.raises(ValueError, match="API_TOKEN"):
        executor.environment(allow_env=["API_TOKEN"])
    permitted = SubprocessExecutor(source_env=source, allow_env=["API_TOKEN", "OK_VAR"])
    assert (await Verifier(permitted).verify(spec, tmp_path)).passed
    assert marker.read_text() == "s3cret"


async def test_commands_without_a_folder_run_in_a_fresh_scratch_dir(tmp_path: Path) -> None:
    """Without cwd, a command runs in a new scratch folder under scratch_root, removed afterwards."""
    executor = SubprocessExecutor(scratch_root=tmp_path)
    result = await executor.run(
        (PY, "-c", "import os; open('f', 'w').write('x'); print(os.getcwd())")
    )
    where = Path(result.stdout.strip())
    assert where.parent == tmp_path and where.name.startswith("steadyloop-")
    assert not where.exists()


async def test_command_tool_is_never_repeat_by_default(tmp_path: Path) -> None:
    """The executor's loop tool runs commands in the folder and defaults to the NEVER policy."""
    tool = SubprocessExecutor().tool(tmp_path)
    assert tool.policy is ReplayPolicy.NEVER
    value = await tool.function(argv=[PY, "-c", "print(6 * 7)"])
    assert isinstance(value, dict) and value["stdout"].strip() == "42"


async def test_in_process_executor_codes_errors_and_timeouts(tmp_path: Path) -> None:
    """In-process commands map return values to exit codes, exceptions to 1, and report timeouts and unknown names."""

    def ok(cwd: Path) -> bool:
        return True

    def fails(cwd: Path, what: str) -> tuple[int, str]:
        return 2, f"failed on {what}"

    def boom(cwd: Path) -> None:
        raise RuntimeError("kaboom")

    async def slow(cwd: Path) -> int:
        await asyncio.sleep(5)
        return 0

    ex = InProcessExecutor({"ok": ok, "fails": fails, "boom": boom, "slow": slow})
    assert (await ex.run(["ok"], cwd=tmp_path)).ok
    r = await ex.run(["fails", "x"], cwd=tmp_path)
    assert (r.exit_code, r.stdout) == (2, "failed on x")
    r = await ex.run(["boom"], cwd=tmp_path)
    assert r.exit_code == 1 and "kaboom" in r.stderr
    r = await ex.run(["slow"], cwd=tmp_path, timeout=0.1)
    assert r.status == "timeout"
    r = await ex.run(["nope"], cwd=tmp_path)
    assert r.status == "missing" and "known: boom, fails, ok, slow" in r.stderr


def test_cap_text_keeps_short_text_and_counts_cut_bytes() -> None:
    """cap_text leaves short text alone and reports exactly how many bytes it cut."""
    assert cap_text("short", 100) == ("short", 0)
    text, cut = cap_text("a" * 50 + "b" * 50, 20)
    assert cut == 80 and text.startswith("a" * 10) and text.endswith("b" * 10)


def test_verification_round_trips_through_json() -> None:
    """A verification stored in the trail rebuilds to an equal object."""
    v = Verification(False, "x", "exited", 1, "s", "e", 0, 0.5, "/tmp")
    assert Verification.from_json(v.to_json()) == v


@pytest.mark.parametrize("bad", [0, -1.0])
def test_executor_refuses_a_non_positive_timeout(bad: float) -> None:
    """A subprocess executor needs a positive default timeout."""
    with pytest.raises(ValueError, match="timeout"):
        SubprocessExecutor(timeout=bad)
