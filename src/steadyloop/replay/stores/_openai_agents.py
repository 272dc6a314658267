"""The OpenAI Agents SDK's sessions as stores under test (extra `openai-agents`).

Selected by URL on `--backends`:

| URL | SDK session |
|---|---|
| `openai-agents+memory://` | `SQLiteSession(id)` (its default in-memory database) |
| `openai-agents+sqlite:///FILE` | `SQLiteSession(id, FILE)` |
| `openai-agents+sqlalchemy+sqlite:///FILE` | `SQLAlchemySession` on `sqlite+aiosqlite` |
| `openai-agents+postgresql://USER@HOST/DB` | `SQLAlchemySession` on `postgresql+psycopg` |
| `openai-agents+mysql://USER@HOST/DB` | `SQLAlchemySession` on `mysql+asyncmy` |
| `openai-agents+redis://HOST:PORT/DB` | `RedisSession` |

Without a location (`openai-agents+memory`, `…+sqlite`, `…+sqlalchemy+sqlite`) the
store lives under the harness's temporary directory; `mariadb` is `mysql`, and a
SQLAlchemy driver may be named (`openai-agents+postgresql+asyncpg://…`). The SDK's
other sessions (the OpenAI Conversations API, Dapr, MongoDB, the encrypting and
advanced-SQLite wrappers) are not offered.

SQLAlchemy stores are opened with `create_tables=True`, the SDK's own way to make its
tables. On MySQL/MariaDB that fails (`VARCHAR requires a length`: the SDK declares
`session_id` as a `String` without length), and every operation reports that error.
`?tables=adapter` (e.g. `openai-agents+mysql://root@db/x?tables=adapter`, reported as
`openai-agents+mysql+tables`) instead creates the SDK's own tables, with `VARCHAR(190)`
for the two `session_id` columns and nothing else changed, and opens the sessions with
`create_tables=False` — what the SDK's documentation leaves to its users ("defaults to
False for production use"), with the length of the open upstream fix.

A session here is a conversation: a list of input items, nothing more. So the SDK has
no users, no state, no event times or invocation ids, no listing and no memory; cases
needing those are `not_applicable`. The translation:

- each case app gets its own tables (`oa_<digest>_sessions`, `oa_<digest>_messages`;
  the SDK lets the caller name them) or its own Redis key prefix (`<prefix><app>`), so
  `cleanup` drops exactly that; the case's session id is the SDK's `session_id` as it
  is, and the user id is not stored (two users' sessions with one id are one);
- an event becomes items, the first carrying `"id": event.id`: runs of text parts one
  `message` item (role `user`, `system` or `developer` for those authors with
  `input_text` content, else `assistant` with `output_text`), a tool call a
  `function_call` item (`arguments` as JSON text), a tool result a
  `function_call_output` (`output` is the JSON text of `{"output": …}`, plus `"error"`
  when the case gives one); an event without parts is one message with empty content;
- reading back, an item with an `id` starts an event (author: its role, `tool` for a
  tool output), the items after it until the next `id` belong to it; a tool result's
  name is that of the call with its `call_id` earlier in the conversation;
- deleting a session is `clear_session`; `get_session` always returns the items (the
  SDK cannot say whether a session exists).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from steadyloop._errors import BackendUnavailable, UnknownBackend
from steadyloop._urls import split_scheme
from steadyloop.replay._store import (
    Capability,
    EventEdit,
    SessionRef,
    StoredSession,
    StoreEvent,
    StoreSpec,
    missing_extra,
)
from steadyloop.replay.stores._common import describe, require_postgres_schema

__all__ = ["OpenAIAgentsStore", "open_store"]

CAPABILITIES: frozenset[Capability] = frozenset(
    {
        Capability.EVENTS,
        Capability.EXPLICIT_SESSION_ID,
        Capability.EXPLICIT_EVENT_ID,
        Capability.TOOL_PARTS,
        Capability.DELETE_SESSION,
        Capability.CALLER_EDIT,
    }
)
"""Events only: the SDK keeps items, no state, times, users, listing or memory."""

_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+asyncmy",
    "sqlite": "sqlite+aiosqlite",
}
_ID_LENGTH = 190
_INPUT_ROLES = {"user", "system", "developer"}


def _classify(backend: str) -> tuple[str, str] | None:
    """`(kind, dialect)`: kind `memory`, `sqlite`, `sqlalchemy` or `redis`."""
    if backend in {"memory", "sqlite", "redis"}:
        return backend, ""
    qualifiers, family, _ = split_scheme(backend)
    if qualifiers == ("sqlalchemy",) and family == "sqlite":
        return "sqlalchemy", "sqlite"
    if qualifiers in {(), ("sqlalchemy",)} and family in {"postgresql", "mysql"}:
        return "sqlalchemy", family
    return None


def _tables(app: str) -> tuple[str, str]:
    """The SDK table names this adapter gives a case app."""
    digest = hashlib.sha256(app.encode()).hexdigest()[:16]
    return f"oa_{digest}_sessions", f"oa_{digest}_messages"


class OpenAIAgentsStore:
    """One OpenAI Agents SDK session backend.

    Attributes:
        name: The store's name in reports (`openai-agents+redis`, …).
        framework: `"openai-agents"`.
        backend: `memory`, `sqlite`, `sqlalchemy+sqlite`, `postgresql`, `mysql` or
            `redis`.
        capabilities: `CAPABILITIES`: events, ids, tool parts, delete, caller edits.
    """

    framework = "openai-agents"
    capabilities = CAPABILITIES

    def __init__(self, spec: StoreSpec) -> None:
        classified = _classify(spec.backend)
        if classified is None:
            raise UnknownBackend(
                f"store {spec.redacted!r}: openai-agents has no backend {spec.backend!r} "
                "(memory, sqlite, sqlalchemy+sqlite, postgresql, mysql, redis)"
            )
        kind, dialect = classified
        self._spec = spec
        self._schema_checked = False
        self._kind = kind
        self._dialect = dialect
        self.backend = (
            kind
            if kind != "sqlalchemy"
            else "sqlalchemy+sqlite"
            if dialect == "sqlite"
            else dialect
        )
        self.name = spec.name
        self._made: Path | None = None
        self._path = ""
        self._url = ""
        self._own_tables = False
        self._key_prefix = "agents:session"
        if kind == "sqlite" or (kind == "sqlalchemy" and dialect == "sqlite"):
            if spec.location is not None:
                self._path = spec.location.path
                if not self._path or self._path == "/":
                    raise UnknownBackend(f"store URL {spec.redacted!r} names no file")
            else:
                spec.workdir.mkdir(parents=True, exist_ok=True)
                self._made = spec.workdir / f"{spec.name.replace('+', '-')}.db"
                self._path = str(self._made)
            self._url = f"sqlite+aiosqlite:///{self._path}"
        elif kind in {"sqlalchemy", "redis"}:
            location = spec.location
            if location is None:
                raise UnknownBackend(
                    f"store {spec.redacted!r} needs a server URL, for example "
                    f"openai-agents+{spec.backend}://HOST/…"
                )
            query = location.query_items
            options = dict(query)
            tables = options.get("tables", "sdk")
            if tables not in {"sdk", "adapter"}:
                raise UnknownBackend(
                    f"store {spec.redacted!r}: tables={tables!r}; use tables=sdk or tables=adapter"
                )
            self._own_tables = tables == "adapter"
            if self._own_tables and spec.name == f"{spec.framework}+{spec.backend}":
                self.name = f"{spec.name}+tables"
            if kind == "redis":
                self._key_prefix = options.get("key_prefix", self._key_prefix)
            rest = [(k, v) for k, v in query if k not in {"tables", "key_prefix"}]
            if kind == "redis":
                self._url = location.build(query=rest)
            else:
                self._url = location.sqlalchemy(_DRIVERS, query=rest)
        # The in-memory store: one SQLiteSession (its own :memory: database) per app and
        # session id, kept across restarts because it has nowhere else to live.
        self._memory: dict[tuple[str, str], Any] = {}
        self._open: dict[tuple[str, str], Any] = {}
        self._engine: Any = None
        self._redis: Any = None
        self._made_tables: set[str] = set()
        self._handed: dict[tuple[str, str, str], list[dict[str, Any]]] = {}

    # -- client life ---------------------------------------------------------------------

    async def open(self) -> None:
        """Start a client (an engine or Redis connection), checking the server answers."""
        self._open.clear()
        try:
            if self._kind == "sqlalchemy":
                from sqlalchemy.ext.asyncio import create_async_engine

                self._engine = create_async_engine(self._url)
                async with self._engine.connect():
                    pass
                if not self._schema_checked:
                    await require_postgres_schema(self._engine, self._spec.redacted)
                    self._schema_checked = True
            elif self._kind == "redis":
                import redis.asyncio

                self._redis = redis.asyncio.Redis.from_url(self._url)
                await self._redis.ping()
        except BackendUnavailable:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            raise BackendUnavailable(
                f"store {self._spec.redacted!r} is unreachable: {describe(exc)}"
            ) from None

    async def close(self) -> None:
        """Close every session object and the client (a restart when `open` follows)."""
        sessions, self._open = list(self._open.values()), {}
        for session in sessions:
            with contextlib.suppress(Exception):
                result = session.close()
                if result is not None:
                    await result
        engine, self._engine = self._engine, None
        if engine is not None:
            with contextlib.suppress(Exception):
                await engine.dispose()
        client, self._redis = self._redis, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def dispose(self) -> None:
        """Forget the in-memory sessions, or remove the file this adapter made."""
        await self.close()
        for session in self._memory.values():
            with contextlib.suppress(Exception):
                session.close()
        self._memory.clear()
        self._handed.clear()
        if self._made is not None:
            _remove_sqlite_file(self._made)

    def _session(self, app: str, session_id: str) -> Any:
        """The SDK session object for `session_id` in the app's namespace."""
        key = (app, session_id)
        if self._kind == "memory":
            if key not in self._memory:
                from agents import SQLiteSession

                self._memory[key] = SQLiteSession(session_id)
            return self._memory[key]
        if key in self._open:
            return self._open[key]
        sessions_table, messages_table = _tables(app)
        session: Any
        if self._kind == "sqlite":
            from agents import SQLiteSession

            session = SQLiteSession(
                session_id,
                self._path,
                sessions_table=sessions_table,
                messages_table=messages_table,
            )
        elif self._kind == "redis":
            from agents.extensions.memory import RedisSession

            session = RedisSession(
                session_id, redis_client=self._redis, key_prefix=f"{self._key_prefix}{app}"
            )
        else:
            from agents.extensions.memory import SQLAlchemySession

            session = SQLAlchemySession(
                session_id,
                engine=self._engine,
                create_tables=not self._own_tables,
                sessions_table=sessions_table,
                messages_table=messages_table,
            )
        self._open[key] = session
        return session

    async def _ready(self, app: str, session: Any) -> None:
        """With `tables=adapter`: create the app's tables before the first use."""
        if not self._own_tables or app in self._made_tables:
            return
        from sqlalchemy import MetaData, String

        metadata = MetaData()
        for table in (session._sessions, session._messages):
            copied = table.to_metadata(metadata)
            copied.c.session_id.type = String(_ID_LENGTH)
        async with self._engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
        self._made_tables.add(app)

    # -- sessions --------------------------------------------------------------------------

    async def create_session(
        self, app: str, user: str, session_id: str | None, state: Mapping[str, Any]
    ) -> str:
        """The SDK has no create step: a session is its id; return it unchanged."""
        if session_id is None:
            raise NotImplementedError("openai-agents sessions have no generated ids")
        return session_id

    async def append_event(
        self, ref: SessionRef, event: StoreEvent, *, idempotency_key: str | None = None
    ) -> None:
        """`add_items` with the event's items (see the module doc)."""
        session = self._session(ref.app, ref.session_id)
        await self._ready(ref.app, session)
        items = _to_items(event)
        self._handed[(ref.app, ref.session_id, event.id)] = items
        await session.add_items(items)

    async def edit_appended(self, ref: SessionRef, event_id: str, edit: EventEdit) -> None:
        """Edit the item dicts last handed to the SDK for `event_id`, in place.

        Items hold no state delta, so only a text edit has anything to change.
        """
        items = self._handed[(ref.app, ref.session_id, event_id)]
        if edit.text is None:
            return
        for item in items:
            for content in item.get("content") or []:
                if "text" in content:
                    content["text"] = edit.text
                    return

    async def get_session(self, ref: SessionRef) -> StoredSession | None:
        """`get_items`, regrouped into events."""
        session = self._session(ref.app, ref.session_id)
        await self._ready(ref.app, session)
        items = await session.get_items()
        return StoredSession(
            user_id=ref.user,
            session_id=ref.session_id,
            events=_from_items(items),
            state={"session": {}, "user": {}, "app": {}, "temp": {}},
        )

    async def list_sessions(self, app: str, user: str) -> list[str]:
        """The SDK cannot list sessions."""
        raise NotImplementedError("openai-agents sessions cannot be listed")

    async def delete_session(self, ref: SessionRef) -> None:
        """`clear_session`."""
        session = self._session(ref.app, ref.session_id)
        await self._ready(ref.app, session)
        await session.clear_session()

    async def add_session_to_memory(self, ref: SessionRef) -> None:
        """The SDK has no memory."""
        raise NotImplementedError("openai-agents has no memory service")

    async def search_memory(
        self, app: str, user: str, query: str, limit: int
    ) -> list[dict[str, Any]]:
        """The SDK has no memory."""
        raise NotImplementedError("openai-agents has no memory service")

    # -- cleanup ---------------------------------------------------------------------------

    async def cleanup(self, app: str) -> None:
        """Drop the app's tables, keys or in-memory sessions."""
        self._handed = {k: v for k, v in self._handed.items() if k[0] != app}
        for key in [k for k in self._open if k[0] == app]:
            session = self._open.pop(key)
            with contextlib.suppress(Exception):
                result = session.close()
                if result is not None:
                    await result
        if self._kind == "memory":
            for key in [k for k in self._memory if k[0] == app]:
                self._memory.pop(key).close()
        elif self._kind == "sqlite":
            _drop_sqlite_tables(self._path, _tables(app))
        elif self._kind == "redis":
            prefix = f"{self._key_prefix}{app}"
            pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + "*"
            keys = [k async for k in self._redis.scan_iter(match=pattern, count=1000)]
            for i in range(0, len(keys), 1000):
                await self._redis.delete(*keys[i : i + 1000])
        else:
            from sqlalchemy import MetaData, Table

            metadata = MetaData()
            sessions_table, messages_table = _tables(app)
            async with self._engine.begin() as conn:
                # Messages first (they reference sessions); checkfirst, because MariaDB
                # warns about DROP TABLE IF EXISTS of a table that is not there.
                for name in (messages_table, sessions_table):
                    await conn.run_sync(Table(name, metadata).drop, checkfirst=True)
            self._made_tables.discard(app)


def _remove_sqlite_file(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _drop_sqlite_tables(path: str, tables: tuple[str, str]) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for table in reversed(tables):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.commit()


def _role(author: str) -> str:
    return author if author in _INPUT_ROLES else "assistant"


def _message(role: str, texts: list[str]) -> dict[str, Any]:
    if role in _INPUT_ROLES:
        return {
            "type": "message",
            "role": role,
            "content": [{"type": "input_text", "text": t} for t in texts],
        }
    return {
        "type": "message",
        "role": role,
        "status": "completed",
        "content": [{"type": "output_text", "text": t, "annotations": []} for t in texts],
    }


def _to_items(event: StoreEvent) -> list[dict[str, Any]]:
    """The SDK input items for a case event (see the module doc)."""
    role = _role(event.author)
    items: list[dict[str, Any]] = []
    texts: list[str] = []
    for part in event.parts:
        kind = part.get("type")
        if kind == "text":
            texts.append(str(part["text"]))
            continue
        if texts:
            items.append(_message(role, texts))
            texts = []
        if kind == "tool_call":
            items.append(
                {
                    "type": "function_call",
                    "call_id": part.get("call_id"),
                    "name": part.get("name"),
                    "arguments": json.dumps(part.get("arguments")),
                }
            )
        elif kind == "tool_result":
            output: dict[str, Any] = {"output": copy.deepcopy(part.get("response"))}
            if part.get("error") is not None:
                output["error"] = part["error"]
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": part.get("call_id"),
                    "output": json.dumps(output),
                }
            )
        else:
            raise ValueError(f"openai-agents adapter: unknown part type {kind!r}")
    if texts or not items:
        items.append(_message(role, texts))
    items[0] = {**items[0], "id": event.id}
    return items


def _from_items(items: list[Any]) -> list[dict[str, Any]]:
    """Regroup read-back items into events in the snapshot's event form."""
    events: list[dict[str, Any]] = []
    call_names: dict[Any, Any] = {}
    for item in items:
        kind = item.get("type", "message")
        if "id" in item or not events:
            author = (
                item.get("role", "assistant")
                if kind == "message"
                else "tool"
                if kind == "function_call_output"
                else "assistant"
            )
            events.append(
                {
                    "id": item.get("id"),
                    "author": author,
                    "parts": [],
                    "state_delta": {},
                    "time": None,
                    "invocation_id": None,
                }
            )
        parts = events[-1]["parts"]
        if kind == "message":
            content = item.get("content")
            if isinstance(content, str):
                parts.append({"type": "text", "text": content})
            else:
                parts.extend(
                    {"type": "text", "text": c.get("text")} for c in content or [] if "text" in c
                )
        elif kind == "function_call":
            call_names[item.get("call_id")] = item.get("name")
            parts.append(
                {
                    "type": "tool_call",
                    "call_id": item.get("call_id"),
                    "name": item.get("name"),
                    "arguments": json.loads(item.get("arguments") or "null"),
                }
            )
        elif kind == "function_call_output":
            raw = item.get("output")
            try:
                output = json.loads(raw) if isinstance(raw, str) else raw
            except json.JSONDecodeError:
                output = {"output": raw}
            if not isinstance(output, dict):
                output = {"output": output}
            parts.append(
                {
                    "type": "tool_result",
                    "call_id": item.get("call_id"),
                    "name": call_names.get(item.get("call_id"), ""),
                    "response": output.get("output"),
                    "error": output.get("error"),
                }
            )
        else:
            parts.append({"type": "other", "item": item})
    return events


def _needed_modules(spec: StoreSpec) -> list[str]:
    """The modules a store of `spec` imports when it runs (so a missing one shows now)."""
    classified = _classify(spec.backend)
    kind, dialect = classified if classified is not None else ("memory", "")
    if kind in {"memory", "sqlite"}:
        return ["agents.memory"]
    if kind == "redis":
        return ["agents.memory", "redis.asyncio", "agents.extensions.memory.redis_session"]
    given = spec.location.driver if spec.location is not None else ""
    driver = given or split_scheme(_DRIVERS[dialect])[2]
    return [
        "agents.memory",
        "sqlalchemy.ext.asyncio",
        "greenlet",
        "agents.extensions.memory.sqlalchemy_session",
        driver,
    ]


def open_store(spec: StoreSpec) -> OpenAIAgentsStore:
    """The entry point `openai-agents`: a store for an `openai-agents+…` URL.

    Raises:
        MissingExtra: openai-agents, or a driver its store needs (extra
            `openai-agents`), is not installed.
        UnknownBackend: The backend is not one of the SDK's, or a server URL is missing.
    """
    import importlib

    for module in _needed_modules(spec):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            package = "openai-agents" if module.startswith("agents") else module.split(".")[0]
            raise missing_extra(spec, "openai-agents", package) from exc
    return OpenAIAgentsStore(spec)
