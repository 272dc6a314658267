"""The task board: the queue, plus each task's trail in the journal.

The trail (stream ``["task", task_id]`` in the board's app namespace) is the record
of what happened to a task; the queue row is its projection, the index workers pick
work from. Board and queue are scoped to one app: a board sees, claims and writes only
its app's tasks, and the same task id in another app is another task.

The queue's tables sit in the journal's database, so every task change (submit,
claim, round result, finish, release, cancel, retry, block) is **one transaction**: the
trail's records, written with ``expected_next``, and the row's new status commit
together or not at all. Two writers can never interleave transitions (the second
one's write is refused, and its row change with it), and no crash leaves the row and
the trail disagreeing, so nothing repairs one from the other. A claim is one such
change too (`TaskBoard.claim`): the lease (owner, token, expiry) and the trail's
``claimed`` record commit together. (`TaskQueue.claim` alone takes a lease with no
record: a queue used without a board.)

Trails in another store than the queue (``journal_url=`` of earlier versions) are no
longer supported: one transaction cannot span two stores.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from steadyloop import _names
from steadyloop._errors import (
    ConflictError,
    CorruptionError,
    IllegalTransition,
    LeaseLost,
    StoreNotFound,
    TaskNotFound,
    TaskSpecError,
    UnknownBackend,
)
from steadyloop.audit._queue import (
    DEFAULT_APP,
    Claim,
    QueuedTask,
    SubmitResult,
    TaskQueue,
    UnreadableTask,
    open_queue,
    split_queue_url,
)
from steadyloop.audit._tasks import TaskEvent, TaskSpec, TaskState, TaskStatus, task_stream
from steadyloop.journal import URL, StreamWrite, open_journal
from steadyloop.journal._protocol import PreparedBatch, prepare_batch
from steadyloop.journal._sql import Plan, PlanJournal, append_plan, read_plan
from steadyloop.records import Clock, IdSource, JSONValue, RecordFactory, StoredRecord

__all__ = ["DEFAULT_APP", "TaskBoard"]

_log = logging.getLogger(__name__)
_CLAIM_RACES = 5  # claims in a row refused by a trail that moved on, before giving up


class TaskBoard:
    """Tasks: a queue to pick them from and a trail per task in the journal.

    Args:
        queue: The queue (scoped to the board's app).
        journal: The journal holding trails (and the tasks' runs): the queue's own
            (``queue.journal``, the default), as a task change writes both in one
            transaction.
        app: The journal namespace; the queue's app by default, and it must be that.
        records: Clock and id source for trail records.
        owned: Close the queue and the journal when the board is closed.

    Raises:
        TaskSpecError: ``app`` is not the queue's, or ``journal`` is not the queue's.
    """

    def __init__(
        self,
        queue: TaskQueue,
        journal: PlanJournal | None = None,
        *,
        app: str | None = None,
        records: RecordFactory | None = None,
        owned: bool = False,
    ) -> None:
        if app is not None and app != queue.app:
            raise TaskSpecError(
                f"the board's app {app!r} is not its queue's app {queue.app!r}: open the "
                f"queue with app={app!r}",
                field="app",
            )
        if journal is not None and journal is not queue.journal:
            raise TaskSpecError(
                f"the board's journal {journal!r} is not its queue's {queue.journal!r}: a "
                "task change writes the queue row and the trail in one transaction, so "
                "the trails live in the queue's journal (pass queue.journal, or nothing)",
                field="journal",
            )
        self.queue = queue
        self.journal: PlanJournal = queue.journal
        self.app = queue.app
        self.records = records or RecordFactory()
        self._owned = owned

    @classmethod
    async def open(
        cls,
        url: str | URL,
        *,
        app: str = DEFAULT_APP,
        records: RecordFactory | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        create: bool = True,
        poll: float | None = None,
    ) -> TaskBoard:
        """Open a board whose queue and journal live at ``url``, on one connection.

        The queue's tables sit next to the journal's (one SQLite thread, one server
        pool), so a task change is one transaction.

        Args:
            url: ``sqlite:FILE``, ``postgresql://…`` or ``mysql://…``: the queue and the
                journal of the trails and runs.
            app: The app: the journal namespace of the trails and runs, and the only
                tasks of the queue the board sees, claims or changes.
            records: Clock and id source for trail records.
            clock: The queue's clock (leases, on SQLite).
            ids: Where generated task ids come from.
            create: Whether a missing store is created; ``False`` (for commands that
                read or work on tasks) makes a mistyped path or prefix an error, and
                nothing is created.
            poll: Seconds between looks at the queue of an idle worker where the store
                cannot notify (SQLite, MySQL).

        Raises:
            UnknownBackend: The URL names no supported store.
            BackendUnavailable: The store cannot be opened, or (``create=False``) none
                is there.
        """
        problem = _names.app_problem(app)
        if problem is not None:
            raise TaskSpecError(problem, field="app")
        options: dict[str, Any] = {"app": app, "clock": clock, "ids": ids}
        if poll is not None:
            options["poll"] = poll
        try:
            return await cls._open(url, records, create, options)
        except StoreNotFound as exc:
            raise StoreNotFound(f"no task store exists here: {exc}") from None

    @classmethod
    async def _open(
        cls,
        url: str | URL,
        records: RecordFactory | None,
        create: bool,
        options: dict[str, Any],
    ) -> TaskBoard:
        location, own = split_queue_url(url)  # the one parse of the board's URL
        journal = await open_journal(location, create=create)
        try:
            if not isinstance(journal, PlanJournal):  # pragma: no cover - SQL schemes only
                raise UnknownBackend(
                    f"the task queue runs on sqlite, postgresql or mysql, not {location!r}"
                )
            queue = await open_queue(location, create=create, journal=journal, **{**own, **options})
        except BaseException:
            await journal.close()
            raise
        return cls(queue, app=options["app"], records=records, owned=True)

    async def close(self) -> None:
        """Close the queue and journal, if the board opened them."""
        if self._owned:
            await self.queue.close()
            await self.journal.close()

    async def __aenter__(self) -> TaskBoard:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- submitting --------------------------------------------------------------------

    async def submit(self, spec: TaskSpec) -> SubmitResult:
        """Queue one task and write its ``submitted`` record; see `submit_many`."""
        return (await self.submit_many([spec]))[0]

    async def submit_many(self, specs: Sequence[TaskSpec]) -> list[SubmitResult]:
        """Queue tasks (all or none), with each new task's ``submitted`` record.

        One transaction writes the queue rows and the trails' first records: a crash
        leaves either all of them or none. Every id is checked by the one id rule of
        `steadyloop._names` when its [`TaskSpec`][steadyloop.audit.TaskSpec] is built,
        so its trail stream is nameable before anything is written. A duplicate (an
        idempotency key seen before) writes nothing.

        Raises:
            TaskSpecError: A spec is invalid or clashes with the queue (or a new task's
                id already has a trail in the journal); nothing queued.
        """
        for spec in specs:
            if isinstance(spec, TaskSpec) and spec.task_id is not None:
                task_stream(spec.task_id)  # nameable, or refused before anything is written
        made: dict[str, Any] = {}  # one record per task id, the same on every attempt

        def trail(results: list[SubmitResult]) -> list[StreamWrite]:
            writes = []
            for spec, result in zip(specs, results, strict=True):
                if result.duplicate:
                    continue
                rec = made.get(result.task_id)
                if rec is None:
                    rec = made[result.task_id] = self._submitted(spec.with_id(result.task_id))
                writes.append(StreamWrite(task_stream(result.task_id), [rec], expected_next=1))
            return writes

        try:
            results: list[SubmitResult] = await self._change(self.queue._submit_plan(specs), trail)
        except ConflictError as exc:
            raise TaskSpecError(
                f"task {exc.stream!r} already has a trail in namespace {self.app!r} of the "
                "journal, but no queue row: use another task id; nothing queued",
                field="task_id",
            ) from None
        return results

    def _submitted(self, spec: TaskSpec) -> Any:
        return self.records(
            TaskEvent.SUBMITTED.value, {"task_id": spec.task_id, "spec": spec.to_json()}
        )

    async def _change(
        self,
        queue_part: Callable[[bool], Plan] | None,
        trail: Callable[[Any], Sequence[StreamWrite]],
    ) -> Any:
        """Change a task's queue row and append to its trail, in one transaction.

        ``queue_part(recovering)`` is the queue's plan; ``trail(its result)`` says what
        to append (every write with ``expected_next``). A transaction whose outcome was
        lost (a dropped connection) is recognised on the next attempt by the first
        record it appended, and not written twice.

        Raises:
            ConflictError: A trail moved on; nothing was written, row nor trail.
        """
        d = self.queue.dialect
        last: list[tuple[Any, PreparedBatch | None]] = []

        def plan(recovering: bool) -> Plan:
            if recovering and last:
                result, batch = last[-1]
                if batch is not None and (yield from self._landed(batch)):
                    return result
            result = None if queue_part is None else (yield from queue_part(recovering))
            writes = list(trail(result))
            batch = prepare_batch(self.app, writes, None) if writes else None
            last.append((result, batch))
            if batch is not None:
                yield from append_plan(d, batch)
            return result

        return await self.queue._run(plan)

    def _landed(self, batch: PreparedBatch) -> Plan:
        """Whether ``batch`` is in the journal: its first record is where it was to go."""
        first = batch.writes[0]
        assert first.expected_next is not None
        rows = yield from read_plan(
            self.queue.dialect, self.app, first.stream, first.expected_next, 1
        )
        return bool(rows) and rows[0].record.id == first.records[0].id

    # -- claiming ----------------------------------------------------------------------

    async def claim(self, worker: str, lease: float = 30.0) -> tuple[Claim, TaskState] | None:
        """Lease the next claimable task to ``worker`` and record it, in one transaction.

        The queue picks and locks the row (as
        [`TaskQueue.claim`][steadyloop.audit.TaskQueue.claim] does), the task's trail is
        read in the same transaction, and its ``claimed`` record (after a ``lease_lost``
        naming the worker it was taken over from, if any) is appended with
        ``expected_next`` before the commit. A crash anywhere leaves the lease and its
        record both written or neither; a commit whose reply was lost is
        found on the next attempt by its lease token.

        A trail the claim does not fit (empty, ended, or in a state no claim follows:
        only a store written by an older version holds one) gets no record: the claim
        is returned with that trail's state, for the claimer to hand to a person.

        Args:
            worker: The claimer.
            lease: Seconds the lease lasts without a heartbeat.

        Returns:
            The claim and the task's state after its records, or ``None`` when nothing
                is claimable now.

        Raises:
            ConflictError: The trail moved on under the claim (a worker whose lease
                expired wrote to it) on every attempt; nothing was written.
        """
        for _ in range(_CLAIM_RACES):
            try:
                got: tuple[Claim, TaskState] | None = await self.queue._run(
                    self._claim_plan(worker, lease)
                )
            except ConflictError as exc:
                # The lost worker's last write landed first: nothing was written; claim again.
                _log.info(
                    "worker %s: a claim's trail moved on under it (%s); claiming again", worker, exc
                )
                continue
            return got
        raise ConflictError(self.app, "task", 0, 0)  # pragma: no cover - a trail racing 5 claims

    def _claim_plan(self, worker: str, lease: float) -> Callable[[bool], Plan]:
        queue_part = self.queue._claim_plan(worker, lease)
        d = self.queue.dialect

        def plan(recovering: bool) -> Plan:
            claim: Claim | None = yield from queue_part(recovering)
            if claim is None:
                return None
            stream = task_stream(claim.task_id)
            rows = yield from read_plan(d, self.app, stream, 1, None)
            state = TaskState.fold(claim.task_id, rows)
            if state.status is TaskStatus.RUNNING and state.lease_token == claim.lease_token:
                return claim, state  # this claim, committed by an attempt whose reply was lost
            if state.status is None or state.status.terminal:
                return claim, state  # nothing a claim can follow
            events: list[tuple[TaskEvent, Mapping[str, JSONValue]]] = []
            if state.status is TaskStatus.RUNNING:
                events.append(
                    (
                        TaskEvent.LEASE_LOST,
                        {
                            "worker": state.owner,
                            "lease_token": state.lease_token,
                            "noticed_by": worker,
                        },
                    )
                )
            events.append(
                (
                    TaskEvent.CLAIMED,
                    {"worker": worker, "lease_token": claim.lease_token, "attempt": claim.attempt},
                )
            )
            try:
                after, write = self._transitions(state, events)
            except IllegalTransition as exc:
                _log.warning(
                    "task %r: a claim by worker %s does not fit its trail (%s); nothing is "
                    "recorded, the claimer hands the task to a person",
                    claim.task_id,
                    worker,
                    exc,
                )
                return claim, state
            yield from append_plan(d, prepare_batch(self.app, [write], None))
            return claim, after

        return plan

    # -- trails ------------------------------------------------------------------------

    async def trail(self, task_id: str) -> list[StoredRecord]:
        """The task's trail records, in order."""
        return await self.journal.read(self.app, task_stream(task_id))

    async def state(self, task_id: str) -> TaskState:
        """The fold of the task's trail (status ``None`` when the trail is empty)."""
        return TaskState.fold(task_id, await self.trail(task_id))

    async def record(
        self,
        state: TaskState,
        events: Sequence[tuple[TaskEvent, Mapping[str, JSONValue]]],
    ) -> TaskState:
        """Append transitions to a task's trail, atomically, if they fit its state.

        Args:
            state: The task's state as the caller knows it (its ``head`` is checked).
            events: The transitions, in order.

        Returns:
            The new state (``state`` itself is left unchanged).

        Raises:
            IllegalTransition: An event does not fit; nothing was written.
            ConflictError: The trail moved on since ``state`` was read (another worker
                wrote to it); nothing was written.
        """
        after, write = self._transitions(state, events)
        await self.journal.append(self.app, [write])
        return after

    def _transitions(
        self,
        state: TaskState,
        events: Sequence[tuple[TaskEvent, Mapping[str, JSONValue]]],
    ) -> tuple[TaskState, StreamWrite]:
        """The state after ``events`` and the trail write of them (IllegalTransition)."""
        after = copy.deepcopy(state)
        recs = []
        for event, payload in events:
            rec = self.records(event.value, dict(payload))
            after.apply(rec.kind, rec.payload)
            recs.append(rec)
        return after, StreamWrite(task_stream(state.task_id), recs, expected_next=state.head + 1)

    async def _record_with(
        self,
        state: TaskState,
        events: Sequence[tuple[TaskEvent, Mapping[str, JSONValue]]],
        queue_part: Callable[[bool], Plan],
    ) -> tuple[TaskState, Any]:
        """`record`, with the queue row's change ``queue_part``: one transaction."""
        after, write = self._transitions(state, events)
        result = await self._change(queue_part, lambda _: [write])
        return after, result

    async def conclude(
        self,
        state: TaskState,
        events: Sequence[tuple[TaskEvent, Mapping[str, JSONValue]]],
        lease_token: str,
        status: TaskStatus,
        *,
        delay: float = 0.0,
    ) -> TaskState:
        """Record a held task's last transitions and settle its row, in one transaction.

        Args:
            state: The task's state as the lease holder knows it.
            events: The transitions ending the claim (terminal, pushed back, released…).
            lease_token: The lease being given up.
            status: Where the row goes: ``queued`` or a terminal status.
            delay: Seconds before a re-queued task may be claimed again.

        Returns:
            The new state.

        Raises:
            IllegalTransition: An event does not fit; nothing was written.
            ConflictError: The trail moved on; nothing was written.
            LeaseLost: The lease is no longer this token's; nothing was written.
        """
        after, write = self._transitions(state, events)
        settle = self.queue._settle_plan(
            state.task_id,
            lease_token,
            status,
            round=after.round,
            audit_rounds=after.audit_rounds,
            detail=after.detail,
            delay=delay,
        )

        def plan(recovering: bool) -> Plan:
            if not (yield from settle(recovering)):
                raise LeaseLost(
                    f"task {state.task_id!r}: the lease {lease_token[:8]}… is no longer held"
                )
            return True

        await self._change(plan, lambda _: [write])
        return after

    # -- reading -----------------------------------------------------------------------

    async def get(self, task_id: str) -> QueuedTask:
        """The task's queue row.

        Raises:
            TaskNotFound: No such task.
        """
        return await self.queue.get(task_id)

    async def tasks(self, status: TaskStatus | None = None) -> list[QueuedTask]:
        """Every task (or those with ``status``), in submission order.

        Raises:
            CorruptionError: A row holds a status or spec this version cannot read.
        """
        return await self.queue.tasks(status)

    async def listing(self, status: TaskStatus | None = None) -> list[QueuedTask | UnreadableTask]:
        """Every task as `tasks` lists them, with a row this version cannot read in its place.

        See [`TaskQueue.listing`][steadyloop.audit.TaskQueue.listing].
        """
        return await self.queue.listing(status)

    async def counts(self) -> dict[TaskStatus, int]:
        """How many tasks are in each status."""
        return await self.queue.counts()

    async def block_doomed(self) -> list[str]:
        """Move queued tasks whose dependency ended without completing to ``blocked``.

        Returns:
            The tasks blocked now (dependents of dependents follow on the next call,
                or in the same call when they were already known).
        """
        blocked: list[str] = []
        for _ in range(100):
            doomed = await self.queue.doomed()
            if not doomed:
                break
            progressed = False
            for task_id, dep, dep_status in doomed:
                if task_id in blocked:
                    continue
                state = await self.state(task_id)
                if state.status is not TaskStatus.QUEUED:
                    continue  # claimed or ended meanwhile
                detail = f"dependency {dep!r} ended {dep_status} without completing"
                try:
                    _, moved = await self._record_with(
                        state,
                        [
                            (
                                TaskEvent.BLOCKED,
                                {
                                    "dependency": dep,
                                    "dependency_status": dep_status,
                                    "reason": detail,
                                },
                            )
                        ],
                        self._only_if(self.queue._block_plan(task_id, detail)),
                    )
                except (ConflictError, _Unmoved) as exc:
                    _log.debug("task %r: not blocked now, it changed meanwhile (%r)", task_id, exc)
                    continue
                if moved:
                    blocked.append(task_id)
                    progressed = True
            if not progressed:
                break
        return blocked

    # -- a person's decisions ----------------------------------------------------------

    @staticmethod
    def _only_if(inner: Callable[[bool], Plan]) -> Callable[[bool], Plan]:
        """A queue plan that must change the row, or the whole transaction is undone."""

        def plan(recovering: bool) -> Plan:
            if not (yield from inner(recovering)):
                raise _Unmoved
            return True

        return plan

    async def _current(self, task_id: str) -> TaskState:
        await self.queue.get(task_id)  # TaskNotFound for an unknown task
        state = await self.state(task_id)
        if state.status is None:
            raise CorruptionError(
                "the task has a queue row but an empty trail: a version before "
                "single-transaction task changes crashed between its two writes; resubmit "
                "the task under another id",
                location=f"{self.app}/{task_stream(task_id)}",
            )
        return state

    async def cancel(self, task_id: str, reason: str = "cancelled by a person") -> TaskStatus:
        """Cancel a task: a queued one at once, a running one through its worker.

        A queued task's trail gets ``cancelled``, its row follows, and its dependents
        are blocked. A running task is marked in the queue, and its worker sees the mark
        promptly (on PostgreSQL by a notification at once, elsewhere within the queue's
        poll interval; its heartbeat also raises [`TaskCancelled`][steadyloop.TaskCancelled]):
        it stops the round's run at its next write boundary (a hung tool after the
        grace period), kills a verify command, and records the task cancelled (a
        worker taking over an expired lease sees `Claim.cancel_requested` and does
        the same). A running task whose lease
        has expired (its worker is gone) is cancelled here and now, like a queued one.

        Returns:
            ``cancelled``, or ``running`` when the cancel was requested of its worker.

        Raises:
            TaskNotFound: No such task.
            IllegalTransition: The task already ended; nothing changed.
        """
        for _ in range(20):
            state = await self._current(task_id)
            if state.status is TaskStatus.RUNNING:
                status = await self.queue.cancel(task_id, reason)
                if status is not TaskStatus.RUNNING:
                    continue  # it was just pushed back, released or ended: look again
                if not await self.queue.lease_expired(task_id):
                    return TaskStatus.RUNNING  # its worker stops at the next write boundary
                # Its worker is gone and nobody holds the lease: end it here. A worker
                # taking it over now either loses this write or sees the request.
            elif state.status is not TaskStatus.QUEUED:
                raise IllegalTransition(
                    task_id,
                    str(state.status),
                    TaskEvent.CANCELLED.short,
                    "the task already ended; nothing to cancel",
                )
            try:
                # The trail and the row, in one transaction; the row is cancelled even if
                # a worker claimed it in between (its claim record is then refused, so it
                # stops; its settle finds the lease gone).
                await self._record_with(
                    state,
                    [(TaskEvent.CANCELLED, {"reason": reason})],
                    self.queue._cancel_plan(task_id, reason, recorded=True),
                )
            except ConflictError as exc:
                # A worker recorded its claim meanwhile: look again.
                _log.debug(
                    "task %r: its trail moved on under the cancel (%s); looking again", task_id, exc
                )
                continue
            await self.block_doomed()
            return TaskStatus.CANCELLED
        raise ConflictError(self.app, task_stream(task_id), 0, 0)  # pragma: no cover

    async def retry(self, task_id: str, note: str, *, blocked: bool = True) -> TaskState:
        """Send a task that went to a person (needs-human, goal-unmet) back to the queue.

        The trail keeps everything and the counters go on (rounds, audits, claims);
        the retry grants the task its audit rounds (and goal-mode round budget) again,
        counted from where it stopped, and ``note`` is the person's instruction for the
        next round (`TaskState.retry_note`). Its dependents that were blocked because
        it ended are queued again too (their trails say why), and theirs in turn; they
        run once it completes. A blocked task may also be retried by itself, unless
        ``blocked`` is false.

        Args:
            task_id: The task.
            note: What to do differently; the agent reads it.
            blocked: Whether a blocked task may be retried by itself. False (as
                ``steadyloop audit retry`` does) refuses it, naming the dependency to
                retry instead: retried alone, it would wait on a dependency that
                already ended.

        Returns:
            The task's state after the retry.

        Raises:
            TaskNotFound: No such task.
            IllegalTransition: The task is not needs-human, goal-unmet or (when allowed)
                blocked; nothing changed.
        """
        if not isinstance(note, str) or not note.strip():
            raise TaskSpecError("a retry needs a note saying what to do differently", field="note")
        state = await self._current(task_id)
        if not blocked and state.status is TaskStatus.BLOCKED:
            raise IllegalTransition(
                task_id,
                state.status.value,
                TaskEvent.RETRIED.short,
                await self._blocked_why(task_id),
            )
        after, _ = await self._record_with(
            state,
            [(TaskEvent.RETRIED, {"note": note})],
            self.queue._requeue_plan(task_id, f"retried: {note}"),
        )
        await self._reopen_dependents(task_id)
        return after

    async def _blocked_why(self, task_id: str) -> str:
        """Why a blocked task is not retried by itself: the dependencies to retry instead."""
        spec = (await self.queue.get(task_id)).spec
        ended = []
        for dep in spec.depends_on:
            try:
                status = (await self.queue.get(dep)).status
            except TaskNotFound:
                _log.debug("task %r: its dependency %r has no queue row", task_id, dep)
                continue
            if status is not TaskStatus.COMPLETED:
                ended.append(f"{dep!r} ({status.value})")
        which = ", ".join(ended) or "a dependency"
        return (
            f"it waits on {which}, which ended without completing; retry the dependency "
            "(a needs-human or goal-unmet one) and its blocked dependents are queued again "
            "with it"
        )

    async def _reopen_dependents(self, task_id: str) -> list[str]:
        """Queue again the blocked dependents of a retried task (and theirs), in order."""
        reopened: list[str] = []
        todo = [task_id]
        while todo:
            parent = todo.pop(0)
            for child in await self.queue.dependents(parent):
                state = await self.state(child)
                if state.status is not TaskStatus.BLOCKED or child in reopened:
                    continue
                note = f"dependency {parent!r} was retried"
                try:
                    await self._record_with(
                        state,
                        [(TaskEvent.RETRIED, {"note": note})],
                        self._only_if(self.queue._requeue_plan(child, note)),
                    )
                except (ConflictError, _Unmoved) as exc:
                    _log.debug("task %r: not queued again, it changed meanwhile (%r)", child, exc)
                    continue
                reopened.append(child)
                todo.append(child)
        return reopened


class _Unmoved(Exception):
    """A queue row was not where its trail said (a change raced): undo the transaction."""
