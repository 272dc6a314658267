"""A small, correct store under test kept in a dict: the reference adapter of the protocol docs."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from steadyloop.replay import (
    Capability,
    EventEdit,
    SessionRef,
    StoredSession,
    StoreEvent,
    StoreSpec,
    scope_of,
)

ALL = frozenset(Capability) - {
    Capability.MEMORY_ENTRIES,
    Capability.SUMMARIES,
    Capability.LOOP,
    Capability.CRASH_INJECTION,
    Capability.IDEMPOTENCY,
    Capability.CHECKPOINTER,
}


class DictStore:
    """Sessions in a dict that outlives close/open, as an in-memory framework store would."""

    def __init__(
        self,
        name: str = "dict+memory",
        capabilities: frozenset[Capability] = ALL,
        backend: str = "memory",
    ) -> None:
        self.name = name
        self.framework = name.split("+", 1)[0]
        self.backend = backend
        self.capabilities = capabilities
        self.sessions: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.shared: dict[tuple[str, str], dict[str, Any]] = {}
        self.memory: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.opened = 0
        self.counter = 0

    async def open(self) -> None:
        self.opened += 1

    async def close(self) -> None:
        pass

    async def dispose(self) -> None:
        self.sessions.clear()

    def _split(
        self, app: str, user: str, values: Mapping[str, Any], session: dict[str, Any]
    ) -> None:
        for key, value in values.items():
            scope = scope_of(key)
            if scope == "session":
                session["state"][key] = copy.deepcopy(value)
            elif scope == "user":
                self.shared.setdefault((app, "user:" + user), {})[key] = copy.deepcopy(value)
            elif scope == "app":
                self.shared.setdefault((app, "app"), {})[key] = copy.deepcopy(value)

    async def create_session(
        self, app: str, user: str, session_id: str | None, state: Mapping[str, Any]
    ) -> str:
        if session_id is None:
            self.counter += 1
            session_id = f"dict-{self.counter}"
        key = (app, user, session_id)
        if key in self.sessions:
            raise KeyError(f"session {session_id!r} exists")
        self.sessions[key] = {"events": [], "state": {}}
        self._split(app, user, state, self.sessions[key])
        return session_id

    async def append_event(
        self, ref: SessionRef, event: StoreEvent, *, idempotency_key: str | None = None
    ) -> None:
        session = self.sessions[(ref.app, ref.user, ref.session_id)]
        stored = event.to_dict()
        stored["state_delta"] = {
            k: v for k, v in stored["state_delta"].items() if scope_of(k) != "temp"
        }
        session["events"].append(stored)
        self._split(ref.app, ref.user, stored["state_delta"], session)

    async def edit_appended(self, ref: SessionRef, event_id: str, edit: EventEdit) -> None:
        pass  # the store kept a copy: the caller's edit never reaches it

    async def get_session(self, ref: SessionRef) -> StoredSession | None:
        session = self.sessions.get((ref.app, ref.user, ref.session_id))
        if session is None:
            return None
        return StoredSession(
            user_id=ref.user,
            session_id=ref.session_id,
            events=copy.deepcopy(session["events"]),
            state={
                "session": copy.deepcopy(session["state"]),
                "user": copy.deepcopy(self.shared.get((ref.app, "user:" + ref.user), {})),
                "app": copy.deepcopy(self.shared.get((ref.app, "app"), {})),
                "temp": {},
            },
        )

    async def list_sessions(self, app: str, user: str) -> list[str]:
        return [s for (a, u, s) in self.sessions if a == app and u == user]

    async def delete_session(self, ref: SessionRef) -> None:
        del self.sessions[(ref.app, ref.user, ref.session_id)]

    async def add_session_to_memory(self, ref: SessionRef) -> None:
        entries = self.memory.setdefault((ref.app, ref.user), [])
        for event in self.sessions[(ref.app, ref.user, ref.session_id)]["events"]:
            text = "\n".join(p["text"] for p in event["parts"] if p["type"] == "text")
            if text:
                entries.append(
                    {"text": text, "session_id": ref.session_id, "event_id": event["id"]}
                )

    async def search_memory(
        self, app: str, user: str, query: str, limit: int
    ) -> list[dict[str, Any]]:
        words = set(query.casefold().split())
        hits = [
            e for e in self.memory.get((app, user), []) if words & set(e["text"].casefold().split())
        ]
        return copy.deepcopy(hits[:limit])

    async def cleanup(self, app: str) -> None:
        for key in [k for k in self.sessions if k[0] == app]:
            del self.sessions[key]
        for key in [k for k in self.shared if k[0] == app]:
            del self.shared[key]
        for key in [k for k in self.memory if k[0] == app]:
            del self.memory[key]


def open_store(spec: StoreSpec) -> DictStore:
    """The opener an entry point would name."""
    return DictStore(spec.name, backend=spec.backend)
