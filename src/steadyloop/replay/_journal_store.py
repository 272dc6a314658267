"""Steadyloop's own session service on a journal, as a store under test.

[`JournalStore`][steadyloop.replay.JournalStore] implements
[`SessionStore`][steadyloop.replay.SessionStore] on
[`SessionService`][steadyloop.SessionService] over any journal a
[`Backend`][steadyloop.replay.Backend] opens, and offers what only Steadyloop has: the
agent loop, summaries, memory entries as stored, and injected crashes, torn writes and
dropped connections (through the journal it wraps).

Its client keeps the session it last wrote (the service returns it), so appending to a
long session costs the same at event 10,000 as at event 10; anything else the harness
does to the journal (a loop, a summary, a restart) drops that cache.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any, Protocol

from steadyloop._errors import BackendUnavailable, SessionError, SessionNotFound, UnknownBackend
from steadyloop.journal import (
    AppendResult,
    Files,
    ForwardingJournal,
    Journal,
    JSONLJournal,
    PreparedBatch,
    namespace_filename,
)
from steadyloop.records import RecordFactory
from steadyloop.replay._backends import EMBEDDED_BACKENDS, Backend, temporary_backend
from steadyloop.replay._store import (
    Capability,
    EventEdit,
    SessionRef,
    StoredSession,
    StoreEvent,
    StoreSpec,
)
from steadyloop.sessions import SCOPES, Event, Session, SessionService, TextPart, part_from_dict

__all__ = ["JOURNAL_CAPABILITIES", "FailurePlan", "JournalStore", "open_store"]

JOURNAL_CAPABILITIES: frozenset[Capability] = frozenset(Capability.__members__.values()) - {
    Capability.CHECKPOINTER
}
"""Every capability but the checkpointer ops: Steadyloop's session service is what the
case language describes; a checkpoint saver is another framework's kind of store."""


class FailurePlan(Protocol):
    """A failure to carry out on the next operation's writes (a case's ``inject_failure``)."""

    @property
    def kind(self) -> str:
        """``crash_after_write``, ``torn_write``, ``dropped_connection``, …."""
        ...

    @property
    def after(self) -> int:
        """crash_after_write: the writes that land before the crash."""
        ...

    @property
    def write(self) -> int:
        """dropped_connection, torn_write: which write fails."""
        ...

    @property
    def when(self) -> str:
        """dropped_connection: ``before`` or ``after`` the write lands."""
        ...

    @property
    def fraction(self) -> float:
        """torn_write: the share of the write's bytes that land."""
        ...


class Crash(BaseException):
    """The simulated process died. A `BaseException`, so nothing swallows it."""


class InjectedDrop(BackendUnavailable):
    """A connection drop the case asked for; any other `BackendUnavailable` is real."""


class TearingFiles(Files):
    """A file layer that, once armed, writes only a head of the next write and dies."""

    def __init__(self) -> None:
        self._fraction: float | None = None

    def arm(self, fraction: float) -> None:
        """Cut the next write after `fraction` of its bytes, then die."""
        self._fraction = fraction

    def write(self, fd: int, data: bytes) -> None:
        """Write, or write a head of `data` and die when armed."""
        fraction, self._fraction = self._fraction, None
        if fraction is None:
            super().write(fd, data)
            return
        cut = min(len(data) - 1, max(1, int(len(data) * fraction)))
        super().write(fd, data[:cut])
        raise Crash(f"torn write: {cut} of {len(data)} bytes landed")


class Injector(ForwardingJournal):
    """Carries out the failure armed for the current operation."""

    def __init__(self, inner: Journal, files: TearingFiles | None) -> None:
        super().__init__(inner)
        self.files = files
        self.plan: FailurePlan | None = None
        self.count = 0
        self.effect = ""

    def arm(self, plan: FailurePlan | None) -> None:
        """Arm `plan` for the next operation (`None` disarms)."""
        self.plan = plan
        self.count = 0
        self.effect = "not triggered"

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        plan = self.plan
        if plan is None:
            return await super()._append(batch)
        self.count += 1
        n = self.count
        if plan.kind == "crash_after_write":
            if plan.after == 0:
                self.effect = "crashed before the first write"
                raise Crash(self.effect)
            result = await super()._append(batch)
            if n == plan.after:
                self.effect = f"crashed after write {n}"
                raise Crash(self.effect)
            return result
        if plan.kind == "torn_write" and n == plan.write:
            if self.files is None:
                self.effect = f"write {n} never landed (not a file backend: no torn bytes)"
                raise Crash(self.effect)
            self.effect = f"write {n} torn mid-way"
            self.files.arm(plan.fraction)
            await super()._append(batch)
            raise Crash(self.effect)  # pragma: no cover - the file layer dies first
        if plan.kind == "dropped_connection" and n == plan.write:
            if plan.when == "before":
                self.effect = f"connection dropped before write {n}; retried"
                raise InjectedDrop("replay: connection dropped before the write")
            await super()._append(batch)
            self.effect = f"connection dropped after write {n} landed; retried"
            raise InjectedDrop("replay: connection dropped after the write")
        return await super()._append(batch)


class JournalStore:
    """Steadyloop's session service on one journal backend, as a store under test.

    Attributes:
        name: The backend's name (`sqlite`, `postgres`, …).
        framework: `"steadyloop"`.
        backend: The backend's name.
        capabilities: Every capability.
        records: The record factory (ids and clock) services use; the harness sets
            its recording one before each case.
    """

    framework = "steadyloop"
    capabilities = JOURNAL_CAPABILITIES

    def __init__(self, backend: Backend, records: RecordFactory | None = None) -> None:
        self.source = backend
        self.name: str = backend.name
        self.backend: str = backend.name
        self.records = records or RecordFactory()
        self._journal: Injector | None = None
        self._services: dict[str, SessionService] = {}
        self._latest: dict[SessionRef, Session] = {}
        self._handed: dict[tuple[SessionRef, str], Event] = {}
        self._removed: set[str] = set()

    # -- what only Steadyloop has --------------------------------------------------

    @property
    def journal(self) -> Injector:
        """The open journal (with the failure injector around it)."""
        if self._journal is None:
            raise RuntimeError(f"store {self.name!r} is not open")
        return self._journal

    def service(self, app: str) -> SessionService:
        """The session service of `app` on the open journal."""
        service = self._services.get(app)
        if service is None:
            service = self._services[app] = SessionService(self.journal, app, records=self.records)
        return service

    def forget(self) -> None:
        """Drop the cached sessions: something other than `append_event` wrote."""
        self._latest.clear()

    async def session(self, ref: SessionRef) -> Session:
        """Read a session through the service (and cache it for the next append)."""
        session = await self.service(ref.app).get_session(ref.user, ref.session_id)
        self._latest[ref] = session
        return session

    # -- the protocol ----------------------------------------------------------------

    async def open(self) -> None:
        """Open the journal (on a tearing file layer for file backends)."""
        open_files = self.source.open_files
        files = TearingFiles() if open_files is not None else None
        if open_files is not None and files is not None:
            inner = await open_files(files)
        else:
            inner = await self.source.open()
        self._journal = Injector(inner, files)
        self._services.clear()
        self._latest.clear()

    async def close(self) -> None:
        """Close the journal; a process that died closes nothing, so errors are dropped."""
        journal, self._journal = self._journal, None
        self._services.clear()
        self._latest.clear()
        self._handed.clear()
        if journal is not None:
            with contextlib.suppress(Exception):
                await journal.close()
            self._remove_locks(journal.inner)

    def _remove_locks(self, journal: Journal) -> None:
        """Remove the lock files of the JSONL namespaces this store deleted.

        The JSONL journal locks a namespace through a `.lock` file beside it and keeps
        that file when the namespace is deleted; a case run must leave nothing behind,
        so once the journal is closed (its locks released) the file goes too — unless
        the namespace was written again meanwhile.
        """
        removed, self._removed = self._removed, set()
        if not isinstance(journal, JSONLJournal):
            return
        for app in removed:
            base = os.path.join(journal.directory, namespace_filename(app))
            if not os.path.exists(base):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(base[: -len(".jsonl")] + ".lock")

    async def dispose(self) -> None:
        """Remove a store the harness made (a temporary file or named memory store)."""
        if self.source.dispose is not None:
            await self.source.dispose()

    async def create_session(
        self, app: str, user: str, session_id: str | None, state: Mapping[str, Any]
    ) -> str:
        """Create a session; a generated id comes from the harness's id source."""
        session = await self.service(app).create_session(user, session_id, dict(state))
        self._latest[SessionRef(app, user, session.id)] = session
        return session.id

    def _native(self, event: StoreEvent) -> Event:
        return Event(
            id=event.id,
            author=event.author,
            parts=[part_from_dict(p, f"part {i}") for i, p in enumerate(event.parts)],
            state_delta=dict(event.state_delta),
            time=event.time,
            invocation_id=event.invocation_id,
        )

    async def _base(self, ref: SessionRef) -> Session:
        session = self._latest.get(ref)
        if session is None:
            session = await self.session(ref)
        return session

    async def append_event(
        self, ref: SessionRef, event: StoreEvent, *, idempotency_key: str | None = None
    ) -> None:
        """Append through the service, on the session it returned last time.

        When the append fails, the session it was made on stays cached, so a retry
        under the same idempotency key submits the very same batch.
        """
        session = await self._base(ref)
        service = self.service(ref.app)
        native = self._handed[(ref, event.id)] = self._native(event)
        after = await service.append_event(session, native, idempotency_key=idempotency_key)
        self._latest[ref] = after

    async def submit_twice(self, ref: SessionRef, event: StoreEvent, idempotency_key: str) -> None:
        """Submit one append twice under one idempotency key, as a retrying client would."""
        session = await self._base(ref)
        service = self.service(ref.app)
        native = self._native(event)
        await service.append_event(session, native, idempotency_key=idempotency_key)
        self._latest[ref] = await service.append_event(
            session, native, idempotency_key=idempotency_key
        )

    async def edit_appended(self, ref: SessionRef, event_id: str, edit: EventEdit) -> None:
        """Edit the [`Event`][steadyloop.Event] object last appended, as a caller could.

        Its state delta is a plain dict, so new keys land in the object (and never
        in the journal, which encoded the event when it was appended); its parts are
        frozen, so a new text raises `FrozenInstanceError`, as it would for a caller.
        """
        native = self._handed.get((ref, event_id))
        if native is None:
            raise SessionError(
                f"no event object {event_id!r} to edit: this client did not append it "
                "(the store restarted since, or never had it)"
            )
        native.state_delta.update(edit.state_delta)  # type: ignore[attr-defined]
        if edit.text is not None:
            for part in native.parts:
                if isinstance(part, TextPart):
                    part.text = edit.text  # type: ignore[misc]
                    break

    async def get_session(self, ref: SessionRef) -> StoredSession | None:
        """Reload a session: events, historical events, summaries, state per scope."""
        try:
            session = await self.service(ref.app).get_session(ref.user, ref.session_id)
        except SessionNotFound:
            return None
        return StoredSession(
            user_id=session.user_id,
            session_id=session.id,
            events=[e.to_dict() for e in session.events],
            historical_events=[e.to_dict() for e in session.historical_events],
            state={scope: session.scope_state(scope) for scope in SCOPES},
            summaries=[s.to_dict() for s in session.summaries],
        )

    async def list_sessions(self, app: str, user: str) -> list[str]:
        """The user's session ids."""
        return await self.service(app).list_sessions(user)

    async def delete_session(self, ref: SessionRef) -> None:
        """Delete the session's stream."""
        self._latest.pop(ref, None)
        await self.service(ref.app).delete_session(ref.user, ref.session_id)

    async def add_session_to_memory(self, ref: SessionRef) -> None:
        """Store the session's text into its user's memory."""
        await self.service(ref.app).store_memory(await self.session(ref))

    async def search_memory(
        self, app: str, user: str, query: str, limit: int
    ) -> list[dict[str, Any]]:
        """Search the user's memory."""
        hits = await self.service(app).search_memory(user, query, limit)
        return [h.to_dict() for h in hits]

    async def cleanup(self, app: str) -> None:
        """Delete the app's namespace, and nothing else."""
        self._latest.clear()
        await self.journal.delete_namespace(app)
        self._removed.add(app)


def open_store(spec: StoreSpec) -> JournalStore:
    """Open a Steadyloop store from a `steadyloop+JOURNAL_URL` selection.

    `steadyloop+sqlite:///F` is the same store as `sqlite:///F`; `steadyloop+sqlite`
    (no location) is a fresh temporary one, as the plain name `sqlite` is.
    """
    if spec.location is None:
        if spec.backend not in EMBEDDED_BACKENDS:
            raise UnknownBackend(
                f"store {spec.redacted!r}: a {spec.backend} store needs its server's URL, "
                f"for example steadyloop+{spec.backend}://HOST/…"
            )
        return JournalStore(temporary_backend(spec.backend, spec.workdir))
    return JournalStore(Backend.from_url(spec.location))
