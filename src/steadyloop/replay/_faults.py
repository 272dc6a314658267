"""A planted faulty store: any store under test, with one known fault, to test the harness.

An adapter that mistranslates could hide a framework's divergence, and a harness that
misses a kind of difference would never notice. [`FaultyStore`][steadyloop.replay.FaultyStore]
wraps any [`SessionStore`][steadyloop.replay.SessionStore] and plants one fault of
[`FAULTS`][steadyloop.replay.FAULTS] in what passes through it; replaying the hostile pack
on the wrapped store next to an honest one must report a difference for every fault.

Examples:
    ```python
    from steadyloop.replay import FaultyStore, JournalStore, load_cases, pack_cases, replay
    from steadyloop.replay import temporary_backend

    cases = load_cases([pack_cases("hostile")])
    honest = "sqlite"
    faulty = FaultyStore(JournalStore(temporary_backend("memory", workdir)), "drop_event")
    report = await replay(cases, [honest, faulty])
    assert not report.ok  # the dropped event is found
    ```
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from steadyloop.replay._store import (
    Capability,
    EventEdit,
    SessionRef,
    SessionStore,
    StoredSession,
    StoreEvent,
)

__all__ = ["FAULTS", "FaultyStore"]

FAULTS: dict[str, str] = {
    "drop_event": "the second event appended to each session is acknowledged but not stored",
    "reorder_events": "a session reads back with its last two events swapped",
    "shift_time": "event times read back one hour late (a local UTC offset applied twice)",
    "change_type": "integer state values read back as floats (1 becomes 1.0)",
    "merge_sessions": "session ids that differ only by letter case are one session",
    "leak_list": "listing a user's sessions also lists every other user's",
    "lose_user_scope": "user: state reads back empty",
    "truncate_text": "text parts are cut to 65,535 characters (a TEXT column)",
    "keep_temp": "temp: keys of appended events are stored and read back",
    "cut_at_nul": "strings are cut at the first NUL (a C string)",
    "trim_ids": "trailing spaces are trimmed from session ids, merging 's1 ' into 's1'",
}
"""Every fault [`FaultyStore`][steadyloop.replay.FaultyStore] can plant, with what it does."""

_ONLY_THROUGH_JOURNAL = frozenset(
    {
        Capability.MEMORY_ENTRIES,
        Capability.SUMMARIES,
        Capability.LOOP,
        Capability.CRASH_INJECTION,
    }
)
"""Steadyloop capabilities the harness reaches through the journal, not the protocol."""


def _walk_strings(value: Any, fn: Any) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_walk_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {fn(k): _walk_strings(v, fn) for k, v in value.items()}
    return value


def _floats(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, list):
        return [_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    return value


class FaultyStore:
    """A store under test that passes everything to another, but for one planted fault.

    Args:
        inner: The honest store.
        fault: One of [`FAULTS`][steadyloop.replay.FAULTS].
        name: Its name in reports (`<inner name>+<fault>` by default).

    Attributes:
        name: Its name in reports.
        framework: The inner store's framework, so it is compared with that
            framework's reference.
        backend: `faulty`.
        capabilities: The inner store's, but for those the harness reaches through
            Steadyloop's journal rather than the protocol.

    Raises:
        ValueError: The fault is not one of [`FAULTS`][steadyloop.replay.FAULTS].
    """

    def __init__(self, inner: SessionStore, fault: str, name: str | None = None) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; the faults are: {', '.join(FAULTS)}")
        self.inner = inner
        self.fault = fault
        self.name = name or f"{inner.name}+{fault}"
        self.framework = inner.framework
        self.backend = "faulty"
        self.capabilities = frozenset(inner.capabilities) - _ONLY_THROUGH_JOURNAL
        self._appended: dict[SessionRef, int] = {}
        self._sessions: dict[str, set[tuple[str, str]]] = {}
        self._temp: dict[SessionRef, dict[str, Any]] = {}

    def _id(self, session_id: str) -> str:
        if self.fault == "merge_sessions":
            return session_id.casefold()
        if self.fault == "trim_ids":
            return session_id.rstrip(" ")
        return session_id

    def _ref(self, ref: SessionRef) -> SessionRef:
        return dataclasses.replace(ref, session_id=self._id(ref.session_id))

    async def open(self) -> None:
        """Open the inner store."""
        await self.inner.open()

    async def close(self) -> None:
        """Close the inner store."""
        await self.inner.close()

    async def dispose(self) -> None:
        """Dispose of the inner store."""
        await self.inner.dispose()

    async def create_session(
        self, app: str, user: str, session_id: str | None, state: Mapping[str, Any]
    ) -> str:
        """Create, unless a merged id already exists (then answer with it, silently)."""
        known = self._sessions.setdefault(app, set())
        if session_id is not None:
            folded = self._id(session_id)
            if folded != session_id and (user, folded) in known:
                return session_id
            session_id = folded
        used = await self.inner.create_session(app, user, session_id, state)
        known.add((user, used))
        return used

    async def append_event(
        self, ref: SessionRef, event: StoreEvent, *, idempotency_key: str | None = None
    ) -> None:
        """Append, or drop, truncate, or remember the temp: keys, as the fault says."""
        ref = self._ref(ref)
        count = self._appended[ref] = self._appended.get(ref, 0) + 1
        if self.fault == "drop_event" and count == 2:
            return
        if self.fault == "truncate_text":
            parts = tuple(
                {**p, "text": p["text"][:65_535]} if p.get("type") == "text" else p
                for p in event.parts
            )
            event = dataclasses.replace(event, parts=parts)
        if self.fault == "cut_at_nul":
            event = dataclasses.replace(
                event,
                parts=tuple(_walk_strings(dict(p), _cut) for p in event.parts),
                state_delta=_walk_strings(dict(event.state_delta), _cut),
            )
        if self.fault == "keep_temp":
            temp = {k: v for k, v in event.state_delta.items() if k.startswith("temp:")}
            self._temp.setdefault(ref, {}).update(copy.deepcopy(temp))
        await self.inner.append_event(ref, event, idempotency_key=idempotency_key)

    async def edit_appended(self, ref: SessionRef, event_id: str, edit: EventEdit) -> None:
        """Edit through the inner store."""
        await self.inner.edit_appended(self._ref(ref), event_id, edit)

    async def get_session(self, ref: SessionRef) -> StoredSession | None:
        """Read back, with the fault applied to what is read."""
        stored = await self.inner.get_session(self._ref(ref))
        if stored is None:
            return None
        stored = copy.deepcopy(stored)
        if self.fault == "reorder_events" and len(stored.events) >= 2:
            stored.events[-1], stored.events[-2] = stored.events[-2], stored.events[-1]
        elif self.fault == "shift_time":
            for event in stored.events:
                if isinstance(event.get("time"), int):
                    event["time"] += 3_600_000_000
        elif self.fault == "change_type":
            stored.state = {scope: _floats(values) for scope, values in stored.state.items()}
        elif self.fault == "lose_user_scope":
            stored.state["user"] = {}
        elif self.fault == "keep_temp":
            stored.state["temp"] = {**stored.state.get("temp", {}), **self._temp.get(ref, {})}
        elif self.fault == "cut_at_nul":
            stored.state = _walk_strings(stored.state, _cut)
        return stored

    async def list_sessions(self, app: str, user: str) -> list[str]:
        """List, leaking other users' sessions when the fault says so."""
        ids = await self.inner.list_sessions(app, user)
        if self.fault == "leak_list":
            ids += [sid for u, sid in self._sessions.get(app, set()) if u != user]
        return ids

    async def delete_session(self, ref: SessionRef) -> None:
        """Delete through the inner store."""
        await self.inner.delete_session(self._ref(ref))

    async def add_session_to_memory(self, ref: SessionRef) -> None:
        """Add to memory through the inner store."""
        await self.inner.add_session_to_memory(self._ref(ref))

    async def search_memory(
        self, app: str, user: str, query: str, limit: int
    ) -> list[dict[str, Any]]:
        """Search through the inner store."""
        return await self.inner.search_memory(app, user, query, limit)

    async def cleanup(self, app: str) -> None:
        """Clean up through the inner store, and forget the app."""
        self._sessions.pop(app, None)
        self._appended = {r: n for r, n in self._appended.items() if r.app != app}
        self._temp = {r: t for r, t in self._temp.items() if r.app != app}
        await self.inner.cleanup(app)


def _cut(text: str) -> str:
    return text.split("\x00", 1)[0]
