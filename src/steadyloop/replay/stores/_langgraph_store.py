"""LangGraph's long-term stores (`BaseStore`) as stores under test (extra `langgraph`).

Selected by URL on `--backends`:

| URL | store |
|---|---|
| `langgraph-store+memory` | `InMemoryStore` (the reference) |
| `langgraph-store+sqlite:///FILE` | `SqliteStore` (ships with langgraph-checkpoint-sqlite) |
| `langgraph-store+postgresql://USER@HOST/DB` | `PostgresStore` |

(`postgres` is `postgresql`.) Without a location (`langgraph-store+sqlite`) the file
lives under the harness's temporary directory. The stores are made without a vector
index (`index=None`) and without TTL, each with its own `setup()`.

A store keeps JSON documents under a namespace and a key; the adapter keeps a session
the way an application keeps one there:

- the case's app becomes the first namespace label `a<sha256 of the app, 16 hex>`
  (a label may hold no `.`, and the app does), the user the second;
- a session is the item `(app, user, "sessions")` / session id, its value
  `{"user_id", "session_id", "events": N, "state": {…}}`, N its count of events; the
  n-th event (from 0) is the item `(app, user, "events")` / `<session id>/<n, 8
  digits>`, its value the event (one item per event, so an append writes one event,
  not the whole list); an append `get`s the session, then `put`s in one `batch` the
  event as item N and the session with N + 1 and the state delta's keys; reading
  back `get`s the session, then its N events in one `batch`;
- `user:` keys live in the item `(app, user, "scopes")` / `user`, `app:` keys in
  `(app, "~app", "scopes")` / `app`, each read, updated and put back when a create or
  an append sets some; `temp:` keys are not stored (the common contract);
- listing a user's sessions is `search((app, user, "sessions"), limit=1000)`, the keys
  in the store's order; deleting a session is `delete` of the session and its events;
- a session stored into memory is one item per text event under
  `(app, user, "memory")`, key `<session id>/<event id>`, value `{"text", "session_id",
  "event_id", "author", "time"}`; a memory search is `search((app, user, "memory"),
  query=…, limit=…)` (without an index the store ignores the query), the hits in the
  store's order;
- `cleanup` finds the app's namespaces with `list_namespaces(prefix=(app,))` and
  deletes every item `search` returns in each, searching again until none is left.

Nothing is repaired: values, order and errors are the store's. The `InMemoryStore`
lives in this store object, so a restart keeps it; the others get a new connection on
`open`.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from steadyloop._errors import BackendUnavailable, UnknownBackend
from steadyloop.replay._store import (
    Capability,
    EventEdit,
    SessionRef,
    StoredSession,
    StoreEvent,
    StoreSpec,
    missing_extra,
    scope_of,
)
from steadyloop.replay.stores._common import describe
from steadyloop.replay.stores._langgraph import SCHEMA_QUERY, require_schema

__all__ = ["CAPABILITIES", "LangGraphStore", "open_store", "parse_target"]

CAPABILITIES: frozenset[Capability] = frozenset(
    {
        Capability.EVENTS,
        Capability.STATE,
        Capability.USER_STATE,
        Capability.APP_STATE,
        Capability.TEMP_STATE,
        Capability.EXPLICIT_SESSION_ID,
        Capability.EXPLICIT_EVENT_ID,
        Capability.EXPLICIT_TIME,
        Capability.INVOCATION_ID,
        Capability.TOOL_PARTS,
        Capability.LIST_SESSIONS,
        Capability.DELETE_SESSION,
        Capability.MEMORY,
        Capability.CALLER_EDIT,
    }
)
"""Every state scope (as items of their own), memory by listing, no generated ids."""

_KINDS = ("memory", "sqlite", "postgresql")
_MANY = 1000


def parse_target(spec: StoreSpec) -> tuple[str, str]:
    """Return `(kind, location)`: `memory`, `sqlite` or `postgresql`, and where.

    Raises:
        UnknownBackend: The backend is not a LangGraph store, or PostgreSQL has no URL.
    """
    kind = "postgresql" if spec.backend == "postgres" else spec.backend
    if kind not in _KINDS:
        raise UnknownBackend(
            f"store {spec.redacted!r}: unknown LangGraph store {spec.backend!r}; "
            f"known: {', '.join('langgraph-store+' + k for k in _KINDS)}"
        )
    location = spec.location
    if kind == "postgresql":
        if location is None:
            raise UnknownBackend(
                f"store {spec.redacted!r}: a PostgreSQL store needs a URL "
                "(langgraph-store+postgresql://USER@HOST/DB)"
            )
        return kind, location.build(scheme="postgresql")
    if kind == "memory" or location is None:
        return kind, ""
    path = location.path
    if not path or path == "/":
        raise UnknownBackend(f"store URL {spec.redacted!r} names no file")
    return kind, path


def _event_key(session_id: str, n: int) -> str:
    """The key of a session's n-th event item."""
    return f"{session_id}/{n:08d}"


def _count(value: Any) -> int:
    """A session item's count of events (0 when it holds no integer count)."""
    count = value.get("events") if isinstance(value, Mapping) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def _label(app: str) -> str:
    return "a" + hashlib.sha256(app.encode()).hexdigest()[:16]


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


class LangGraphStore:
    """One LangGraph `BaseStore` under test (see the module doc for the translation)."""

    framework = "langgraph-store"
    capabilities = CAPABILITIES

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.kind, self.location = parse_target(spec)
        self.backend = self.kind
        self._fixed: Any = None
        if self.kind == "memory":
            from langgraph.store.memory import InMemoryStore

            self._fixed = InMemoryStore()
        self._made: Path | None = None
        if self.kind == "sqlite" and not self.location:
            spec.workdir.mkdir(parents=True, exist_ok=True)
            self._made = spec.workdir / "langgraph-store.db"
            self.location = str(self._made)
        self.store: Any = None
        self._conn: Any = None
        self._handed: dict[tuple[SessionRef, str], dict[str, Any]] = {}

    async def open(self) -> None:
        if self._fixed is not None:
            self.store = self._fixed
            return
        try:
            if self.kind == "sqlite":
                import sqlite3

                from langgraph.store.sqlite import SqliteStore

                self._conn = sqlite3.connect(
                    self.location, check_same_thread=False, isolation_level=None
                )
                self.store = SqliteStore(self._conn)
            else:
                import psycopg
                from langgraph.store.postgres import PostgresStore
                from psycopg.rows import dict_row

                self._conn = psycopg.Connection.connect(
                    self.location, autocommit=True, prepare_threshold=0, row_factory=dict_row
                )
                require_schema(self._conn.execute(SCHEMA_QUERY).fetchone(), self.spec)
                self.store = PostgresStore(self._conn)
            self.store.setup()
        except BackendUnavailable:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            raise BackendUnavailable(f"store {self.spec.redacted!r}: {describe(exc)}") from exc

    async def close(self) -> None:
        conn, self._conn, self.store = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    async def dispose(self) -> None:
        if self._made is not None:
            _remove(self._made)

    def _ns(self, app: str, user: str, what: str) -> tuple[str, ...]:
        return (_label(app), user, what)

    async def create_session(
        self, app: str, user: str, session_id: str | None, state: Mapping[str, Any]
    ) -> str:
        if session_id is None:  # pragma: no cover - outside the capabilities
            raise NotImplementedError("a store key is the caller's")
        value = {
            "user_id": user,
            "session_id": session_id,
            "events": 0,
            "state": self._scoped(app, user, state),
        }
        self.store.put(self._ns(app, user, "sessions"), session_id, value)
        return session_id

    def _scope_item(self, app: str, user: str, scope: str) -> tuple[tuple[str, ...], str]:
        return (
            (self._ns(app, user, "scopes"), "user")
            if scope == "user"
            else (
                self._ns(app, "~app", "scopes"),
                "app",
            )
        )

    def _scoped(self, app: str, user: str, delta: Mapping[str, Any]) -> dict[str, Any]:
        """Put `user:`/`app:` keys into their items; return the session's own keys."""
        own: dict[str, Any] = {}
        shared: dict[str, dict[str, Any]] = {"user": {}, "app": {}}
        for key, value in delta.items():
            scope = scope_of(key)
            if scope == "session":
                own[key] = copy.deepcopy(value)
            elif scope in shared:
                shared[scope][key] = copy.deepcopy(value)
        for name, keys in shared.items():
            if keys:
                ns, key = self._scope_item(app, user, name)
                item = self.store.get(ns, key)
                self.store.put(ns, key, {**(item.value if item else {}), **keys})
        return own

    def _read_scope(self, app: str, user: str, scope: str) -> dict[str, Any]:
        ns, key = self._scope_item(app, user, scope)
        item = self.store.get(ns, key)
        return dict(item.value) if item is not None else {}

    async def append_event(
        self, ref: SessionRef, event: StoreEvent, *, idempotency_key: str | None = None
    ) -> None:
        ns = self._ns(ref.app, ref.user, "sessions")
        item = self.store.get(ns, ref.session_id)
        if item is None:
            raise LookupError(f"no session {ref.session_id!r}")
        value = dict(item.value)
        body = event.to_dict()
        self._handed[(ref, event.id)] = body
        count = _count(value)
        value["events"] = count + 1
        own = self._scoped(ref.app, ref.user, event.state_delta)
        value["state"] = {**value.get("state", {}), **own}
        from langgraph.store.base import PutOp

        events = self._ns(ref.app, ref.user, "events")
        self.store.batch(
            [
                PutOp(events, _event_key(ref.session_id, count), body),
                PutOp(ns, ref.session_id, value),
            ]
        )

    async def edit_appended(self, ref: SessionRef, event_id: str, edit: EventEdit) -> None:
        body = self._handed[(ref, event_id)]
        if edit.text is not None:
            for part in body["parts"]:
                if part.get("type") == "text":
                    part["text"] = edit.text
                    break
        body["state_delta"].update(edit.state_delta)

    async def get_session(self, ref: SessionRef) -> StoredSession | None:
        item = self.store.get(self._ns(ref.app, ref.user, "sessions"), ref.session_id)
        if item is None:
            return None
        value = item.value
        from langgraph.store.base import GetOp

        ns = self._ns(ref.app, ref.user, "events")
        got = self.store.batch(
            [GetOp(ns, _event_key(ref.session_id, n)) for n in range(_count(value))]
        )
        return StoredSession(
            user_id=str(value.get("user_id")),
            session_id=str(item.key),
            events=[event.value for event in got if event is not None],
            state={
                "session": dict(value.get("state", {})),
                "user": self._read_scope(ref.app, ref.user, "user"),
                "app": self._read_scope(ref.app, ref.user, "app"),
                "temp": {},
            },
        )

    async def list_sessions(self, app: str, user: str) -> list[str]:
        items = self.store.search(self._ns(app, user, "sessions"), limit=_MANY)
        return [str(item.key) for item in items]

    async def delete_session(self, ref: SessionRef) -> None:
        ns = self._ns(ref.app, ref.user, "sessions")
        item = self.store.get(ns, ref.session_id)
        self.store.delete(ns, ref.session_id)
        if item is not None:
            from langgraph.store.base import PutOp

            events = self._ns(ref.app, ref.user, "events")
            self.store.batch(
                [
                    PutOp(events, _event_key(ref.session_id, n), None)
                    for n in range(_count(item.value))
                ]
            )

    async def add_session_to_memory(self, ref: SessionRef) -> None:
        session = await self.get_session(ref)
        if session is None:
            raise LookupError(f"no session {ref.session_id!r}")
        ns = self._ns(ref.app, ref.user, "memory")
        for event in session.events:
            text = "\n".join(
                str(p.get("text")) for p in event.get("parts", ()) if p.get("type") == "text"
            )
            if not text:
                continue
            value = {
                "text": text,
                "session_id": ref.session_id,
                "event_id": event.get("id"),
                "author": event.get("author"),
                "time": event.get("time"),
            }
            self.store.put(ns, f"{ref.session_id}/{event.get('id')}", value)

    async def search_memory(
        self, app: str, user: str, query: str, limit: int
    ) -> list[dict[str, Any]]:
        items = self.store.search(self._ns(app, user, "memory"), query=query, limit=limit)
        return [dict(item.value) for item in items]

    async def cleanup(self, app: str) -> None:
        prefix = (_label(app),)
        for ns in self.store.list_namespaces(prefix=prefix, limit=_MANY):
            while items := self.store.search(ns, limit=_MANY):
                for item in items:
                    self.store.delete(ns, item.key)
        self._handed = {k: v for k, v in self._handed.items() if k[0].app != app}


def open_store(spec: StoreSpec) -> LangGraphStore:
    """The entry point `langgraph-store`: a store for a `langgraph-store+…` URL.

    Raises:
        MissingExtra: LangGraph or the store's package (extra `langgraph`) is not
            installed.
        UnknownBackend: The backend is not one of LangGraph's stores.
    """
    import importlib

    kind, _ = parse_target(spec)
    module = {
        "memory": "langgraph.store.memory",
        "sqlite": "langgraph.store.sqlite",
        "postgresql": "langgraph.store.postgres",
    }[kind]
    for name in (module, "psycopg") if kind == "postgresql" else (module,):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise missing_extra(spec, "langgraph", name.split(".")[0]) from exc
    return LangGraphStore(spec)
