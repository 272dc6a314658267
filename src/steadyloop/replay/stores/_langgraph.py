"""LangGraph's checkpointers as stores under test (extra `langgraph`).

Selected by URL on `--backends`:

| URL | checkpointer |
|---|---|
| `langgraph+memory` | `InMemorySaver` (the reference) |
| `langgraph+sqlite:///FILE` | `SqliteSaver` |
| `langgraph+async+sqlite:///FILE` | `AsyncSqliteSaver` |
| `langgraph+postgresql://USER@HOST/DB` | `PostgresSaver` |
| `langgraph+async+postgresql://USER@HOST/DB` | `AsyncPostgresSaver` |

(`postgres` is `postgresql`.) Without a location (`langgraph+sqlite`,
`langgraph+async+sqlite`) the file lives under the harness's temporary directory. The
PostgreSQL savers make their fixed tables (`checkpoints`, `checkpoint_blobs`,
`checkpoint_writes`, `checkpoint_migrations`) with their own `setup()`; a
`?options=-csearch_path%3DSCHEMA` picks a schema, which must exist.

A session is what a graph keeps for a thread, and the adapter drives the saver the
way LangGraph's Pregel loop does:

- a session is the thread `<app>/<session id>` in the root namespace `""`; its
  first checkpoint (`source: "input"`, step -1) holds the initial state, one channel
  per state key, and the channel `messages`, the list of events, laid out as
  LangGraph's `DeltaChannel` lays out an append-only list: a checkpoint holds it whole
  (a `_DeltaSnapshot`) at the start and every `SNAPSHOT_EVERY` events, and otherwise
  not at all, the events being the `messages` writes of its ancestors;
- an append is one super-step: the adapter takes the thread's newest checkpoint
  config (the one its own last `put` returned, as a running graph holds it; after a
  restart or for a thread's first step, the latest tuple's, by `get_tuple`), hands
  the saver the step's task writes with `put_writes` (task id: the event id; writes:
  `("messages", event)` and one `(key, value)` per state key),
  reads the checkpoint back by id and applies its `pending_writes` as a resumed graph
  does (a `messages` write is appended to the list the running graph holds, rebuilt
  after a restart as below; any other write replaces its channel), then
  `put`s the next checkpoint, its parent the one read, with the saver's own
  `get_next_version` for every channel written and `new_versions` naming only those;
- metadata carries `app`, `user` and `step`; listing a user's sessions is
  `list(None, filter={"app": …, "user": …})`, the distinct thread ids in the saver's
  order; deleting a session is `delete_thread`;
- reading back is `get_tuple` of the thread's latest checkpoint after a restart: its
  `messages` (restored as LangGraph's loop restores a `DeltaChannel`: the snapshot the
  checkpoint holds, or the saver's `get_delta_channel_history` seed and writes
  replayed) are the events, its other channels the state (a `user:`, `app:` or
  `temp:` key, a channel like any other, in the scope its prefix names), its
  metadata's `user` the user.

The checkpoint ids are LangGraph's own `uuid6(clock_seq=step)`, as the Pregel loop
makes them. Nothing is repaired: values, order and errors are the saver's. The
`InMemorySaver` lives in this store object, so a restart keeps it; every other saver
gets a new connection on `open`.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from steadyloop._errors import BackendUnavailable, UnknownBackend
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
)
from steadyloop.replay.stores._common import describe
from steadyloop.replay.stores._langgraph_ops import SaverOps

__all__ = [
    "CAPABILITIES",
    "SCHEMA_QUERY",
    "CheckpointerStore",
    "open_store",
    "parse_target",
    "require_schema",
]

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
        Capability.CALLER_EDIT,
        Capability.CHECKPOINTER,
    }
)
"""A thread's channels hold every state key and the events. A thread has no user, app
or temp scope: such keys are channels of the thread like any other, reported in the
scope their prefix names, so they are compared only with the in-memory saver. No
generated ids (a graph's caller names the thread) and no memory. The checkpointer ops
of the case language run on the saver itself (`_langgraph_ops`)."""

MESSAGES = "messages"
"""The channel that holds a session's events: a LangGraph `DeltaChannel` (see the module doc)."""

SNAPSHOT_EVERY = 100
"""Every this many events the `messages` channel is checkpointed whole (a `_DeltaSnapshot`),
as `DeltaChannel`'s default `snapshot_frequency` does."""


def _whole(messages: list[Any]) -> Any:
    """The `messages` channel stored whole: LangGraph's `_DeltaSnapshot` blob."""
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    return _DeltaSnapshot(messages)


def _extend(state: list[Any], writes: Sequence[Any]) -> list[Any]:
    """The `messages` reducer: the writes appended, in order (batching-invariant)."""
    return [*state, *writes]


_KINDS = ("memory", "sqlite", "async+sqlite", "postgresql", "async+postgresql")


def parse_target(spec: StoreSpec) -> tuple[str, str]:
    """Return `(kind, location)` for a `langgraph+…` selection.

    `kind` is one of `memory`, `sqlite`, `async+sqlite`, `postgresql`,
    `async+postgresql`; `location` is a file path, a PostgreSQL URL, or `""` (a fresh
    file under the harness's temporary directory, or the in-memory saver).

    Raises:
        UnknownBackend: The backend is not a LangGraph checkpointer, or a PostgreSQL
            store has no URL.
    """
    backend = spec.backend.replace("postgres+", "postgresql+")
    kind = {"postgres": "postgresql", "async+postgres": "async+postgresql"}.get(backend, backend)
    if kind not in _KINDS:
        raise UnknownBackend(
            f"store {spec.redacted!r}: unknown LangGraph checkpointer {spec.backend!r}; "
            f"known: {', '.join('langgraph+' + k for k in _KINDS)}"
        )
    location = spec.location
    if kind.endswith("postgresql"):
        if location is None:
            raise UnknownBackend(
                f"store {spec.redacted!r}: a PostgreSQL checkpointer needs a URL "
                "(langgraph+postgresql://USER@HOST/DB)"
            )
        return kind, location.build(scheme="postgresql")
    if kind == "memory" or location is None:
        return kind, ""
    path = location.path
    if not path or path == "/":
        raise UnknownBackend(f"store URL {spec.redacted!r} names no file")
    return kind, path


SCHEMA_QUERY = "SELECT current_schema() AS s, current_setting('search_path') AS p"
"""The schema a PostgreSQL connection writes to (`s`, `NULL` when none exists) and its path."""


def require_schema(row: Any, spec: StoreSpec) -> None:
    """Refuse a PostgreSQL store whose `search_path` names no schema that exists.

    `row` is the `dict_row` answer to `SCHEMA_QUERY`.

    Raises:
        BackendUnavailable: No schema of the path exists; the message names it.
    """
    if row is not None and row["s"] is not None:
        return
    path = str(row["p"] if row is not None else "")
    names = [p.strip().strip('"') for p in path.split(",") if p.strip()]
    name = next((n for n in names if n != "$user"), path)
    raise BackendUnavailable(
        f"store {spec.redacted!r}: the PostgreSQL schema {name!r} (its search_path: {path}) "
        f'does not exist; create it first: CREATE SCHEMA "{name}"'
    )


def _checkpoint_id(step: int) -> str:
    from langgraph.checkpoint.base.id import uuid6

    return str(uuid6(clock_seq=step + 1))


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


class CheckpointerStore(SaverOps):
    """One LangGraph checkpointer under test (see the module doc for the translation).

    Args:
        spec: The parsed selection.
        saver: A saver to test instead of the one the URL names; it is kept across
            restarts, like the in-memory saver.
        wrap: Called with each saver the store opens; what it returns is used instead
            (a planted faulty saver around the real one).
    """

    framework = "langgraph"
    capabilities = CAPABILITIES

    def __init__(
        self, spec: StoreSpec, saver: Any = None, wrap: Callable[[Any], Any] | None = None
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.kind, self.location = parse_target(spec)
        self.backend = self.kind
        self._fixed = saver
        if saver is None and self.kind == "memory":
            from langgraph.checkpoint.memory import InMemorySaver

            self._fixed = InMemorySaver()
        self._wrap = wrap
        if self._fixed is not None and wrap is not None:
            self._fixed = wrap(self._fixed)
        self._made: Path | None = None
        if self.kind.endswith("sqlite") and not self.location:
            spec.workdir.mkdir(parents=True, exist_ok=True)
            self._made = spec.workdir / f"langgraph-{self.kind.replace('+', '-')}.db"
            self.location = str(self._made)
        self.saver: Any = None
        self._conn: Any = None
        self._threads: dict[str, set[str]] = {}
        self._handed: dict[tuple[SessionRef, str], dict[str, Any]] = {}
        # The config `put` returned for each thread's newest checkpoint, as a running
        # graph knows it; a restart forgets it (`open`), and the next append reads the
        # latest tuple again.
        self._latest: dict[SessionRef, Any] = {}
        self._messages: dict[SessionRef, list[Any]] = {}

    # -- the saver's calls, sync or async ---------------------------------------------

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        saver = self.saver
        if self.kind.startswith("async+"):
            if name == "list":
                return [t async for t in saver.alist(*args, **kwargs)]
            return await getattr(saver, "a" + name)(*args, **kwargs)
        result = getattr(saver, name)(*args, **kwargs)
        if name == "list":
            return list(result)
        if inspect.isawaitable(result):  # pragma: no cover - a wrapped async saver
            return await result
        return result

    # -- life -------------------------------------------------------------------------

    async def open(self) -> None:
        self._latest.clear()
        self._messages.clear()
        if self._fixed is not None:
            self.saver = self._fixed
            return
        try:
            if self.kind == "sqlite":
                import sqlite3

                from langgraph.checkpoint.sqlite import SqliteSaver

                self._conn = sqlite3.connect(self.location, check_same_thread=False)
                self.saver = SqliteSaver(self._conn)
                self.saver.setup()
            elif self.kind == "async+sqlite":
                import aiosqlite
                from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

                self._conn = await aiosqlite.connect(self.location)
                self.saver = AsyncSqliteSaver(self._conn)
                await self.saver.setup()
            else:
                await self._open_postgres()
            if self._wrap is not None:
                self.saver = self._wrap(self.saver)
        except BackendUnavailable:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            raise BackendUnavailable(f"store {self.spec.redacted!r}: {describe(exc)}") from exc

    async def _open_postgres(self) -> None:
        import psycopg
        from psycopg.rows import dict_row

        options: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0}
        if self.kind == "postgresql":
            from langgraph.checkpoint.postgres import PostgresSaver

            self._conn = psycopg.Connection.connect(self.location, row_factory=dict_row, **options)
            schema = self._conn.execute(SCHEMA_QUERY).fetchone()
            self._need_schema(schema)
            self.saver = PostgresSaver(self._conn)
            self.saver.setup()
        else:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

            self._conn = await psycopg.AsyncConnection.connect(
                self.location, row_factory=dict_row, **options
            )
            schema = await (await self._conn.execute(SCHEMA_QUERY)).fetchone()
            self._need_schema(schema)
            self.saver = AsyncPostgresSaver(self._conn)
            await self.saver.setup()

    def _need_schema(self, row: Any) -> None:
        require_schema(row, self.spec)

    async def close(self) -> None:
        conn, self._conn, self.saver = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                result = conn.close()
                if inspect.isawaitable(result):
                    await result

    async def dispose(self) -> None:
        self._threads.clear()
        if self._made is not None:
            _remove(self._made)

    # -- sessions as threads ----------------------------------------------------------

    def _config(self, app: str, session_id: str, checkpoint_id: str | None = None) -> Any:
        configurable: dict[str, Any] = {"thread_id": f"{app}/{session_id}", "checkpoint_ns": ""}
        if checkpoint_id is not None:
            configurable["checkpoint_id"] = checkpoint_id
        return {"configurable": configurable}

    def _checkpoint(
        self, step: int, values: Mapping[str, Any], versions: Mapping[str, Any], updated: list[str]
    ) -> dict[str, Any]:
        return {
            "v": 4,
            "id": _checkpoint_id(step),
            "ts": datetime.now(UTC).isoformat(),
            "channel_values": dict(values),
            "channel_versions": dict(versions),
            "versions_seen": {},
            "updated_channels": updated,
        }

    def _versions(self, old: Mapping[str, Any], channels: list[str]) -> dict[str, Any]:
        return {ch: self.saver.get_next_version(old.get(ch), None) for ch in channels}

    async def create_session(
        self, app: str, user: str, session_id: str | None, state: Mapping[str, Any]
    ) -> str:
        if session_id is None:  # pragma: no cover - outside the capabilities
            raise NotImplementedError("a LangGraph thread id is the caller's")
        self._threads.setdefault(app, set()).add(session_id)
        values: dict[str, Any] = {MESSAGES: _whole([]), **copy.deepcopy(dict(state))}
        channels = list(values)
        versions = self._versions({}, channels)
        checkpoint = self._checkpoint(-1, values, versions, channels)
        metadata = {"source": "input", "step": -1, "parents": {}, "app": app, "user": user}
        await self._call("put", self._config(app, session_id), checkpoint, metadata, versions)
        return session_id

    async def append_event(
        self, ref: SessionRef, event: StoreEvent, *, idempotency_key: str | None = None
    ) -> None:
        config = self._latest.get(ref)
        if config is None:
            latest = await self._call("get_tuple", self._config(ref.app, ref.session_id))
            if latest is None:
                raise LookupError(f"thread {ref.session_id!r} has no checkpoint")
            config = latest.config
        body = event.to_dict()
        self._handed[(ref, event.id)] = body
        writes = [(MESSAGES, body), *((k, v) for k, v in event.state_delta.items())]
        await self._call("put_writes", config, writes, event.id)
        read = await self._call("get_tuple", config)
        if read is None:
            raise LookupError(f"checkpoint {config!r} vanished after put_writes")
        messages = self._messages.get(ref)
        if messages is None:
            messages = await self._read_messages(read)
        old = read.checkpoint
        values = {k: v for k, v in old["channel_values"].items() if k != MESSAGES}
        updated: list[str] = []
        for _task, channel, value in read.pending_writes or ():
            if channel == MESSAGES:
                messages = [*messages, value]
            else:
                values[channel] = value
            if channel not in updated:
                updated.append(channel)
        if len(messages) % SNAPSHOT_EVERY == 0:
            values[MESSAGES] = _whole(messages)
        step = int(read.metadata.get("step", -1)) + 1
        versions = dict(old["channel_versions"])
        new_versions = self._versions(versions, updated)
        versions.update(new_versions)
        checkpoint = self._checkpoint(step, values, versions, updated)
        metadata = {**read.metadata, "source": "loop", "step": step}
        self._latest.pop(ref, None)
        self._messages.pop(ref, None)
        made = await self._call("put", read.config, checkpoint, metadata, new_versions)
        self._latest[ref] = made
        self._messages[ref] = messages

    async def _read_messages(self, tup: Any) -> list[Any]:
        """The `messages` channel of a checkpoint, as LangGraph's loop rebuilds a delta channel.

        A checkpoint holding the channel (a `_DeltaSnapshot`) restores it directly;
        otherwise the saver's `get_delta_channel_history` gives the nearest stored
        value up the parent chain and the writes after it, replayed oldest first. The
        checkpoint's own pending writes are the next step's, never part of its value.
        """
        from langgraph.channels.delta import DeltaChannel

        channel = DeltaChannel(_extend, list)
        values = tup.checkpoint["channel_values"]
        if MESSAGES in values:
            return list(channel.from_checkpoint(values[MESSAGES]).get())
        history = (
            await self._call("get_delta_channel_history", config=tup.config, channels=[MESSAGES])
        )[MESSAGES]
        restored = channel.from_checkpoint(history.get("seed"))
        restored.replay_writes(history["writes"])
        return list(restored.get())

    async def edit_appended(self, ref: SessionRef, event_id: str, edit: EventEdit) -> None:
        body = self._handed[(ref, event_id)]
        if edit.text is not None:
            for part in body["parts"]:
                if part.get("type") == "text":
                    part["text"] = edit.text
                    break
        body["state_delta"].update(edit.state_delta)

    async def get_session(self, ref: SessionRef) -> StoredSession | None:
        got = await self._call("get_tuple", self._config(ref.app, ref.session_id))
        if got is None:
            return None
        events = await self._read_messages(got)
        values = {k: v for k, v in got.checkpoint["channel_values"].items() if k != MESSAGES}
        state: dict[str, dict[str, Any]] = {scope: {} for scope in SCOPE_NAMES}
        for key, value in values.items():
            state[scope_of(key)][key] = value
        return StoredSession(
            user_id=str(got.metadata.get("user")),
            session_id=got.config["configurable"]["thread_id"].removeprefix(f"{ref.app}/"),
            events=list(events),
            state=state,
        )

    async def list_sessions(self, app: str, user: str) -> list[str]:
        found: list[str] = []
        for tup in await self._call("list", None, filter={"app": app, "user": user}):
            thread = tup.config["configurable"]["thread_id"].removeprefix(f"{app}/")
            if thread not in found:
                found.append(thread)
        return found

    async def delete_session(self, ref: SessionRef) -> None:
        self._latest.pop(ref, None)
        self._messages.pop(ref, None)
        await self._call("delete_thread", f"{ref.app}/{ref.session_id}")

    async def add_session_to_memory(self, ref: SessionRef) -> None:  # pragma: no cover
        raise NotImplementedError("a checkpointer has no memory")

    async def search_memory(
        self, app: str, user: str, query: str, limit: int
    ) -> list[dict[str, Any]]:  # pragma: no cover - outside the capabilities
        raise NotImplementedError("a checkpointer has no memory")

    async def cleanup(self, app: str) -> None:
        self._latest = {k: v for k, v in self._latest.items() if k.app != app}
        self._messages = {k: v for k, v in self._messages.items() if k.app != app}
        for session_id in sorted(self._threads.pop(app, set())):
            await self._call("delete_thread", f"{app}/{session_id}")
        self._handed = {k: v for k, v in self._handed.items() if k[0].app != app}


def open_store(spec: StoreSpec) -> CheckpointerStore:
    """The entry point `langgraph`: a store for a `langgraph+…` URL.

    Raises:
        MissingExtra: LangGraph or the checkpointer's package (extra `langgraph`) is
            not installed.
        UnknownBackend: The backend is not one of LangGraph's checkpointers.
    """
    import importlib

    kind, _ = parse_target(spec)
    modules = {
        "memory": ["langgraph.checkpoint.memory"],
        "sqlite": ["langgraph.checkpoint.sqlite"],
        "async+sqlite": ["langgraph.checkpoint.sqlite.aio", "aiosqlite"],
        "postgresql": ["langgraph.checkpoint.postgres", "psycopg"],
        "async+postgresql": ["langgraph.checkpoint.postgres.aio", "psycopg"],
    }[kind]
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise missing_extra(spec, "langgraph", module.split(".")[0]) from exc
    return CheckpointerStore(spec)
