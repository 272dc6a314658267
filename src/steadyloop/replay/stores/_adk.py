"""google-adk's session and memory services as stores under test (extra `adk`).

Selected by URL on `--backends`:

| URL | ADK session service | memory service |
|---|---|---|
| `adk+memory://` | `InMemorySessionService` | `InMemoryMemoryService` |
| `adk+sqlite:///FILE` | `SqliteSessionService` | `SqliteMemoryService`, same file |
| `adk+database+sqlite:///FILE` | `DatabaseSessionService`, `sqlite+aiosqlite` | — |
| `adk+postgresql://USER@HOST/DB` | `DatabaseSessionService`, `postgresql+psycopg` | — |
| `adk+mysql://USER@HOST/DB` | `DatabaseSessionService`, `mysql+asyncmy` | — |

(`adk+mariadb://…` is `adk+mysql://…`.) ADK's Vertex AI session and memory services
need Google Cloud and are not offered.

Without a location (`adk+memory`, `adk+sqlite`, `adk+database+sqlite`) the store lives
under the harness's temporary directory. A SQLAlchemy driver may be named
(`adk+postgresql+asyncpg://…`); the query string goes to the driver unchanged (for
PostgreSQL, `?options=-csearch_path%3DSCHEMA` picks a schema). ADK writes fixed table
names (`sessions`, `events`, `app_states`, `user_states`, …), so give each store a
database or schema of its own.

How a case maps onto ADK, the whole translation:

- the case's app is ADK's `app_name`, its user `user_id`; state keys keep their
  `user:`/`app:`/`temp:` prefixes, which is ADK's own convention;
- an event becomes an `Event` with the case's id, author, invocation id (`None` is
  ADK's default `""`, and `""` reads back as `None`) and time in float seconds
  ([us_to_seconds][steadyloop.replay.us_to_seconds]); its parts become one `Content`
  (role `user` for the author `user`, else `model`; no parts: no content): text is
  `Part(text=…)`, a tool call `FunctionCall(id, name, args)`, a tool result
  `FunctionResponse(id, name, response={"output": …})` plus `"error"` when the case
  gives one (the keys google-genai documents for a function's output and error);
- an append hands ADK the session object the client holds (the one `create_session`
  returned, updated by every append since, as ADK's runner does) and loads it with
  `get_session` when the client holds none;
- memory hits report the text of their content, `author`, `time` (ADK formats it as
  local wall-clock ISO text without an offset, read back the same way), the session
  and event ids where the service reports them (`InMemoryMemoryService`'s `id` is the
  event id; `SqliteMemoryService` puts both in `custom_metadata`) and `memory_id`, the
  entry's own `id`.

Nothing is repaired: ids, values, order and errors are ADK's. `InMemorySessionService`
and `InMemoryMemoryService` live in this store object, so a restart (`close`, `open`)
keeps them; every other store gets new service objects on `open`.
"""

from __future__ import annotations

import contextlib
import copy
import sqlite3
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steadyloop._errors import BackendUnavailable, UnknownBackend
from steadyloop._urls import split_scheme
from steadyloop.replay._store import (
    SCOPE_NAMES,
    Capability,
    EventEdit,
    SessionRef,
    StoredSession,
    StoreEvent,
    StoreSpec,
    missing_extra,
    scope_of,
    seconds_to_us,
    us_to_seconds,
)
from steadyloop.replay.stores._common import describe, require_postgres_schema

if TYPE_CHECKING:
    from google.adk.events import Event as AdkEvent
    from google.adk.sessions import Session as AdkSession

__all__ = ["AdkStore", "open_store"]

_COMMON = frozenset(
    {
        Capability.EVENTS,
        Capability.STATE,
        Capability.USER_STATE,
        Capability.APP_STATE,
        Capability.TEMP_STATE,
        Capability.EXPLICIT_SESSION_ID,
        Capability.GENERATED_SESSION_ID,
        Capability.EXPLICIT_EVENT_ID,
        Capability.EXPLICIT_TIME,
        Capability.INVOCATION_ID,
        Capability.TOOL_PARTS,
        Capability.LIST_SESSIONS,
        Capability.DELETE_SESSION,
        Capability.CALLER_EDIT,
    }
)
_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+asyncmy",
    "sqlite": "sqlite+aiosqlite",
}


def _classify(backend: str) -> tuple[str, str] | None:
    """`(kind, dialect)` of a backend name: `memory`, `sqlite` or `database` + its dialect."""
    if backend in {"memory", "sqlite"}:
        return backend, "sqlite" if backend == "sqlite" else ""
    qualifiers, family, _ = split_scheme(backend)
    if qualifiers in {(), ("database",)} and family in _DRIVERS:
        return "database", family
    return None


def _local_path(spec: StoreSpec) -> str:
    """The file of a `…sqlite:///FILE` store URL."""
    path = spec.location.path if spec.location is not None else ""
    if not path or path == "/":
        raise UnknownBackend(f"store URL {spec.redacted!r} names no file")
    return path


class AdkStore:
    """One google-adk session service (and its memory service, where ADK has one).

    Attributes:
        name: The store's name in reports (`adk+sqlite`, …).
        framework: `"adk"`.
        backend: `memory`, `sqlite`, `database+sqlite`, `postgresql` or `mysql`.
        capabilities: Everything ADK's session API offers; `memory` only for the
            in-memory and SQLite stores, the two ADK memory services that store
            locally.
    """

    framework = "adk"

    def __init__(self, spec: StoreSpec) -> None:
        classified = _classify(spec.backend)
        if classified is None:
            raise UnknownBackend(
                f"store {spec.redacted!r}: adk has no backend {spec.backend!r} "
                "(memory, sqlite, database+sqlite, postgresql, mysql)"
            )
        kind, dialect = classified
        self._spec = spec
        self._kind = kind
        self.name = spec.name
        self.backend = (
            kind if kind != "database" else "database+sqlite" if dialect == "sqlite" else dialect
        )
        self.capabilities = _COMMON | (
            {Capability.MEMORY} if kind in {"memory", "sqlite"} else frozenset()
        )
        self._made: Path | None = None
        self._path = ""
        self._db_url = ""
        if dialect == "sqlite":
            if spec.location is not None:
                self._path = _local_path(spec)
            else:
                spec.workdir.mkdir(parents=True, exist_ok=True)
                self._made = spec.workdir / f"{spec.name.replace('+', '-')}.db"
                self._path = str(self._made)
            self._db_url = f"sqlite+aiosqlite:///{self._path}"
        elif kind == "database":
            if spec.location is None:
                raise UnknownBackend(
                    f"store {spec.redacted!r} needs a server URL, for example "
                    f"adk+{spec.backend}://USER@HOST/DB"
                )
            self._db_url = spec.location.sqlalchemy(_DRIVERS)
        self._sessions: Any = None
        self._memory: Any = None
        self._schema_checked = False
        if kind == "memory":
            from google.adk.memory import InMemoryMemoryService
            from google.adk.sessions import InMemorySessionService

            self._sessions = InMemorySessionService()
            self._memory = InMemoryMemoryService()
        self._held: dict[tuple[str, str, str], AdkSession] = {}
        self._handed: dict[tuple[str, str, str, str], AdkEvent] = {}

    # -- client life ---------------------------------------------------------------------

    async def open(self) -> None:
        """Start a client: new service objects, except for the in-memory store."""
        self._held.clear()
        if self._kind == "memory":
            return
        if self._kind == "sqlite":
            from google.adk.memory import SqliteMemoryService
            from google.adk.sessions.sqlite_session_service import SqliteSessionService

            self._sessions = SqliteSessionService(self._path)
            self._memory = SqliteMemoryService(self._path)
            return
        from google.adk.sessions import DatabaseSessionService

        service = DatabaseSessionService(self._db_url)
        try:
            async with service.db_engine.connect():
                pass
        except Exception as exc:
            await service.close()
            raise BackendUnavailable(
                f"store {self._spec.redacted!r} is unreachable: {describe(exc)}"
            ) from None
        if not self._schema_checked:
            try:
                await require_postgres_schema(service.db_engine, self._spec.redacted)
            except BaseException:
                await service.close()
                raise
            self._schema_checked = True
        self._sessions = service

    async def close(self) -> None:
        """Drop the client and what it held (a restart when `open` follows)."""
        self._held.clear()
        if self._kind == "memory":
            return
        sessions, memory, self._sessions, self._memory = self._sessions, self._memory, None, None
        with contextlib.suppress(Exception):
            if sessions is not None:
                await sessions.close()
        with contextlib.suppress(Exception):
            if memory is not None:
                await memory.close()

    async def dispose(self) -> None:
        """Forget the in-memory services, or remove the file this adapter made."""
        await self.close()
        self._handed.clear()
        if self._kind == "memory":
            from google.adk.memory import InMemoryMemoryService
            from google.adk.sessions import InMemorySessionService

            self._sessions = InMemorySessionService()
            self._memory = InMemoryMemoryService()
        if self._made is not None:
            _remove_sqlite_file(self._made)

    # -- sessions --------------------------------------------------------------------------

    async def create_session(
        self, app: str, user: str, session_id: str | None, state: Mapping[str, Any]
    ) -> str:
        """Create the session through ADK; return the id ADK reports."""
        session = await self._sessions.create_session(
            app_name=app,
            user_id=user,
            state=copy.deepcopy(dict(state)) or None,
            session_id=session_id,
        )
        self._held[(app, user, session.id)] = session
        return str(session.id)

    async def append_event(
        self, ref: SessionRef, event: StoreEvent, *, idempotency_key: str | None = None
    ) -> None:
        """Append through ADK, on the session object this client holds."""
        key = (ref.app, ref.user, ref.session_id)
        session = self._held.pop(key, None)
        if session is None:
            session = await self._sessions.get_session(
                app_name=ref.app, user_id=ref.user, session_id=ref.session_id
            )
        if session is None:
            from google.adk.sessions import Session

            # What a caller holding a stale id would pass; ADK raises its own error.
            session = Session(
                app_name=ref.app, user_id=ref.user, id=ref.session_id, last_update_time=0.0
            )
        adk_event = _to_adk(event)
        self._handed[(*key, event.id)] = adk_event
        await self._sessions.append_event(session, adk_event)
        self._held[key] = session

    async def edit_appended(self, ref: SessionRef, event_id: str, edit: EventEdit) -> None:
        """Edit the `Event` object last handed to ADK for `event_id`, in place."""
        adk_event = self._handed[(ref.app, ref.user, ref.session_id, event_id)]
        if edit.text is not None and adk_event.content is not None:
            for part in adk_event.content.parts or []:
                if part.text is not None:
                    part.text = edit.text
                    break
        adk_event.actions.state_delta.update(copy.deepcopy(dict(edit.state_delta)))

    async def get_session(self, ref: SessionRef) -> StoredSession | None:
        """Read the session back through `get_session`."""
        session = await self._sessions.get_session(
            app_name=ref.app, user_id=ref.user, session_id=ref.session_id
        )
        if session is None:
            return None
        state: dict[str, dict[str, Any]] = {scope: {} for scope in SCOPE_NAMES}
        for key, value in session.state.items():
            state[scope_of(key)][key] = value
        return StoredSession(
            user_id=str(session.user_id),
            session_id=str(session.id),
            events=[_from_adk(e) for e in session.events],
            state=state,
        )

    async def list_sessions(self, app: str, user: str) -> list[str]:
        """The ids `list_sessions` returns for the user, in its order."""
        listed = await self._sessions.list_sessions(app_name=app, user_id=user)
        return [str(s.id) for s in listed.sessions]

    async def delete_session(self, ref: SessionRef) -> None:
        """Delete through ADK."""
        self._held.pop((ref.app, ref.user, ref.session_id), None)
        await self._sessions.delete_session(
            app_name=ref.app, user_id=ref.user, session_id=ref.session_id
        )

    # -- memory ----------------------------------------------------------------------------

    async def add_session_to_memory(self, ref: SessionRef) -> None:
        """Load the session and hand it to the memory service's `add_session_to_memory`."""
        session = await self._sessions.get_session(
            app_name=ref.app, user_id=ref.user, session_id=ref.session_id
        )
        if session is None:
            raise LookupError(f"adk get_session found no session {ref.session_id!r}")
        await self._memory.add_session_to_memory(session)

    async def search_memory(
        self, app: str, user: str, query: str, limit: int
    ) -> list[dict[str, Any]]:
        """`search_memory`'s hits in its order, the first `limit` of them."""
        found = await self._memory.search_memory(app_name=app, user_id=user, query=query)
        hits = []
        for entry in found.memories[:limit]:
            meta = dict(entry.custom_metadata or {})
            parts = entry.content.parts or []
            hits.append(
                {
                    "text": "\n".join(p.text for p in parts if p.text is not None),
                    "author": entry.author,
                    "time": _local_iso_to_us(entry.timestamp),
                    "session_id": meta.get("session_id"),
                    "event_id": meta.get("event_id", entry.id if self._kind == "memory" else None),
                    "memory_id": entry.id,
                }
            )
        return hits

    # -- cleanup ---------------------------------------------------------------------------

    async def cleanup(self, app: str) -> None:
        """Remove the app's sessions, events, user and app state, and memory."""
        self._held = {k: v for k, v in self._held.items() if k[0] != app}
        self._handed = {k: v for k, v in self._handed.items() if k[0] != app}
        if self._kind == "memory":
            # ADK has no API to drop state or memory; these are its own dicts.
            self._sessions.sessions.pop(app, None)
            self._sessions.user_state.pop(app, None)
            self._sessions.app_state.pop(app, None)
            memory = self._memory
            for key in [k for k in memory._session_events if k[0] == app]:
                memory._session_events.pop(key, None)
            return
        if self._kind == "sqlite":
            _delete_app_rows(self._path, app)
            return
        from sqlalchemy import text

        await self._sessions.prepare_tables()
        async with self._sessions.db_engine.begin() as conn:
            for table in ("events", "sessions", "user_states", "app_states"):
                await conn.execute(text(f"DELETE FROM {table} WHERE app_name = :app"), {"app": app})


def _remove_sqlite_file(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _delete_app_rows(path: str, app: str) -> None:
    """Delete an app's rows from the tables SqliteSessionService/SqliteMemoryService made."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        for table in ("events", "sessions", "user_states", "app_states", "memory_events"):
            if table in tables:
                conn.execute(f"DELETE FROM {table} WHERE app_name = ?", (app,))
        conn.commit()


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0]


def _local_iso_to_us(value: str | None) -> int | None:
    """ADK's memory time (naive local ISO text) back to microseconds, as ADK wrote it."""
    if not value:
        return None
    moment = datetime.fromisoformat(value)
    return seconds_to_us(moment.timestamp())


def _to_adk(event: StoreEvent) -> AdkEvent:
    """The ADK `Event` for a case event (see the module doc)."""
    from google.adk.events import Event, EventActions
    from google.genai import types

    parts: list[types.Part] = []
    for part in event.parts:
        kind = part.get("type")
        if kind == "text":
            parts.append(types.Part(text=part["text"]))
        elif kind == "tool_call":
            parts.append(
                types.Part(
                    function_call=types.FunctionCall(
                        id=part.get("call_id"),
                        name=part.get("name"),
                        args=copy.deepcopy(part.get("arguments")),
                    )
                )
            )
        elif kind == "tool_result":
            response: dict[str, Any] = {"output": copy.deepcopy(part.get("response"))}
            if part.get("error") is not None:
                response["error"] = part["error"]
            parts.append(
                types.Part(
                    function_response=types.FunctionResponse(
                        id=part.get("call_id"), name=part.get("name"), response=response
                    )
                )
            )
        else:
            raise ValueError(f"adk adapter: unknown part type {kind!r}")
    content = (
        types.Content(role="user" if event.author == "user" else "model", parts=parts)
        if parts
        else None
    )
    return Event(
        id=event.id,
        author=event.author,
        invocation_id=event.invocation_id or "",
        timestamp=us_to_seconds(event.time),
        content=content,
        actions=EventActions(state_delta=copy.deepcopy(dict(event.state_delta))),
    )


def _from_adk(event: AdkEvent) -> dict[str, Any]:
    """A read-back ADK `Event` in the snapshot's event form."""
    parts: list[dict[str, Any]] = []
    for part in (event.content.parts or []) if event.content is not None else []:
        if part.function_call is not None:
            call = part.function_call
            parts.append(
                {
                    "type": "tool_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.args if call.args is not None else {},
                }
            )
        elif part.function_response is not None:
            result = part.function_response
            response = result.response or {}
            parts.append(
                {
                    "type": "tool_result",
                    "call_id": result.id,
                    "name": result.name,
                    "response": response.get("output"),
                    "error": response.get("error"),
                }
            )
        elif part.text is not None:
            parts.append({"type": "text", "text": part.text})
        else:
            parts.append({"type": "other", "part": part.model_dump(mode="json", exclude_none=True)})
    return {
        "id": event.id,
        "author": event.author,
        "parts": parts,
        "state_delta": dict(event.actions.state_delta or {}),
        "time": seconds_to_us(event.timestamp),
        "invocation_id": event.invocation_id or None,
    }


_DRIVER_MODULES = {
    "psycopg": "psycopg",
    "asyncpg": "asyncpg",
    "asyncmy": "asyncmy",
    "aiomysql": "aiomysql",
    "aiosqlite": "aiosqlite",
}


def _needed_modules(spec: StoreSpec) -> list[str]:
    """The modules a store of `spec` imports when it runs (so a missing one shows now)."""
    classified = _classify(spec.backend)
    if classified is None:
        return ["google.adk.sessions"]
    kind, dialect = classified
    if kind == "memory":
        return ["google.adk.sessions", "google.adk.memory"]
    if kind == "sqlite":
        return ["aiosqlite", "google.adk.sessions.sqlite_session_service", "google.adk.memory"]
    given = spec.location.driver if spec.location is not None else ""
    driver = given or split_scheme(_DRIVERS[dialect])[2]
    return [
        "google.adk.sessions",
        "sqlalchemy.ext.asyncio",
        "greenlet",
        _DRIVER_MODULES.get(driver, driver),
    ]


def open_store(spec: StoreSpec) -> AdkStore:
    """The entry point `adk`: a store for an `adk+…` URL.

    Raises:
        MissingExtra: google-adk, or a driver its store needs (extra `adk`), is not
            installed.
        UnknownBackend: The backend is not one of ADK's, or a server URL is missing.
    """
    import importlib

    for module in _needed_modules(spec):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            package = "google-adk" if module.startswith("google.") else module.split(".")[0]
            raise missing_extra(spec, "adk", package) from exc
    return AdkStore(spec)
