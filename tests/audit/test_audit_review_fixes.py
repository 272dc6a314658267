"""Review fixes: capped output, evidence counts, spec checks, judge, state machine, CLI."""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from audit_helpers import goal_spec, states_by_status
from typer.testing import CliRunner

from steadyloop import AuditError
from steadyloop.audit import (
    AuditContext,
    InProcessExecutor,
    ModelJudge,
    SubprocessExecutor,
    TaskBoard,
    TaskSpec,
    TaskSpecError,
    TaskState,
    Verifier,
    VerifySpec,
)
from steadyloop.audit import IllegalTransition as Illegal
from steadyloop.cli import _common, app
from steadyloop.loop import Message, ModelReply, RunResult, StopReason, ToolSpec

PY = sys.executable
runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Print messages wide enough that nothing folds."""
    monkeypatch.setattr(_common.console, "width", 300)
    monkeypatch.setattr(_common.err_console, "width", 300)


# -- capped output ---------------------------------------------------------------------


@pytest.mark.parametrize("text", ["aaa€", "aaaa€", "aa😀", "aaaa😀"])
async def test_output_under_the_cap_is_kept_exactly(tmp_path: Path, text: str) -> None:
    """Output under the cap comes back unchanged, even with a character across the head/tail split."""
    code = f"import sys; sys.stdout.buffer.write({text.encode()!r})"
    result = await SubprocessExecutor(max_output=10).run((PY, "-c", code), cwd=tmp_path)
    assert (result.stdout, result.stdout_cut) == (text, 0)


async def test_a_cut_never_splits_a_character() -> None:
    """Where output is cut, characters at the cut are dropped whole and counted, never shown as U+FFFD."""
    executor = InProcessExecutor({"euros": lambda cwd: (0, "€" * 10)}, max_output=10)
    result = await executor.run(["euros"])
    assert "\ufffd" not in result.stdout
    assert result.stdout.startswith("€\n[… 24 bytes cut: kept the first 3 and the last 3 of 30")
    assert result.stdout.endswith("…]\n€") and result.stdout_cut == 24


# -- evidence --------------------------------------------------------------------------


def _noted(evidence: str) -> list[int]:
    return [int(n) for n in re.findall(r"\[… (\d+) bytes cut …\]", evidence)]


async def test_evidence_counts_only_output_when_the_executor_already_cut() -> None:
    """After an executor cut, the evidence's note and `cut` both equal the bytes of output missing from it."""
    executor = InProcessExecutor({"big": lambda cwd: (1, "x" * 100_000)}, max_output=1000)
    v = await Verifier(executor, evidence_limit=200).verify(VerifySpec(("big",)), ".")
    missing = 100_000 - v.evidence.count("x")
    assert v.cut == missing
    assert _noted(v.evidence) == [missing]


async def test_evidence_of_two_cut_streams_states_each_cut_and_the_sum(tmp_path: Path) -> None:
    """When both streams were cut, the evidence notes each cut and their sum, and `cut` is that sum."""
    code = "import sys; sys.stdout.write('o' * 50_000); sys.stderr.write('e' * 50_000)"
    executor = SubprocessExecutor(max_output=1000)
    v = await Verifier(executor).verify(VerifySpec((PY, "-c", code)), tmp_path)
    assert re.findall(r"o{2,}|e{2,}", v.evidence) == ["o" * 500, "o" * 500, "e" * 500, "e" * 500]
    assert _noted(v.evidence) == [49_000, 49_000]
    assert v.evidence.endswith("[… 98000 bytes of output cut in all …]")
    assert v.cut == 98_000


# -- spec checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verify", "field"),
    [
        ({"command": ["true"], "env": {"A=B": "x"}}, "goal.verify.env"),
        ({"command": ["true"], "env": {"": "x"}}, "goal.verify.env"),
        ({"command": ["true"], "env": {"A\0": "x"}}, "goal.verify.env"),
        ({"command": ["true"], "env": {"A": "x\0y"}}, "goal.verify.env"),
        ({"command": ["tr\0ue"]}, "goal.verify.command"),
        ("echo 'oops", "goal.verify.command"),
        ({"command": ["true"], "timeout": float("inf")}, "goal.verify.timeout"),
    ],
)
def test_verify_specs_the_os_would_refuse_are_refused(verify: Any, field: str) -> None:
    """A verify spec the OS cannot run (bad env, NUL, unbalanced quote, endless timeout) is a TaskSpecError naming its field."""
    with pytest.raises(TaskSpecError) as info:
        TaskSpec.from_json({"prompt": "p", "goal": {"goal": "g", "verify": verify}})
    assert info.value.field == field


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"prompt": "p\ud800"}, "prompt"),
        ({"prompt": "p", "goal": {"goal": "g\ud800", "verify": ["true"]}}, "goal.goal"),
        ({"prompt": "p", "goal": {"goal": "g", "verify": ["tr\ud800ue"]}}, "goal.verify.command"),
        (
            {
                "prompt": "p",
                "goal": {"goal": "g", "verify": {"command": ["t"], "env": {"A": "\udc00"}}},
            },
            "goal.verify.env",
        ),
        ({"prompt": "p", "user_id": "u\ud800"}, "user_id"),
        ({"prompt": "p", "workdir": "w\ud800"}, "workdir"),
        ({"prompt": "p", "workdir": "w\0"}, "workdir"),
        ({"prompt": "p", "priority": 2**63}, "priority"),
        ({"prompt": "p", "priority": -(2**63) - 1}, "priority"),
    ],
)
def test_specs_without_a_stored_form_are_refused_up_front(data: dict[str, Any], field: str) -> None:
    """A spec with no canonical JSON form, or a priority beyond 64 bits, is a TaskSpecError naming the field."""
    with pytest.raises(TaskSpecError) as info:
        TaskSpec.from_json(data)
    assert info.value.field == field


def test_unknown_keys_of_mixed_types_are_named() -> None:
    """Unknown keys that are not all strings are still refused as a TaskSpecError."""
    with pytest.raises(TaskSpecError, match="unknown field"):
        TaskSpec.from_json({1: "x", "zz": "y", "prompt": "p"})


async def test_the_widest_priorities_are_stored(tmp_path: Path) -> None:
    """Priorities at both ends of the signed 64-bit range are accepted and queued, and one beyond is not."""
    async with await TaskBoard.open(f"sqlite:///{tmp_path}/q.db") as board:
        for n, priority in enumerate((2**63 - 1, -(2**63))):
            await board.submit(TaskSpec(prompt="p", task_id=f"t{n}", priority=priority))
        assert sorted(t.priority for t in await board.tasks()) == [-(2**63), 2**63 - 1]
    with pytest.raises(TaskSpecError):
        TaskSpec(prompt="p", priority=2**63)


@pytest.mark.parametrize(
    ("argv", "env"),
    [(["true"], {"A=B": "x"}), (["true"], {"A": "x\0y"}), (["tr\0ue"], {})],
)
async def test_a_command_the_os_refuses_is_an_error_result(
    tmp_path: Path, argv: list[str], env: dict[str, str]
) -> None:
    """An argv or env the OS refuses gives a result with status error; the executor does not raise."""
    result = await SubprocessExecutor().run(argv, cwd=tmp_path, env=env)
    assert result.status == "error" and "ValueError" in result.stderr and not result.ok


# -- the model judge -------------------------------------------------------------------


class _Answers:
    """A model client answering from a list, one answer per call."""

    name = "answers"

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        self.calls += 1
        return ModelReply.final(self.answers[min(self.calls, len(self.answers)) - 1])


def _context() -> AuditContext:
    run = RunResult(run_id="r", stop_reason=StopReason.COMPLETED, output="x")
    return AuditContext(task_id="t", spec=TaskSpec(prompt="p"), round=1, audit_round=1, run=run)


async def test_a_finding_that_is_not_an_object_is_a_bad_answer() -> None:
    """A findings list holding a non-object is retried, then an AuditError, never an AttributeError."""
    model = _Answers('{"findings": ["the answer is wrong"]}', '{"findings": []}')
    assert await ModelJudge(model, attempts=2).judge(_context()) == []
    assert model.calls == 2
    stubborn = _Answers('{"findings": ["the answer is wrong"]}')
    with pytest.raises(AuditError, match="not an object"):
        await ModelJudge(stubborn, attempts=2).judge(_context())
    assert stubborn.calls == 2


# -- the state machine -----------------------------------------------------------------

STATES = states_by_status()


@pytest.mark.parametrize(
    ("name", "kind", "payload", "error"),
    [
        ("new", "task.submitted", {"spec": {"prompt": "   "}}, TaskSpecError),
        ("new", "task.submitted", {"task_id": "t1"}, Illegal),
        ("new", "task.submitted", {"spec": "not an object"}, Illegal),
        ("running", "task.round_started", {"round": 1}, Illegal),
        ("running", "task.round_started", {"round": 1, "run_id": 7}, Illegal),
        ("running/failed", "task.pushed_back", {"round": 1}, Illegal),
    ],
)
def test_a_refused_event_leaves_the_state_unchanged(
    name: str, kind: str, payload: dict[str, Any], error: type[Exception]
) -> None:
    """An event whose payload lacks what the state needs is refused before anything changes."""
    state = copy.deepcopy(STATES[name])
    before = copy.deepcopy(state)
    with pytest.raises(error):
        state.apply(kind, payload)
    assert state == before


def test_a_goal_task_does_not_complete_when_its_verification_failed() -> None:
    """In goal mode, completed is refused after a failed verification, even if the audit lists no finding."""
    state = TaskState("t1")
    for kind, payload in [
        ("task.submitted", {"spec": goal_spec("t1").to_json()}),
        ("task.claimed", {"worker": "w", "lease_token": "k"}),
        ("task.round_started", {"round": 1, "run_id": "t1.r1"}),
        ("task.run_finished", {"round": 1, "stop_reason": "completed"}),
        ("task.verified", {"round": 1, "passed": False, "exit_code": 1}),
        ("task.audited", {"round": 1, "audit_round": 1, "passed": True, "findings": []}),
    ]:
        state.apply(kind, payload)
    before = copy.deepcopy(state)
    with pytest.raises(Illegal, match="verification failed"):
        state.apply("task.completed", {"round": 1, "reason": "done"})
    assert state == before


# -- the CLI ---------------------------------------------------------------------------


@pytest.mark.parametrize("lease", ["0", "-5", "inf"])
def test_work_refuses_a_lease_that_is_not_a_positive_time(tmp_path: Path, lease: str) -> None:
    """`audit work --lease` of zero, below zero or endless exits 2 with a usage message, no traceback."""
    store = f"sqlite:///{tmp_path}/a.db"
    assert runner.invoke(app, ["audit", "submit", "-s", store, "-p", "x"]).exit_code == 0
    r = runner.invoke(
        app, ["audit", "work", "-s", store, "-a", "audit_cli_agent:agent", "--lease", lease]
    )
    assert r.exit_code == 2 and "--lease" in r.output
    assert isinstance(r.exception, SystemExit)


@pytest.mark.parametrize(
    "extra",
    [
        ["--id", "wanted"],
        ["--priority", "9"],
        ["-d", "a"],
        ["--key", "k"],
        ["--goal", "g", "--verify", "true"],
        ["--rounds", "5"],
        ["--audit-rounds", "1"],
        ["--workdir", "/tmp"],
    ],
)
def test_submit_refuses_spec_options_with_a_file(tmp_path: Path, extra: list[str]) -> None:
    """`audit submit -f` with an option that would shape the spec exits 2 naming it; nothing is queued."""
    f = tmp_path / "s.json"
    f.write_text('{"prompt": "p"}')
    store = f"sqlite:///{tmp_path}/a.db"
    r = runner.invoke(app, ["audit", "submit", "-s", store, "-f", str(f), *extra])
    assert r.exit_code == 2 and extra[0] in r.output and "--file" in r.output
    assert not (tmp_path / "a.db").exists()


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["show", "t1"]])
def test_reading_a_missing_store_creates_nothing(tmp_path: Path, command: list[str]) -> None:
    """`audit status` and `audit show` on a SQLite store that does not exist exit 2 and create no file."""
    path = tmp_path / "typo.db"
    r = runner.invoke(app, ["audit", *command, "-s", f"sqlite:{path}"])
    assert r.exit_code == 2 and "no task store exists" in r.output
    assert not path.exists()
