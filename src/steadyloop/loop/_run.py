"""Run and resume an agent, with an intent made durable before every external effect.

One step is: model call → decision → action(s) → observation(s). The write sequence of
a step that calls one tool is (``|`` separates batches; each batch is one atomic
journal append, one sync)::

    intent(model)                                   → the model is called
    result(model) + event(reply) + intent(tool)     → the tool is called
    result(tool) + event(observation) + intent(model) → the next step's model call …
    result(model) + event(final answer) + run.ended → the result is returned

Run records go to the run stream ``["run", run_id]``; events go to the session stream,
in the same batch ([`append_event`][steadyloop.sessions.SessionService.append_event] with
``extra``). Records with no effect between them always share a batch, so a run of N
external effects costs N + 1 syncs (one more to create a new session): the
``run.started``, ``run.claimed`` and the user's input event ride with the first intent,
each result with the next intent, and the end record with the last result.

**One driver per run** ([`RunBusy`][steadyloop.RunBusy]). Two mechanisms together:

* *Fencing.* Every write of a driver carries ``expected_next`` on the run stream. If
  anything else was written to the run since the driver last wrote, the journal
  refuses the batch (nothing is written) and the driver stops with ``RunBusy``. So two
  drivers can never interleave writes, whatever their clocks or hosts, on every
  backend, at no extra cost: the check rides on writes the loop makes anyway.
* *Ownership.* A driver writes ``run.claimed`` (host, boot id, pid, process start
  time, a fresh token) in its first batch, before any effect. ``resume`` refuses with
  ``RunBusy`` while the claimant lives: another task of this process (token still
  registered), or a live process on this host. A claimant on another host cannot be
  checked, so resume refuses unless the caller passes ``takeover=True`` to say that
  process is gone. A claim is released by ``run.suspended`` and ``run.ended``.

We chose this over a time-based lease because a lease needs renewal writes (syncs) or
a wall clock both sides trust, and still needs fencing when a paused process wakes up
after its lease expired; fencing alone already makes a second driver harmless, and the
liveness check makes resume after a crash immediate instead of waiting out a lease.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from steadyloop._errors import (
    ConflictError,
    EncodingError,
    LoopError,
    RunBusy,
    RunFinished,
    RunNotFound,
    SessionExists,
    SessionNotFound,
    ToolTimeout,
)
from steadyloop.effects import (
    LIVE_TOKENS,
    Happened,
    NotHappened,
    Owner,
    decision_payload,
    describe,
    interrupted,
)
from steadyloop.journal import Journal, StreamWrite
from steadyloop.loop._agent import Agent
from steadyloop.loop._messages import (
    LOOP_AUTHOR,
    TOOL_AUTHOR,
    USER_AUTHOR,
    decision_to_json,
    event_messages,
    reply_events_parts,
    session_messages,
)
from steadyloop.loop._state import (
    RUN_CANCEL_REQUESTED,
    RUN_CLAIMED,
    RUN_ENDED,
    RUN_SNAPSHOT,
    RUN_STARTED,
    RUN_STOPPED,
    RUN_SUSPENDED,
    ParseHook,
    RunState,
    parse_run_stream,
    run_stream,
)
from steadyloop.loop._tools import ToolContext
from steadyloop.loop._types import (
    Message,
    ModelReply,
    ParseFailure,
    ReplayPolicy,
    RunResult,
    StopReason,
)
from steadyloop.records import (
    INTENT_KIND,
    RESULT_KIND,
    JSONValue,
    Record,
    RecordFactory,
    StoredRecord,
    _Checked,
    _make_unchecked,
    canonical_json,
    check_canonical,
)
from steadyloop.sessions import Event, Session, SessionService, TextPart, ToolResultPart

__all__ = [
    "RunInfo",
    "list_runs",
    "load_run",
    "request_cancel",
    "resolve",
    "resume",
    "run",
    "run_keys",
]

SNAPSHOT_EVERY = 200

LATE_PAUSE_MAX = 5.0
"""Longest pause, in seconds, between a cancelled driver's tries to record its run."""

_LATE: set[asyncio.Task[None]] = set()  # held, or asyncio could drop them half-way
"""Run records between snapshots: resume reads and folds at most about this many.

About 50 steps: small enough that resuming any long run costs about what resuming a
short one does, and a snapshot (a few hundred bytes) is rare enough not to show in a
step's cost.
"""

_log = logging.getLogger("steadyloop.loop")


class _CancelSeen(Exception):
    """A cancel request landed in the run stream before our intent."""


class _SessionMoved(Exception):
    """Someone else wrote to the session before our intent: the prompt must be rebuilt."""


def _parse_hook(agent: Agent) -> ParseHook:
    def parse(reply: Mapping[str, Any]) -> dict[str, JSONValue]:
        return decision_to_json(agent.parser.parse(ModelReply.from_json(reply), agent.tools))

    return parse


def _check_owner(state: RunState, takeover: bool) -> None:
    owner = state.owner
    if owner is None:
        return
    liveness = owner.liveness()
    if liveness == "alive":
        if owner.token in LIVE_TOKENS:
            raise RunBusy(f"run {state.run_id!r} is being driven by another task of this process")
        raise RunBusy(f"run {state.run_id!r} is being driven by process {owner.pid} on this host")
    if liveness == "unknown" and not takeover:
        raise RunBusy(
            f"run {state.run_id!r} was claimed by process {owner.pid} on host "
            f"{owner.host!r}, which cannot be checked from here; if that process is gone, "
            "take the run over (--takeover)"
        )


class _Driver:
    """Drives one run: folds every record it writes into [`RunState`][steadyloop.loop.RunState]."""

    def __init__(
        self,
        agent: Agent,
        service: SessionService,
        state: RunState,
        session: Session,
        *,
        cancel: asyncio.Event | None,
        stop: asyncio.Event | None,
    ) -> None:
        self.agent = agent
        self.service = service
        self.journal = service.journal
        self.records = service.records
        self.state = state
        self.cancel = cancel
        self.stop = stop
        self.stream = run_stream(state.run_id)
        self.token = uuid.uuid4().hex
        self.pending: list[Record] = []
        self.pending_events: list[Event] = []
        self.parse = _parse_hook(agent)
        self.tool_specs = agent.tools.specs()
        self.spec_chars = len(canonical_json([t.to_json() for t in self.tool_specs]))
        self._show(session)

    def _show(self, session: Session, queued: Sequence[Event] = ()) -> None:
        """Take ``session`` as the session, and build the prompt from it and ``queued``."""
        self.session = session
        self.messages: list[Message] = session_messages(self.agent.system_prompt, session)
        for event in queued:
            self.messages.extend(event_messages(event))
        self.message_chars = sum(m.size for m in self.messages)

    def _drop_queued(self) -> None:
        """Forget the records and events queued for the next batch."""
        self.pending.clear()
        self.pending_events.clear()

    # -- writing ----------------------------------------------------------------------

    def _record(
        self, kind: str, payload: Mapping[str, JSONValue], *, checked: bool = False
    ) -> Record:
        """Make a run record.

        Its payload is checked once, by the journal's ``append`` (before anything is
        written), not also here; with ``checked`` (it holds only values checked where
        they came in) it is only encoded there.
        """
        return _make_unchecked(self.records, kind, (_Checked if checked else dict)(payload))

    def _queue(self, kind: str, payload: Mapping[str, JSONValue]) -> Record:
        """Queue a record for the next batch and fold it into the state now.

        Queued are run.started, run.claimed and results, whose values were checked where
        they came in (a reply or a tool's value, by ``check_canonical``).
        """
        rec = self._record(kind, payload, checked=True)
        self.pending.append(rec)
        self.state.apply(kind, rec.payload, parse=self.parse, where=self.stream)
        return rec

    def _queue_event(self, event: Event) -> None:
        self.pending_events.append(event)
        for m in event_messages(event):
            self.messages.append(m)
            self.message_chars += m.size

    def _new_event(self, event_id: str, author: str, parts: Sequence[Any]) -> Event:
        return self.service.new_event(
            author, parts, invocation_id=self.state.run_id, event_id=event_id
        )

    async def _flush(self, last: Record | None = None, *, is_intent: bool = False) -> None:
        """Write the queued records (and ``last``) and events as one atomic batch.

        ``last`` is folded into the state only once it is durable. When enough run
        records have gone by since the last snapshot, a ``run.snapshot`` of the state
        rides along, before ``last``.

        Raises:
            _CancelSeen: A cancel request landed first and ``last`` is an intent.
            _SessionMoved: The session changed first and ``last`` is an intent: it was
                built from a stale prompt, so the caller checks the budgets again and
                builds it anew.
            RunBusy: Another driver wrote to the run.
        """
        if not self.pending and last is None and not self.pending_events:
            return
        while True:
            durable = self.state.head - len(self.pending)
            after = [*self._snapshot_due(), *([last] if last is not None else [])]
            write = StreamWrite(self.stream, [*self.pending, *after], expected_next=durable + 1)
            try:
                await self._append(write)
                break
            except ConflictError as exc:
                if exc.stream != self.stream:
                    await self._reload_session()
                    if is_intent:
                        raise _SessionMoved() from None
                    continue
                await self._absorb_cancel(durable)
                if is_intent:
                    raise _CancelSeen() from None
        self._drop_queued()
        for rec in after:
            self.state.apply(
                rec.kind, rec.payload, parse=self.parse, where=self.stream, time=rec.time
            )

    def _snapshot_due(self) -> list[Record]:
        """A snapshot of the state as it stands (queued records applied), if one is due."""
        state = self.state
        if state.head - state.last_snapshot < SNAPSHOT_EVERY or not state.started:
            return []
        # A copy, not the state's own lists and dicts, which the driver changes later.
        last = (self.pending[-1].kind, self.pending[-1].payload) if self.pending else None
        return [self._record(RUN_SNAPSHOT, json.loads(canonical_json(state.snapshot(last))))]

    async def _append(self, write: StreamWrite) -> None:
        if self.pending_events:
            self.session = await self.service.append_event(
                self.session, list(self.pending_events), extra=[write]
            )
        else:
            await self.journal.append(self.service.app, [write])

    async def _absorb_cancel(self, durable: int) -> None:
        """After a conflict on the run stream: fold cancel requests, or give up."""
        newer = await self.journal.read(self.service.app, self.stream, start=durable + 1)
        if not newer or any(r.kind != RUN_CANCEL_REQUESTED for r in newer):
            raise RunBusy(
                f"run {self.state.run_id!r} was written by another driver "
                f"({', '.join(r.kind for r in newer) or 'unknown'}); this one stops"
            )
        self._apply_cancels(newer)

    def _apply_cancels(self, newer: Sequence[StoredRecord]) -> None:
        """Fold cancel requests written by others since our last durable record.

        They only set a flag: folding them now, after our queued records, gives the
        state they give in journal order.
        """
        for r in newer:
            self.state.apply(r.kind, r.payload, where=f"{self.stream}#{r.seq}")

    async def _reload_session(self) -> None:
        """Someone else wrote to the session: read it again and rebuild the prompt.

        Raises:
            RunBusy: The session already holds an event this driver was about to write:
                another driver of this run wrote it.
        """
        session = await self.service.get_session(
            self.state.user_id, self.state.session_id, history=False
        )
        taken = sorted(e.id for e in self.pending_events if session.has_event(e.id))
        if taken:
            raise RunBusy(
                f"run {self.state.run_id!r} is driven by another driver too: it wrote "
                f"event {taken[0]!r} first; this one stops"
            )
        self._show(session, self.pending_events)

    # -- the loop -----------------------------------------------------------------------

    def _cancelled(self) -> bool:
        return self.state.cancel_requested or (self.cancel is not None and self.cancel.is_set())

    def _stopping(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    async def _close(
        self, kind: str, payload: dict[str, JSONValue], reason: StopReason
    ) -> RunResult:
        """Write what is queued with a record that stops the driver; the run's result."""
        rec = self._record(kind, payload)
        await self._flush(rec)
        if self.state.ended is not None:
            return self.state.ended
        return self.state.result(reason, str(payload["detail"]), None, rec.time)

    async def _stopped(self, detail: str) -> RunResult:
        """Write what is queued with a ``run.stopped`` record: the run can be resumed."""
        return await self._close(RUN_STOPPED, {"detail": detail}, StopReason.STOPPED)

    async def drive(self) -> RunResult:
        """Run until a stop reason; the end record is durable before this returns."""
        LIVE_TOKENS.add(self.token)
        try:
            return await self._drive()
        except asyncio.CancelledError:
            await self._end_after_task_cancel()
            raise
        finally:
            LIVE_TOKENS.discard(self.token)

    async def _drive(self) -> RunResult:
        state = self.state
        resolved = state.unwritten_events
        self._queue(RUN_CLAIMED, {"owner": Owner.me(self.token).to_json()})
        if resolved is not None:
            for event in self._events_for(resolved["intent"], resolved["result"]):
                self._queue_event(event)
        while True:
            outcome: RunResult | None = None
            if state.open_intent is not None:
                outcome = await self._open_intent()
            elif self._cancelled():
                return await self._end(StopReason.CANCELLED, "the run was cancelled", None)
            elif state.end is not None:
                return await self._end(*state.end)
            elif self._stopping():
                return await self._stopped(
                    "a stop was requested; the run stopped before its next effect "
                    "and can be resumed"
                )
            elif (spent := self._spent()) is not None:
                return await self._end(StopReason.BUDGET_EXHAUSTED, spent, None)
            elif state.pending_calls:
                outcome = await self._call_tool()
            else:
                await self._call_model(self.message_chars + self.spec_chars)
            if outcome is not None:
                return outcome

    def _spent(self) -> str | None:
        """Which budget the next effect would exceed, in words; ``None`` if none.

        The next effect is a pending tool call if there is one, else a model call.
        """
        state, budgets = self.state, self.state.budgets
        if state.pending_calls:
            if state.actions >= budgets.max_actions:
                return f"the action budget is spent ({budgets.max_actions} actions)"
            return None
        if state.steps >= budgets.max_steps:
            return f"the step budget is spent ({budgets.max_steps} steps)"
        prompt = self.message_chars + self.spec_chars
        if prompt > budgets.max_prompt_chars:
            return (
                f"the prompt would be {prompt} characters; the budget is {budgets.max_prompt_chars}"
            )
        return None

    async def _announce(self, payload: dict[str, JSONValue]) -> bool:
        """Make an intent durable (with everything queued).

        False if a cancel request or a session write came first: the caller goes back
        to the loop, which checks the stop reasons and budgets again.
        """
        # A model intent holds only the loop's own values; a tool intent holds arguments
        # that, on resume, a custom parser may have made: checked in full.
        rec = self._record(INTENT_KIND, payload, checked=payload.get("what") == "model")
        try:
            await self._flush(rec, is_intent=True)
        except (_CancelSeen, _SessionMoved):
            return False
        return True

    def _intent(self, what: str, policy: ReplayPolicy, **fields: JSONValue) -> dict[str, JSONValue]:
        state = self.state
        payload: dict[str, JSONValue] = {
            "intent_id": f"{state.run_id}/{state.intents + 1}",
            "policy": policy.value,
            "what": what,
            **fields,
        }
        payload["attempt"] = state.attempts.get(RunState.action_key(payload), 0) + 1
        return payload

    async def _call_model(self, prompt: int) -> None:
        agent, state = self.agent, self.state
        payload = self._intent(
            "model",
            agent.model_policy,
            step=state.steps + 1,
            model=str(getattr(agent.model, "name", type(agent.model).__name__)),
            message_count=len(self.messages),
            prompt_chars=prompt,
        )
        if not await self._announce(payload):
            return
        try:
            reply = await agent.model.complete(list(self.messages), self.tool_specs)
        except Exception as exc:  # the model's failure is its outcome
            self._record_result(payload, {"status": "error", "error": describe(exc)})
            return
        decision = agent.parser.parse(reply, agent.tools)
        result: dict[str, JSONValue] = {
            "status": "ok",
            "reply": reply.to_json(),
            "decision": decision_to_json(decision),
        }
        try:
            check_canonical(result)
        except EncodingError as exc:
            result = {"status": "error", "error": _safe(f"the reply has no JSON form: {exc}")}

        def unparsed(why: str) -> dict[str, JSONValue]:
            # The reply parsed, yet cannot be recorded as session events (a call id the
            # session refuses, say): it counts as a reply that did not parse.
            failure = ParseFailure(f"the reply cannot be recorded: {why}")
            return {**result, "decision": decision_to_json(failure)}

        def failed(why: str) -> dict[str, JSONValue]:
            return {"status": "error", "error": f"the reply cannot be recorded: {why}"}

        self._record_result(payload, result, unparsed, failed)

    async def _call_tool(self) -> RunResult | None:
        """Call the next pending tool; a result only if that stops the run."""
        state = self.state
        call_id, name, arguments = state.pending_calls[0]
        tool = self.agent.tools.get(name) if name in self.agent.tools else None
        policy = tool.policy if tool is not None else ReplayPolicy.SAFE
        payload = self._intent(
            "tool",
            policy,
            step=state.last_reply_step,
            index=state.call_base,
            tool=name,
            call_id=call_id,
            arguments=arguments,
        )
        if not await self._announce(payload):
            return None
        result: dict[str, JSONValue]
        if tool is None:
            result = {"status": "error", "error": f"the agent has no tool {name!r}"}
        else:
            context = ToolContext(
                run_id=state.run_id,
                intent_id=str(payload["intent_id"]),
                step=int(str(payload["step"])),
                index=state.call_base,
                attempt=int(str(payload["attempt"])),
            )
            try:
                value = await tool.invoke(arguments, context)
                check_canonical(value)
                result = {"status": "ok", "value": value}
            except ToolTimeout as exc:
                if policy is ReplayPolicy.NEVER:
                    # Given up, not finished: its thread may still act. Its intent stays
                    # open, exactly as after a crash, and a person decides.
                    return await self._suspend(payload, _safe(str(exc)))
                result = {"status": "error", "error": describe(exc)}
            except EncodingError as exc:
                result = {
                    "status": "error",
                    "error": _safe(f"the tool returned no JSON value: {exc}"),
                }
            except Exception as exc:  # a tool that raises: that is its observation
                result = {"status": "error", "error": describe(exc)}

        def failed(why: str) -> dict[str, JSONValue]:
            return {"status": "error", "error": f"the result cannot be recorded: {why}"}

        self._record_result(payload, result, failed)
        return None

    def _record_result(
        self,
        intent: Mapping[str, Any],
        result: dict[str, JSONValue],
        *fallbacks: Callable[[str], dict[str, JSONValue]],
    ) -> None:
        """Queue an effect's result with the session events recording it.

        ``result`` has a JSON form already: the reply or the tool's value was checked
        where it came in, and every error text is made safe (``_safe``); the journal
        encodes it once more when it is written. If its events cannot be made (the
        session refuses them), each fallback in turn makes another result from why;
        the last one is queued without events if even it cannot be recorded.
        """
        iid = intent["intent_id"]
        payload: dict[str, JSONValue] = {"intent_id": iid, **result}
        events: list[Event] = []
        for fallback in (*fallbacks, None):
            try:
                events = self._events_for(intent, payload)
                break
            except Exception as exc:  # anything the session or the encoder refuses
                if fallback is None:
                    break
                payload = {"intent_id": iid, **fallback(describe(exc))}
        self._queue(RESULT_KIND, payload)
        for event in events:
            self._queue_event(event)

    def _events_for(self, intent: Mapping[str, Any], result: Mapping[str, Any]) -> list[Event]:
        """The session events recording an effect's outcome."""
        iid = str(intent["intent_id"])
        if result.get("status") not in ("ok", "error"):
            return []
        if intent.get("what") == "model":
            if result.get("status") != "ok":
                return []
            reply = result.get("reply") or {}
            decision = result.get("decision")
            if not isinstance(decision, Mapping):
                decision = self.parse(reply)
            parts, feedback = reply_events_parts(reply, decision)
            events = [self._new_event(f"{iid}:reply", self.agent.name, parts)]
            if feedback is not None:
                events.append(self._new_event(f"{iid}:feedback", LOOP_AUTHOR, [TextPart(feedback)]))
            return events
        error = result.get("error") if result.get("status") == "error" else None
        part = ToolResultPart(
            str(intent.get("call_id")),
            str(intent.get("tool")),
            result.get("value") if error is None else None,
            None if error is None else str(error),
        )
        return [self._new_event(f"{iid}:result", TOOL_AUTHOR, [part])]

    async def _open_intent(self) -> RunResult | None:
        """Handle an intent found without a result on resume."""
        state = self.state
        intent = state.open_intent
        assert intent is not None
        iid = str(intent["intent_id"])
        if state.open_policy is ReplayPolicy.SAFE:
            # Safe to repeat: close the old intent and do the action again, anew.
            self._queue(RESULT_KIND, interrupted(iid))
            return None
        if self._cancelled():
            # Nobody will decide any more: end, naming the intent whose outcome stays
            # unknown (the end record's open_intent), rather than guess it either way.
            detail = (
                f"the run was cancelled while the outcome of the never-repeat {_what(intent)} "
                f"of intent {iid!r} was unknown; it was left unresolved"
            )
            return await self._end(StopReason.CANCELLED, detail, None)
        if state.suspended == iid:
            self._drop_queued()  # already recorded: write nothing more
            return state.result(StopReason.RESUME_STATE_UNKNOWN, _unknown(intent), None)
        return await self._suspend(intent)

    async def _suspend(self, intent: Mapping[str, Any], why: str = "") -> RunResult:
        """Write a ``run.suspended`` (with what is queued): the run waits for a decision."""
        reason = StopReason.RESUME_STATE_UNKNOWN
        payload: dict[str, JSONValue] = {
            "stop_reason": reason.value,
            "intent_id": str(intent["intent_id"]),
            "detail": _unknown(intent, why),
        }
        return await self._close(RUN_SUSPENDED, payload, reason)

    async def _end(self, reason: StopReason, detail: str, output: str | None) -> RunResult:
        """Write what is queued with the ``run.ended`` record."""
        state = self.state
        payload: dict[str, JSONValue] = {
            "stop_reason": reason.value,
            "output": output,
            "detail": detail,
            "steps": state.steps,
            "actions": state.actions,
            "parse_failures": state.parse_failures,
            "open_intent": None if state.open_intent is None else state.open_intent["intent_id"],
        }
        return await self._close(RUN_ENDED, payload, reason)

    async def _end_after_task_cancel(self) -> None:
        """The task was cancelled: record how the run stands, if we still can.

        Records queued for the batch that was cut off (an effect's known result and its
        events) are written with the closing record, fenced like every write, so no
        outcome is lost. An effect in flight keeps its intent open: a never-repeat one
        suspends the run (``RESUME_STATE_UNKNOWN``) so a person can
        [`resolve`][steadyloop.loop.resolve] it; otherwise the run ends ``CANCELLED``,
        or, if a stop was requested (a stop at once), it gets a ``run.stopped`` record
        and stays resumable. A run with no durable ``run.started`` gets nothing. If the
        journal cannot take that record now, it is written once the journal answers
        again, while this process lives (`_record_late`).
        """
        stopping = self._stopping()  # decided now: a later round may reuse the event
        try:
            await self._record_task_cancel(stopping)
        except Exception as exc:
            # The run stays as its last durable record says, busy while this process
            # lives; the record is written as soon as the journal answers again.
            _log.warning(
                "run %r: could not record how the cancelled run stands (%s: %s); "
                "it stays as its journal says, and is recorded when the journal answers",
                self.state.run_id,
                type(exc).__name__,
                exc,
            )
            _LATE.add(asyncio.get_running_loop().create_task(self._record_late(stopping)))

    async def _record_late(self, stopping: bool) -> None:
        """Record how the cancelled run stands once the journal answers (see above).

        A live process that holds a run it no longer drives would keep it busy for
        every other driver until it exits. So this retries, each pause longer up to
        `LATE_PAUSE_MAX` seconds, until it records, or until another driver has
        claimed the run (the journal's latest claim is not this driver's token).
        """
        pause = 0.25
        try:
            while True:
                await asyncio.sleep(pause)
                pause = min(pause * 2, LATE_PAUSE_MAX)
                try:
                    latest = await _read_state(
                        self.journal, self.service.app, self.state.run_id, self.parse
                    )
                    if latest.owner is None or latest.owner.token != self.token:
                        return  # another driver holds it now: nothing of ours to record
                    await self._record_task_cancel(stopping)
                except Exception as exc:
                    _log.debug("run %r: still not recorded (%s)", self.state.run_id, exc)
                    continue
                _log.info("run %r: how the cancelled run stands is recorded", self.state.run_id)
                return
        finally:
            _LATE.discard(asyncio.current_task())

    async def _record_task_cancel(self, stopping: bool) -> None:
        """Write the record that says how the cancelled run stands (one attempt)."""
        app = self.service.app
        durable = self.state.head - len(self.pending)
        head = await self.journal.head(app, self.stream)
        if head == 0:
            return  # the run never started: an end record would be its first record
        newer = await self.journal.read(app, self.stream, start=durable + 1)
        if durable and head >= durable and all(r.kind == RUN_CANCEL_REQUESTED for r in newer):
            self._apply_cancels(newer)  # our view is current: keep what we queued
        else:  # another driver wrote, or nothing of ours is durable: as the journal says
            self.state = await _read_state(self.journal, app, self.state.run_id, self.parse)
            self._drop_queued()
        state = self.state
        if state.ended is not None:
            return
        intent = state.open_intent
        if intent is not None and state.open_policy is ReplayPolicy.NEVER:
            iid = str(intent["intent_id"])
            if state.suspended == iid and not self.pending and not self.pending_events:
                return
            await self._suspend(intent, "the task driving the run was cancelled")
            return
        if stopping:
            await self._stopped(
                "the run was stopped at once; an effect in flight was abandoned "
                "with its intent open; the run can be resumed"
            )
            return
        await self._end(StopReason.CANCELLED, "the task driving the run was cancelled", None)


def _what(intent: Mapping[str, Any]) -> str:
    """What an intent announces, in words: ``tool 'name'`` or ``model call``."""
    return f"tool {intent.get('tool')!r}" if intent.get("what") == "tool" else "model call"


def _unknown(intent: Mapping[str, Any], why: str = "") -> str:
    """Why a run waits for a decision on a never-repeat intent (after ``why``, if given)."""
    text = (
        f"the never-repeat {_what(intent)} of intent {intent['intent_id']!r} may or may not "
        "have happened; decide with resolve(), then resume"
    )
    return f"{why}; {text}" if why else text


def _safe(text: str) -> str:
    """``text`` with lone surrogates escaped, so that it always has a JSON form."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


async def _session(service: SessionService, user_id: str, session_id: str) -> Session:
    """The session a run talks in, created if need be.

    Read partial (from its latest snapshot, see
    [`get_session`][steadyloop.sessions.SessionService.get_session]): a driver needs what
    the model is shown and the checks of its appends, never the historical events.
    """
    try:
        return await service.get_session(user_id, session_id, history=False)
    except SessionNotFound:
        pass
    try:
        return await service.create_session(user_id, session_id)
    except SessionExists:
        return await service.get_session(user_id, session_id, history=False)


async def run(  # noqa: PLR0917 - the positional order is the documented API
    agent: Agent,
    journal: Journal,
    app: str,
    user_id: str,
    session_id: str,
    run_id: str,
    input: str,
    *,
    records: RecordFactory | None = None,
    cancel: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
) -> RunResult:
    """Start a run: the user's ``input`` in a session, then steps until a stop reason.

    The session is created if it does not exist. Calling ``run`` again with the same
    run id and the same arguments continues that run, as [`resume`][steadyloop.loop.resume] does
    (so a caller may simply retry after a crash).

    Args:
        agent: The agent.
        journal: Where the run and the session live.
        app: The app: the journal namespace.
        user_id: The user the run acts for.
        session_id: The session it talks in.
        run_id: The run's id, chosen by the caller; unique in the app.
        input: The user's message.
        records: Clock and id source for records (deterministic ones in tests).
        cancel: Set it to end the run at its next write (stop reason ``CANCELLED``).
        stop: Set it to stop the run at its next write boundary, resumable (stop
            reason ``STOPPED``); see [SignalStop][steadyloop.loop.SignalStop].

    Returns:
        How the run stopped. Its end record is durable.

    Raises:
        LoopError: The run id exists with different arguments or another agent.
        RunBusy: Another task or process drives this run.
        RunFinished: The run id exists and has ended.
        JournalError: The journal failed; the run can be resumed once it works again.
    """
    records = records or RecordFactory()
    stream = run_stream(run_id)
    given = {"agent": agent.name, "user_id": user_id, "session_id": session_id, "input": input}

    async def started() -> bool:
        """Whether the run exists (with these arguments: else LoopError)."""
        head = await journal.read(app, stream, limit=1)
        if not head:
            return False
        differs = [k for k, v in given.items() if head[0].payload.get(k) != v]
        if differs:
            raise LoopError(
                f"run {run_id!r} already exists in app {app!r} with a different "
                f"{', '.join(differs)}; choose a new run id, or resume it"
            )
        return True

    input_id = f"{run_id}:input"
    service = SessionService(journal, app, records=records)
    session = None if await started() else await _session(service, user_id, session_id)
    # The input and run.started are one batch: a session that holds the input means
    # another driver started the run after the first look, and it is there now.
    if session is None or (session.has_event(input_id) and await started()):
        return await resume(agent, journal, app, run_id, records=records, cancel=cancel, stop=stop)
    state = RunState(run_id=run_id, namespace=app)
    driver = _Driver(agent, service, state, session, cancel=cancel, stop=stop)
    driver._queue(
        RUN_STARTED,
        {
            "run_id": run_id,
            "agent": agent.name,
            "user_id": user_id,
            "session_id": session_id,
            "input": input,
            "budgets": agent.budgets.to_json(),
        },
    )
    driver._queue_event(driver._new_event(input_id, USER_AUTHOR, [TextPart(input)]))
    try:
        return await driver.drive()
    except ConflictError as exc:
        if exc.stream == stream:
            raise RunBusy(
                f"run {run_id!r} was started by another driver at the same time"
            ) from None
        raise


async def _read_state(journal: Journal, app: str, run_id: str, parse: ParseHook | None) -> RunState:
    """The run's state: from its latest snapshot and the records after it, if it can.

    Only the last ``SNAPSHOT_EVERY`` records or so are read to find the snapshot. A
    run longer than that without a usable snapshot (written before snapshots, or with
    a damaged one) is folded whole, and a warning says so.
    """
    stream = run_stream(run_id)
    head = await journal.head(app, stream)
    if head == 0:
        raise RunNotFound(f"no run {run_id!r} in app {app!r} of {journal.url}")
    window = SNAPSHOT_EVERY + 16  # a snapshot rides in a batch of a few records
    if head > window:
        tail = await journal.read(app, stream, start=head - window)  # one more: the covered
        why = f"no snapshot among its last {window} records"
        for i in range(len(tail) - 1, 0, -1):
            rec = tail[i]
            if rec.kind != RUN_SNAPSHOT:
                continue
            try:
                state = RunState.from_snapshot(app, run_id, rec.payload, rec.seq, tail[i - 1])
            except ValueError as exc:
                why = f"the snapshot at seq {rec.seq} is damaged ({exc})"
                break
            for later in tail[i + 1 :]:
                state.apply(later.kind, later.payload, parse=parse, where=f"{stream}#{later.seq}")
            return state
        _log.warning("run %r of app %r: %s; folding the whole run", run_id, app, why)
    records = await journal.read(app, stream)
    state = RunState.fold(app, run_id, records, parse)
    if head > window:
        state.folded_from = f"the whole run ({why})"
    return state


async def resume(
    agent: Agent,
    journal: Journal,
    app: str,
    run_id: str,
    *,
    records: RecordFactory | None = None,
    cancel: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
    takeover: bool = False,
) -> RunResult:
    """Continue a run from its journal.

    Effects with a result are not repeated: their recorded results are reused. An
    intent without a result is executed again if its policy is ``SAFE``; if it is
    ``NEVER``, the run stops with ``RESUME_STATE_UNKNOWN`` (that outcome is written)
    and waits for [`resolve`][steadyloop.loop.resolve].

    Args:
        agent: The agent the run started with (same name); its budgets are ignored in
            favour of those stored when the run started.
        journal: Where the run lives.
        app: Its app.
        run_id: The run.
        records: Clock and id source for new records.
        cancel: Set it to end the run at its next write (``CANCELLED``).
        stop: Set it to stop the run at its next write boundary, resumable
            (``STOPPED``).
        takeover: Take the run over from a claimant on another host that cannot be
            checked; only when you know that process is gone.

    Returns:
        How the run stopped.

    Raises:
        RunNotFound: No such run.
        RunFinished: The run has ended.
        RunBusy: Another task or process drives the run.
        LoopError: The agent is not the one the run started with.
        CorruptionError: The journal is damaged; the error names where.
    """
    records = records or RecordFactory()
    state = await _read_state(journal, app, run_id, _parse_hook(agent))
    if state.ended is not None:
        raise RunFinished(
            f"run {run_id!r} ended ({state.ended.stop_reason.value}: {state.ended.detail}); "
            "it cannot be resumed"
        )
    if state.started.get("agent") != agent.name:
        raise LoopError(
            f"run {run_id!r} was started by agent {state.started.get('agent')!r}, "
            f"not {agent.name!r}"
        )
    _check_owner(state, takeover)
    service = SessionService(journal, app, records=records)
    try:
        session = await service.get_session(state.user_id, state.session_id, history=False)
    except SessionNotFound:
        raise LoopError(
            f"run {run_id!r} talks in session {state.session_id!r} of user "
            f"{state.user_id!r}, which no longer exists"
        ) from None
    return await _Driver(agent, service, state, session, cancel=cancel, stop=stop).drive()


async def resolve(
    journal: Journal,
    app: str,
    run_id: str,
    intent_id: str,
    outcome: Happened | NotHappened,
    *,
    records: RecordFactory | None = None,
    takeover: bool = False,
) -> None:
    """Record a caller's decision about an intent that has no result.

    Use it after a run stopped with ``RESUME_STATE_UNKNOWN`` (its
    [`RunResult.open_intent`][steadyloop.loop.RunResult]), once you know whether the effect
    happened: check the payment provider, the outbox, the ticket system. Then
    [`resume`][steadyloop.loop.resume] the run.

    * [`Happened`][steadyloop.loop.Happened] — the effect took place: its value (or error)
      becomes the observation, and it is never executed again.
    * [`NotHappened`][steadyloop.loop.NotHappened] — it did not: resume executes it again, under
      a new intent.

    A run suspended for a decision has no claimant. One whose driver died with the
    intent open (never resumed since) is still claimed by it: on another host that
    cannot be checked, pass ``takeover=True`` once you know that process is gone.

    Raises:
        RunNotFound: No such run.
        RunFinished: The run has ended.
        RunBusy: A live driver holds the run.
        LoopError: ``intent_id`` is not the open intent, a model reply given as
            [`Happened`][steadyloop.loop.Happened] is malformed, or the outcome (value, error,
            reply or note) has no JSON form.
    """
    records = records or RecordFactory()
    state = await _read_state(journal, app, run_id, None)
    if state.ended is not None:
        raise RunFinished(f"run {run_id!r} ended ({state.ended.stop_reason.value})")
    _check_owner(state, takeover=takeover or state.suspended is not None)
    intent = state.open_intent
    if intent is None or intent["intent_id"] != intent_id:
        open_id = None if intent is None else intent["intent_id"]
        raise LoopError(
            f"intent {intent_id!r} of run {run_id!r} is not waiting for a decision "
            f"(the open intent is {open_id!r})"
        )
    value = None if isinstance(outcome, NotHappened) else outcome.value
    field = "value"
    if intent.get("what") == "model" and isinstance(outcome, Happened) and outcome.error is None:
        if not isinstance(outcome.value, Mapping):
            raise LoopError("a model call's outcome must be a reply, as ModelReply.to_json gives")
        try:
            value, field = ModelReply.from_json(outcome.value).to_json(), "reply"
        except (KeyError, TypeError, ValueError) as exc:
            raise LoopError(f"the reply is malformed: {exc}") from None
    payload = decision_payload(intent_id, outcome, value, field=field)
    try:
        check_canonical(payload)
    except EncodingError as exc:
        raise LoopError(f"the outcome has no JSON form: {exc}") from None
    stream = run_stream(run_id)
    try:
        await journal.append(
            app, [StreamWrite(stream, [records(RESULT_KIND, payload)], state.head + 1)]
        )
    except ConflictError:
        raise RunBusy(f"run {run_id!r} changed while the decision was being written") from None


async def request_cancel(
    journal: Journal,
    app: str,
    run_id: str,
    reason: str = "",
    *,
    records: RecordFactory | None = None,
) -> None:
    """Ask a run to stop, from any process: it ends ``CANCELLED`` at its next write.

    The driver notices when its next batch is refused (the request moved the run
    stream on): it writes the outcome of the effect in flight and then the end record,
    without starting another effect. A run nobody drives ends when it is resumed; one
    suspended at ``RESUME_STATE_UNKNOWN`` ends ``CANCELLED`` too, without a decision:
    its result names the unresolved intent in ``open_intent``, whose outcome stays
    unknown.

    Raises:
        RunNotFound: No such run.
        RunFinished: The run has ended.
    """
    records = records or RecordFactory()
    stream = run_stream(run_id)
    for _ in range(100):
        state = await _read_state(journal, app, run_id, None)
        if state.ended is not None:
            raise RunFinished(f"run {run_id!r} ended ({state.ended.stop_reason.value})")
        rec = records(RUN_CANCEL_REQUESTED, {"reason": reason})
        try:
            await journal.append(app, [StreamWrite(stream, [rec], state.head + 1)])
            return
        except ConflictError:
            await asyncio.sleep(0.001)
    raise RunBusy(f"run {run_id!r} kept changing; the cancel request was not written")


@dataclass(frozen=True)
class RunInfo:
    """What the journal says about a run.

    Attributes:
        app: Its app.
        run_id: Its id.
        state: The fold of its stream.
        records: Its records, in order.
        status: ``"running"`` (a live driver holds it), ``"stopped"`` (it stopped on
            request: resume it), ``"interrupted"`` (its driver died: resume it),
            ``"resume_state_unknown"`` (waiting for
            [`resolve`][steadyloop.loop.resolve]), or the stop reason it ended with.
    """

    app: str
    run_id: str
    state: RunState
    records: tuple[Any, ...]
    status: str


def _status(state: RunState) -> str:
    if state.ended is not None:
        return state.ended.stop_reason.value
    if state.suspended is not None:
        return StopReason.RESUME_STATE_UNKNOWN.value
    if state.stopped is not None:
        return StopReason.STOPPED.value
    try:
        _check_owner(state, takeover=False)
    except RunBusy:
        return "running"
    return "interrupted"


async def load_run(journal: Journal, app: str, run_id: str) -> RunInfo:
    """Read one run.

    Raises:
        RunNotFound: No such run.
        CorruptionError: The run stream is damaged.
    """
    records = await journal.read(app, run_stream(run_id))
    if not records:
        raise RunNotFound(f"no run {run_id!r} in app {app!r} of {journal.url}")
    state = RunState.fold(app, run_id, records, None)
    return RunInfo(app, run_id, state, tuple(records), _status(state))


async def list_runs(
    journal: Journal,
    app: str | None = None,
    *,
    limit: int | None = None,
    after: tuple[str, str] | None = None,
) -> list[RunInfo]:
    """The runs of one app (or of every namespace), sorted by app and run id.

    Only the runs returned are read: the others are known by their stream names, so a
    page costs the same however many runs the journal holds.

    Args:
        journal: The journal.
        app: Only this app's runs; every namespace's when `None`.
        limit: At most this many runs (the first page); every run when `None`.
        after: Only runs after this ``(app, run_id)`` in the order (the next page).

    Raises:
        ValueError: If ``limit`` is negative.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be 0 or more, got {limit}")
    keys = [key for key in await run_keys(journal, app) if after is None or key > after]
    return [await load_run(journal, ns, run_id) for ns, run_id in keys[:limit]]


async def run_keys(journal: Journal, app: str | None = None) -> list[tuple[str, str]]:
    """Every run's ``(app, run_id)``, sorted, from stream names alone (no run is read)."""
    keys: list[tuple[str, str]] = []
    for ns in [app] if app is not None else await journal.namespaces():
        for name in await journal.streams(ns):
            run_id = parse_run_stream(name)
            if run_id is not None:
                keys.append((ns, run_id))
    return sorted(keys)
