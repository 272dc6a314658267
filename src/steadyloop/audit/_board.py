"""The task board: the queue, plus each task's trail in the journal.

The trail (stream ``["task", task_id]`` in the board's app namespace) is the record
of what happened to a task; the queue is the index workers pick work from. Every
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

from steadyloop._errors import ConflictError
from steadyloop.audit._queue import QueuedTask, SubmitResult, TaskQueue, open_queue
from steadyloop.audit._tasks import TaskEvent, TaskSpec, TaskState, TaskStatus, task_stream
from steadyloop.journal import Journal, StreamWrite, open_journal
from steadyloop.records import Clock, IdSource, JSONValue, RecordFactory, StoredRecord

__all__ = ["DEFAULT_APP", "TaskBoard"]

DEFAULT_APP = "audit"
"""The journal namespace of tasks' trails and runs, unless another is named."""


class TaskBoard:
    """Tasks: a queue to pick them from and a trail per task in the journal.

    Args:
        queue: The queue.
        journal: The journal holding trails (and the tasks' runs).
        app: The journal namespace.
        records: Clock and id source for trail records.
        owned: Close the queue and the journal when the board is closed.
    """

    def __init__(
        self,
        queue: TaskQueue,
        journal: Journal,
        *,
        app: str = DEFAULT_APP,
        records: RecordFactory | None = None,
        owned: bool = False,
    ) -> None:
        self.queue = queue
        self.journal = journal
        self.app = app
        self.records = records or RecordFactory()
        self._owned = owned

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        journal_url: str | None = None,
        app: str = DEFAULT_APP,
        records: RecordFactory | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
    ) -> TaskBoard:
        """Open a board whose queue (and, by default, journal) live at ``url``.

        Args:
            url: ``sqlite:FILE`` or ``postgresql://…``: the queue, and the journal too
                unless ``journal_url`` names another.
            journal_url: Where the trails and runs go, if not at ``url``.
            app: The journal namespace.
            records: Clock and id source for trail records.
            clock: The queue's clock (leases).
            ids: Where generated task ids come from.

        Raises:
            UnknownBackend: A URL names no supported store.
            BackendUnavailable: A store cannot be opened.
        """
        queue = await open_queue(url, clock=clock, ids=ids)
        try:
            journal = await open_journal(journal_url or url)
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

        Raises:
            TaskSpecError: A spec is invalid or clashes with the queue; nothing queued.
        """
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
        """Every task (or those with ``status``), in submission order."""
        return await self.queue.tasks(status)

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
