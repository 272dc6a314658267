"""The worker: claims tasks, runs each round through the loop, verifies, audits, decides.

One claim is one round::

    claim ─▶ claimed ─▶ round_started ─▶ run (loop) ─▶ run_finished
          ─▶ verified (goal mode) ─▶ audited + decision ─▶ settle the queue row

The decision, written in the same batch as the audit:

* the audit passed → ``completed``;
* goal mode and the round budget is spent → ``goal_unmet`` (or ``needs_human`` if the
  verify command passed but a judge did not);
* the audit cap is reached → ``needs_human``;
* otherwise → ``pushed_back`` with a packet, and the task is queued again.

A worker that dies leaves its round open in the trail. When its lease expires,
another worker claims the task (``lease_lost`` and ``claimed`` commit with the claim,
in one transaction: `TaskBoard.claim`), and continues
the open round where it stopped: it *resumes* the round's run from the journal
(``round_resumed``), with the preamble (resume note and packet) on its first model
call only. Round and audit counters come from the trail, so they continue and never
reset.

A worker told to shut down ([`Worker.shutdown`][steadyloop.audit.Worker.shutdown], which
``steadyloop audit work`` calls on SIGTERM or the first Ctrl-C) claims nothing more and
lets its current round finish within a grace period. A round still going then is
*interrupted*: its run is stopped where it stands, resumably (the loop's ``stop``: a
``run.stopped`` record; an effect in flight keeps its intent open, so a ``SAFE`` one is
done again on resume and a ``NEVER`` one asks a person), a verify command is killed, and
the lease is handed back at once with a ``released`` record, so another worker claims
the task without waiting for the lease to expire and resumes the round.

A cancel of the held task (``audit cancel``) is seen promptly: on PostgreSQL the
canceller's ``NOTIFY`` reaches the worker at once, elsewhere the worker reads its task's
row every `TaskQueue.poll` seconds while it works (and every heartbeat looks too). The
run is then ended at its next write (the loop's ``cancel``; a hung tool is interrupted
after the grace period), a verify command is killed at once, and the task is recorded
``cancelled``.

A worker fences itself by its own clock: when no renewal of its lease has succeeded
for ``lease - heartbeat`` seconds since the last one that did (the store is out of
reach, or stalled), or a renewal finds the lease no longer its own, it stops the round
at once, as an interrupt does (the run stops where it stands, a verify command's whole
process tree is killed), but writes and releases nothing: the task may be another
worker's by the time the lease would have expired, and nothing of this claim may then
still run. It logs one ``WARNING`` (logger ``steadyloop.audit``), emits ``lease-lost``
and goes back to claiming, which waits for the store to come back.

A round has a wall-clock limit (``round_time``): a run still going when it runs out is
stopped the same way, and the round is audited with the overrun as its evidence, so no
hung tool keeps a task ``running`` (and its lease renewed) for ever.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import re
import socket
import tempfile
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steadyloop._errors import (
    BackendUnavailable,
    ConflictError,
    LeaseLost,
    LoopError,
    RunBusy,
    RunFinished,
    RunNotFound,
    TaskCancelled,
)
from steadyloop.audit._auditor import AuditContext, Auditor, AuditReport
from steadyloop.audit._board import TaskBoard
from steadyloop.audit._packets import Packet, PreambleModel, compose_preamble
from steadyloop.audit._queue import Claim, wait_event
from steadyloop.audit._tasks import TaskEvent, TaskSpec, TaskState, TaskStatus
from steadyloop.audit._verify import Verification, Verifier
from steadyloop.loop import Agent, RunResult, StopReason, load_run, resume, run
from steadyloop.records import INTENT_KIND, RESULT_KIND, JSONValue

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_ROUND_TIME",
    "AgentFactory",
    "TaskContext",
    "Worker",
    "WorkerEvent",
    "decide",
]

_log = logging.getLogger(__name__)

DEFAULT_GRACE = 5.0
"""Seconds a worker told to shut down lets its current round go on before interrupting it."""

DEFAULT_ROUND_TIME = 3600.0
"""Seconds a round's run may take before it is stopped and audited as overrun."""


@dataclass(frozen=True)
class TaskContext:
    """What an agent factory learns about the round it makes an agent for.

    Attributes:
        task_id: The task.
        spec: Its spec.
        round: The round's number.
        run_id: The round's run.
        workdir: Where the task works (created if it was a scratch folder).
        resumed: Whether this drive resumes a round a lost worker left open.
        preamble: The preamble shown on the first model call, if any.
        worker: The worker.
    """

    task_id: str
    spec: TaskSpec
    round: int
    run_id: str
    workdir: Path
    resumed: bool
    preamble: str | None
    worker: str


AgentFactory = Callable[[TaskContext], Agent]
"""Makes the agent for one drive of one round (called again for a resume)."""


@dataclass(frozen=True)
class WorkerEvent:
    """Something a worker did, for progress displays.

    Attributes:
        worker: The worker.
        kind: ``claimed``, ``round``, ``resumed``, ``verified``, ``audited``,
            ``pushed_back``, ``completed``, ``needs-human``, ``goal-unmet``, ``blocked``,
            ``released``, ``interrupted``, ``time-limit``, ``cancelled``,
            ``store-unavailable``, ``lease-lost`` or ``error``.
        task_id: The task, if any.
        detail: A sentence.
    """

    worker: str
    kind: str
    task_id: str | None = None
    detail: str = ""


def decide(
    spec: TaskSpec, round: int, report: AuditReport, verification: Verification | None
) -> tuple[TaskEvent, str]:
    """The decision after a round's audit, and why.

    Args:
        spec: The task's spec.
        round: The round audited.
        report: Its audit.
        verification: Its verification (goal mode).
    """
    if report.passed:
        return TaskEvent.COMPLETED, f"round {round} passed audit {report.audit_round}"
    blocking = sum(1 for f in report.findings if f.blocking)
    if spec.goal is not None and round >= spec.goal.round_budget:
        if verification is not None and not verification.passed:
            return (
                TaskEvent.GOAL_UNMET,
                f"the round budget ({spec.goal.round_budget}) is spent and the verify "
                "command still fails",
            )
        return (
            TaskEvent.NEEDS_HUMAN,
            f"the round budget ({spec.goal.round_budget}) is spent with {blocking} finding(s) open",
        )
    if report.audit_round >= spec.max_audit_rounds:
        return (
            TaskEvent.NEEDS_HUMAN,
            f"{report.audit_round} audit rounds (the cap) and {blocking} finding(s) still open",
        )
    return TaskEvent.PUSHED_BACK, f"audit {report.audit_round} found {blocking} finding(s)"


_TERMINAL_EVENTS = {
    TaskEvent.COMPLETED: TaskStatus.COMPLETED,
    TaskEvent.NEEDS_HUMAN: TaskStatus.NEEDS_HUMAN,
    TaskEvent.GOAL_UNMET: TaskStatus.GOAL_UNMET,
}


class _Stopped(Exception):
    """The round's run returned ``stopped``: the worker is shutting down."""


class _Backoff:
    """Bounded exponential backoff: 0.1 s, doubling, at most 2 s a wait."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.delay = 0.1
        self.spent = 0.0

    def next(self) -> float:
        pause = self.delay
        self.spent += pause
        self.delay = min(self.delay * 2, 2.0)
        return pause


async def _reap(task: asyncio.Future[Any], what: str) -> None:
    """Cancel a helper task and wait for it to end; an error it ended with is logged.

    Its cancellation is what was asked for; anything else it raised (a bug, a store
    error nobody caught) would otherwise vanish with it, so it is logged at INFO.
    """
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # the caller itself is being cancelled
    except Exception as exc:
        _log.info("%s: a helper task ended with %s: %s", what, type(exc).__name__, exc)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:120] or "task"


def _result_from(payload: Mapping[str, Any], run_id: str) -> RunResult:
    return RunResult(
        run_id=run_id,
        stop_reason=StopReason(payload["stop_reason"]),
        output=payload.get("output"),
        detail=str(payload.get("detail") or ""),
        steps=int(payload.get("steps") or 0),
        actions=int(payload.get("actions") or 0),
        parse_failures=int(payload.get("parse_failures") or 0),
        open_intent=payload.get("open_intent"),
    )


class Worker:
    """Claims tasks from a board and works on them, one round per claim.

    Args:
        board: Where the tasks are.
        agent: The agent, or a factory making one per drive of a round.
        worker_id: This worker's name (host, pid and a random suffix by default).
        auditor: The auditor (gates only, no judges, by default).
        verifier: Runs verify commands (in a scrubbed subprocess by default).
        scratch_root: Where scratch folders for tasks without a ``workdir`` are made.
        lease: Seconds a claim lasts without a heartbeat.
        heartbeat: Seconds between heartbeats (a third of the lease by default); less
            than ``lease``. With no successful renewal for ``lease - heartbeat`` seconds,
            the worker stops its round on its own (see the module's notes on fencing).
        poll: Most seconds an idle worker waits before it looks at the queue again
            (the queue wakes it earlier when a task becomes claimable: at once on
            PostgreSQL, within the queue's own poll interval elsewhere).
        max_claims: Claims of one round (the claim working it plus those whose worker
            was lost or released it) after which the task goes to a person. Push-backs
            start the count again, so a task may take as many rounds as its audit cap.
            A release by a worker that shut down does not count.
        on_event: Called with every [`WorkerEvent`][steadyloop.audit.WorkerEvent].
        grace: Seconds [`shutdown`][steadyloop.audit.Worker.shutdown] lets the current
            round go on before interrupting it.
        round_time: Seconds a round's run may take; ``None``: no limit.
    """

    def __init__(
        self,
        board: TaskBoard,
        agent: Agent | AgentFactory,
        *,
        worker_id: str | None = None,
        auditor: Auditor | None = None,
        verifier: Verifier | None = None,
        scratch_root: str | os.PathLike[str] | None = None,
        lease: float = 30.0,
        heartbeat: float | None = None,
        poll: float = 1.0,
        max_claims: int = 10,
        on_event: Callable[[WorkerEvent], None] | None = None,
        grace: float = DEFAULT_GRACE,
        round_time: float | None = DEFAULT_ROUND_TIME,
    ) -> None:
        if not grace >= 0:
            raise ValueError(f"grace must be zero or more seconds, got {grace!r}")
        if round_time is not None and not round_time > 0:
            raise ValueError(f"round_time must be positive seconds or None, got {round_time!r}")
        self.board = board
        self._agent = agent
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.auditor = auditor or Auditor()
        self.verifier = verifier or Verifier()
        self.scratch_root = Path(scratch_root or Path(tempfile.gettempdir()) / "steadyloop-audit")
        self.lease = lease
        self.heartbeat = heartbeat if heartbeat is not None else lease / 3
        if not 0 < self.heartbeat < lease:
            raise ValueError(
                f"heartbeat must be positive and shorter than the lease ({lease!r} s), "
                f"got {self.heartbeat!r}"
            )
        self.poll = poll
        self.max_claims = max_claims
        self.on_event = on_event
        self.grace = grace
        self.round_time = round_time
        self.errors: list[BaseException] = []
        self._stop = asyncio.Event()
        self._lost = asyncio.Event()
        self._work: asyncio.Future[None] | None = None
        self._interrupting = False
        self._timer: asyncio.TimerHandle | None = None
        self._cancelled: str | None = None  # why the held task is to be cancelled
        self._cancel_run = asyncio.Event()  # the run's cancel=: end it for good
        self._stop_run = asyncio.Event()  # the run's stop=: stop it, resumably
        self._verifying = False
        self._counters: tuple[int, int] | None = None
        self._nudge = asyncio.Event()  # a cancel in this app may have come (PostgreSQL)
        self._unwatch: Callable[[], None] | None = None
        self._watching = False
        self._cancel_timer: asyncio.TimerHandle | None = None  # a cancel's grace, this claim's
        self._renewed = 0.0  # loop time a successful claim or renewal was asked at
        self._fenced: str | None = None  # why this claim's lease is taken as lost
        self._settling = False  # the claim is being given up: its lease ends by our hand
        self._claimed_state: TaskState | None = None  # the trail as the claim left it
        self._went_on = False  # the claim's round was started on (not the first pass)

    # -- public ------------------------------------------------------------------------

    def stop(self) -> None:
        """Finish the current round, then stop claiming."""
        self._stop.set()

    def shutdown(self, grace: float | None = None) -> None:
        """Stop claiming; interrupt the current round if it is still going after ``grace``.

        An interrupted round's run stops where it stands, its verify command is killed,
        and the lease is released at once with a record, so another worker can take the
        task over straight away. Calling it again (a second signal) interrupts at once.

        Args:
            grace: Seconds to let the round go on (the worker's ``grace`` by default).
        """
        first = not self._stop.is_set()
        self._stop.set()
        if not first:
            self.interrupt()
            return
        wait = self.grace if grace is None else grace
        self._timer = asyncio.get_running_loop().call_later(wait, self.interrupt)

    def interrupt(self) -> None:
        """Stop claiming and interrupt the current round now.

        See [`shutdown`][steadyloop.audit.Worker.shutdown].
        """
        self._stop.set()
        self.interrupt_round()

    async def run(self, *, until_idle: bool = True, max_tasks: int | None = None) -> int:
        """Claim and work on tasks.

        Args:
            until_idle: Return once no task is queued or running; otherwise wait for
                more work until [`stop`][steadyloop.audit.Worker.stop].
            max_tasks: Return after this many claims.

        Returns:
            How many claims were worked on.
        """
        done = 0
        backoff = _Backoff()
        try:
            while not self._stop.is_set() and (max_tasks is None or done < max_tasks):
                try:
                    worked = await self.run_once()
                    if worked is not None:
                        done += 1
                        backoff.reset()
                        continue
                    if until_idle:
                        counts = await self.board.counts()
                        if counts[TaskStatus.QUEUED] + counts[TaskStatus.RUNNING] == 0:
                            break
                    await self._idle()
                    backoff.reset()
                except BackendUnavailable as exc:
                    # The store is gone for longer than the queue's own retries: a worker
                    # outlives it, waiting (and saying so) until it is back.
                    pause = backoff.next()
                    _log.info(
                        "worker %s: the store is unavailable (%s); trying again in %.1f s",
                        self.worker_id,
                        exc,
                        pause,
                    )
                    self._emit("store-unavailable", None, f"{exc}; trying again in {pause:.1f} s")
                    await wait_event(self._stop, pause)
        finally:
            if self._unwatch is not None:
                self._unwatch()  # no claim is held any more: no cancel to watch for
            self._unwatch, self._watching = None, False
        if self._timer is not None:
            self._timer.cancel()  # a shutdown's grace timer has nothing left to interrupt
        return done

    async def _idle(self) -> None:
        """Wait until a task may be claimable, ``poll`` seconds pass, or the worker stops."""
        waits = [
            asyncio.ensure_future(self.board.queue.wait_for_task(self.poll)),
            asyncio.ensure_future(self._stop.wait()),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            for w in waits:
                await _reap(w, f"worker {self.worker_id}: an idle wait")

    async def run_once(self) -> str | None:
        """Claim one task and work one round of it.

        Returns:
            The task worked on, or ``None`` if nothing was claimable.
        """
        self._watch_cancels()
        self._nudge.clear()  # a notification from here on may be about this claim
        asked = asyncio.get_running_loop().time()
        got = await self.board.claim(self.worker_id, self.lease)
        if got is None:
            for task_id in await self.board.block_doomed():
                self._emit("blocked", task_id, "a dependency ended without completing")
            return None
        claim, self._claimed_state = got
        self._went_on = False
        self._lost = asyncio.Event()
        self._interrupting = False
        self._renewed = asked  # the lease runs from no earlier than the claim was asked
        self._fenced = None
        self._settling = False
        self._counters = None  # the round's, for the queue row
        self._cancelled = claim.cancel_requested
        self._cancel_run = asyncio.Event()
        self._stop_run = asyncio.Event()
        self._work = work = asyncio.ensure_future(self._process_through_blips(claim))
        beat = asyncio.ensure_future(self._beat(claim))
        look = asyncio.ensure_future(self._look_for_cancel(claim))
        fence = asyncio.ensure_future(self._fence(claim))
        try:
            try:
                await work
            except (asyncio.CancelledError, _Stopped):
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                if self._fenced is not None:
                    raise LeaseLost(self._fenced) from None
                if not self._interrupting and not self._stop_run.is_set():
                    if work.cancelled() and work.cancelling() == 0:
                        # Nobody cancelled the round (not the worker, not its caller): a
                        # driver's own wait was cancelled under it (psycopg does, when a
                        # connection is closed while a query waits). A store failure, not
                        # the worker's end: the claim is left to its lease, the worker
                        # goes on claiming.
                        raise BackendUnavailable(
                            f"task {claim.task_id!r}: the store's driver cancelled a wait of "
                            "the round's; the claim is left to its lease"
                        ) from None
                    raise
                if self._cancelled is not None:
                    await self._record_cancelled(claim, self._cancelled)
                else:
                    await self._release_interrupted(claim)
            except TaskCancelled as exc:
                if self._fenced is not None:
                    raise LeaseLost(self._fenced) from None
                await self._record_cancelled(claim, exc.reason)
            except Exception:
                if self._fenced is not None:
                    # However the stopped round ended (a lost store, a refused write),
                    # what happened is that the lease was lost.
                    raise LeaseLost(self._fenced) from None
                raise
        except LeaseLost as exc:
            if self._fenced is None:  # a fence has said so already, in its own line
                _log.warning(
                    "worker %s: task %r: the lease was lost (%s); nothing more is written "
                    "for this claim",
                    self.worker_id,
                    claim.task_id,
                    exc,
                )
            self._emit("lease-lost", claim.task_id, str(exc))
        except Exception as exc:
            _log.error(
                "worker %s: task %r: the round failed: %s: %s; the claim is left to its "
                "lease and the worker goes on",
                self.worker_id,
                claim.task_id,
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
            self.errors.append(exc)
            self._emit("error", claim.task_id, f"{type(exc).__name__}: {exc}")
        finally:
            self._work = None
            if self._cancel_timer is not None:
                # The cancelled round ended within its grace: the timer must not
                # interrupt the next claim's round.
                self._cancel_timer.cancel()
                self._cancel_timer = None
            for helper in (beat, look, fence):
                helper.cancel()
            for helper in (beat, look, fence):
                await _reap(helper, f"worker {self.worker_id}: task {claim.task_id!r}")
        return claim.task_id

    # -- internals ---------------------------------------------------------------------

    def _emit(self, kind: str, task_id: str | None, detail: str = "") -> None:
        if self.on_event is not None:
            self.on_event(WorkerEvent(self.worker_id, kind, task_id, detail))

    async def _beat(self, claim: Claim) -> None:
        """Renew the lease every ``heartbeat`` seconds; fence the claim if it is gone.

        Renewals start every ``heartbeat`` seconds counted from the start of the one
        before (at once after one that took longer), not ``heartbeat`` after it ended:
        on a slow store the time a renewal takes is not added to every interval, so
        the fence's margin (``lease - heartbeat`` from the last successful start) is
        what it says.
        """
        loop = asyncio.get_running_loop()
        asked = self._renewed  # the claim's own start: the lease runs from no earlier
        while True:
            await asyncio.sleep(max(0.0, asked + self.heartbeat - loop.time()))
            asked = loop.time()
            try:
                ok = await self.board.queue.heartbeat(
                    claim.task_id, claim.lease_token, self.lease, counters=self._counters
                )
            except TaskCancelled as exc:
                self._renewed = asked  # the lease was renewed: keep it while the round stops
                self._cancel(exc.reason)
                continue
            except Exception as exc:
                # Retried at the next beat; `_fence` stops the round if none succeeds in time.
                _log.warning(
                    "worker %s: task %r: a lease renewal failed (%s: %s); %.1f s of the "
                    "fence's margin left",
                    self.worker_id,
                    claim.task_id,
                    type(exc).__name__,
                    exc,
                    max(0.0, self._renewed + self.lease - self.heartbeat - loop.time()),
                )
                continue
            if not ok:
                self._fence_off(
                    claim,
                    "a renewal found the lease no longer this worker's (another worker "
                    "took the task over, or it was settled)",
                )
                return
            self._renewed = asked

    async def _fence(self, claim: Claim) -> None:
        """Stop the round once no renewal has succeeded for ``lease - heartbeat`` seconds.

        A renewal's lease runs from no earlier than the moment it was asked for, so the
        round stops at least ``heartbeat`` seconds before the lease can expire in the
        store: time to kill a verify command's process tree before another worker may
        claim the task. The clock is this process's own (monotonic), not the store's, so
        a stalled or unreachable store cannot keep the round going.
        """
        loop = asyncio.get_running_loop()
        margin = self.lease - self.heartbeat
        while True:
            wait = self._renewed + margin - loop.time()  # moved on by each renewal
            if wait > 0:
                await asyncio.sleep(wait)
            elif self._settling:
                # The claim is being given up by this worker's own hand: its last
                # transaction checks the lease itself, and cancelling it would end the
                # worker, not the claim. Fence only if it fails and the round goes on.
                await asyncio.sleep(min(self.heartbeat, 0.1))
            else:
                break
        self._fence_off(
            claim,
            f"no renewal of the lease succeeded for {margin:g} s (lease {self.lease:g} s "
            f"less heartbeat {self.heartbeat:g} s); the store may be unreachable",
        )
        # The round's own clean-up may wait on the lost store (the run tries to record
        # how it stopped): cut it short too, so the worker goes back to claiming.
        work = self._work
        while work is not None and not work.done():
            await asyncio.wait({work}, timeout=self.heartbeat)
            if not work.done():
                work.cancel()

    def _fence_off(self, claim: Claim, why: str) -> None:
        """Take the lease as lost: stop the round now; nothing more is written for it."""
        if self._fenced is not None or self._settling:
            return  # already fenced, or the lease ends because this worker gives it up
        self._fenced = f"task {claim.task_id!r}: {why}"
        self._lost.set()
        _log.warning(
            "worker %s: task %r: %s; its round is stopped (run and verify command) and "
            "nothing is written for it; the worker goes back to claiming",
            self.worker_id,
            claim.task_id,
            why,
        )
        self.interrupt_round()

    def _watch_cancels(self) -> None:
        """Ask the queue to nudge this worker when a cancel may have come (once)."""
        if not self._watching:
            self._watching = True
            self._unwatch = self.board.queue.watch_cancels(self._nudge.set)

    async def _look_for_cancel(self, claim: Claim) -> None:
        """See a cancel of the held task promptly, not only at the next heartbeat.

        Where the store notifies (PostgreSQL), the canceller's ``NOTIFY`` nudges the
        worker, which then reads whether its own task is the one; elsewhere, and while
        the notification connection is down, it reads every `TaskQueue.poll` seconds
        (one indexed read of its own row). A cancel seen stops the round as
        `_cancel` says.
        """
        queue = self.board.queue
        while self._cancelled is None:
            notified = self._unwatch is not None and queue.cancels_notified
            await wait_event(self._nudge, queue.poll * (10 if notified else 1))
            if notified and not self._nudge.is_set():
                continue  # no news: nothing to read (the heartbeat looks too)
            self._nudge.clear()
            try:
                reason = await queue.cancel_requested(claim.task_id, claim.lease_token)
            except LeaseLost:
                self._fence_off(claim, "the lease is no longer this worker's")
                return
            except Exception as exc:
                # A failed look is tried again after a pause (the heartbeat looks too).
                _log.info(
                    "worker %s: task %r: looking for a cancel failed (%s: %s); looking "
                    "again in %.2f s",
                    self.worker_id,
                    claim.task_id,
                    type(exc).__name__,
                    exc,
                    queue.poll,
                )
                await asyncio.sleep(queue.poll)
                self._nudge.set()
                continue
            if reason is not None:
                self._cancel(reason)

    def _cancel(self, reason: str) -> None:
        """Someone cancelled the held task: stop the round at its next write boundary.

        The run is asked to end (``cancelled``) at its next write; a verify command is
        killed at once; a round still going after the grace period is interrupted.
        """
        if self._cancelled is not None:
            return
        self._cancelled = reason
        self._cancel_run.set()
        if self._verifying:
            self.interrupt_round()
        else:
            self._cancel_timer = asyncio.get_running_loop().call_later(
                self.grace, self.interrupt_round
            )

    def interrupt_round(self) -> None:
        """Interrupt the current round now, without stopping the worker.

        Its run stops resumably (``run.stopped``, the effect in flight left open), and
        whatever else it was doing (a verify command, an audit) is cancelled.
        """
        if self._work is not None and not self._work.done():
            self._interrupting = True
            self._stop_run.set()
            self._work.cancel()

    async def _record_cancelled(self, claim: Claim, reason: str) -> None:
        """Record the held task cancelled, as its canceller asked, and settle it."""
        state = await self.board.state(claim.task_id)
        if state.status is None or state.status.terminal:
            return
        await self._conclude(
            claim,
            state,
            [(TaskEvent.CANCELLED, {"reason": reason, "worker": self.worker_id})],
            TaskStatus.CANCELLED,
            cancelling=True,
        )
        self._emit("cancelled", claim.task_id, reason)

    async def _write(
        self,
        state: TaskState,
        events: list[tuple[TaskEvent, Mapping[str, JSONValue]]],
        *,
        cancelling: bool = False,
    ) -> TaskState:
        """Append to the trail, fenced: never after the lease is lost or a cancel came."""
        if self._lost.is_set():
            raise LeaseLost(f"task {state.task_id!r}: the lease was lost")
        if self._cancelled is not None and not cancelling:
            raise TaskCancelled(state.task_id, self._cancelled)
        try:
            return await self.board.record(state, events)
        except ConflictError:
            raise LeaseLost(
                f"task {state.task_id!r}: its trail moved on (another worker took it over)"
            ) from None

    async def _conclude(
        self,
        claim: Claim,
        state: TaskState,
        events: list[tuple[TaskEvent, Mapping[str, JSONValue]]],
        status: TaskStatus,
        *,
        delay: float = 0.0,
        cancelling: bool = False,
    ) -> TaskState:
        """Write the claim's last transitions and settle the row, in one transaction, fenced."""
        if self._lost.is_set():
            raise LeaseLost(f"task {state.task_id!r}: the lease was lost")
        if self._cancelled is not None and not cancelling:
            raise TaskCancelled(state.task_id, self._cancelled)
        self._settling = True  # the lease ends by this worker's hand: no fence for it
        try:
            state = await self.board.conclude(state, events, claim.lease_token, status, delay=delay)
        except ConflictError:
            self._settling = False
            raise LeaseLost(
                f"task {state.task_id!r}: its trail moved on (another worker took it over)"
            ) from None
        except BaseException:
            self._settling = False  # not given up after all: the fence holds again
            raise
        await self._after_settle(claim, status)
        return state

    async def _after_settle(self, claim: Claim, status: TaskStatus) -> None:
        if status in (TaskStatus.NEEDS_HUMAN, TaskStatus.GOAL_UNMET, TaskStatus.CANCELLED):
            for task_id in await self.board.block_doomed():
                self._emit("blocked", task_id, f"{claim.task_id} ended {status.value}")

    async def _settle(
        self, claim: Claim, state: TaskState, status: TaskStatus, delay: float = 0.0
    ) -> None:
        """Give the lease up with no trail change (the trail holds nothing of this claim)."""
        self._settling = True  # the lease ends by this worker's hand: no fence for it
        try:
            await self.board.queue.settle(
                claim.task_id,
                claim.lease_token,
                status,
                round=state.round,
                audit_rounds=state.audit_rounds,
                detail=state.detail,
                delay=delay,
            )
        except BaseException:
            self._settling = False  # not given up after all: the fence holds again
            raise
        await self._after_settle(claim, status)

    async def _process_through_blips(self, claim: Claim) -> None:
        """Work the claim; after a lost connection, wait and go on with the same claim.

        The heartbeat keeps the lease meanwhile, and the trail says how far the round
        got (a write whose reply was lost is found there), so a blip costs no claim.
        """
        backoff = _Backoff()
        while True:
            try:
                await self._process(claim)
                return
            except BackendUnavailable as exc:
                if self._lost.is_set() or backoff.spent >= self.lease * 2 + 30:
                    raise
                pause = backoff.next()
                _log.info(
                    "worker %s: task %r: the store is unavailable (%s); going on with the "
                    "claim in %.1f s",
                    self.worker_id,
                    claim.task_id,
                    exc,
                    pause,
                )
                self._emit("store-unavailable", claim.task_id, f"{exc}; going on in {pause:.1f} s")
                await asyncio.sleep(pause)

    async def _release_interrupted(self, claim: Claim) -> None:
        """After an interrupt: hand the task back at once, naming the run that was stopped."""
        state = await self.board.state(claim.task_id)
        if state.status is not TaskStatus.RUNNING or state.lease_token != claim.lease_token:
            # The trail has moved past this claim: its round ended. The queue row may
            # still hold the lease: hand it back too, so nobody waits for it to expire.
            status = state.status
            if status is None or not status.terminal:
                status = TaskStatus.QUEUED
            try:
                await self._settle(claim, state, status)
            except LeaseLost as exc:
                _log.info(
                    "worker %s: task %r: nothing to hand back after the interrupt: %s",
                    self.worker_id,
                    claim.task_id,
                    exc,
                )
            return
        interrupted = None
        if state.phase == "running" and state.run_id is not None:
            try:
                info = await load_run(self.board.journal, self.board.app, state.run_id)
            except RunNotFound:
                _log.debug(
                    "worker %s: task %r: the interrupted round's run %r was never begun",
                    self.worker_id,
                    claim.task_id,
                    state.run_id,
                )
            else:
                if info.status in (StopReason.STOPPED.value, StopReason.RESUME_STATE_UNKNOWN.value):
                    interrupted = state.run_id
        reason = f"worker {self.worker_id} shut down; the round was interrupted"
        await self._conclude(
            claim,
            state,
            [
                (
                    TaskEvent.RELEASED,
                    {"reason": reason, "shutdown": True, "interrupted": interrupted},
                )
            ],
            TaskStatus.QUEUED,
        )
        self._emit("interrupted", claim.task_id, reason)

    def _workdir(self, task_id: str, spec: TaskSpec) -> Path:
        path = Path(spec.workdir) if spec.workdir else self.scratch_root / _safe(task_id)
        path.mkdir(parents=True, exist_ok=True)
        return path

    async def _process(self, claim: Claim) -> None:
        board = self.board
        state, self._claimed_state = self._claimed_state, None  # as the claim left it, once
        if state is None:  # going on after a lost connection: the trail says how far
            state = await board.state(claim.task_id)
        if state.status is not TaskStatus.RUNNING or state.lease_token != claim.lease_token:
            # The claim and its record commit together, so a trail without it is one the
            # claim could not follow (empty, ended, or elsewhere): one a version before
            # single-transaction task changes left behind. Send it to a person, saying
            # so; nothing is guessed.
            reason = (
                "the task's trail is empty: a version before single-transaction task "
                "changes crashed between its two writes; resubmit the task"
                if state.status is None
                else f"the trail says {state.status.value} but the queue row was claimable"
            )
            status = (
                state.status
                if state.status is not None and state.status.terminal
                else TaskStatus.NEEDS_HUMAN
            )
            await self._settle(claim, state, status)
            self._emit(status.value, claim.task_id, reason)
            return
        first_pass = not self._went_on
        self._went_on = True
        if first_pass:
            self._emit("claimed", claim.task_id, f"attempt {claim.attempt}")
        if state.round_claims > self.max_claims:
            number = state.round if state.phase else state.round + 1
            reason = (
                f"claimed {state.round_claims} times without finishing round {number} "
                f"(limit {self.max_claims}); a person should look"
            )
            await self._give_up(claim, state, reason)
            return
        # The worker whose lease this claim took over (its round is resumed), if any.
        lost_worker = claim.previous_owner if first_pass else None
        await self._round(claim, state, lost_worker)

    async def _round(self, claim: Claim, state: TaskState, lost_worker: str | None) -> None:
        """Work one round of a claim recorded in ``state``."""
        spec = state.spec
        assert spec is not None
        task_id = claim.task_id
        try:
            workdir = self._workdir(task_id, spec)
        except OSError as exc:
            # No claim can fix the folder: say what is wrong with it, once.
            reason = f"the task's working folder cannot be used: {exc}"
            await self._give_up(claim, state, reason)
            return
        packet = None if state.packet is None else Packet.from_json(state.packet)
        if state.phase is None:
            number = state.round + 1
            run_id = f"{task_id}.r{number}"
            preamble = compose_preamble(packet, note=state.retry_note)
            state = await self._write(
                state,
                [
                    (
                        TaskEvent.ROUND_STARTED,
                        {
                            "round": number,
                            "run_id": run_id,
                            "worker": self.worker_id,
                            "packet": None if packet is None else packet.id,
                            "preamble_chars": len(preamble or ""),
                        },
                    ),
                ],
            )
            self._counters = (state.round, state.audit_rounds)  # the next heartbeat shows them
            self._emit("round", task_id, f"round {number} started")
            result = await self._drive(claim, state, spec, workdir, preamble, resumed=False)
            if result is None:
                return
            state = result
        elif state.phase == "running":
            assert state.run_id is not None
            if await self._driven_elsewhere(state.run_id):
                await self._release(
                    claim, state, "the round's run is still driven by a live process"
                )
                return
            preamble = compose_preamble(
                packet, resume_round=state.round, lost_worker=lost_worker, note=state.retry_note
            )
            state = await self._write(
                state,
                [
                    (
                        TaskEvent.ROUND_RESUMED,
                        {
                            "round": state.round,
                            "run_id": state.run_id,
                            "worker": self.worker_id,
                            "lost_worker": lost_worker,
                            "preamble_chars": len(preamble or ""),
                        },
                    )
                ],
            )
            self._emit("resumed", task_id, f"round {state.round} resumed")
            result = await self._drive(claim, state, spec, workdir, preamble, resumed=True)
            if result is None:
                return
            state = result
        await self._finish_round(claim, state, spec, workdir)

    async def _give_up(self, claim: Claim, state: TaskState, reason: str) -> None:
        """Send the task to a person at once, saying why."""
        await self._conclude(
            claim, state, [(TaskEvent.NEEDS_HUMAN, {"reason": reason})], TaskStatus.NEEDS_HUMAN
        )
        self._emit("needs-human", claim.task_id, reason)

    async def _driven_elsewhere(self, run_id: str) -> bool:
        """Whether a live driver (a task here, or a process on this host) holds the run.

        A driver on another host cannot be checked from here; the expired lease is the
        evidence that it is gone, and the resume takes the run over.
        """
        try:
            info = await load_run(self.board.journal, self.board.app, run_id)
        except RunNotFound:
            _log.debug(
                "worker %s: run %r is not in the journal: nobody drives it", self.worker_id, run_id
            )
            return False
        owner = info.state.owner
        return info.status == "running" and owner is not None and owner.same_host()

    async def _release(self, claim: Claim, state: TaskState, reason: str) -> None:
        """Give the task back untouched, to be tried again after a lease's time."""
        await self._conclude(
            claim,
            state,
            [(TaskEvent.RELEASED, {"reason": reason})],
            TaskStatus.QUEUED,
            delay=self.lease,
        )
        self._emit("released", claim.task_id, reason)

    async def _drive(
        self,
        claim: Claim,
        state: TaskState,
        spec: TaskSpec,
        workdir: Path,
        preamble: str | None,
        *,
        resumed: bool,
    ) -> TaskState | None:
        """Run (or resume) the round's run; write ``run_finished``. None: released."""
        board = self.board
        run_id = state.run_id
        assert run_id is not None
        context = TaskContext(
            task_id=claim.task_id,
            spec=spec,
            round=state.round,
            run_id=run_id,
            workdir=workdir,
            resumed=resumed,
            preamble=preamble,
            worker=self.worker_id,
        )
        agent = self._agent(context) if callable(self._agent) else self._agent
        agent = dataclasses.replace(agent, model=PreambleModel(agent.model, preamble))
        overrun = None
        try:
            try:
                await load_run(board.journal, board.app, run_id)
                exists = True
            except RunNotFound:
                exists = False
            started = asyncio.get_running_loop().time()
            try:
                async with asyncio.timeout(self.round_time):
                    if exists:
                        # The lease expired, so its holder is presumed gone: take over
                        # from another host too (a live driver on this host still refuses).
                        outcome = await resume(
                            agent,
                            board.journal,
                            board.app,
                            run_id,
                            records=board.records,
                            takeover=True,
                            cancel=self._cancel_run,
                            stop=self._stop_run,
                        )
                    else:
                        outcome = await run(
                            agent,
                            board.journal,
                            board.app,
                            spec.user_id,
                            run_id,
                            run_id,
                            spec.input_text(),
                            records=board.records,
                            cancel=self._cancel_run,
                            stop=self._stop_run,
                        )
            except TimeoutError:
                # The run was cancelled where it stood, and recorded how it ended.
                elapsed = asyncio.get_running_loop().time() - started
                outcome, overrun = await self._overrun(run_id, elapsed)
                self._emit("time-limit", claim.task_id, overrun)
            if outcome.stop_reason is StopReason.STOPPED:
                raise _Stopped  # the worker shuts down: the task is handed back
        except RunFinished:
            ended = (await load_run(board.journal, board.app, run_id)).state.ended
            assert ended is not None
            outcome = ended
        except RunBusy as exc:
            await self._release(claim, state, f"the run is still driven elsewhere: {exc}")
            return None
        except LoopError as exc:
            await self._give_up(claim, state, f"the run could not go on: {exc}")
            return None
        return await self._write(
            state,
            [
                (
                    TaskEvent.RUN_FINISHED,
                    {
                        "round": state.round,
                        "run_id": run_id,
                        "stop_reason": outcome.stop_reason.value,
                        "output": outcome.output,
                        "detail": outcome.detail if overrun is None else overrun,
                        "time_limit": None if overrun is None else self.round_time,
                        "steps": outcome.steps,
                        "actions": outcome.actions,
                        "parse_failures": outcome.parse_failures,
                        "open_intent": outcome.open_intent,
                    },
                )
            ],
        )

    async def _overrun(self, run_id: str, elapsed: float) -> tuple[RunResult, str]:
        """How a run stopped at the round's time limit, and the evidence of the overrun."""
        info = await load_run(self.board.journal, self.board.app, run_id)
        state = info.state
        # The effect in flight: the last intent without a result.
        done = {r.payload.get("intent_id") for r in info.records if r.kind == RESULT_KIND}
        intent = next(
            (
                dict(r.payload)
                for r in reversed(info.records)
                if r.kind == INTENT_KIND and r.payload.get("intent_id") not in done
            ),
            None,
        )
        iid = None if intent is None else intent.get("intent_id")
        if intent is None:
            doing = "no effect was in flight"
        elif intent.get("what") == "tool":
            args = json.dumps(intent.get("arguments"), ensure_ascii=False)[:200]
            doing = f"tool {intent.get('tool')!r} was running (intent {iid}, arguments {args})"
        else:
            doing = f"the model call of step {intent.get('step')} was running (intent {iid})"
        evidence = (
            f"the round's time limit of {self.round_time:g} s ran out after {elapsed:.1f} s; "
            f"{doing}; the run was stopped"
        )
        if state.ended is not None:
            return state.ended, evidence
        return (
            RunResult(
                run_id=run_id,
                stop_reason=StopReason.RESUME_STATE_UNKNOWN,
                detail=evidence,
                open_intent=iid,
            ),
            evidence,
        )

    async def _finish_round(
        self, claim: Claim, state: TaskState, spec: TaskSpec, workdir: Path
    ) -> None:
        task_id = claim.task_id
        assert state.run_result is not None and state.run_id is not None
        run_result = _result_from(state.run_result, state.run_id)
        if run_result.stop_reason is StopReason.RESUME_STATE_UNKNOWN:
            reason = (
                f"the run stopped with resume_state_unknown: {run_result.detail} "
                "(resolve the intent, then resubmit or resume the run)"
            )
            await self._give_up(claim, state, reason)
            return
        if run_result.stop_reason is StopReason.BUDGET_EXHAUSTED and run_result.steps == 0:
            # Over budget before the first model call: the prompt alone is too big, and
            # no further round can change that.
            reason = (
                f"the task cannot fit the agent's budget before its first step: "
                f"{run_result.detail} (shorten the prompt, or raise the agent's budget)"
            )
            await self._give_up(claim, state, reason)
            return
        verification = None
        if spec.goal is not None:
            if state.phase == "verified" and state.verification is not None:
                verification = Verification.from_json(state.verification)
            else:
                self._verifying = True
                try:
                    verification = await self.verifier.verify(spec.goal.verify, workdir)
                finally:
                    self._verifying = False
                state = await self._write(
                    state,
                    [(TaskEvent.VERIFIED, {"round": state.round, **verification.to_json()})],
                )
                self._emit("verified", task_id, verification.summary)
        if state.phase == "audited" and state.audit is not None:
            report = AuditReport.from_json(state.audit)
        else:
            report = await self.auditor.audit(
                AuditContext(
                    task_id=task_id,
                    spec=spec,
                    round=state.round,
                    audit_round=state.audit_rounds + 1,
                    run=run_result,
                    verification=verification,
                    workdir=str(workdir),
                    app=self.board.app,
                    run_id=str(state.run_id),
                )
            )
        event, reason = decide(spec, state.round, report, verification)
        payload: dict[str, JSONValue] = {
            "round": state.round,
            "audit_round": report.audit_round,
            "reason": reason,
        }
        if event is TaskEvent.PUSHED_BACK:
            blocking = tuple(f for f in report.findings if f.blocking)
            rest = tuple(f for f in report.findings if not f.blocking)
            payload["packet"] = Packet(
                task_id, state.round, report.audit_round, blocking + rest
            ).to_json()
        events: list[tuple[TaskEvent, Mapping[str, JSONValue]]] = []
        if state.phase != "audited":
            events.append((TaskEvent.AUDITED, report.to_json()))
        events.append((event, payload))
        status = _TERMINAL_EVENTS.get(event, TaskStatus.QUEUED)
        state = await self._conclude(claim, state, events, status)
        self._emit(
            "audited", task_id, f"audit {report.audit_round}: {len(report.findings)} finding(s)"
        )
        self._emit("pushed_back" if status is TaskStatus.QUEUED else status.value, task_id, reason)
