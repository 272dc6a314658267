"""trpc-agent-py's session and memory services as stores under test (the `trpc` extra).

Selected by URL on `--backends`:

| URL | session service | memory service |
| --- | --- | --- |
| `trpc+memory://` | `InMemorySessionService` | `InMemoryMemoryService` |
| `trpc+sqlite:///FILE` | `SqlSessionService` | `SqlMemoryService` |
| `trpc+postgresql://USER@HOST/DB` | `SqlSessionService` (psycopg) | `SqlMemoryService` |
| `trpc+mysql://USER@HOST/DB` | `SqlSessionService` (PyMySQL) | `SqlMemoryService` |
| `trpc+redis://HOST:PORT/N` | `RedisSessionService` | `RedisMemoryService` |

`trpc+memory` and `trpc+sqlite` without a location make a fresh store (a SQLite file
under the harness's temporary directory, removed afterwards); `trpc+mysql` serves MySQL
and MariaDB alike.

`postgres` and `mariadb` are accepted for `postgresql` and `mysql`; a `+DRIVER` suffix
(`trpc+postgresql+psycopg://…`) picks a SQLAlchemy driver explicitly. Query parameters
go to SQLAlchemy or redis-py unchanged (`?options=-csearch_path%3Dreplay` puts the
PostgreSQL tables in a schema of their own: the framework's table names — `sessions`,
`events`, `app_states`, `user_states`, `mem_events` — are fixed, and other frameworks
use some of the same names). The services run in the framework's default synchronous
mode: its documented asynchronous mode (`is_async=True`) fails on the second call at the
pinned version (see the how-to). Each service is built as the framework's documentation
shows, with the URL and nothing else.

The adapter only translates. A case event becomes a trpc `Event`: its id, author and
invocation id (`""` for none), its time by [us_to_seconds][steadyloop.replay.us_to_seconds]
(read back with [seconds_to_us][steadyloop.replay.seconds_to_us]), its state delta as the
event's `actions.state_delta`, and its parts as google-genai `Part`s: text as `text`, a
tool call as a `function_call` (`id`, `name`, `args`), a tool result as a
`function_response` whose `response` is `{"output": RESPONSE}` plus `"error"` when there
is one (the genai convention, undone on the way back). An event without parts has no
content. Appends go through the session object the framework last handed this client
(from `create_session` or a read), as an agent runner holds it within an invocation; a
restart or a failed append drops it, so the next append reads the session first.
Read-back splits the framework's merged state by prefix into the four scopes. Memory is
searched under the framework's own key, `"{app}/{user}"`; a hit's time is the framework's
ISO text read as local time. An in-memory store keeps its service objects across
restarts (there is no other process to reach).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from steadyloop._errors import BackendUnavailable, UnknownBackend
from steadyloop._urls import URL, parse_url, split_scheme
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

_log = logging.getLogger(__name__)

__all__ = ["TRPC_CAPABILITIES", "TrpcStore", "open_store"]

TRPC_CAPABILITIES: frozenset[Capability] = frozenset(
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
        Capability.MEMORY,
        Capability.CALLER_EDIT,
    }
)
"""What every trpc-agent-py session service offers (each of its backends alike)."""

_SQL_DRIVERS = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}
_KINDS = ("memory", "sqlite", "postgresql", "mysql", "redis")


def _kind(spec: StoreSpec) -> tuple[str, str | None]:
    """Return the backend kind and an explicit SQLAlchemy driver (`None`: the default)."""
    qualifiers, kind, driver = split_scheme(spec.backend)
    if qualifiers or kind not in _KINDS or (driver and kind not in _SQL_DRIVERS):
        raise UnknownBackend(
            f"store {spec.redacted!r}: trpc has no {spec.backend!r} backend; use one of "
            "trpc+memory://, trpc+sqlite:///FILE, trpc+postgresql://…, trpc+mysql://…, "
            "trpc+redis://…"
        )
    return kind, driver or None


def _native_url(kind: str, driver: str | None, target: URL) -> str:
    """The URL the framework's service takes: the target with a SQLAlchemy driver."""
    if kind == "redis":
        return target.text
    return target.build(scheme=f"{kind}+{driver}" if driver else _SQL_DRIVERS[kind])


async def _check_schema(url: str, store: str) -> None:
    """Refuse a PostgreSQL URL whose search_path names no existing schema."""
    from sqlalchemy.ext.asyncio import create_async_engine

    try:
        engine = create_async_engine(url)
    except Exception as exc:  # a driver without asyncio: the framework's own probe reports
        _log.debug("%s: no schema check, the engine did not open (%s)", store, exc)
        return
    try:
        await require_postgres_schema(engine, store)
    except BackendUnavailable:
        raise
    except Exception as exc:  # unreachable: the framework's own probe says why, in its words
        _log.debug("%s: no schema check, the server did not answer (%s)", store, exc)
        return
    finally:
        await engine.dispose()


def _scrub(text: str, password: str | None) -> str:
    """Remove the URL's password from a message (drivers and trpc quote the URL)."""
    return text.replace(password, "***") if password else text


def _to_part(part: Mapping[str, Any], types: Any) -> Any:
    kind = part.get("type")
    if kind == "text":
        return types.Part(text=part["text"])
    if kind == "tool_call":
        return types.Part(
            function_call=types.FunctionCall(
                id=part["call_id"], name=part["name"], args=dict(part["arguments"])
            )
        )
    if kind == "tool_result":
        response: dict[str, Any] = {"output": part["response"]}
        if part.get("error") is not None:
            response["error"] = part["error"]
        return types.Part(
            function_response=types.FunctionResponse(
                id=part["call_id"], name=part["name"], response=response
            )
        )
    raise ValueError(f"trpc adapter: unknown part type {kind!r}")


def _from_part(part: Any) -> dict[str, Any]:
    if part.function_call is not None:
        call = part.function_call
        return {
            "type": "tool_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.args if call.args is not None else {},
        }
    if part.function_response is not None:
        result = part.function_response
        response = result.response if result.response is not None else {}
        return {
            "type": "tool_result",
            "call_id": result.id,
            "name": result.name,
            "response": response.get("output"),
            "error": response.get("error"),
        }
    if part.text is not None:
        return {"type": "text", "text": part.text}
    # Something the adapter never writes: show it whole rather than drop it.
    return {"type": "other", "part": part.model_dump(mode="json", exclude_none=True)}


def _event_dict(event: Any) -> dict[str, Any]:
    content = event.content
    parts = [_from_part(p) for p in (content.parts or [])] if content is not None else []
    return {
        "id": event.id,
        "author": event.author,
        "parts": parts,
        "state_delta": dict(event.actions.state_delta or {}),
        "time": seconds_to_us(event.timestamp),
        "invocation_id": event.invocation_id or None,
    }


def _scopes(state: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    scopes: dict[str, dict[str, Any]] = {scope: {} for scope in SCOPE_NAMES}
    for key, value in state.items():
        scopes[scope_of(key)][key] = value
    return scopes


class TrpcStore:
    """One trpc-agent-py backend: its session service and its memory service.

    Attributes:
        name: The store's name in reports (`trpc+sqlite`, …).
        framework: `"trpc"`.
        backend: The backend as selected (`memory`, `sqlite`, `postgresql`, …).
        capabilities: `TRPC_CAPABILITIES`, the same for every backend.
        url: The URL the framework's services get (`""` for the in-memory store).
    """

    framework = "trpc"
    capabilities = TRPC_CAPABILITIES

    def __init__(self, spec: StoreSpec, kind: str, url: str, temporary: Path | None) -> None:
        self.name = spec.name
        self.backend = spec.backend
        self.kind = kind
        self.url = url
        self._spec = spec
        self._temporary = temporary
        self._sessions: Any = None
        self._memory: Any = None
        self._reached = False
        self._cleaner: Any = None
        self._held: dict[SessionRef, Any] = {}
        self._handed: dict[tuple[SessionRef, str], Any] = {}

    # -- life cycle --------------------------------------------------------------------

    def _service(self) -> Any:
        if self._sessions is None:
            raise RuntimeError(f"store {self.name!r} is not open")
        return self._sessions

    async def open(self) -> None:
        """Build new services on the URL (the in-memory ones are kept) and reach the store."""
        from trpc_agent_sdk import memory, sessions

        if self.kind != "memory":
            await self.close()
        self._held.clear()
        if self.kind == "memory":
            if self._sessions is None:
                self._sessions = sessions.InMemorySessionService()
                self._memory = memory.InMemoryMemoryService(enabled=True)
            return
        if self.kind == "redis":
            self._sessions = sessions.RedisSessionService(db_url=self.url)
            self._memory = memory.RedisMemoryService(db_url=self.url, enabled=True)
        else:
            self._sessions = sessions.SqlSessionService(db_url=self.url)
            self._memory = memory.SqlMemoryService(db_url=self.url, enabled=True)
        if self._reached:
            return
        probe = f"steadyloop-probe-{uuid.uuid4().hex}"
        try:
            if self.kind == "postgresql":
                await _check_schema(self.url, self._spec.redacted)
            # The first open reaches the store: reads of an app nobody uses connect (and
            # create the tables, as the framework does on first use) and touch no data.
            # Later opens are restarts of a store known to be there.
            await self._sessions.list_sessions(app_name=probe)
            await self._memory.search_memory(key=f"{probe}/probe", query="probe")
            self._reached = True
        except BackendUnavailable:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            location = self._spec.location
            message = _scrub(describe(exc), location.password if location is not None else None)
            raise BackendUnavailable(
                f"store {self._spec.redacted!r} cannot be reached: {message}"
            ) from None

    async def close(self) -> None:
        """Close the services (engines, connection pools); errors are dropped."""
        self._held.clear()
        if self.kind == "memory":
            return
        services, self._sessions, self._memory = (self._sessions, self._memory), None, None
        for service in services:
            if service is not None:
                with contextlib.suppress(Exception):
                    await service.close()

    async def dispose(self) -> None:
        """Forget the in-memory store, or remove the SQLite file the adapter made."""
        if self.kind == "memory" and self._sessions is not None:
            await self._sessions.close()
            await self._memory.close()
            self._sessions = self._memory = None
        if self._cleaner is not None:
            self._cleaner.dispose()
            self._cleaner = None
        if self._temporary is not None:
            self._temporary.unlink(missing_ok=True)

    # -- sessions ----------------------------------------------------------------------

    async def create_session(
        self, app: str, user: str, session_id: str | None, state: Mapping[str, Any]
    ) -> str:
        """`create_session(app_name, user_id, session_id, state)`; the id it returns."""
        session = await self._service().create_session(
            app_name=app, user_id=user, session_id=session_id, state=dict(state)
        )
        self._held[SessionRef(app, user, session.id)] = session
        return str(session.id)

    def _native(self, event: StoreEvent) -> Any:
        from trpc_agent_sdk import types
        from trpc_agent_sdk.events import Event

        parts = [_to_part(p, types) for p in event.parts]
        role = "user" if event.author == "user" else "model"
        return Event(
            id=event.id,
            author=event.author,
            invocation_id=event.invocation_id or "",
            timestamp=us_to_seconds(event.time),
            content=types.Content(role=role, parts=parts) if parts else None,
            actions=types.EventActions(state_delta=dict(event.state_delta)),
        )

    async def append_event(
        self, ref: SessionRef, event: StoreEvent, *, idempotency_key: str | None = None
    ) -> None:
        """`append_event(session, event)` on the session this client holds (read if none)."""
        service = self._service()
        session = self._held.get(ref)
        if session is None:
            session = await service.get_session(
                app_name=ref.app, user_id=ref.user, session_id=ref.session_id
            )
            if session is None:
                raise LookupError(
                    f"trpc get_session returned None for session {ref.session_id!r} "
                    f"of user {ref.user!r}: there is no session object to append to"
                )
            self._held[ref] = session
        native = self._native(event)
        self._handed[(ref, event.id)] = native
        try:
            await service.append_event(session, native)
        except Exception:
            # The framework has already put the event on the session object; a caller
            # whose append failed starts over from a fresh read, not from that object.
            self._held.pop(ref, None)
            raise

    async def edit_appended(self, ref: SessionRef, event_id: str, edit: EventEdit) -> None:
        """Edit the very `Event` object last handed to `append_event` for `event_id`."""
        native = self._handed[(ref, event_id)]
        if edit.text is not None:
            texts = [p for p in (native.content.parts if native.content else []) if p.text]
            if not texts:
                raise ValueError(f"event {event_id!r} has no text part to edit")
            texts[0].text = edit.text
        if edit.state_delta:
            native.actions.state_delta.update(dict(edit.state_delta))

    async def get_session(self, ref: SessionRef) -> StoredSession | None:
        """`get_session(...)`: its events and its merged state split by scope."""
        session = await self._service().get_session(
            app_name=ref.app, user_id=ref.user, session_id=ref.session_id
        )
        if session is None:
            return None
        self._held[ref] = session
        return StoredSession(
            user_id=str(session.user_id),
            session_id=str(session.id),
            events=[_event_dict(e) for e in session.events],
            state=_scopes(session.state),
        )

    async def list_sessions(self, app: str, user: str) -> list[str]:
        """`list_sessions(app_name, user_id)`: the ids of the sessions it returns."""
        listed = await self._service().list_sessions(app_name=app, user_id=user)
        return [str(s.id) for s in listed.sessions]

    async def delete_session(self, ref: SessionRef) -> None:
        """`delete_session(app_name, user_id, session_id)`."""
        self._held.pop(ref, None)
        await self._service().delete_session(
            app_name=ref.app, user_id=ref.user, session_id=ref.session_id
        )

    # -- memory ------------------------------------------------------------------------

    async def add_session_to_memory(self, ref: SessionRef) -> None:
        """Read the session, then `store_session(session)` on the memory service."""
        session = await self._service().get_session(
            app_name=ref.app, user_id=ref.user, session_id=ref.session_id
        )
        if session is None:
            raise LookupError(f"trpc get_session returned None for session {ref.session_id!r}")
        await self._memory.store_session(session)

    async def search_memory(
        self, app: str, user: str, query: str, limit: int
    ) -> list[dict[str, Any]]:
        """`search_memory(key="{app}/{user}", query, limit)`: text, author and time per hit."""
        from trpc_agent_sdk.utils import user_key

        found = await self._memory.search_memory(key=user_key(app, user), query=query, limit=limit)
        hits: list[dict[str, Any]] = []
        for entry in found.memories:
            parts = entry.content.parts or []
            hit: dict[str, Any] = {
                "text": "\n".join(p.text for p in parts if p.text is not None),
                "author": entry.author,
            }
            if entry.timestamp:
                hit["time"] = seconds_to_us(datetime.fromisoformat(entry.timestamp).timestamp())
            hits.append(hit)
        return hits

    # -- cleanup -----------------------------------------------------------------------

    async def cleanup(self, app: str) -> None:
        """Remove the app's sessions, its app and user state and its memory, nothing else."""
        self._held = {ref: s for ref, s in self._held.items() if ref.app != app}
        self._handed = {key: e for key, e in self._handed.items() if key[0].app != app}
        if self.kind == "memory":
            self._cleanup_memory(app)
        elif self.kind == "redis":
            await self._cleanup_redis(app)
        else:
            self._cleanup_sql(app)

    def _cleanup_memory(self, app: str) -> None:
        # The in-memory services expose no delete for state or memory: drop the app's
        # entries from their dictionaries.
        service, memory = self._service(), self._memory
        service._sessions.pop(app, None)
        service._user_state.pop(app, None)
        service._app_state.pop(app, None)
        prefix = f"{app}/"
        for key in [k for k in memory._session_events if k.startswith(prefix)]:
            del memory._session_events[key]

    def _cleanup_sql(self, app: str) -> None:
        import sqlalchemy
        from trpc_agent_sdk.memory import MemStorageEvent
        from trpc_agent_sdk.sessions import (
            SessionStorageEvent,
            StorageAppState,
            StorageSession,
            StorageUserState,
        )

        if self._cleaner is None:
            self._cleaner = sqlalchemy.create_engine(self.url)
        with self._cleaner.begin() as conn:
            for table in (
                SessionStorageEvent,
                StorageSession,
                StorageUserState,
                StorageAppState,
            ):
                conn.execute(sqlalchemy.delete(table).where(table.app_name == app))
            conn.execute(
                sqlalchemy.delete(MemStorageEvent).where(
                    MemStorageEvent.save_key.startswith(f"{app}/", autoescape=True)
                )
            )

    async def _cleanup_redis(self, app: str) -> None:
        import redis.asyncio

        escaped = "".join("\\" + c if c in "*?[]\\" else c for c in app)
        patterns = [f"session:{escaped}:*", f"user_state:{escaped}:*", f"memory:{escaped}/*"]
        client = redis.asyncio.Redis.from_url(self.url)
        try:
            keys: list[Any] = [f"app_state:{app}"]
            for pattern in patterns:
                keys.extend([k async for k in client.scan_iter(match=pattern, count=1000)])
            await client.delete(*keys)
        finally:
            await client.aclose()


def _missing_package(exc: ImportError) -> str:
    """The package whose absence `exc` reports: trpc-agent-py itself, or what it imports.

    SQLAlchemy's asyncio module names no module when greenlet is missing, only says so.
    """
    if "greenlet" in str(exc) or (exc.name or "").split(".")[0] == "greenlet":
        return "greenlet"
    top = (exc.name or "trpc_agent_sdk").split(".")[0]
    return "trpc-agent-py" if top == "trpc_agent_sdk" else top


def open_store(spec: StoreSpec) -> TrpcStore:
    """Open a trpc-agent-py store from a `trpc+BACKEND[://…]` selection.

    Raises:
        MissingExtra: trpc-agent-py (or its greenlet) is not installed.
        UnknownBackend: The backend is not one trpc has, or a server backend has no URL.
    """
    try:
        import trpc_agent_sdk.memory
        import trpc_agent_sdk.sessions  # noqa: F401
    except ImportError as exc:
        raise missing_extra(spec, "trpc", _missing_package(exc)) from None
    kind, driver = _kind(spec)
    if kind == "memory":
        return TrpcStore(spec, kind, "", None)
    temporary: Path | None = None
    target = spec.location
    if target is None:
        if kind != "sqlite":
            raise UnknownBackend(
                f"store {spec.redacted!r}: a trpc {spec.backend} store needs its server's URL, "
                f"for example trpc+{spec.backend}://HOST/…"
            )
        temporary = spec.workdir / f"trpc-{uuid.uuid4().hex[:8]}.db"
        target = parse_url(f"sqlite:///{temporary}")
    return TrpcStore(spec, kind, _native_url(kind, driver, target), temporary)
