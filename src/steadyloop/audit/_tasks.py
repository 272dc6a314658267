"""Task specs, the task state machine, and the fold of a task's trail.

A task's *trail* is its journal stream ``["task", task_id]``. Every transition is one
record of it; [`TaskState`][steadyloop.audit.TaskState] is a fold over those records, and
[`TaskState.apply`][steadyloop.audit.TaskState.apply] is the state machine: it refuses, with
[`IllegalTransition`][steadyloop.audit.IllegalTransition], any event that does not fit the state.

States ([`TaskStatus`][steadyloop.audit.TaskStatus])::

    queued ──claimed──▶ running ──completed──▶ completed      (terminal)
      ▲  │                │ │ ├──needs_human─▶ needs-human    (terminal)
      │  └──blocked──▶ blocked (terminal)       │ └──goal_unmet──▶ goal-unmet (terminal)
      └──pushed_back / lease_lost / released ───┘

Inside ``running`` a round moves through phases: ``round_started`` (or
``round_resumed`` after a crash) → ``run_finished`` → ``verified`` (goal mode) →
``audited`` → a decision (``pushed_back``, ``completed``, ``goal_unmet``,
``needs_human``). ``lease_lost`` and ``released`` keep the open round, so the next
worker resumes it instead of starting again; round counters only ever go up.
"""

from __future__ import annotations

import enum
import hashlib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, TypeVar

from steadyloop import _names
from steadyloop._errors import CorruptionError, IllegalTransition, TaskSpecError
from steadyloop.records import JSONValue, StoredRecord, canonical_json

__all__ = [
    "DEFAULT_AUDIT_ROUNDS",
    "DEFAULT_ROUND_BUDGET",
    "TERMINAL",
    "TRANSITIONS",
    "GoalSpec",
    "TaskEvent",
    "TaskSpec",
    "TaskState",
    "TaskStatus",
    "VerifySpec",
    "check_dependencies",
    "prepare_spec_model",
    "task_stream",
]

DEFAULT_AUDIT_ROUNDS = 3
"""Audit rounds a task gets before it goes to a person."""

DEFAULT_ROUND_BUDGET = 3
"""Rounds a goal-mode task gets to make its verify command pass."""


class TaskStatus(enum.StrEnum):
    """Where a task is.

    Attributes:
        QUEUED: Waiting for a worker (new, pushed back, or its worker was lost).
        RUNNING: A worker holds its lease and works on a round.
        COMPLETED: The last round passed the audit. Terminal.
        NEEDS_HUMAN: The audit cap was reached, or the run needs a person's decision.
            Terminal.
        GOAL_UNMET: Goal mode spent its round budget without the verify command
            passing. Terminal.
        BLOCKED: A dependency ended without completing. Terminal.
        CANCELLED: Someone cancelled it (``audit cancel``). Terminal.
    """

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    NEEDS_HUMAN = "needs-human"
    GOAL_UNMET = "goal-unmet"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Whether no event can follow."""
        return self in TERMINAL


TERMINAL = frozenset(
    {
        TaskStatus.COMPLETED,
        TaskStatus.NEEDS_HUMAN,
        TaskStatus.GOAL_UNMET,
        TaskStatus.BLOCKED,
        TaskStatus.CANCELLED,
    }
)
"""The statuses a task never leaves."""


class TaskEvent(enum.StrEnum):
    """The record kinds of a task's trail, one per transition.

    The value is the record kind (``task.<name>``).
    """

    SUBMITTED = "task.submitted"
    CLAIMED = "task.claimed"
    LEASE_LOST = "task.lease_lost"
    RELEASED = "task.released"
    ROUND_STARTED = "task.round_started"
    ROUND_RESUMED = "task.round_resumed"
    RUN_FINISHED = "task.run_finished"
    VERIFIED = "task.verified"
    AUDITED = "task.audited"
    PUSHED_BACK = "task.pushed_back"
    COMPLETED = "task.completed"
    NEEDS_HUMAN = "task.needs_human"
    GOAL_UNMET = "task.goal_unmet"
    BLOCKED = "task.blocked"
    CANCELLED = "task.cancelled"
    RETRIED = "task.retried"

    @property
    def short(self) -> str:
        """The name without the ``task.`` prefix."""
        return self.value.removeprefix("task.")


_S = TypeVar("_S", "VerifySpec", "GoalSpec", "TaskSpec")

_Q, _R = TaskStatus.QUEUED, TaskStatus.RUNNING

TRANSITIONS: dict[TaskEvent, tuple[frozenset[TaskStatus | None], TaskStatus]] = {
    TaskEvent.SUBMITTED: (frozenset({None}), _Q),
    TaskEvent.CLAIMED: (frozenset({_Q}), _R),
    TaskEvent.LEASE_LOST: (frozenset({_R}), _Q),
    TaskEvent.RELEASED: (frozenset({_R}), _Q),
    TaskEvent.ROUND_STARTED: (frozenset({_R}), _R),
    TaskEvent.ROUND_RESUMED: (frozenset({_R}), _R),
    TaskEvent.RUN_FINISHED: (frozenset({_R}), _R),
    TaskEvent.VERIFIED: (frozenset({_R}), _R),
    TaskEvent.AUDITED: (frozenset({_R}), _R),
    TaskEvent.PUSHED_BACK: (frozenset({_R}), _Q),
    TaskEvent.COMPLETED: (frozenset({_R}), TaskStatus.COMPLETED),
    TaskEvent.NEEDS_HUMAN: (frozenset({_R}), TaskStatus.NEEDS_HUMAN),
    TaskEvent.GOAL_UNMET: (frozenset({_R}), TaskStatus.GOAL_UNMET),
    TaskEvent.BLOCKED: (frozenset({_Q}), TaskStatus.BLOCKED),
    TaskEvent.CANCELLED: (frozenset({_Q, _R}), TaskStatus.CANCELLED),
    TaskEvent.RETRIED: (
        frozenset({TaskStatus.NEEDS_HUMAN, TaskStatus.GOAL_UNMET, TaskStatus.BLOCKED}),
        _Q,
    ),
}
"""For each event: the statuses it may be applied in (``None``: a task not yet
submitted), and the status it leads to. Round phases add finer rules; see
[`TaskState.apply`][steadyloop.audit.TaskState.apply]."""

# Round phase each event needs (None: no open round), and the phase it leads to.
_PHASES: dict[TaskEvent, tuple[frozenset[str | None], str | None]] = {
    TaskEvent.ROUND_STARTED: (frozenset({None}), "running"),
    TaskEvent.ROUND_RESUMED: (frozenset({"running"}), "running"),
    TaskEvent.RUN_FINISHED: (frozenset({"running"}), "ran"),
    TaskEvent.VERIFIED: (frozenset({"ran"}), "verified"),
    TaskEvent.AUDITED: (frozenset({"ran", "verified"}), "audited"),
    TaskEvent.PUSHED_BACK: (frozenset({"audited"}), None),
    TaskEvent.COMPLETED: (frozenset({"audited"}), None),
    TaskEvent.GOAL_UNMET: (frozenset({"audited"}), None),
}


def task_stream(task_id: str) -> str:
    """Return the trail stream of a task: ``["task", task_id]`` (see `steadyloop._names`)."""
    return _names.task_stream(task_id)


def prepare_spec_model() -> None:
    """Import the declarative spec model now, not when the first spec is checked.

    The model (`steadyloop.audit._spec_model`) imports pydantic, which takes a moment
    that ``import steadyloop.audit`` should not spend. A process that will hold leases
    calls this first (`open_queue` does), so that moment is never spent while a lease
    runs or inside a claim's transaction.
    """
    from steadyloop.audit import _spec_model  # noqa: F401


def _check(spec: VerifySpec | GoalSpec | TaskSpec) -> None:
    """Check a spec built in Python, in place: its fields take their normal form."""
    from steadyloop.audit._spec_model import BUILT, check

    cls = type(spec)
    given = {f.name: getattr(spec, f.name) for f in fields(spec)}
    for name, part in _PARTS[cls].items():
        if type(given[name]) is part:
            given[name] = BUILT  # it was checked when it was built
    for name, value in check(_KINDS[cls], given).items():
        if value is not BUILT:
            object.__setattr__(spec, name, _part(cls, name, value))


def _load(cls: type[_S], data: Any) -> _S:
    """Build a spec from its JSON form, checked as a whole by the model."""
    from steadyloop.audit._spec_model import load

    return _build(cls, load(_KINDS[cls], data))


def _build(cls: type[_S], given: Mapping[str, Any]) -> _S:
    """A spec of fields the model checked already: not checked again by ``__post_init__``."""
    spec = object.__new__(cls)
    for f in fields(cls):
        if f.name in given:
            value = _part(cls, f.name, given[f.name])
        else:
            value = f.default if f.default_factory is MISSING else f.default_factory()
        object.__setattr__(spec, f.name, value)
    return spec


def _part(cls: type, name: str, value: Any) -> Any:
    """A field's value; a part the model gave as a mapping becomes its spec object."""
    part = _PARTS[cls].get(name)
    return _build(part, value) if part is not None and isinstance(value, Mapping) else value


def _json(spec: VerifySpec | GoalSpec | TaskSpec) -> dict[str, JSONValue]:
    """A spec's JSON form: lists for tuples, objects for mappings and parts."""
    out: dict[str, JSONValue] = {}
    for f in fields(spec):
        value = getattr(spec, f.name)
        if isinstance(value, VerifySpec | GoalSpec):
            value = _json(value)
        elif isinstance(value, tuple | Mapping):
            value = list(value) if isinstance(value, tuple) else dict(value)
        out[f.name] = value
    return out


@dataclass(frozen=True, slots=True)
class VerifySpec:
    """The command that says whether a goal is met: it passes when it exits with 0.

    Attributes:
        command: The argv; a string is split with `shlex.split`.
        timeout: Seconds before the command is killed (and fails).
        env: Extra environment variables to set for it.
        allow_env: Names of variables the command needs from the worker's environment,
            besides the safe defaults (``PATH``, locale, …). Each must already be allowed
            by whoever runs the worker (``steadyloop audit work --allow-env NAME``);
            otherwise the command does not run and the verification fails naming it. A
            task cannot widen the worker's allow-list, so whoever submits a task cannot
            read a worker's secrets through its verify command.
    """

    command: tuple[str, ...]
    timeout: float = 60.0
    env: Mapping[str, str] = field(default_factory=dict)
    allow_env: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check(self)

    @property
    def display(self) -> str:
        """The command as a shell line, for people."""
        return shlex.join(self.command)

    def to_json(self) -> dict[str, JSONValue]:
        """Return the spec as a JSON object."""
        return _json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str | Sequence[str]) -> VerifySpec:
        """Build a spec from JSON: an object, or just the command (string or list).

        Raises:
            TaskSpecError: A field is missing or malformed.
        """
        return _load(cls, data)


@dataclass(frozen=True, slots=True)
class GoalSpec:
    """Goal mode: the verify command runs after each round.

    The task stops when it passes, or when the round budget is spent (``goal-unmet``).

    Attributes:
        goal: What must be true, in words; shown to the agent after the prompt.
        verify: The command that checks it.
        round_budget: Most rounds the task may take.
    """

    goal: str
    verify: VerifySpec
    round_budget: int = DEFAULT_ROUND_BUDGET

    def __post_init__(self) -> None:
        _check(self)

    def to_json(self) -> dict[str, JSONValue]:
        """Return the spec as a JSON object."""
        return _json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GoalSpec:
        """Build a goal from its JSON object.

        Raises:
            TaskSpecError: A field is missing or malformed.
        """
        return _load(cls, data)


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """What is submitted: the work, its order, and how it is checked.

    The prompt and goal are stored exactly as given and never change; findings from
    audits reach the agent through packets added in memory only. Built in Python or
    read from JSON, a spec is checked by one declarative model
    (`steadyloop.audit._spec_model`); a broken rule raises
    [`TaskSpecError`][steadyloop.audit.TaskSpecError] naming the field.

    Attributes:
        prompt: What the agent is asked to do. Required, not blank.
        task_id: The task's id; generated at submission when ``None``.
        priority: Higher runs first; ties run in submission order.
        depends_on: Ids of tasks that must complete before this one runs.
        idempotency_key: Submitting the same key again returns the first task; the
            same key with a different body is refused.
        goal: Goal mode, if set.
        max_audit_rounds: Audit rounds before the task goes to a person.
        workdir: The directory the task works in (an existing folder); by default a
            scratch folder the worker creates.
        user_id: The user the task's runs act for.
        metadata: Anything else, stored with the task (JSON).
    """

    prompt: str
    task_id: str | None = None
    priority: int = 0
    depends_on: tuple[str, ...] = ()
    idempotency_key: str | None = None
    goal: GoalSpec | None = None
    max_audit_rounds: int = DEFAULT_AUDIT_ROUNDS
    workdir: str | None = None
    user_id: str = "audit"
    metadata: Mapping[str, JSONValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check(self)

    @property
    def round_budget(self) -> int | None:
        """The goal's round budget, or ``None`` outside goal mode."""
        return None if self.goal is None else self.goal.round_budget

    def input_text(self) -> str:
        """The text a round's run starts with: the prompt, then the goal (if any).

        Packets are never part of it; they are put before it in memory only.
        """
        if self.goal is None:
            return self.prompt
        return (
            f"{self.prompt}\n\nGoal: {self.goal.goal}\n"
            f"The goal is met when `{self.goal.verify.display}` exits with status 0."
        )

    def to_json(self) -> dict[str, JSONValue]:
        """Return the spec as a JSON object (the stored form)."""
        return _json(self)

    def digest(self) -> str:
        """A hash of the body, to tell a resubmission from a different task with one key."""
        return hashlib.sha256(canonical_json(self.to_json()).encode("utf-8")).hexdigest()

    def with_id(self, task_id: str) -> TaskSpec:
        """The same spec with its task id set."""
        return replace(self, task_id=task_id)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskSpec:
        """Build a spec from its JSON object (as `to_json` gives, or a subset).

        Raises:
            TaskSpecError: A field is missing, unknown or malformed; the error names it.
        """
        return _load(cls, data)


_KINDS: dict[type, str] = {TaskSpec: "task", GoalSpec: "goal", VerifySpec: "verify"}
"""The name the spec model (`steadyloop.audit._spec_model`) knows each spec class by."""

_PARTS: dict[type, dict[str, type]] = {
    TaskSpec: {"goal": GoalSpec},
    GoalSpec: {"verify": VerifySpec},
    VerifySpec: {},
}
"""For each spec class: its fields that hold a part, and the part's spec class."""


def _audit_passed(audit: Mapping[str, Any]) -> bool:
    """Whether an ``audited`` payload has no finding above ``info`` (read from its findings).

    A finding without a severity counts as blocking.
    """
    findings = audit.get("findings") or ()
    return not any(not isinstance(f, Mapping) or f.get("severity") != "info" for f in findings)


def check_dependencies(specs: Sequence[TaskSpec], known: set[str]) -> None:
    """Check that every dependency is known and that there is no cycle.

    Args:
        specs: New specs, each with its task id set.
        known: Ids of tasks already in the queue (they cannot depend on new ones).

    Raises:
        TaskSpecError: A dependency names an unknown task, or the new tasks form a cycle
            (the error shows it, e.g. ``a → b → a``).
    """
    new = {str(s.task_id): s for s in specs}
    for spec in specs:
        for dep in spec.depends_on:
            if dep not in new and dep not in known:
                raise TaskSpecError(
                    f"task {spec.task_id!r} depends on {dep!r}, which is not a known task "
                    "(submit it first, or in the same batch)",
                    field="depends_on",
                )
    # Depth-first search over the new tasks only: old ones cannot reach new ones.
    colour: dict[str, int] = {}
    for start in new:
        if colour.get(start):
            continue
        path: list[str] = []
        stack: list[tuple[str, int]] = [(start, 0)]
        while stack:
            node, i = stack.pop()
            if i == 0:
                colour[node] = 1
                path.append(node)
            deps = [d for d in new[node].depends_on if d in new]
            if i < len(deps):
                stack.append((node, i + 1))
                nxt = deps[i]
                if colour.get(nxt) == 1:
                    cycle = [*path[path.index(nxt) :], nxt]
                    raise TaskSpecError(
                        "dependency cycle: " + " → ".join(cycle), field="depends_on"
                    )
                if not colour.get(nxt):
                    stack.append((nxt, 0))
            else:
                colour[node] = 2
                path.pop()


@dataclass
class TaskState:
    """A task as its trail tells it: a fold over the trail's records.

    Attributes:
        task_id: The task.
        head: How many trail records were applied (the trail's last sequence number).
        status: Where the task is; ``None`` before ``submitted``.
        spec: The spec as submitted.
        round: Rounds started so far (the current round's number while one is open).
        audit_rounds: Audits done so far.
        phase: The open round's phase (``"running"``, ``"ran"``, ``"verified"``,
            ``"audited"``), or ``None`` when no round is open.
        run_id: The open (or last) round's run.
        claims: How many times a worker claimed the task.
        round_claims: Claims since the last push-back (or submission): the one that
            works the round, plus any whose worker was lost or released it. Push-backs
            are progress and start the count again.
        resumes: How many times a round was resumed after its worker was lost.
        owner: The worker holding the task while running.
        lease_token: Its lease token.
        run_result: The open round's run outcome (``run_finished`` payload).
        verification: The open round's verification (``verified`` payload).
        audit: The open round's audit (``audited`` payload).
        packet: The packet of the last push-back (its JSON form), if any.
        detail: Why the task ended (for terminal states).
        retries: How many times a person sent it back to the queue (``retried``).
        retry_note: The note of the last retry: the person's instruction for the
            next round.
        submitted: The spec as submitted (``spec`` is the one in force: a retry
            raises its caps).
    """

    task_id: str
    head: int = 0
    status: TaskStatus | None = None
    spec: TaskSpec | None = None
    round: int = 0
    audit_rounds: int = 0
    phase: str | None = None
    run_id: str | None = None
    claims: int = 0
    round_claims: int = 0
    resumes: int = 0
    owner: str | None = None
    lease_token: str | None = None
    run_result: dict[str, Any] | None = None
    verification: dict[str, Any] | None = None
    audit: dict[str, Any] | None = None
    packet: dict[str, Any] | None = None
    detail: str = ""
    retries: int = 0
    retry_note: str | None = None
    submitted: TaskSpec | None = None

    @classmethod
    def fold(cls, task_id: str, records: Sequence[StoredRecord]) -> TaskState:
        """Fold a trail into a state.

        Raises:
            CorruptionError: A stored record breaks the state machine; names the stream
                and sequence number.
        """
        state = cls(task_id=task_id)
        for rec in records:
            try:
                state.apply(rec.kind, rec.payload)
            except (IllegalTransition, KeyError, ValueError, TypeError) as exc:
                raise CorruptionError(
                    f"trail record {rec.kind} does not fit: {exc}",
                    location=f"{rec.stream}#{rec.seq}",
                ) from None
        return state

    def _refuse(self, event: str, reason: str) -> IllegalTransition:
        state = "new" if self.status is None else self.status.value
        return IllegalTransition(self.task_id, state, event, reason)

    def check(self, kind: str, payload: Mapping[str, Any]) -> TaskEvent:
        """Check that an event may be applied now, without applying it.

        Raises:
            IllegalTransition: It may not; the message says why and what is allowed.
            TaskSpecError: A ``submitted`` payload's spec is invalid.
        """
        return self._prepare(kind, payload)[0]

    def _prepare(self, kind: str, payload: Mapping[str, Any]) -> tuple[TaskEvent, TaskSpec | None]:
        """Check an event as `check` does; return it, and the spec it submits."""
        try:
            event = TaskEvent(kind)
        except ValueError:
            raise self._refuse(kind, "not a task event") from None
        allowed_from, _ = TRANSITIONS[event]
        if self.status not in allowed_from:
            if self.status is not None and self.status.terminal:
                reason = f"the task already ended ({self.status.value}); nothing may follow"
            else:
                ok = sorted(e.short for e, (src, _) in TRANSITIONS.items() if self.status in src)
                reason = f"allowed from here: {', '.join(ok) or 'nothing'}"
            raise self._refuse(event.short, reason)
        phases = _PHASES.get(event)
        if phases is not None and self.phase not in phases[0]:
            want = " or ".join(sorted("no open round" if p is None else p for p in phases[0]))
            have = "no open round" if self.phase is None else f"phase {self.phase!r}"
            raise self._refuse(event.short, f"it needs {want}, but the task has {have}")
        self._check_payload(event, payload)
        spec = None
        if event is TaskEvent.SUBMITTED:
            if not isinstance(payload.get("spec"), Mapping):
                raise self._refuse(event.short, "the payload has no spec object")
            spec = TaskSpec.from_json(payload["spec"])
        return event, spec

    def _check_payload(self, event: TaskEvent, payload: Mapping[str, Any]) -> None:
        goal = self.spec is not None and self.spec.goal is not None
        if event is TaskEvent.ROUND_STARTED:
            if not isinstance(payload.get("run_id"), str) or not payload["run_id"]:
                raise self._refuse(
                    event.short, f"the payload names no run (run_id: {payload.get('run_id')!r})"
                )
            expected = self.round + 1
            if payload.get("round") != expected:
                raise self._refuse(
                    event.short,
                    f"round counters never go back or skip: the next round is {expected}, "
                    f"not {payload.get('round')!r}",
                )
            budget = None if self.spec is None else self.spec.round_budget
            if budget is not None and expected > budget:
                raise self._refuse(
                    event.short,
                    f"the round budget ({budget}) is spent; round {expected} may not start",
                )
        elif event in (TaskEvent.ROUND_RESUMED, TaskEvent.RUN_FINISHED, TaskEvent.VERIFIED):
            if payload.get("round") != self.round:
                raise self._refuse(
                    event.short, f"the open round is {self.round}, not {payload.get('round')!r}"
                )

        elif event is TaskEvent.AUDITED:
            if goal and self.phase != "verified":
                raise self._refuse(event.short, "a goal-mode round is verified before its audit")
            if payload.get("audit_round") != self.audit_rounds + 1:
                raise self._refuse(
                    event.short,
                    f"the next audit round is {self.audit_rounds + 1}, not "
                    f"{payload.get('audit_round')!r}",
                )
            findings = payload.get("findings", [])
            if not isinstance(findings, list) or not all(isinstance(f, Mapping) for f in findings):
                raise self._refuse(event.short, "the audit's findings must be a list of objects")
            passed = _audit_passed(payload)
            if "passed" in payload and bool(payload["passed"]) != passed:
                raise self._refuse(
                    event.short,
                    f"the audit says passed={payload['passed']!r}, but its findings say "
                    f"{'nothing above info was found' if passed else 'a blocking finding is open'}",
                )
        elif event is TaskEvent.COMPLETED:
            if not _audit_passed(self.audit or {"findings": [{}]}):
                raise self._refuse(event.short, "the round's audit did not pass")
            if goal and not (self.verification or {}).get("passed"):
                raise self._refuse(
                    event.short,
                    "a goal-mode task completes only when its round's verify command passed; "
                    "this round's verification failed",
                )
        elif event is TaskEvent.PUSHED_BACK:
            assert self.spec is not None
            if not isinstance(payload.get("packet"), Mapping):
                raise self._refuse(event.short, "the payload has no packet object")
            if _audit_passed(self.audit or {}):
                raise self._refuse(event.short, "the round's audit passed; nothing to push back")
            if self.audit_rounds >= self.spec.max_audit_rounds:
                raise self._refuse(
                    event.short,
                    f"the audit cap ({self.spec.max_audit_rounds}) is reached: the task goes to "
                    "a person (needs_human), not back to the queue",
                )
            budget = self.spec.round_budget
            if budget is not None and self.round >= budget:
                raise self._refuse(
                    event.short,
                    f"the round budget ({budget}) is spent: the task ends (goal_unmet or "
                    "needs_human), not back to the queue",
                )
        elif event is TaskEvent.GOAL_UNMET:
            if not goal:
                raise self._refuse(event.short, "only goal-mode tasks can miss their goal")
            assert self.spec is not None and self.spec.goal is not None
            if self.round < self.spec.goal.round_budget:
                raise self._refuse(
                    event.short,
                    f"the round budget ({self.spec.goal.round_budget}) is not spent: only "
                    f"{self.round} round(s) ran",
                )
            if (self.verification or {}).get("passed") or _audit_passed(self.audit or {}):
                raise self._refuse(
                    event.short, "the goal is unmet only when the verification and audit failed"
                )
        if event is TaskEvent.VERIFIED and not goal:
            raise self._refuse(event.short, "only goal-mode tasks are verified")

    def apply(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Apply one trail record: the state machine.

        Everything is checked before anything changes.

        Raises:
            IllegalTransition: The event does not fit the state, or its payload lacks a
                field the state needs; the state is unchanged.
            TaskSpecError: A ``submitted`` payload's spec is invalid; the state is
                unchanged.
        """
        event, spec = self._prepare(kind, payload)
        self.head += 1
        self.status = TRANSITIONS[event][1]
        phases = _PHASES.get(event)
        if phases is not None:
            self.phase = phases[1]
        if event is TaskEvent.SUBMITTED:
            self.spec = self.submitted = spec
        elif event is TaskEvent.CLAIMED:
            self.claims += 1
            self.round_claims += 1
            self.owner = str(payload.get("worker"))
            self.lease_token = payload.get("lease_token")
        elif event in (TaskEvent.LEASE_LOST, TaskEvent.RELEASED):
            self.owner = None
            self.lease_token = None
            if event is TaskEvent.RELEASED and payload.get("shutdown"):
                # A worker that shut down gave the task back: not the task's failure.
                self.round_claims = max(0, self.round_claims - 1)
        elif event is TaskEvent.ROUND_STARTED:
            self.round = int(payload["round"])
            self.run_id = str(payload["run_id"])
            self.run_result = self.verification = self.audit = None
        elif event is TaskEvent.ROUND_RESUMED:
            self.resumes += 1
        elif event is TaskEvent.RUN_FINISHED:
            self.run_result = dict(payload)
        elif event is TaskEvent.VERIFIED:
            self.verification = dict(payload)
        elif event is TaskEvent.AUDITED:
            self.audit_rounds = int(payload["audit_round"])
            self.audit = dict(payload)
        elif event is TaskEvent.PUSHED_BACK:
            self.packet = dict(payload["packet"])
            self.round_claims = 0
            self.owner = self.lease_token = None
        elif event is TaskEvent.RETRIED:
            # Counters go on; the retry grants the task its allowance again, counted
            # from where it stopped (the caps of the spec in force grow accordingly).
            assert self.spec is not None
            base = self.submitted or self.spec
            goal = self.spec.goal
            if goal is not None and base.goal is not None:
                goal = replace(goal, round_budget=self.round + base.goal.round_budget)
            self.spec = replace(
                self.spec,
                max_audit_rounds=self.audit_rounds + base.max_audit_rounds,
                goal=goal,
            )
            self.retries += 1
            self.retry_note = str(payload.get("note") or "")
            self.round_claims = 0
            self.detail = ""
        if self.status is not None and self.status.terminal:
            self.detail = str(payload.get("reason") or payload.get("detail") or "")
            self.phase = None
            self.owner = self.lease_token = None
