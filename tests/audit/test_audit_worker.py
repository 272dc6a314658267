"""The worker end to end on SQLite: push-back with packets, caps, goal budgets, crashes and resume."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from audit_helpers import (
    Call,
    ManualClock,
    check_answer,
    first_user_text,
    goal_spec,
    writer_factory,
)

from steadyloop.audit import (
    PREAMBLE_OPEN,
    Auditor,
    InProcessExecutor,
    Rule,
    RulesJudge,
    TaskBoard,
    TaskContext,
    TaskSpec,
    TaskStatus,
    Verifier,
    Worker,
    WorkerEvent,
    count_preambles,
)
from steadyloop.faults import Fault, FaultPlan, SimulatedCrash
from steadyloop.loop import Agent, Message, ModelReply, ReplayPolicy, ScriptedModel, ToolRegistry
from steadyloop.testing._queue_conformance import _statement_boundaries


class Crash(BaseException):
    """Stands in for SIGKILL inside one process: nothing catches it on the way out."""


def make_worker(board: TaskBoard, agent: Any, tmp_path: Path, name: str, **kw: Any) -> Worker:
    return Worker(
        board,
        agent,
        worker_id=name,
        verifier=Verifier(InProcessExecutor({"check": check_answer})),
        scratch_root=tmp_path / "scratch",
        lease=10,
        poll=0.01,
        **kw,
    )


async def kinds(board: TaskBoard, task_id: str) -> list[str]:
    return [r.kind.removeprefix("task.") for r in await board.trail(task_id)]


async def journal_text(board: TaskBoard) -> str:
    out = []
    for ns in await board.journal.namespaces():
        for stream in await board.journal.streams(ns):
            out.extend(r.record.to_json() for r in await board.journal.read(ns, stream))
    return "\n".join(out)


async def test_first_round_fails_packet_pushes_back_second_round_passes(
    board: TaskBoard, tmp_path: Path
) -> None:
    """A failed verify pushes the task back with a packet; the next round sees it once, first turn only, and passes."""
    log: list[Call] = []
    spec = goal_spec("t1")
    await board.submit(spec)
    await make_worker(board, writer_factory(log=log), tmp_path, "w1").run()
    assert (await board.get("t1")).status is TaskStatus.COMPLETED
    assert await kinds(board, "t1") == [
        "submitted",
        "claimed",
        "round_started",
        "run_finished",
        "verified",
        "audited",
        "pushed_back",
        "claimed",
        "round_started",
        "run_finished",
        "verified",
        "audited",
        "completed",
    ]
    trail = await board.trail("t1")
    packet = trail[6].payload["packet"]
    assert isinstance(packet, dict)
    finding = packet["findings"][0]  # type: ignore[index]
    assert finding["gate"] == "verification" and finding["kind"] == "deterministic"
    assert "answer.txt holds '41'" in finding["evidence"]
    assert finding["acceptance"] == "`check` exits with status 0"
    assert finding["id"] == "r1.verification.1" and finding["severity"] == "blocker"
    # What the model saw: no preamble in round 1, exactly one on round 2's first call only.
    seen = {(r, i): count_preambles(text) for _, r, _, i, text in log}
    assert seen == {(1, 0): 0, (1, 1): 0, (2, 0): 1, (2, 1): 0}
    r2_first = next(text for _, r, _, i, text in log if (r, i) == (2, 0))
    assert r2_first.index(PREAMBLE_OPEN) == 0 and r2_first.endswith(spec.input_text())
    # In memory only: the stored prompt and goal are unchanged, the journal has no preamble.
    state = await board.state("t1")
    assert state.spec == spec and (await board.get("t1")).spec == spec
    assert PREAMBLE_OPEN not in await journal_text(board)


async def test_three_failed_audits_go_to_a_person(board: TaskBoard, tmp_path: Path) -> None:
    """A task that never passes is audited three times (the default cap) and ends needs-human."""
    await board.submit(goal_spec("t2", budget=10))
    await make_worker(board, writer_factory(fix_when_packet=False), tmp_path, "w1").run()
    row = await board.get("t2")
    assert (row.status, row.round, row.audit_rounds) == (TaskStatus.NEEDS_HUMAN, 3, 3)
    assert "3 audit rounds (the cap)" in row.detail
    k = await kinds(board, "t2")
    assert k.count("audited") == 3 and k.count("pushed_back") == 2 and k[-1] == "needs_human"


async def test_push_backs_do_not_count_against_the_claim_limit(
    board: TaskBoard, tmp_path: Path
) -> None:
    """A task allowed 12 audit rounds gets all 12 and ends at its audit cap, not at the claim limit of 10."""
    await board.submit(TaskSpec(prompt="say yes", task_id="t", max_audit_rounds=12))
    auditor = Auditor([RulesJudge([Rule.output_contains("yes")])])
    agent = Agent("a", ScriptedModel(lambda i, m: "no"))
    await make_worker(board, agent, tmp_path, "w", auditor=auditor).run()
    state = await board.state("t")
    assert (state.status, state.audit_rounds, state.claims) == (TaskStatus.NEEDS_HUMAN, 12, 12)
    assert "12 audit rounds (the cap)" in state.detail


async def test_claims_that_make_no_progress_go_to_a_person(
    board: TaskBoard, tmp_path: Path, clock: ManualClock
) -> None:
    """A round whose workers keep dying is given to a person once its claims pass max_claims."""
    await board.submit(TaskSpec(prompt="say yes", task_id="t"))

    def dying(ctx: TaskContext) -> Agent:
        raise Crash(ctx.round)

    for _ in range(3):
        with pytest.raises(Crash):
            await make_worker(board, dying, tmp_path, "w", max_claims=3).run_once()
        clock.advance(11)
    await make_worker(board, dying, tmp_path, "w", max_claims=3).run_once()
    state = await board.state("t")
    assert (state.status, state.round, state.claims) == (TaskStatus.NEEDS_HUMAN, 1, 4)
    assert "claimed 4 times without finishing round 1 (limit 3)" in state.detail


async def test_goal_mode_stops_when_the_round_budget_is_spent(
    board: TaskBoard, tmp_path: Path
) -> None:
    """With a round budget of 2 and a verify command that keeps failing, the task ends goal-unmet after round 2."""
    await board.submit(goal_spec("t3", budget=2))
    await make_worker(board, writer_factory(fix_when_packet=False), tmp_path, "w1").run()
    row = await board.get("t3")
    assert (row.status, row.round) == (TaskStatus.GOAL_UNMET, 2)
    assert "round budget (2) is spent" in row.detail


async def test_rules_judge_pushes_back_plain_tasks(board: TaskBoard, tmp_path: Path) -> None:
    """Without goal mode the judgement gate decides: a rule broken in round 1 is fixed in round 2."""

    def script(index: int, messages: Sequence[Message]) -> str:
        return "all done" if PREAMBLE_OPEN in first_user_text(messages) else "TODO later"

    await board.submit(TaskSpec(prompt="Summarise.", task_id="p1"))
    auditor = Auditor([RulesJudge([Rule.output_lacks(r"\bTODO\b")])])
    await make_worker(
        board, Agent("a", ScriptedModel(script)), tmp_path, "w", auditor=auditor
    ).run()
    state = await board.state("p1")
    assert state.status is TaskStatus.COMPLETED and state.audit_rounds == 2
    finding = (await board.trail("p1"))[4].payload["findings"][0]  # type: ignore[index]
    assert (finding["gate"], finding["kind"]) == ("judgement", "deterministic")


async def test_dependencies_run_in_order_and_failures_block_dependents(
    board: TaskBoard, tmp_path: Path
) -> None:
    """A dependent waits for its dependency; the dependent of a task that ends goal-unmet is blocked."""
    await board.submit_many(
        [
            goal_spec("bad", budget=1),
            goal_spec("after-bad", depends_on=("bad",), priority=5),
            goal_spec("good"),
            TaskSpec(prompt="then this", task_id="after-good", depends_on=("good",), priority=9),
        ]
    )
    events: list[WorkerEvent] = []
    await make_worker(board, writer_factory(), tmp_path, "w1", on_event=events.append).run()
    status = {t.task_id: t.status.value for t in await board.tasks()}
    assert status == {
        "bad": "goal-unmet",
        "after-bad": "blocked",
        "good": "completed",
        "after-good": "completed",
    }
    assert (await kinds(board, "after-bad")) == ["submitted", "blocked"]
    assert any(e.kind == "blocked" and e.task_id == "after-bad" for e in events)


def crashing_factory(log: list[Call], crash_at: set[tuple[str, int, str]]) -> Any:
    """Writer agents with two tools; raising Crash the first time a (task, round, tool) is reached."""
    base = writer_factory(log=log)

    def make(ctx: TaskContext) -> Agent:
        agent = base(ctx)
        tools = ToolRegistry()
        write = agent.tools.get("write")

        def guarded(name: str, fn: Any) -> Any:
            def call(**kw: Any) -> Any:
                key = (ctx.task_id, ctx.round, name)
                if key in crash_at:
                    crash_at.discard(key)
                    raise Crash(key)
                return fn(**kw)

            return call

        tools.tool(policy=ReplayPolicy.SAFE, name="write")(guarded("write", write.function))
        tools.tool(policy=ReplayPolicy.SAFE, name="note")(guarded("note", lambda: "noted"))
        inner = agent.model

        async def complete(messages: Sequence[Message], specs: Any) -> ModelReply:
            index = sum(1 for m in messages if m.role == "assistant")
            reply = await inner.complete(messages, specs)
            if index == 1:
                return ModelReply.call("note", {})
            if index == 2:
                return ModelReply.final("done")
            return reply

        model = ScriptedModel(lambda i, m: "unused")
        model.complete = complete  # type: ignore[method-assign]
        return Agent(agent.name, model, tools)

    return make


async def test_worker_dies_mid_round_and_another_resumes_it_from_the_journal(
    board: TaskBoard, tmp_path: Path, clock: ManualClock
) -> None:
    """After a crash in round 2 the next worker resumes that round: preamble once on its first turn, counters continue."""
    log: list[Call] = []
    crash_at = {("t1", 2, "write")}
    await board.submit(goal_spec("t1"))
    factory = crashing_factory(log, crash_at)
    w1 = make_worker(board, factory, tmp_path, "w1")
    await w1.run_once()  # round 1: fails verify, pushed back
    with pytest.raises(Crash):
        await w1.run_once()  # round 2 dies in its first tool call
    assert (await board.state("t1")).phase == "running"
    w2 = make_worker(board, factory, tmp_path, "w2")
    assert await w2.run_once() is None  # the lease still holds
    clock.advance(11)
    await w2.run()
    state = await board.state("t1")
    assert state.status is TaskStatus.COMPLETED
    assert (state.round, state.audit_rounds, state.resumes, state.claims) == (2, 2, 1, 3)
    k = await kinds(board, "t1")
    assert k[7:] == [
        "claimed",
        "round_started",
        "lease_lost",
        "claimed",
        "round_resumed",
        "run_finished",
        "verified",
        "audited",
        "completed",
    ]
    rounds = [r.payload.get("round") for r in await board.trail("t1") if "round" in r.payload]
    assert rounds == sorted(rounds)
    # Round 2 calls: 0 before the crash (packet preamble), then the resumed driver's
    # calls 1 and 2: the preamble (resume note + packet) on call 1 only.
    r2 = [(resumed, i, count_preambles(t), t) for _, r, resumed, i, t in log if r == 2]
    assert [(resumed, i, n) for resumed, i, n, _ in r2] == [
        (False, 0, 1),
        (True, 1, 1),
        (True, 2, 0),
    ]
    resumed_text = r2[1][3]
    assert "Resume note: round 2" in resumed_text and "worker w1 stopped" in resumed_text
    assert "the verify command failed" in resumed_text
    assert PREAMBLE_OPEN not in await journal_text(board)


async def test_crash_after_the_run_verifies_without_resuming_the_run(
    board: TaskBoard, tmp_path: Path, clock: ManualClock
) -> None:
    """A worker lost after run_finished leaves the run alone: the next one verifies and audits without a second round."""
    calls = {"n": 0}

    def check(cwd: Path) -> tuple[int, str]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise Crash("verify")
        return check_answer(cwd)

    await board.submit(goal_spec("t1"))
    w = Worker(
        board,
        writer_factory(),
        worker_id="w1",
        verifier=Verifier(InProcessExecutor({"check": check})),
        scratch_root=tmp_path,
        lease=10,
    )
    with pytest.raises(Crash):
        await w.run_once()
    clock.advance(11)
    await w.run_once()
    k = await kinds(board, "t1")
    assert k == [
        "submitted",
        "claimed",
        "round_started",
        "run_finished",
        "lease_lost",
        "claimed",
        "verified",
        "audited",
        "pushed_back",
    ]


async def test_a_crash_inside_the_finishing_transaction_leaves_the_task_to_the_next_worker(
    board: TaskBoard, tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker dying between the statements of its last write leaves row and trail both running; the next worker completes the task once."""
    await board.submit(TaskSpec(prompt="hi", task_id="x"))
    real = board.conclude

    async def dying(*a: Any, **kw: Any) -> Any:
        # The third statement of the one transaction: the trail's records are sent, the
        # row's settle not yet, nothing committed.
        faults = FaultPlan(Fault(at=3, label="queue.statement"))
        with _statement_boundaries(board.journal, faults):
            return await real(*a, **kw)

    monkeypatch.setattr(board, "conclude", dying)
    with pytest.raises(SimulatedCrash):
        await make_worker(board, Agent("a", ScriptedModel(["ok"])), tmp_path, "w1").run_once()
    monkeypatch.setattr(board, "conclude", real)
    assert (await board.get("x")).status is TaskStatus.RUNNING
    assert (await board.state("x")).status is TaskStatus.RUNNING
    assert "completed" not in await kinds(board, "x")
    clock.advance(11)
    events: list[WorkerEvent] = []
    await make_worker(
        board, Agent("a", ScriptedModel(["ok"])), tmp_path, "w2", on_event=events.append
    ).run()
    assert (await board.get("x")).status is TaskStatus.COMPLETED
    k = await kinds(board, "x")
    assert k.count("completed") == 1 and k[-1] == "completed" and "lease_lost" in k
    assert [(e.kind, e.task_id) for e in events if e.kind == "completed"] == [("completed", "x")]


async def test_never_repeat_effect_in_doubt_goes_to_a_person(
    board: TaskBoard, tmp_path: Path, clock: ManualClock
) -> None:
    """A worker lost during a never-repeat tool leaves it in doubt; the resumed round stops needs-human, nothing guessed."""
    fired: list[int] = []

    def factory(ctx: TaskContext) -> Agent:
        tools = ToolRegistry()

        @tools.tool(policy=ReplayPolicy.NEVER)
        def pay() -> str:
            """Pay once."""
            fired.append(1)
            raise Crash("mid-payment")

        return Agent("payer", ScriptedModel([ModelReply.call("pay"), "paid"]), tools)

    await board.submit(TaskSpec(prompt="Pay the invoice.", task_id="pay"))
    with pytest.raises(Crash):
        await make_worker(board, factory, tmp_path, "w1").run_once()
    clock.advance(11)
    await make_worker(board, factory, tmp_path, "w2").run()
    row = await board.get("pay")
    assert row.status is TaskStatus.NEEDS_HUMAN and "resume_state_unknown" in row.detail
    assert fired == [1]


async def test_a_live_worker_that_lost_its_lease_cannot_write_again(
    board: TaskBoard, tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A slow worker whose lease was taken over is fenced off: its next trail write fails with lease-lost, said in one WARNING naming worker and task."""
    caplog.set_level(logging.DEBUG, logger="steadyloop.audit")
    gate = asyncio.Event()
    entered = asyncio.Event()

    def factory(ctx: TaskContext) -> Agent:
        tools = ToolRegistry()

        @tools.tool(policy=ReplayPolicy.SAFE)
        async def slow() -> str:
            """Wait for the test."""
            entered.set()
            await gate.wait()
            return "ok"

        return Agent("slow", ScriptedModel([ModelReply.call("slow"), "done"]), tools)

    await board.submit(TaskSpec(prompt="slow task", task_id="s"))
    events: list[WorkerEvent] = []
    w1 = make_worker(board, factory, tmp_path, "w1", on_event=events.append)
    first = asyncio.ensure_future(w1.run_once())
    await entered.wait()
    clock.advance(11)
    w2 = make_worker(board, factory, tmp_path, "w2", on_event=events.append)
    await w2.run_once()  # the run is still driven by w1: released, not resumed
    assert [e.kind for e in events if e.worker == "w2"] == ["claimed", "released"]
    gate.set()
    await first
    assert any(e.kind == "lease-lost" and e.worker == "w1" for e in events)
    lost = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "steadyloop.audit._worker"
    ]
    assert len(lost) == 1, [r.getMessage() for r in lost]
    assert "worker w1: task 's'" in lost[0].getMessage() and "lease" in lost[0].getMessage()
    clock.advance(11)
    await make_worker(board, factory, tmp_path, "w3").run()
    state = await board.state("s")
    assert state.status is TaskStatus.COMPLETED and state.round == 1
    assert (await kinds(board, "s")).count("run_finished") == 1


async def test_a_blocking_threaded_tool_keeps_its_lease_alive(
    board: TaskBoard, tmp_path: Path, clock: ManualClock
) -> None:
    """While a thread=True tool blocks past the lease, heartbeats renew it: no other worker takes the task."""
    entered, gate = threading.Event(), threading.Event()
    released: list[bool] = []

    def factory(ctx: TaskContext) -> Agent:
        tools = ToolRegistry()

        @tools.tool(policy=ReplayPolicy.NEVER, thread=True)
        def transfer() -> str:
            """Block, as a synchronous client call does."""
            entered.set()
            released.append(gate.wait(10))
            return "ok"

        return Agent("blocker", ScriptedModel([ModelReply.call("transfer"), "done"]), tools)

    await board.submit(TaskSpec(prompt="pay the invoice", task_id="p"))
    events: list[WorkerEvent] = []
    w1 = make_worker(board, factory, tmp_path, "w1", heartbeat=0.02, on_event=events.append)
    first = asyncio.ensure_future(w1.run_once())
    try:
        assert await asyncio.to_thread(entered.wait, 10)
        for _ in range(3):  # 24 s of lease time pass while the tool blocks: 2.4 leases
            clock.advance(8)
            await asyncio.sleep(0.2)  # ten heartbeats' worth of real time
            assert await make_worker(board, factory, tmp_path, "w2").run_once() is None
            assert not first.done()
    finally:
        gate.set()
    assert await first == "p"
    assert released == [True], "the tool was not still blocking while the lease was checked"
    assert [e.kind for e in events if e.kind == "lease-lost"] == []
    state = await board.state("p")
    assert state.round == 1 and (await kinds(board, "p")).count("claimed") == 1


async def test_a_cancelled_wait_inside_the_driver_does_not_end_the_worker(
    board: TaskBoard, tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CancelledError nobody asked for (a driver cancelling its own wait) costs the claim, not the worker: it works on and the task completes once."""
    await board.submit(TaskSpec(prompt="hi", task_id="x"))
    real = board.conclude
    calls = 0

    async def cancelled_under(*a: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise asyncio.CancelledError  # as psycopg's wait does when its connection closes
        return await real(*a, **kw)

    monkeypatch.setattr(board, "conclude", cancelled_under)
    events: list[WorkerEvent] = []
    worker = make_worker(
        board, Agent("a", ScriptedModel(["ok", "ok"])), tmp_path, "w1", on_event=events.append
    )
    assert await worker.run_once() == "x"  # the worker lives on
    assert [e.kind for e in events if e.kind == "error"] == ["error"]
    assert (await board.get("x")).status is TaskStatus.RUNNING  # left to its lease
    clock.advance(11)
    await worker.run()
    assert (await board.get("x")).status is TaskStatus.COMPLETED
    assert (await kinds(board, "x")).count("completed") == 1


async def test_a_wait_cancelled_as_its_event_is_set_is_still_cancelled() -> None:
    """A helper's wait cancelled in the same moment its event is set raises the cancellation instead of losing it."""
    from steadyloop.audit._queue import wait_event

    for spins in range(4):  # the cancel lands before, with and after the waiter wakes
        event = asyncio.Event()
        waiting = asyncio.ensure_future(wait_event(event, 60))
        for _ in range(spins):
            await asyncio.sleep(0)
        event.set()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting


async def test_an_error_a_helper_task_ended_with_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A helper task reaped at the end of a claim that had failed says why at INFO, instead of vanishing."""
    from steadyloop.audit._worker import _reap

    async def broken() -> None:
        raise RuntimeError("the helper broke")

    caplog.set_level(logging.DEBUG, logger="steadyloop.audit")
    helper = asyncio.ensure_future(broken())
    await asyncio.sleep(0)
    await _reap(helper, "worker w: task 't'")
    (record,) = [r for r in caplog.records if r.name == "steadyloop.audit._worker"]
    assert record.levelno == logging.INFO
    assert "worker w: task 't'" in record.getMessage() and "the helper broke" in record.getMessage()
    quiet = asyncio.ensure_future(asyncio.sleep(60))
    await _reap(quiet, "worker w: an idle wait")  # cancelled as asked: nothing to say
    assert len([r for r in caplog.records if r.name == "steadyloop.audit._worker"]) == 1
