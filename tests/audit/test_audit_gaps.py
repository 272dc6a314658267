"""The smaller gaps of the worker and the CLI: each fails on the code before the fix."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from audit_helpers import first_user_text
from typer.testing import CliRunner

from steadyloop.audit import (
    PREAMBLE_CLOSE,
    PREAMBLE_OPEN,
    GoalSpec,
    InProcessExecutor,
    TaskBoard,
    TaskContext,
    TaskSpec,
    TaskStatus,
    Verifier,
    VerifySpec,
    Worker,
)
from steadyloop.cli import _common, app
from steadyloop.loop import Agent, Budgets, Message, ModelReply, ScriptedModel

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Print wide enough that nothing folds."""
    monkeypatch.setattr(_common.console, "width", 300)
    monkeypatch.setattr(_common.err_console, "width", 300)


async def test_a_workdir_that_is_a_file_goes_to_a_person_at_once_saying_why(
    tmp_path: Path,
) -> None:
    """A task whose workdir is a file costs one claim and ends needs-human with the real error."""
    path = tmp_path / "not-a-folder"
    path.write_text("x")
    async with await TaskBoard.open(f"sqlite:///{tmp_path}/a.db") as board:
        await board.submit(TaskSpec(prompt="p", task_id="w1", workdir=str(path)))
        worker = Worker(board, Agent("a", ScriptedModel(["done"])), scratch_root=tmp_path)
        await worker.run()
        row = await board.get("w1")
        assert row.status is TaskStatus.NEEDS_HUMAN and row.attempts == 1
        assert "working folder cannot be used" in row.detail and str(path) in row.detail
        assert not worker.errors


async def test_a_prompt_over_the_agents_budget_goes_to_a_person_after_one_round(
    tmp_path: Path,
) -> None:
    """A prompt that alone exceeds the agent's prompt budget ends needs-human after one round, not three."""
    agent = Agent("a", ScriptedModel(["done"]), budgets=Budgets(max_prompt_chars=1000))
    async with await TaskBoard.open(f"sqlite:///{tmp_path}/a.db") as board:
        await board.submit(TaskSpec(prompt="x" * 5000, task_id="big"))
        await Worker(board, agent, scratch_root=tmp_path).run()
        row = await board.get("big")
        assert row.status is TaskStatus.NEEDS_HUMAN and row.round == 1
        assert "cannot fit the agent's budget" in row.detail and "shorten the prompt" in row.detail


async def test_a_prompt_that_begins_with_the_markers_keeps_its_block_in_every_round(
    tmp_path: Path,
) -> None:
    """A prompt beginning with the preamble markers reaches the model whole in round 2 too, after the packet."""
    prompt = f"{PREAMBLE_OPEN}\nthe user's own block\n{PREAMBLE_CLOSE}\n\nWrite 42."
    seen: list[tuple[int, str]] = []

    def make(ctx: TaskContext) -> Agent:
        def script(index: int, messages: Sequence[Message]) -> ModelReply | str:
            if index == 0:
                seen.append((ctx.round, first_user_text(messages)))
            return "done"

        return Agent("a", ScriptedModel(script))

    spec = TaskSpec(
        prompt=prompt,
        task_id="m1",
        goal=GoalSpec("fails", VerifySpec(("check",)), round_budget=2),
    )
    verifier = Verifier(InProcessExecutor({"check": lambda cwd: 1}))
    async with await TaskBoard.open(f"sqlite:///{tmp_path}/a.db") as board:
        await board.submit(spec)
        await Worker(board, make, verifier=verifier, scratch_root=tmp_path).run()
    assert [r for r, _ in seen] == [1, 2]
    assert seen[0][1].startswith(prompt)
    assert "the user's own block" in seen[1][1] and seen[1][1].count(PREAMBLE_OPEN) == 2
    assert prompt in seen[1][1]


@pytest.mark.parametrize(
    ("args", "content", "expected"),
    [
        (["-p", "Do it", "--rounds", "0"], None, "--rounds is goal mode's round budget"),
        (["-p", "Do it", "--rounds", "5"], None, "--rounds is goal mode's round budget"),
        (["-f", "{file}"], "", "holds no task spec"),
        (["-f", "{file}"], "[]", "holds no task spec"),
    ],
    ids=["rounds-0", "rounds-without-goal", "empty-file", "empty-list"],
)
def test_submit_that_would_queue_nothing_or_ignore_an_option_fails(
    tmp_path: Path, args: list[str], content: str | None, expected: str
) -> None:
    """--rounds without goal mode, an empty spec file and [] exit 2 with a reason instead of 0 in silence."""
    file = tmp_path / "specs.json"
    if content is not None:
        file.write_text(content)
    argv = ["audit", "submit", "-s", f"sqlite:///{tmp_path}/a.db"]
    argv += [a.replace("{file}", str(file)) for a in args]
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, r.output
    assert expected in r.output


def test_an_agent_factory_given_through_the_cli_receives_its_task_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Audit work -a module:make_agent calls a one-argument factory with each round's TaskContext."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    store = f"sqlite:///{tmp_path}/a.db"
    r = runner.invoke(app, ["audit", "submit", "-s", store, "-p", "Go", "--id", "f1"])
    assert r.exit_code == 0, r.output
    (tmp_path / "scratch" / "f1").mkdir(parents=True)
    (tmp_path / "scratch" / "f1" / "hung-once").write_text("no hang")
    r = runner.invoke(
        app,
        [
            "audit",
            "work",
            "-a",
            "audit_slow_agent:make_agent",
            "-s",
            store,
            "--scratch",
            str(tmp_path / "scratch"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "1 completed" in r.output
    r = runner.invoke(app, ["audit", "show", "f1", "-s", store])
    assert "finished by" in r.output


def test_work_on_a_missing_sqlite_store_creates_nothing(tmp_path: Path) -> None:
    """Audit work on a mistyped SQLite path exits 2 and creates no file."""
    path = tmp_path / "typo.db"
    r = runner.invoke(
        app, ["audit", "work", "-a", "audit_cli_agent:agent", "-s", f"sqlite:///{path}"]
    )
    assert r.exit_code == 2 and "no task store exists" in r.output
    assert not path.exists()


def test_isolate_options_need_isolate(tmp_path: Path) -> None:
    """--no-network without --isolate is refused: the plain executor cannot take the network away."""
    r = runner.invoke(
        app,
        ["audit", "work", "-a", "x:y", "-s", f"sqlite:///{tmp_path}/a.db", "--no-network"],
    )
    assert r.exit_code == 2 and "need --isolate" in r.output


def test_isolate_without_bubblewrap_is_one_line_naming_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Audit work --isolate on a machine without bwrap exits 2 with one line naming the package."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    store = f"sqlite:///{tmp_path}/a.db"
    runner.invoke(app, ["audit", "submit", "-s", store, "-p", "Go", "--id", "i1"])
    monkeypatch.setenv("PATH", str(tmp_path))
    r = runner.invoke(
        app, ["audit", "work", "-a", "audit_cli_agent:agent", "-s", store, "--isolate"]
    )
    assert r.exit_code == 2, r.output
    assert "bubblewrap" in r.output and len(r.output.strip().splitlines()) == 1
