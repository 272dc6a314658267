"""The task board: the queue, plus each task's trail in the journal.

The trail (stream ``["task", task_id]`` in the board's app namespace) is the record
of what happened to a task; the queue is the index workers pick work from. Board and
queue are scoped to one app: a board sees, claims and writes only its app's tasks, and
the same task id in another app is another task. Every
change is written to the trail first, with ``expected_next``, and only then to the
queue; so the trail is never behind, and two writers can never interleave
transitions (the second one's write is refused). A worker that finds the queue
behind the trail (it crashed between the two writes) brings the queue up to date.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping, Sequence
from typing import Any

from steadyloop import _names
from steadyloop._errors import (
    ConflictError,
    IllegalTransition,
    StoreNotFound,
    TaskNotFound,
    TaskSpecError,
    UnknownBackend,
)
from steadyloop.audit._queue import (
    DEFAULT_APP,
    QueuedTask,
    SubmitResult,
    TaskQueue,
    UnreadableTask,
    open_queue,
    split_queue_url,
)
from steadyloop.audit._tasks import TaskEvent, TaskSpec, TaskState, TaskStatus, task_stream
from steadyloop.journal import URL, Journal, StreamWrite, open_journal
from steadyloop.journal._sql import PlanJournal
from steadyloop.records import Clock, IdSource, JSONValue, RecordFactory, StoredRecord

__all__ = ["DEFAULT_APP", "TaskBoard"]


class TaskBoard:
    """Tasks: a queue to pick them from and a trail per task in the journal.

    Args:
        queue: The queue (scoped to the board's app).
        journal: The journal holding trails (and the tasks' runs).
        app: The journal namespace; the queue's app by default, and it must be that.
        records: Clock and id source for trail records.
        owned: Close the queue and the journal when the board is closed.
    """

    def __init__(
        self,
        queue: TaskQueue,
        journal: Journal,
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
        self.queue = queue
        self.journal = journal
        self.app = queue.app
        self.records = records or RecordFactory()
        self._owned = owned

    @classmethod
    async def open(
        cls,
        url: str | URL,
        *,
        journal_url: str | None = None,
        app: str = DEFAULT_APP,
        records: RecordFactory | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        create: bool = True,
        poll: float | None = None,
    ) -> TaskBoard:
        """Open a board whose queue (and, by default, journal) live at ``url``.

        When the queue and the journal share a URL they share one connection (one
        SQLite thread, one server pool): the queue's tables sit next to the journal's.

        Args:
            url: ``sqlite:FILE``, ``postgresql://…`` or ``mysql://…``: the queue, and the
                journal too unless ``journal_url`` names another.
            journal_url: Where the trails and runs go, if not at ``url``.
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
            UnknownBackend: A URL names no supported store.
            BackendUnavailable: A store cannot be opened, or (``create=False``) none is
                there.
        """
        problem = _names.app_problem(app)
        if problem is not None:
            raise TaskSpecError(problem, field="app")
        options: dict[str, Any] = {"app": app, "clock": clock, "ids": ids}
        if poll is not None:
            options["poll"] = poll
        try:
            return await cls._open(url, journal_url, app, records, create, options)
        except StoreNotFound as exc:
            raise StoreNotFound(f"no task store exists here: {exc}") from None

    @classmethod
    async def _open(  # noqa: PLR0917 - private, called once
        cls,
        url: str | URL,
        journal_url: str | None,
        app: str,
        records: RecordFactory | None,
        create: bool,
        options: dict[str, Any],
    ) -> TaskBoard:
        location, own = split_queue_url(url)  # the one parse of the board's URL
        given = url if isinstance(url, str) else url.text
        if journal_url is None or journal_url == given:
            journal = await open_journal(location, create=create)
            try:
                if not isinstance(journal, PlanJournal):  # pragma: no cover - SQL schemes only
                    raise UnknownBackend(
                        f"the task queue runs on sqlite, postgresql or mysql, not {location!r}"
                    )
                queue = await open_queue(
                    location, create=create, journal=journal, **{**own, **options}
                )
            except BaseException:
                await journal.close()
                raise
            return cls(queue, journal, app=app, records=records, owned=True)
        queue = await open_queue(location, create=create, **{**own, **options})
        try:
            journal = await open_journal(journal_url, create=create)
        except BaseException:
            await queue.close()
            raise
        return cls(queue, journal, app=app, records=records, owned=True)

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
        """Queue tasks (all or none), then write each new task's ``submitted`` record.

        The order cannot leave an orphan: every id is checked by the one id rule of
        `steadyloop._names` when its [`TaskSpec`][steadyloop.audit.TaskSpec] is built, so its trail
        stream is nameable before the queue row is written; then the queue row, then
        the trail. A crash between the two leaves a queued task with an empty trail,
        which is repaired by the next writer
        ([`ensure_submitted`][steadyloop.audit.TaskBoard.ensure_submitted], called by the
        claiming worker, by [`block_doomed`][steadyloop.audit.TaskBoard.block_doomed],
        [`cancel`][steadyloop.audit.TaskBoard.cancel] and a resubmission).

        Raises:
            TaskSpecError: A spec is invalid or clashes with the queue; nothing queued.
        """
        for spec in specs:
            if isinstance(spec, TaskSpec) and spec.task_id is not None:
                task_stream(spec.task_id)  # nameable, or refused before anything is written
        results = await self.queue.submit_many(specs)
        fresh: list[tuple[str, TaskSpec]] = []
        for spec, result in zip(specs, results, strict=True):
            if not result.duplicate:
                fresh.append((result.task_id, spec.with_id(result.task_id)))
        if fresh:
            writes = [
                StreamWrite(task_stream(tid), [self._submitted(spec)], expected_next=1)
                for tid, spec in fresh
            ]
            try:
                await self.journal.append(self.app, writes)
            except ConflictError:
                for tid, spec in fresh:
                    await self.ensure_submitted(tid, spec)
        for result in results:
            if result.duplicate:
                row = await self.queue.get(result.task_id)
                await self.ensure_submitted(result.task_id, row.spec)
        return results

    def _submitted(self, spec: TaskSpec) -> Any:
        return self.records(
            TaskEvent.SUBMITTED.value, {"task_id": spec.task_id, "spec": spec.to_json()}
        )

    async def ensure_submitted(self, task_id: str, spec: TaskSpec) -> None:
        """Write the ``submitted`` record if the trail is empty (a crash came between)."""
        stream = task_stream(task_id)
        if await self.journal.head(self.app, stream) == 0:
            with contextlib.suppress(ConflictError):  # someone else just wrote it
                await self.journal.append(
                    self.app, [StreamWrite(stream, [self._submitted(spec)], expected_next=1)]
                )

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
        after = copy.deepcopy(state)
        recs = []
        for event, payload in events:
            rec = self.records(event.value, dict(payload))
            after.apply(rec.kind, rec.payload)
            recs.append(rec)
        await self.journal.append(
            self.app,
            [StreamWrite(task_stream(state.task_id), recs, expected_next=state.head + 1)],
        )
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
                if state.status is None:
                    row = await self.queue.get(task_id)
                    await self.ensure_submitted(task_id, row.spec)
                    state = await self.state(task_id)
                detail = f"dependency {dep!r} ended {dep_status} without completing"
                if state.status is TaskStatus.QUEUED:
                    try:
                        await self.record(
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
                        )
                    except ConflictError:
                        continue
                elif state.status is not TaskStatus.BLOCKED:
                    continue
                if await self.queue.block(task_id, detail):
                    blocked.append(task_id)
                    progressed = True
            if not progressed:
                break
        return blocked

    # -- a person's decisions ----------------------------------------------------------

    async def _current(self, task_id: str) -> TaskState:
        row = await self.queue.get(task_id)  # TaskNotFound for an unknown task
        state = await self.state(task_id)
        if state.status is None:
            await self.ensure_submitted(task_id, row.spec)
            state = await self.state(task_id)
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
                await self.record(state, [(TaskEvent.CANCELLED, {"reason": reason})])
            except ConflictError:
                continue  # a worker claimed it meanwhile: look again
            # The trail says cancelled; the row follows, even if a worker claimed it in
            # between (its claim record was refused, so it stops; its settle finds the
            # lease gone).
            await self.queue.cancel(task_id, reason, recorded=True)
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
        after = await self.record(state, [(TaskEvent.RETRIED, {"note": note})])
        await self.queue.requeue(task_id, f"retried: {note}")
        await self._reopen_dependents(task_id)
        return after

    async def _blocked_why(self, task_id: str) -> str:
        """Why a blocked task is not retried by itself: the dependencies to retry instead."""
        spec = (await self.queue.get(task_id)).spec
        ended = []
        for dep in spec.depends_on:
            with contextlib.suppress(TaskNotFound):
                status = (await self.queue.get(dep)).status
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
                    await self.record(state, [(TaskEvent.RETRIED, {"note": note})])
                except ConflictError:
                    continue
                await self.queue.requeue(child, note)
                reopened.append(child)
                todo.append(child)
        return reopened
