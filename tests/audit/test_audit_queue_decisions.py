"""A person's decisions on the board and the CLI (cancel, retry), and ids every layer stores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from audit_helpers import ManualClock, check_answer, goal_spec, writer_factory
from typer.testing import CliRunner

from steadyloop import IllegalTransition, TaskCancelled, TaskSpecError
from steadyloop.audit import (
    InProcessExecutor,
    TaskBoard,
    TaskEvent,
    TaskSpec,
    TaskStatus,
    Verifier,
    Worker,
)
from steadyloop.cli import _common, app
from steadyloop.loop import Agent, ScriptedModel

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Print wide enough that nothing folds."""
    monkeypatch.setattr(_common.console, "width", 300)
    monkeypatch.setattr(_common.err_console, "width", 300)


def _worker(board: TaskBoard, agent: object, tmp_path: Path) -> Worker:
    return Worker(
        board,
        agent,  # type: ignore[arg-type]
        worker_id="w",
        verifier=Verifier(InProcessExecutor({"check": check_answer})),
        scratch_root=tmp_path / "scratch",
        lease=10,
        poll=0.01,
    )


async def test_cancelling_a_queued_task_blocks_its_dependents(board: TaskBoard) -> None:
    """A queued task is cancelled in trail and queue; its dependent ends blocked, naming it."""
    await board.submit(TaskSpec(prompt="p", task_id="a"))
    await board.submit(TaskSpec(prompt="p", task_id="b", depends_on=("a",)))
    assert await board.cancel("a", "not needed any more") is TaskStatus.CANCELLED
    state = await board.state("a")
    assert state.status is TaskStatus.CANCELLED and state.detail == "not needed any more"
    assert (await board.get("a")).status is TaskStatus.CANCELLED
    assert (await board.state("b")).status is TaskStatus.BLOCKED
    assert (await board.get("b")).status is TaskStatus.BLOCKED
    with pytest.raises(IllegalTransition, match="already ended"):
        await board.cancel("a")


async def test_cancelling_a_running_task_asks_its_worker(board: TaskBoard) -> None:
    """A running task stays running in the trail; its worker's heartbeat raises TaskCancelled."""
    await board.submit(TaskSpec(prompt="p", task_id="a"))
    claim = await board.queue.claim("w", 10)
    assert claim is not None
    state = await board.state("a")
    await board.record(
        state,
        [(TaskEvent.CLAIMED, {"worker": "w", "lease_token": claim.lease_token, "attempt": 1})],
    )
    assert await board.cancel("a", "stop") is TaskStatus.RUNNING
    assert (await board.state("a")).status is TaskStatus.RUNNING
    with pytest.raises(TaskCancelled, match="stop"):
        await board.queue.heartbeat("a", claim.lease_token, 10)


async def test_retry_queues_a_goal_unmet_task_again_and_keeps_its_counters(
    board: TaskBoard, tmp_path: Path
) -> None:
    """After goal-unmet, retry --note queues it again; the next round is number 2, not 1 again."""
    agent = writer_factory(fix_when_packet=False)
    await board.submit(goal_spec("g", budget=1))
    await _worker(board, agent, tmp_path).run()
    before = await board.state("g")
    assert before.status is TaskStatus.GOAL_UNMET and before.round == 1
    after = await board.retry("g", "write 42 this time")
    assert after.status is TaskStatus.QUEUED and after.retry_note == "write 42 this time"
    assert (after.round, after.audit_rounds, after.claims) == (1, 1, 1)
    assert (await board.get("g")).status is TaskStatus.QUEUED
    await _worker(board, agent, tmp_path).run()
    final = await board.state("g")
    assert final.status is TaskStatus.GOAL_UNMET
    assert (final.round, final.audit_rounds, final.claims, final.retries) == (2, 2, 2, 1)
    kinds = [r.kind for r in await board.trail("g")]
    assert kinds.count("task.round_started") == 2 and "task.retried" in kinds
    with pytest.raises(TaskSpecError, match="needs a note"):
        await board.retry("g", "  ")
    await board.submit(TaskSpec(prompt="p", task_id="fresh"))
    with pytest.raises(IllegalTransition, match="retried"):
        await board.retry("fresh", "it is only queued")


async def test_a_task_id_with_a_c1_control_becomes_a_valid_task(
    board: TaskBoard, tmp_path: Path
) -> None:
    """A task id holding a C1 control (NEL, U+0085) is queued, worked and completed."""
    spec = TaskSpec(prompt="Say done.", task_id="caf\u00e9\x85 1 ")
    await board.submit(spec)
    await _worker(board, Agent("echo", ScriptedModel(["done"])), tmp_path).run()
    assert (await board.get(spec.task_id or "")).status is TaskStatus.COMPLETED
    state = await board.state(spec.task_id or "")
    assert state.status is TaskStatus.COMPLETED and state.spec is not None
    assert state.spec.task_id == "caf\u00e9\x85 1 "


def test_a_task_id_with_nul_is_refused_at_the_front_door(tmp_path: Path) -> None:
    """A task id the queue cannot store (NUL) is refused by submit with exit 2; nothing is queued."""
    store = f"sqlite:///{tmp_path}/a.db"
    r = runner.invoke(app, ["audit", "submit", "-s", store, "-p", "p", "--id", "a\x00b"])
    assert r.exit_code == 2 and "NUL" in r.output
    r = runner.invoke(app, ["audit", "status", "-s", store])
    assert "no task store" in r.output or "no tasks" in r.output


def test_cli_cancel_and_retry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`audit cancel` ends a queued task and blocks its dependent; `audit retry` needs a person's task."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    store = f"sqlite:///{tmp_path}/a.db"
    for args in (["--id", "a"], ["--id", "b", "-d", "a"], ["--id", "c"]):
        r = runner.invoke(app, ["audit", "submit", "-s", store, "-p", "Say done", *args])
        assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["audit", "cancel", "a", "-s", store, "--reason", "wrong goal"])
    assert r.exit_code == 0, r.output
    assert "a  cancelled" in r.output and "blocked: b" in r.output
    r = runner.invoke(app, ["audit", "cancel", "a", "-s", store])
    assert r.exit_code == 2 and "already ended" in r.output
    r = runner.invoke(app, ["audit", "cancel", "ghost", "-s", store])
    assert r.exit_code == 2 and "no task 'ghost'" in r.output
    r = runner.invoke(app, ["audit", "retry", "c", "-s", store, "--note", "again"])
    assert r.exit_code == 2 and "retried" in r.output
    r = runner.invoke(app, ["audit", "retry", "a", "-s", store, "--note", "again"])
    assert r.exit_code == 2, "a cancelled task stays cancelled"
    r = runner.invoke(app, ["audit", "status", "-s", store, "--json"])
    statuses = {line.split('"task_id": ')[1].split(",")[0]: line for line in r.output.splitlines()}
    assert '"cancelled"' in statuses['"a"'] and '"blocked"' in statuses['"b"']
    r = runner.invoke(app, ["audit", "status", "-s", store])
    assert r.exit_code == 0 and "cancelled" in r.output and "wrong goal" in r.output
    r = runner.invoke(app, ["audit", "show", "a", "-s", store])
    assert r.exit_code == 0 and "cancelled" in r.output
    r = runner.invoke(app, ["audit", "cancel", "a", "-s", f"sqlite:///{tmp_path}/typo.db"])
    assert r.exit_code == 2 and not (tmp_path / "typo.db").exists()


def test_cli_retry_after_goal_unmet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`audit retry TASK --note` sends a goal-unmet task back; the next worker runs round 2."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    store = f"sqlite:///{tmp_path}/a.db"
    fail = "python3 -c 'import sys; sys.exit(1)'"
    r = runner.invoke(
        app,
        [
            *["audit", "submit", "-s", store, "-p", "Check", "--id", "g"],
            *["--goal", "it passes", "--verify", fail, "--rounds", "1"],
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["audit", "submit", "-s", store, "-p", "Then", "--id", "h", "-d", "g"])
    assert r.exit_code == 0, r.output
    work = ["audit", "work", "-s", store, "--agent", "audit_cli_agent:agent"]
    r = runner.invoke(app, work)
    r = runner.invoke(app, ["audit", "status", "-s", store, "--json"])
    assert '"goal-unmet"' in r.output
    r = runner.invoke(app, ["audit", "retry", "g", "-s", store, "--note", "use the other API"])
    assert r.exit_code == 0, r.output
    assert "g  queued again (retry 1; 1 round(s)" in r.output
    assert "queued again with it (they were blocked): h" in r.output
    r = runner.invoke(app, work)
    r = runner.invoke(app, ["audit", "show", "g", "-s", store, "--json"])
    kinds = [line for line in r.output.splitlines() if '"task.round_started"' in line]
    assert len(kinds) == 2 and '"round": 2' in kinds[1]


@pytest.mark.server
@pytest.mark.parametrize("backend", ["postgres", "mysql"])
async def test_a_board_on_a_server_works_odd_ids_cancels_and_retries(
    backend: str, tmp_path: Path
) -> None:
    """On PostgreSQL and MariaDB a task id with a C1 control completes; cancel blocks a dependent."""
    from backends import server_store

    async with server_store(backend) as (url, _), await TaskBoard.open(url) as board:
        assert board.queue.journal is board.journal, "one connection for queue and trail"
        await board.submit(TaskSpec(prompt="Say done.", task_id="Ä\x85 b"))
        await board.submit(TaskSpec(prompt="p", task_id="later"))
        await board.submit(TaskSpec(prompt="p", task_id="after", depends_on=("later",)))
        assert await board.cancel("later", "no") is TaskStatus.CANCELLED
        await _worker(board, Agent("echo", ScriptedModel(["done"])), tmp_path).run()
        assert (await board.state("Ä\x85 b")).status is TaskStatus.COMPLETED
        assert (await board.get("after")).status is TaskStatus.BLOCKED


async def test_a_cancel_racing_a_claim_ends_the_row_too(board: TaskBoard) -> None:
    """A worker that claimed the row but not yet the trail loses to a cancel: the row ends at once."""
    await board.submit(TaskSpec(prompt="p", task_id="a"))
    claim = await board.queue.claim("w", 600)  # claimed in the queue, claimed not yet recorded
    assert claim is not None
    assert await board.cancel("a", "race") is TaskStatus.CANCELLED
    row = await board.get("a")
    assert (row.status, row.lease_token) == (TaskStatus.CANCELLED, None)
    assert not await board.queue.heartbeat("a", claim.lease_token, 600)


async def test_cancelling_a_task_whose_worker_is_gone_ends_it_now(
    board: TaskBoard, clock: ManualClock
) -> None:
    """A running task whose lease ran out is cancelled at once: nobody is left to stop it."""
    await board.submit(TaskSpec(prompt="p", task_id="a"))
    await board.submit(TaskSpec(prompt="p", task_id="b", depends_on=("a",)))
    claim = await board.queue.claim("w", 10)
    assert claim is not None
    state = await board.state("a")
    await board.record(
        state,
        [(TaskEvent.CLAIMED, {"worker": "w", "lease_token": claim.lease_token, "attempt": 1})],
    )
    clock.advance(11)  # the worker died; its lease ran out
    assert await board.cancel("a", "abandoned") is TaskStatus.CANCELLED
    assert (await board.state("a")).status is TaskStatus.CANCELLED
    assert (await board.get("a")).status is TaskStatus.CANCELLED
    assert (await board.get("b")).status is TaskStatus.BLOCKED
    assert await board.queue.claim("w2", 10) is None


async def test_retry_reopens_the_dependents_it_blocked(board: TaskBoard, tmp_path: Path) -> None:
    """Retrying a goal-unmet task queues again the dependents (and theirs) it had blocked."""
    agent = writer_factory(fix_when_packet=False)
    await board.submit(goal_spec("g", budget=1))
    await board.submit(TaskSpec(prompt="p", task_id="child", depends_on=("g",)))
    await board.submit(TaskSpec(prompt="p", task_id="grandchild", depends_on=("child",)))
    await _worker(board, agent, tmp_path).run()
    assert [(await board.get(t)).status for t in ("g", "child", "grandchild")] == [
        TaskStatus.GOAL_UNMET,
        TaskStatus.BLOCKED,
        TaskStatus.BLOCKED,
    ]
    await board.retry("g", "write 42")
    for task_id in ("child", "grandchild"):
        assert (await board.get(task_id)).status is TaskStatus.QUEUED
        state = await board.state(task_id)
        assert state.status is TaskStatus.QUEUED and state.retries == 1
    assert await board.queue.claim("w", 10) is not None  # g itself
    assert await board.queue.claim("w", 10) is None  # the dependents wait for g


def test_cli_retry_refuses_a_blocked_task(tmp_path: Path) -> None:
    """`audit retry` of a blocked task exits 2 with one line naming the dependency; nothing changes."""
    store = f"sqlite:///{tmp_path}/a.db"
    for args in (["--id", "a"], ["--id", "b", "-d", "a"]):
        assert runner.invoke(app, ["audit", "submit", "-s", store, "-p", "p", *args]).exit_code == 0
    assert runner.invoke(app, ["audit", "cancel", "a", "-s", store]).exit_code == 0
    r = runner.invoke(app, ["audit", "retry", "b", "-s", store, "--note", "again"])
    assert r.exit_code == 2, r.output
    assert len(r.output.splitlines()) == 1 and r.output.startswith("error: task 'b'")
    assert "in state 'blocked'" in r.output and "waits on 'a' (cancelled)" in r.output
    r = runner.invoke(app, ["audit", "show", "b", "-s", store, "--json"])
    kinds = [json.loads(line)["kind"] for line in r.output.splitlines()]
    assert kinds == ["task.submitted", "task.blocked"]


async def test_board_retry_of_a_blocked_task_is_refused_when_asked(board: TaskBoard) -> None:
    """`retry(blocked=False)` refuses a blocked task and writes nothing; by default it is retried."""
    await board.submit(TaskSpec(prompt="p", task_id="a"))
    await board.submit(TaskSpec(prompt="p", task_id="b", depends_on=("a",)))
    await board.cancel("a")
    with pytest.raises(IllegalTransition, match=r"'a' \(cancelled\)"):
        await board.retry("b", "again", blocked=False)
    assert (await board.state("b")).status is TaskStatus.BLOCKED
    assert (await board.get("b")).status is TaskStatus.BLOCKED
    assert (await board.retry("b", "again")).status is TaskStatus.QUEUED
