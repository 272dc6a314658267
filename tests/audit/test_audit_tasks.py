"""Task specs, dependency checks and the task state machine, transition by transition."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from audit_helpers import goal_spec, states_by_status

from steadyloop import CorruptionError
from steadyloop.audit import (
    TRANSITIONS,
    GoalSpec,
    IllegalTransition,
    TaskEvent,
    TaskSpec,
    TaskSpecError,
    TaskState,
    TaskStatus,
    VerifySpec,
    check_dependencies,
    task_stream,
)
from steadyloop.records import Record, StoredRecord

STATES = states_by_status()

# Payloads that satisfy each event's own checks in the state where it is legal.
PAYLOADS: dict[TaskEvent, dict[str, Any]] = {
    TaskEvent.SUBMITTED: {"task_id": "t1", "spec": goal_spec("t1").to_json()},
    TaskEvent.CLAIMED: {"worker": "w2", "lease_token": "k2", "attempt": 2},
    TaskEvent.LEASE_LOST: {"worker": "w", "lease_token": "k"},
    TaskEvent.RELEASED: {"reason": "busy"},
    TaskEvent.ROUND_STARTED: {"round": 1, "run_id": "t1.r1"},
    TaskEvent.ROUND_RESUMED: {"round": 1, "run_id": "t1.r1"},
    TaskEvent.RUN_FINISHED: {"round": 1, "stop_reason": "completed"},
    TaskEvent.VERIFIED: {"round": 1, "passed": True},
    TaskEvent.AUDITED: {"round": 1, "audit_round": 1, "passed": True, "findings": []},
    TaskEvent.PUSHED_BACK: {"round": 1, "packet": {"id": "p"}},
    TaskEvent.COMPLETED: {"round": 1},
    TaskEvent.NEEDS_HUMAN: {"reason": "cap"},
    TaskEvent.GOAL_UNMET: {"round": 1},
    TaskEvent.BLOCKED: {"dependency": "d"},
    TaskEvent.CANCELLED: {"reason": "not needed"},
    TaskEvent.RETRIED: {"note": "try the other way"},
}

BLOCKER = {"id": "F1", "severity": "blocker", "kind": "deterministic", "gate": "verification"}

# (state name, event) -> status after, for every legal pair; everything else is refused.
LEGAL: dict[tuple[str, TaskEvent], TaskStatus] = {
    ("new", TaskEvent.SUBMITTED): TaskStatus.QUEUED,
    ("queued", TaskEvent.CLAIMED): TaskStatus.RUNNING,
    ("queued", TaskEvent.BLOCKED): TaskStatus.BLOCKED,
    ("running", TaskEvent.LEASE_LOST): TaskStatus.QUEUED,
    ("running", TaskEvent.RELEASED): TaskStatus.QUEUED,
    ("running", TaskEvent.ROUND_STARTED): TaskStatus.RUNNING,
    ("running", TaskEvent.NEEDS_HUMAN): TaskStatus.NEEDS_HUMAN,
    ("running/running", TaskEvent.LEASE_LOST): TaskStatus.QUEUED,
    ("running/running", TaskEvent.RELEASED): TaskStatus.QUEUED,
    ("running/running", TaskEvent.ROUND_RESUMED): TaskStatus.RUNNING,
    ("running/running", TaskEvent.RUN_FINISHED): TaskStatus.RUNNING,
    ("running/running", TaskEvent.NEEDS_HUMAN): TaskStatus.NEEDS_HUMAN,
    ("running/ran", TaskEvent.LEASE_LOST): TaskStatus.QUEUED,
    ("running/ran", TaskEvent.RELEASED): TaskStatus.QUEUED,
    ("running/ran", TaskEvent.VERIFIED): TaskStatus.RUNNING,
    ("running/ran", TaskEvent.NEEDS_HUMAN): TaskStatus.NEEDS_HUMAN,
    ("running/verified", TaskEvent.LEASE_LOST): TaskStatus.QUEUED,
    ("running/verified", TaskEvent.RELEASED): TaskStatus.QUEUED,
    ("running/verified", TaskEvent.AUDITED): TaskStatus.RUNNING,
    ("running/verified", TaskEvent.NEEDS_HUMAN): TaskStatus.NEEDS_HUMAN,
    ("running/audited", TaskEvent.LEASE_LOST): TaskStatus.QUEUED,
    ("running/audited", TaskEvent.RELEASED): TaskStatus.QUEUED,
    ("running/audited", TaskEvent.COMPLETED): TaskStatus.COMPLETED,
    ("running/audited", TaskEvent.NEEDS_HUMAN): TaskStatus.NEEDS_HUMAN,
    ("running/failed", TaskEvent.LEASE_LOST): TaskStatus.QUEUED,
    ("running/failed", TaskEvent.RELEASED): TaskStatus.QUEUED,
    ("running/failed", TaskEvent.PUSHED_BACK): TaskStatus.QUEUED,
    ("running/failed", TaskEvent.NEEDS_HUMAN): TaskStatus.NEEDS_HUMAN,
    ("running/spent", TaskEvent.LEASE_LOST): TaskStatus.QUEUED,
    ("running/spent", TaskEvent.RELEASED): TaskStatus.QUEUED,
    ("running/spent", TaskEvent.GOAL_UNMET): TaskStatus.GOAL_UNMET,
    ("running/spent", TaskEvent.NEEDS_HUMAN): TaskStatus.NEEDS_HUMAN,
    # A person's decisions: cancel a task not yet ended, retry one that went to a person.
    **{
        (name, TaskEvent.CANCELLED): TaskStatus.CANCELLED
        for name in STATES
        if name == "queued" or name.startswith("running")
    },
    ("needs-human", TaskEvent.RETRIED): TaskStatus.QUEUED,
    ("goal-unmet", TaskEvent.RETRIED): TaskStatus.QUEUED,
}


@pytest.mark.parametrize("event", list(TaskEvent), ids=lambda e: e.short)
@pytest.mark.parametrize("name", list(STATES))
def test_every_transition_is_allowed_or_refused_as_the_table_says(
    name: str, event: TaskEvent
) -> None:
    """Each event in each state either moves the task as the table says or is refused with IllegalTransition, leaving the state unchanged."""
    state = copy.deepcopy(STATES[name])
    before = copy.deepcopy(state)
    expected = LEGAL.get((name, event))
    if expected is None:
        with pytest.raises(IllegalTransition) as info:
            state.apply(event.value, PAYLOADS[event])
        assert info.value.task_id == "t1"
        assert info.value.event == event.short
        assert f"cannot apply {event.short!r}" in str(info.value)
        assert state == before
    else:
        state.apply(event.value, PAYLOADS[event])
        assert state.status is expected
        assert state.head == before.head + 1


def test_the_status_table_matches_the_legal_pairs() -> None:
    """TRANSITIONS names, for every event, exactly the statuses the legal pairs start from."""
    for event, (sources, target) in TRANSITIONS.items():
        starts = {name.split("/")[0] for (name, e) in LEGAL if e is event}
        names = {"new" if s is None else s.value for s in sources}
        assert starts == names, event
        assert {LEGAL[(n, e)] for (n, e) in LEGAL if e is event} == {target}


def test_terminal_states_refuse_everything_with_a_clear_reason() -> None:
    """A terminal task refuses any event, and the error says it already ended."""
    for name in ("completed", "needs-human", "goal-unmet", "blocked"):
        with pytest.raises(IllegalTransition, match="already ended"):
            copy.deepcopy(STATES[name]).apply("task.claimed", PAYLOADS[TaskEvent.CLAIMED])


def test_refusal_lists_what_is_allowed() -> None:
    """Refusing an event in a live state names the events allowed from there."""
    with pytest.raises(IllegalTransition, match="allowed from here: blocked, cancelled, claimed"):
        copy.deepcopy(STATES["queued"]).apply("task.completed", {"round": 1})


def test_unknown_event_is_refused() -> None:
    """A record kind that is no task event is refused."""
    with pytest.raises(IllegalTransition, match="not a task event"):
        copy.deepcopy(STATES["queued"]).apply("task.teleported", {})


def test_round_counter_never_goes_back_or_skips() -> None:
    """round_started must carry exactly the next round number."""
    state = copy.deepcopy(STATES["running"])
    for bad in (0, 2, None):
        with pytest.raises(IllegalTransition, match="never go back or skip"):
            state.apply("task.round_started", {"round": bad, "run_id": "x"})
    state.apply("task.round_started", {"round": 1, "run_id": "t1.r1"})
    assert state.round == 1


def test_resume_and_results_must_name_the_open_round() -> None:
    """round_resumed, run_finished and verified are refused for any round but the open one."""
    state = copy.deepcopy(STATES["running/running"])
    with pytest.raises(IllegalTransition, match="open round is 1"):
        state.apply("task.round_resumed", {"round": 2})
    with pytest.raises(IllegalTransition, match="open round is 1"):
        state.apply("task.run_finished", {"round": 0, "stop_reason": "completed"})


def test_audit_round_must_be_the_next() -> None:
    """Audited must carry the next audit round number."""
    with pytest.raises(IllegalTransition, match="next audit round is 1"):
        copy.deepcopy(STATES["running/verified"]).apply(
            "task.audited", {"round": 1, "audit_round": 3, "passed": True}
        )


def test_goal_mode_round_is_verified_before_its_audit() -> None:
    """A goal-mode round cannot be audited before it is verified."""
    with pytest.raises(IllegalTransition, match="verified before its audit"):
        copy.deepcopy(STATES["running/ran"]).apply(
            "task.audited", {"round": 1, "audit_round": 1, "passed": True}
        )


def test_plain_tasks_are_not_verified_and_cannot_miss_a_goal() -> None:
    """Without goal mode, verified and goal_unmet are refused; audited follows run_finished."""
    state = TaskState("p")
    spec = TaskSpec(prompt="do it", task_id="p").to_json()
    for kind, payload in [
        ("task.submitted", {"spec": spec}),
        ("task.claimed", {"worker": "w"}),
        ("task.round_started", {"round": 1, "run_id": "p.r1"}),
        ("task.run_finished", {"round": 1, "stop_reason": "completed"}),
    ]:
        state.apply(kind, payload)
    with pytest.raises(IllegalTransition, match="only goal-mode tasks are verified"):
        state.apply("task.verified", {"round": 1, "passed": True})
    state.apply(
        "task.audited", {"round": 1, "audit_round": 1, "passed": False, "findings": [BLOCKER]}
    )
    with pytest.raises(IllegalTransition, match="only goal-mode"):
        state.apply("task.goal_unmet", {"round": 1})
    with pytest.raises(IllegalTransition, match="did not pass"):
        state.apply("task.completed", {"round": 1})


def _trail(spec: TaskSpec, events: list[tuple[str, dict[str, Any]]]) -> TaskState:
    state = TaskState(str(spec.task_id))
    state.apply("task.submitted", {"spec": spec.to_json()})
    state.apply("task.claimed", {"worker": "w", "lease_token": "k"})
    for kind, payload in events:
        state.apply(kind, payload)
    return state


def _round(number: int, *, verified: bool | None, findings: list[dict[str, Any]]) -> list[Any]:
    events: list[Any] = [
        ("task.round_started", {"round": number, "run_id": f"t1.r{number}"}),
        ("task.run_finished", {"round": number, "stop_reason": "completed"}),
    ]
    if verified is not None:
        events.append(("task.verified", {"round": number, "passed": verified}))
    events.append(("task.audited", {"round": number, "audit_round": number, "findings": findings}))
    return events


PACKET = {"task_id": "t1", "round": 1, "audit_round": 1, "findings": []}


def test_a_passed_audit_cannot_be_pushed_back() -> None:
    """pushed_back is refused after an audit whose findings are all info."""
    info = {**BLOCKER, "severity": "info"}
    state = _trail(goal_spec("t1"), _round(1, verified=True, findings=[info]))
    with pytest.raises(IllegalTransition, match="audit passed"):
        state.apply("task.pushed_back", {"round": 1, "packet": PACKET})


def test_goal_unmet_needs_a_spent_budget_and_a_failed_verification() -> None:
    """goal_unmet is refused before the round budget is spent and after a passed verification."""
    early = _trail(goal_spec("t1", budget=2), _round(1, verified=False, findings=[BLOCKER]))
    with pytest.raises(IllegalTransition, match="not spent"):
        early.apply("task.goal_unmet", {"round": 1})
    judged = _trail(goal_spec("t1", budget=1), _round(1, verified=True, findings=[BLOCKER]))
    with pytest.raises(IllegalTransition, match="verification and audit failed"):
        judged.apply("task.goal_unmet", {"round": 1})
    judged.apply("task.needs_human", {"reason": "a judge objected"})
    passed = _trail(goal_spec("t1", budget=1), _round(1, verified=True, findings=[]))
    with pytest.raises(IllegalTransition, match="verification and audit failed"):
        passed.apply("task.goal_unmet", {"round": 1})


def test_no_round_starts_beyond_the_round_budget() -> None:
    """A spent round budget refuses both the push-back and the next round_started."""
    state = _trail(goal_spec("t1", budget=1), _round(1, verified=False, findings=[BLOCKER]))
    with pytest.raises(IllegalTransition, match="round budget"):
        state.apply("task.pushed_back", {"round": 1, "packet": PACKET})
    # Even a trail that got past that (an older writer) cannot open round 2.
    state.status, state.phase = TaskStatus.RUNNING, None
    with pytest.raises(IllegalTransition, match="round budget \\(1\\) is spent"):
        state.apply("task.round_started", {"round": 2, "run_id": "t1.r2"})


def test_the_audit_cap_sends_the_task_to_a_person_not_back() -> None:
    """At audit_round == max_audit_rounds, pushed_back is refused and needs_human allowed."""
    spec = TaskSpec(prompt="x", task_id="t1", max_audit_rounds=1)
    state = _trail(spec, _round(1, verified=None, findings=[BLOCKER]))
    with pytest.raises(IllegalTransition, match="audit cap"):
        state.apply("task.pushed_back", {"round": 1, "packet": PACKET})
    state.apply("task.needs_human", {"reason": "cap"})
    assert state.status is TaskStatus.NEEDS_HUMAN


def test_passed_is_read_from_the_findings() -> None:
    """An audit claiming passed with a blocker open is refused, and so is completed after it."""
    spec = TaskSpec(prompt="x", task_id="t1")
    state = _trail(spec, _round(1, verified=None, findings=[BLOCKER])[:-1])
    with pytest.raises(IllegalTransition, match="a blocking finding is open"):
        state.apply(
            "task.audited", {"round": 1, "audit_round": 1, "passed": True, "findings": [BLOCKER]}
        )
    state.apply("task.audited", {"round": 1, "audit_round": 1, "findings": [BLOCKER]})
    with pytest.raises(IllegalTransition, match="did not pass"):
        state.apply("task.completed", {"round": 1})


def test_lease_lost_keeps_the_open_round_for_the_next_worker() -> None:
    """After lease_lost and a new claim, the open round continues (resumable), counters kept."""
    state = copy.deepcopy(STATES["running/running"])
    state.apply("task.lease_lost", {"worker": "w"})
    state.apply("task.claimed", {"worker": "w2", "lease_token": "k2"})
    assert (state.phase, state.round, state.claims, state.owner) == ("running", 1, 2, "w2")
    state.apply("task.round_resumed", {"round": 1, "run_id": "t1.r1"})
    assert state.resumes == 1


def test_fold_reports_a_broken_trail_as_corruption_naming_the_record() -> None:
    """A stored trail that breaks the state machine raises CorruptionError naming stream and seq."""
    stream = task_stream("t1")
    recs = [
        StoredRecord(stream, 1, Record("task.submitted", PAYLOADS[TaskEvent.SUBMITTED], "a", 1)),
        StoredRecord(stream, 2, Record("task.completed", {"round": 1}, "b", 2)),
    ]
    with pytest.raises(CorruptionError) as info:
        TaskState.fold("t1", recs)
    assert info.value.location == f"{stream}#2"


# -- specs ---------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", ["", "   \n", None])
def test_a_spec_without_a_prompt_is_refused(prompt: Any) -> None:
    """A missing or blank prompt is a TaskSpecError naming the prompt field."""
    with pytest.raises(TaskSpecError, match="needs a prompt") as info:
        TaskSpec(prompt=prompt)
    assert info.value.field == "prompt"


def test_a_json_spec_without_a_prompt_is_refused() -> None:
    """A JSON spec lacking the prompt key is refused with the same clear error."""
    with pytest.raises(TaskSpecError, match="needs a prompt"):
        TaskSpec.from_json({"task_id": "x"})


@pytest.mark.parametrize("budget", [0, -1, -100, True, 1.5, "3"])
def test_zero_or_negative_round_budget_is_refused(budget: Any) -> None:
    """A round budget that is not a positive integer is refused, naming the field."""
    with pytest.raises(TaskSpecError, match="round budget must be a positive integer") as info:
        GoalSpec("g", VerifySpec(("true",)), round_budget=budget)
    assert info.value.field == "goal.round_budget"


@pytest.mark.parametrize("cap", [0, -2])
def test_zero_or_negative_audit_cap_is_refused(cap: int) -> None:
    """max_audit_rounds must be a positive integer."""
    with pytest.raises(TaskSpecError, match="max_audit_rounds"):
        TaskSpec(prompt="p", max_audit_rounds=cap)


def test_verify_commands_are_checked() -> None:
    """An empty verify command or a non-positive timeout is refused; a string is split."""
    with pytest.raises(TaskSpecError, match="non-empty"):
        VerifySpec(())
    with pytest.raises(TaskSpecError, match="non-empty"):
        VerifySpec("")  # type: ignore[arg-type]
    with pytest.raises(TaskSpecError, match="timeout"):
        VerifySpec(("true",), timeout=0)
    assert VerifySpec("python -m pytest -q").command == ("python", "-m", "pytest", "-q")  # type: ignore[arg-type]


def test_unknown_fields_are_named() -> None:
    """A JSON spec with an unknown field is refused, naming the field."""
    with pytest.raises(TaskSpecError, match="unknown field 'promt'"):
        TaskSpec.from_json({"prompt": "p", "promt": "typo"})
    with pytest.raises(TaskSpecError, match="unknown field 'budget'"):
        TaskSpec.from_json({"prompt": "p", "goal": {"goal": "g", "verify": "true", "budget": 2}})


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"depends_on": 5}, "depends_on"),
        ({"depends_on": "a"}, "depends_on"),
        ({"depends_on": [5]}, "depends_on"),
        ({"metadata": [1, 2]}, "metadata"),
        ({"metadata": "x"}, "metadata"),
        (
            {"goal": {"goal": "g", "verify": {"command": "true", "allow_env": 5}}},
            "goal.verify.allow_env",
        ),
        (
            {"goal": {"goal": "g", "verify": {"command": "true", "allow_env": [1]}}},
            "goal.verify.allow_env",
        ),
        ({"goal": {"goal": "g", "verify": {"command": "true", "env": [1]}}}, "goal.verify.env"),
        (
            {"goal": {"goal": "g", "verify": {"command": "true", "env": {"A": 1}}}},
            "goal.verify.env",
        ),
        ({"goal": 5}, "goal"),
    ],
)
def test_badly_typed_json_fields_are_named(data: dict[str, Any], field: str) -> None:
    """A JSON spec field of the wrong type raises TaskSpecError naming the field, never a TypeError."""
    with pytest.raises(TaskSpecError) as info:
        TaskSpec.from_json({"prompt": "p", **data})
    assert info.value.field == field


def test_self_dependency_is_a_cycle() -> None:
    """A task depending on itself is refused as a dependency cycle."""
    with pytest.raises(TaskSpecError, match="dependency cycle: a → a"):
        TaskSpec(prompt="p", task_id="a", depends_on=("a",))


def test_dependency_checks_find_unknown_tasks_and_cycles() -> None:
    """check_dependencies refuses an unknown dependency and shows a cycle's path."""
    a = TaskSpec(prompt="p", task_id="a", depends_on=("b",))
    b = TaskSpec(prompt="p", task_id="b", depends_on=("c",))
    c = TaskSpec(prompt="p", task_id="c", depends_on=("a",))
    with pytest.raises(TaskSpecError, match="dependency cycle: a → b → c → a"):
        check_dependencies([a, b, c], set())
    with pytest.raises(TaskSpecError, match="depends on 'zzz', which is not a known task"):
        check_dependencies([TaskSpec(prompt="p", task_id="x", depends_on=("zzz",))], set())
    check_dependencies([TaskSpec(prompt="p", task_id="x", depends_on=("old",))], {"old"})


def test_spec_round_trips_through_json_byte_for_byte() -> None:
    """to_json/from_json keep every field, so the stored prompt and goal are exactly as given."""
    spec = goal_spec(
        "t1", prompt="Ünïcode prompt\n\twith  spaces ", priority=5, metadata={"k": [1]}
    )
    again = TaskSpec.from_json(spec.to_json())
    assert again == spec
    assert again.prompt.encode() == spec.prompt.encode()
    assert "Goal: answer.txt holds 42" in spec.input_text()
