"""Workers shut down cleanly on signals, rounds have a time limit, and commands die with them."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from audit_helpers import first_user_text, marked, new_marker, wait_for, writer_factory
from audit_slow_agent import make_agent

from steadyloop.audit import (
    GoalSpec,
    InProcessExecutor,
    SubprocessExecutor,
    TaskBoard,
    TaskContext,
    TaskSpec,
    TaskStatus,
    Verifier,
    VerifySpec,
    Worker,
)
from steadyloop.loop import Agent, Message, ModelReply, ScriptedModel, load_run

HERE = Path(__file__).parent


def start_worker(url: str, tmp: Path, name: str, *extra: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    with open(tmp / f"{name}.log", "wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "steadyloop",
                "audit",
                "work",
                "-a",
                "audit_slow_agent:make_agent",
                "-s",
                url,
                "--scratch",
                str(tmp / "scratch"),
                "--forever",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


async def trail_kinds(board: TaskBoard, task_id: str) -> list[str]:
    return [r.kind.removeprefix("task.") for r in await board.trail(task_id)]


async def wait_until(predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.05)
    return bool(await predicate())


@pytest.mark.slow
async def test_sigterm_mid_tool_hands_the_task_to_another_worker_within_the_grace(
    tmp_path: Path,
) -> None:
    """SIGTERM during a tool call longer than the grace: the lease is released with a record and another worker claims the task within grace + 2 s, then resumes and finishes the stopped run."""
    url = f"sqlite:///{tmp_path}/audit.db"
    grace = 1.0
    async with await TaskBoard.open(url) as board:
        await board.submit(TaskSpec(prompt="Run the slow tool.", task_id="t1"))
        first = start_worker(url, tmp_path, "first", "--grace", str(grace))
        second = None
        try:
            marker = tmp_path / "scratch" / "t1" / "hung-once"
            assert await wait_until(lambda: asyncio.sleep(0, marker.exists()), 30)
            second = start_worker(url, tmp_path, "second", "--grace", str(grace))
            await asyncio.sleep(3)  # the second worker is up and polling
            assert (await board.get("t1")).status is TaskStatus.RUNNING
            sent = time.time()
            first.send_signal(signal.SIGTERM)
            assert first.wait(timeout=grace + 10) == 0, (tmp_path / "first.log").read_text()
            assert await wait_until(lambda: _claims(board, "t1", 2), grace + 10)
            trail = await board.trail("t1")
            released = next(r for r in trail if r.kind == "task.released")
            assert released.payload["shutdown"] and released.payload["interrupted"] == "t1.r1"
            claim = [r for r in trail if r.kind == "task.claimed"][1]
            assert claim.record.time / 1e6 - sent <= grace + 2, claim.record.time / 1e6 - sent
            assert await wait_until(lambda: _status(board, "t1", TaskStatus.COMPLETED), 30), (
                await trail_kinds(board, "t1")
            )
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(timeout=grace + 10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
        assert second is not None and second.returncode == 0
        kinds = await trail_kinds(board, "t1")
        assert kinds == [
            "submitted",
            "claimed",
            "round_started",
            "released",
            "claimed",
            "round_resumed",
            "run_finished",
            "audited",
            "completed",
        ], kinds
        trail = await board.trail("t1")
        resumed = next(r for r in trail if r.kind == "task.round_resumed")
        assert resumed.payload["run_id"] == "t1.r1" and resumed.payload["round"] == 1
        # The same run went on: it was stopped resumably, not ended.
        run = await load_run(board.journal, board.app, "t1.r1")
        kinds = [r.kind for r in run.records]
        assert "run.stopped" in kinds and kinds.count("run.ended") == 1
        assert run.state.ended is not None and run.state.ended.stop_reason.value == "completed"
        row = await board.get("t1")
        assert (row.round, row.audit_rounds) == (1, 1)
    assert "SIGTERM: claiming no more tasks" in (tmp_path / "first.log").read_text()


async def _claims(board: TaskBoard, task_id: str, n: int) -> bool:
    return (await trail_kinds(board, task_id)).count("claimed") >= n


async def _status(board: TaskBoard, task_id: str, status: TaskStatus) -> bool:
    return (await board.get(task_id)).status is status


@pytest.mark.slow
async def test_a_second_signal_ends_the_worker_at_once(tmp_path: Path) -> None:
    """With a long grace, a second SIGTERM ends the worker at once instead of waiting."""
    url = f"sqlite:///{tmp_path}/audit.db"
    async with await TaskBoard.open(url) as board:
        await board.submit(TaskSpec(prompt="Run the slow tool.", task_id="t1"))
    proc = start_worker(url, tmp_path, "first", "--grace", "120")
    try:
        marker = tmp_path / "scratch" / "t1" / "hung-once"
        assert await asyncio.to_thread(wait_for, marker.exists, 30)
        proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)
        assert proc.poll() is None  # still in its grace
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "SIGTERM again: stopping at once" in (tmp_path / "first.log").read_text()


async def test_shutdown_during_verify_kills_the_command_and_releases_the_lease(
    tmp_path: Path,
) -> None:
    """A worker shut down while its verify command runs kills the command and hands the task back at once."""
    code = new_marker()
    spec = TaskSpec(
        prompt="Write the answer.",
        task_id="v1",
        goal=GoalSpec("it passes", VerifySpec(("sleep", f"900.{code}"), timeout=600)),
    )
    async with await TaskBoard.open(f"sqlite:///{tmp_path}/audit.db") as board:
        await board.submit(spec)
        worker = Worker(
            board,
            writer_factory(),
            verifier=Verifier(SubprocessExecutor()),
            scratch_root=tmp_path,
            lease=30,
        )
        running = asyncio.ensure_future(worker.run())
        assert await asyncio.to_thread(wait_for, lambda: bool(marked(code)), 20)
        worker.shutdown(grace=0.2)
        await asyncio.wait_for(running, 10)
        assert await asyncio.to_thread(wait_for, lambda: not marked(code), 3), marked(code)
        trail = await board.trail("v1")
        assert trail[-1].kind == "task.released" and trail[-1].payload["shutdown"]
        assert trail[-1].payload["interrupted"] is None  # the run had finished already
        row = await board.get("v1")
        assert row.status is TaskStatus.QUEUED and row.owner is None
        state = await board.state("v1")
        assert (state.phase, state.round_claims) == ("ran", 0)


async def test_a_round_past_its_time_limit_is_stopped_and_audited_with_evidence(
    tmp_path: Path,
) -> None:
    """A hung async tool no longer keeps its task running: the round stops at its time limit and the overrun is a finding with evidence."""
    async with await TaskBoard.open(f"sqlite:///{tmp_path}/audit.db") as board:
        await board.submit(TaskSpec(prompt="Hang.", task_id="h1", max_audit_rounds=1))
        worker = Worker(board, make_agent, scratch_root=tmp_path, lease=30, round_time=0.5)
        await asyncio.wait_for(worker.run(), 20)  # the tool hangs for ever: the limit stopped it
        row = await board.get("h1")
        assert row.status is TaskStatus.NEEDS_HUMAN
        trail = await board.trail("h1")
        finished = next(r for r in trail if r.kind == "task.run_finished")
        assert finished.payload["stop_reason"] == "cancelled"
        assert finished.payload["time_limit"] == 0.5
        detail = str(finished.payload["detail"])
        assert "time limit of 0.5 s" in detail and "tool 'slow' was running" in detail
        audited = next(r for r in trail if r.kind == "task.audited")
        evidence = [f["evidence"] for f in audited.payload["findings"]]  # type: ignore[index, union-attr]
        assert any("time limit of 0.5 s" in str(e) for e in evidence), evidence


async def test_cancel_of_a_running_task_stops_its_round_and_records_it_cancelled(
    tmp_path: Path,
) -> None:
    """Audit cancel on a running task: its worker stops the round (a hung tool too, after the grace), records cancelled, and blocks its dependents."""
    async with await TaskBoard.open(f"sqlite:///{tmp_path}/audit.db") as board:
        await board.submit(TaskSpec(prompt="Hang.", task_id="c1"))
        await board.submit(TaskSpec(prompt="After.", task_id="c2", depends_on=("c1",)))
        worker = Worker(board, make_agent, scratch_root=tmp_path, lease=5, heartbeat=0.1, grace=0.5)
        running = asyncio.ensure_future(worker.run())
        marker = tmp_path / "c1" / "hung-once"
        assert await asyncio.to_thread(wait_for, marker.exists, 20)
        assert await board.cancel("c1", "not needed any more") is TaskStatus.RUNNING
        await asyncio.wait_for(running, 15)  # the tool hangs for ever: the cancel stopped it
        row = await board.get("c1")
        assert row.status is TaskStatus.CANCELLED
        trail = await board.trail("c1")
        assert trail[-1].kind == "task.cancelled"
        assert trail[-1].payload["reason"] == "not needed any more"
        assert (await board.get("c2")).status is TaskStatus.BLOCKED
        assert not worker.errors


async def test_a_retried_task_shows_the_persons_note_to_the_agent(tmp_path: Path) -> None:
    """After audit retry --note, the next round's first model call carries the note in its preamble."""
    seen: list[str] = []

    def make(ctx: TaskContext) -> Agent:
        def script(index: int, messages: Sequence[Message]) -> ModelReply | str:
            if index == 0:
                seen.append(first_user_text(messages))
            return "done"

        return Agent("a", ScriptedModel(script))

    spec = TaskSpec(
        prompt="Write it.",
        task_id="r1",
        goal=GoalSpec("fails", VerifySpec(("check",)), round_budget=1),
    )
    calls = iter([1, 0])
    verifier = Verifier(InProcessExecutor({"check": lambda cwd: next(calls)}))
    async with await TaskBoard.open(f"sqlite:///{tmp_path}/audit.db") as board:
        await board.submit(spec)
        await Worker(board, make, verifier=verifier, scratch_root=tmp_path).run()
        assert (await board.get("r1")).status is TaskStatus.GOAL_UNMET
        await board.retry("r1", "use the second file")
        await Worker(board, make, verifier=verifier, scratch_root=tmp_path).run()
        assert (await board.get("r1")).status is TaskStatus.COMPLETED
    assert len(seen) == 2 and "use the second file" not in seen[0]
    assert "sent it back with this note: use the second file" in seen[1]
