"""Run streams, their record kinds, and the fold that turns a run stream into loop state.

A run lives in the journal namespace of its app, in the stream ``["run", run_id]``
(canonical JSON, like session streams). Record kinds, with their payload fields:

``run.started`` (``run_id``, ``agent``, ``user_id``, ``session_id``, ``input``, ``budgets``)
    The first record: what was asked, by whom, in which session, within which budgets.
``run.claimed`` (``owner``: ``host``, ``boot``, ``pid``, ``pid_start``, ``token``)
    A driver took the run; released by ``run.suspended`` or ``run.ended``.
``effect.intent`` (``intent_id``, ``policy``, ``what``, ``step``, ``attempt``, and
    ``model``, ``message_count``, ``prompt_chars`` for a model call, or ``tool``,
    ``call_id``, ``arguments``, ``index`` for a tool call)
    Durable before the effect it announces ([`INTENT_KIND`][steadyloop.records.INTENT_KIND]).
``effect.result`` (``intent_id``, ``status``, and ``reply`` + ``decision`` for a model
    call, ``value`` or ``error`` for a tool call; ``resolved_by`` when a caller wrote it)
    After the effect ([`RESULT_KIND`][steadyloop.records.RESULT_KIND]). ``status`` is ``ok`` or
    ``error`` when the effect happened; ``interrupted`` (resume re-executes a safe
    effect that may not have finished) or ``not_happened`` (a caller said so) when it
    must be done again, under a new intent.
``run.suspended`` (``stop_reason``, ``intent_id``, ``detail``)
    Resume found a never-repeat intent without a result; waits for a caller's decision.
``run.stopped`` (``detail``)
    The driver stopped at a write boundary because a stop was requested (Ctrl-C,
    SIGTERM, the ``stop`` event); releases the claim. The run can be resumed.
``run.snapshot`` (``head``, ``state``, ``seal``)
    The fold of the ``head`` records before it, so that resume reads only the latest
    snapshot and what follows it. Written now and then, in a batch the driver writes
    anyway (no extra sync); a full fold passes over it. Its ``seal`` (see
    `steadyloop._seal`) is checked before resume trusts it.
``run.cancel_requested`` (``reason``)
    Someone asked the run to stop; the driver ends it at its next write.
``run.ended`` (``stop_reason``, ``output``, ``detail``, ``steps``, ``actions``,
    ``parse_failures``, ``open_intent``)
    The last record, written before the result is handed back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from steadyloop import _names
from steadyloop._errors import CorruptionError
from steadyloop._seal import SEAL, seal_problem, sealed, skippable, unsealed
from steadyloop.effects import DONE_STATUSES, REDO_STATUSES, Owner
from steadyloop.loop._types import Budgets, ReplayPolicy, RunResult, StopReason
from steadyloop.records import INTENT_KIND, RESULT_KIND, JSONValue, StoredRecord, canonical_json

__all__ = [
    "RUN_CANCEL_REQUESTED",
    "RUN_CLAIMED",
    "RUN_ENDED",
    "RUN_RECORD_KINDS",
    "RUN_SNAPSHOT",
    "RUN_STARTED",
    "RUN_STOPPED",
    "RUN_SUSPENDED",
    "ParseHook",
    "RunState",
    "parse_run_stream",
    "run_stream",
]

RUN_STARTED = "run.started"
RUN_CLAIMED = "run.claimed"
RUN_SUSPENDED = "run.suspended"
RUN_STOPPED = "run.stopped"
RUN_SNAPSHOT = "run.snapshot"
RUN_CANCEL_REQUESTED = "run.cancel_requested"
RUN_ENDED = "run.ended"

RUN_RECORD_KINDS: tuple[str, ...] = (
    RUN_STARTED,
    RUN_CLAIMED,
    INTENT_KIND,
    RESULT_KIND,
    RUN_SUSPENDED,
    RUN_STOPPED,
    RUN_SNAPSHOT,
    RUN_CANCEL_REQUESTED,
    RUN_ENDED,
)
"""Every record kind a run stream holds."""


def run_stream(run_id: str) -> str:
    """Return the stream name of a run: ``["run", run_id]`` (see `steadyloop._names`).

    Raises:
        ValueError: The run id is not a valid id.
    """
    return _names.run_stream(run_id)


def parse_run_stream(name: str) -> str | None:
    """Return the run id if ``name`` is a run stream, else ``None``."""
    if not name.startswith('["run",'):
        return None
    try:
        value = json.loads(name)
    except ValueError:
        return None
    if isinstance(value, list) and len(value) == 2 and isinstance(value[1], str):
        return value[1]
    return None


ParseHook = Callable[[Mapping[str, Any]], dict[str, JSONValue]]
"""Turns a stored model reply into a stored decision (for caller-resolved replies)."""


@dataclass
class RunState:
    """The loop's state: a fold over a run stream.

    The live driver applies every record it queues, and resume applies every record it
    reads, with the same [`apply`][steadyloop.loop.RunState.apply]; so a resumed driver
    continues from exactly the state an uninterrupted one had.

    Attributes:
        run_id: The run.
        namespace: The app (journal namespace).
        head: How many records of the run stream have been applied.
        started: The ``run.started`` payload.
        budgets: The budgets the run started with.
        steps: Model calls with a recorded reply.
        actions: Tool calls with a recorded outcome.
        parse_failures: Replies that did not parse, in total.
        consecutive_failures: Replies in a row that did not parse.
        intents: Intents written.
        pending_calls: Tool calls of the last reply not yet done, each as
            ``[call_id, name, arguments]``.
        call_base: How many calls of the last reply were done before ``pending_calls``.
        open_intent: The payload of the intent without a result, if any.
        attempts: For each action (``model:<step>`` or ``tool:<step>:<index>``), how many
            intents were written for it.
        end: An end decided by a result (final answer, parse failures, model error)
            and not yet written, as ``(reason, detail, output)``.
        ended: The result, once ``run.ended`` is applied.
        suspended: The intent id of the ``run.suspended`` in force, if any.
        stopped: The detail of the ``run.stopped`` in force (until a driver claims the
            run again), if any.
        cancel_requested: Whether a ``run.cancel_requested`` was applied.
        owner: The driver holding the run, if it holds it.
        unwritten_events: A caller-resolved result whose session events the next driver
            must write.
        last_reply_step: The step whose reply gave ``pending_calls``.
        last_snapshot: The seq of the latest ``run.snapshot`` applied (0 for none).
        folded_from: How this state was read: ``"the whole run"``, or from which
            snapshot (and, when a snapshot could not be used, why).
        snapshot_problems: Snapshots a full fold found not to match it (where, why).
        intent_problems: Tool intents that do not ask for the tool call the model's
            reply made (where, why): a record changed since it was written.
        covered: The kind and payload of the last record applied, which the seal of a
            snapshot written next names.
    """

    run_id: str
    namespace: str
    head: int = 0
    started: dict[str, Any] = field(default_factory=dict)
    budgets: Budgets = field(default_factory=Budgets)
    steps: int = 0
    actions: int = 0
    parse_failures: int = 0
    consecutive_failures: int = 0
    intents: int = 0
    pending_calls: list[list[Any]] = field(default_factory=list)
    call_base: int = 0
    open_intent: dict[str, Any] | None = None
    attempts: dict[str, int] = field(default_factory=dict)
    end: tuple[StopReason, str, str | None] | None = None
    ended: RunResult | None = None
    suspended: str | None = None
    stopped: str | None = None
    cancel_requested: bool = False
    owner: Owner | None = None
    unwritten_events: dict[str, Any] | None = None
    last_reply_step: int = 0
    last_snapshot: int = 0
    folded_from: str = "the whole run"
    snapshot_problems: list[str] = field(default_factory=list)
    intent_problems: list[str] = field(default_factory=list)
    covered: tuple[str, Mapping[str, Any]] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def fold(
        cls,
        namespace: str,
        run_id: str,
        records: Sequence[StoredRecord],
        parse: ParseHook | None = None,
    ) -> RunState:
        """Fold a run stream's records into a state.

        Raises:
            CorruptionError: A record cannot be explained; names the stream and seq.
        """
        state = cls(run_id=run_id, namespace=namespace)
        for rec in records:
            state.apply(rec.kind, rec.payload, parse=parse, where=f"{rec.stream}#{rec.seq}")
        return state

    @property
    def user_id(self) -> str:
        """The user the run acts for."""
        return str(self.started["user_id"])

    @property
    def session_id(self) -> str:
        """The session the run talks in."""
        return str(self.started["session_id"])

    @property
    def open_policy(self) -> ReplayPolicy | None:
        """The replay policy of the open intent, if there is one."""
        if self.open_intent is None:
            return None
        return ReplayPolicy(self.open_intent["policy"])

    def result(
        self, reason: StopReason, detail: str, output: str | None, time: int = 0
    ) -> RunResult:
        """A [`RunResult`][steadyloop.loop.RunResult] with this state's counters."""
        return RunResult(
            run_id=self.run_id,
            stop_reason=reason,
            output=output,
            detail=detail,
            steps=self.steps,
            actions=self.actions,
            parse_failures=self.parse_failures,
            open_intent=None if self.open_intent is None else self.open_intent["intent_id"],
            ended_at=time,
        )

    def _corrupt(self, where: str, message: str) -> CorruptionError:
        return CorruptionError(message, location=f"{self.namespace}/{where}")

    def apply(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        parse: ParseHook | None = None,
        where: str = "",
        time: int = 0,
    ) -> None:
        """Apply one record of the run stream.

        Raises:
            CorruptionError: The record does not fit the state (an unknown kind, a
                result for an intent that is not open, a record after the end).
        """
        if self.ended is not None:
            raise self._corrupt(where, f"a {kind} record follows the end of the run")
        if self.head == 0 and kind != RUN_STARTED:
            raise self._corrupt(where, f"a run stream must start with run.started, not {kind}")
        self.head += 1
        if kind == RUN_STARTED:
            if self.head != 1:
                raise self._corrupt(where, "a second run.started record")
            self.started = dict(payload)
            self.budgets = Budgets.from_json(payload.get("budgets") or {})
        elif kind == RUN_CLAIMED:
            self.owner = Owner.from_json(payload["owner"])
            self.unwritten_events = None
            self.stopped = None
        elif kind == INTENT_KIND:
            if self.open_intent is not None:
                raise self._corrupt(
                    where,
                    f"intent {payload.get('intent_id')!r} while "
                    f"{self.open_intent['intent_id']!r} has no result",
                )
            if payload.get("what") == "tool" and self.pending_calls:
                self._check_tool_intent(payload, where)
            self.unwritten_events = None
            self.intents += 1
            self.open_intent = dict(payload)
            self.attempts[self.action_key(payload)] = int(payload.get("attempt", 1))
        elif kind == RESULT_KIND:
            self._apply_result(payload, parse, where)
        elif kind == RUN_SUSPENDED:
            self.suspended = str(payload["intent_id"])
            self.owner = None
        elif kind == RUN_STOPPED:
            self.stopped = str(payload.get("detail") or "")
            self.owner = None
        elif kind == RUN_SNAPSHOT:
            # The fold so far, for readers starting here: it must be this fold.
            self.head -= 1
            mine = self.snapshot()
            self.head += 1
            if SEAL not in payload:  # written before seals: its state must still match
                mine = unsealed(mine)
            if canonical_json(dict(payload)) != canonical_json(mine):
                # Not fatal to this fold, which does not need it; a reader starting
                # there would go wrong, so it is reported (journal doctor), not used.
                self.snapshot_problems.append(
                    f"{self.namespace}/{where}: the snapshot does not match the fold of "
                    "the records before it"
                )
            else:
                self.last_snapshot = self.head
        elif kind == RUN_CANCEL_REQUESTED:
            self.cancel_requested = True
        elif kind == RUN_ENDED:
            self.owner = None
            self.ended = RunResult(
                run_id=self.run_id,
                stop_reason=StopReason(payload["stop_reason"]),
                output=payload.get("output"),
                detail=str(payload.get("detail") or ""),
                steps=int(payload.get("steps", self.steps)),
                actions=int(payload.get("actions", self.actions)),
                parse_failures=int(payload.get("parse_failures", self.parse_failures)),
                open_intent=payload.get("open_intent"),
                ended_at=time,
            )
        elif not skippable(kind):
            raise self._corrupt(where, f"unknown run record kind {kind!r}")
        # else: a derived record of a later release, passed over (steadyloop._seal.skippable)
        self.covered = (kind, payload)

    def snapshot(
        self, covered: tuple[str, Mapping[str, Any]] | None = None
    ) -> dict[str, JSONValue]:
        """The state as the payload of a ``run.snapshot`` record written after it.

        Only what the fold of later records needs: of the attempt counts, those of the
        step under way (earlier actions are never attempted again). It is sealed (see
        `steadyloop._seal`) with the record at ``head``: ``covered`` (its kind and
        payload) when given, else the last record applied.
        """
        state: dict[str, JSONValue] = {
            "started": self.started,
            "steps": self.steps,
            "actions": self.actions,
            "parse_failures": self.parse_failures,
            "consecutive_failures": self.consecutive_failures,
            "intents": self.intents,
            "pending_calls": self.pending_calls,  # type: ignore[dict-item]
            "call_base": self.call_base,
            "open_intent": self.open_intent,
            "attempts": self._current_attempts(),  # type: ignore[dict-item]
            "end": None if self.end is None else [self.end[0].value, self.end[1], self.end[2]],
            "suspended": self.suspended,
            "stopped": self.stopped,
            "cancel_requested": self.cancel_requested,
            "owner": None if self.owner is None else self.owner.to_json(),
            "unwritten_events": self.unwritten_events,
            "last_reply_step": self.last_reply_step,
        }
        return sealed({"head": self.head, "state": state}, self.head, covered or self.covered)

    @classmethod
    def from_snapshot(
        cls,
        namespace: str,
        run_id: str,
        payload: Mapping[str, Any],
        seq: int,
        covered: StoredRecord | None = None,
    ) -> RunState:
        """The state a ``run.snapshot`` record at ``seq`` holds, itself applied.

        Args:
            namespace: The app.
            run_id: The run.
            payload: The snapshot's payload.
            seq: Its seq.
            covered: The record stored before it, which its seal names.

        Raises:
            ValueError: The snapshot is damaged: its seal does not hold (see
                `steadyloop._seal`), it is malformed, or not at the place it says it
                was written (its ``head`` must be ``seq - 1``).
        """
        problem = seal_problem(
            payload, seq, None if covered is None else (covered.kind, covered.payload)
        )
        if problem is not None:
            raise ValueError(problem)
        try:
            if payload["head"] != seq - 1:
                raise ValueError(f"it says it follows {payload['head']} records, not {seq - 1}")
            data = payload["state"]
            end = data["end"]
            owner = data["owner"]
            state = cls(
                run_id=run_id,
                namespace=namespace,
                head=seq,
                started=dict(data["started"]),
                budgets=Budgets.from_json(data["started"].get("budgets") or {}),
                steps=int(data["steps"]),
                actions=int(data["actions"]),
                parse_failures=int(data["parse_failures"]),
                consecutive_failures=int(data["consecutive_failures"]),
                intents=int(data["intents"]),
                pending_calls=[list(c) for c in data["pending_calls"]],
                call_base=int(data["call_base"]),
                open_intent=None if data["open_intent"] is None else dict(data["open_intent"]),
                attempts={str(k): int(v) for k, v in data["attempts"].items()},
                end=None if end is None else (StopReason(end[0]), str(end[1]), end[2]),
                suspended=data["suspended"],
                stopped=data["stopped"],
                cancel_requested=bool(data["cancel_requested"]),
                owner=None if owner is None else Owner.from_json(owner),
                unwritten_events=data["unwritten_events"],
                last_reply_step=int(data["last_reply_step"]),
                last_snapshot=seq,
                folded_from=f"the snapshot at seq {seq} and the records after it",
                covered=(RUN_SNAPSHOT, payload),
            )
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from None
        if state.run_id != state.started.get("run_id"):
            raise ValueError(f"it is the state of run {state.started.get('run_id')!r}")
        return state

    def _current_attempts(self) -> dict[str, int]:
        """The attempt counts of the step under way: its model call and its tool calls."""
        model, tools = f"model:{self.steps + 1}", f"tool:{self.last_reply_step}:"
        return {k: v for k, v in self.attempts.items() if k == model or k.startswith(tools)}

    @staticmethod
    def action_key(intent: Mapping[str, Any]) -> str:
        """The action an intent is for: the same key across attempts."""
        if intent.get("what") == "model":
            return f"model:{intent.get('step')}"
        return f"tool:{intent.get('step')}:{intent.get('index')}"

    def _check_tool_intent(self, payload: Mapping[str, Any], where: str) -> None:
        """Note a tool intent that does not ask for the call the model's reply made.

        The driver announces the next pending call of the latest reply, as it is:
        its call id, tool and arguments, at that reply's step and the call's index.
        An intent that differs was changed after it was written (or its reply was).
        Not fatal to the fold, which follows the records; ``journal doctor`` reports it.
        """
        call_id, tool, arguments = self.pending_calls[0]
        asked = [payload.get("step"), payload.get("index"), payload.get("call_id")]
        expected = [self.last_reply_step, self.call_base, call_id]
        wrong = [
            f"{name} {canonical_json(got)} where the reply has {canonical_json(want)}"
            for name, got, want in (
                ("step, index and call id", asked, expected),
                ("tool", payload.get("tool"), tool),
                ("arguments", payload.get("arguments"), arguments),
            )
            if not _same_json(got, want)
        ]
        if wrong:
            self.intent_problems.append(
                f"{self.namespace}/{where}: intent {payload.get('intent_id')!r} does not ask "
                f"for the tool call the model's reply made: {'; '.join(wrong)}"
            )

    def _apply_result(
        self, payload: Mapping[str, Any], parse: ParseHook | None, where: str
    ) -> None:
        intent = self.open_intent
        if intent is None or payload.get("intent_id") != intent["intent_id"]:
            raise self._corrupt(
                where, f"a result for intent {payload.get('intent_id')!r}, which is not open"
            )
        self.open_intent = None
        self.suspended = None
        status = payload.get("status")
        if payload.get("resolved_by") is not None and status in DONE_STATUSES:
            self.unwritten_events = {"intent": intent, "result": dict(payload)}
        if status in REDO_STATUSES:
            return
        if status not in DONE_STATUSES:
            raise self._corrupt(where, f"unknown result status {status!r}")
        if intent.get("what") == "model":
            self._apply_model_result(intent, payload, parse)
        else:
            self.actions += 1
            if self.pending_calls:
                self.pending_calls.pop(0)
                self.call_base += 1

    def _apply_model_result(
        self, intent: Mapping[str, Any], payload: Mapping[str, Any], parse: ParseHook | None
    ) -> None:
        self.steps += 1
        self.last_reply_step = int(intent.get("step", self.steps))
        self.pending_calls = []
        self.call_base = 0
        # Earlier actions are never attempted again: keep only the counts a snapshot
        # keeps, so the counts (and each snapshot's scan of them) stay small in a long run.
        self.attempts = self._current_attempts()
        if payload.get("status") == "error":
            self.end = (StopReason.ERROR, f"the model call failed: {payload.get('error')}", None)
            return
        decision = payload.get("decision")
        if decision is None:
            if parse is None:
                # A caller-resolved reply folded without the agent's parser: what it
                # decides is unknown here, which is not a parse failure.
                return
            decision = parse(payload.get("reply") or {})
        if not isinstance(decision, Mapping):
            decision = {"kind": "unknown"}
        kind = decision.get("kind")
        if kind == "final":
            self.consecutive_failures = 0
            self.end = (StopReason.COMPLETED, "the model gave a final answer", decision.get("text"))
        elif kind == "tool_calls":
            self.consecutive_failures = 0
            self.pending_calls = [list(c) for c in decision.get("calls") or []]
        else:
            self.parse_failures += 1
            self.consecutive_failures += 1
            limit = self.budgets.max_parse_failures
            if self.consecutive_failures >= limit:
                self.end = (
                    StopReason.PARSE_FAILURES,
                    f"{self.consecutive_failures} model replies in a row did not parse "
                    f"(limit {limit}); last: {decision.get('reason')}",
                    None,
                )


def _same_json(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` have the same canonical JSON text.

    Without encoding them when that is plain: the same object, or strings or integers
    of one exact type (``True == 1`` and ``1 == 1.0``, whose texts differ, are
    encoded). Lists are compared item by item, so a driver's own intent (which holds
    the reply's very values) is never encoded.
    """
    if a is b:
        return True
    if type(a) is list and type(b) is list:
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    kind = type(a)
    if kind is type(b) and (kind is str or kind is int):
        return a == b
    return canonical_json(a) == canonical_json(b)
