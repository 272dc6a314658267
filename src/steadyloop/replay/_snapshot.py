"""The canonical snapshot: what a store holds after a case, read back through its API.

A snapshot is plain JSON with these domains (the keys a case's ``expected`` may use):

``sessions``
    ``{handle: {"user_id", "session_id", "events", "historical_events", "state":
    {"session", "user", "app", "temp"}, "summaries"}}``: every session of the case,
    reloaded through the store's `get_session` after a restart; state merged and split
    per scope. A session that cannot be read holds ``{"user_id", "session_id",
    "read_error": <error class>}`` instead (`SessionNotFound` when the store says it
    does not exist, `NotJSON` when an adapter hands back something else).
``memory``
    ``{user: {"entries": [...]}}``: every ``memory.entry`` record of the user's memory
    stream, in stored order (its payload; a record of another kind also shows its
    ``kind``). Only Steadyloop's stores can show it (`memory_entries`); for others it is
    empty and left out of their comparisons.
``queries``
    ``{query_id: {"user", "query", "limit", "hits": [...]}}``: the hits each
    ``search_memory`` got.
``lists``
    ``{list_id: {"user", "sessions": [...]}}``: the ids each ``list_sessions`` got,
    sorted (a listing's order is no promise).
``checkpoints``
    ``{name: {"sessions": …, "memory": …}}`` as they were at each ``checkpoint``.
``errors``
    ``{line: {"op", "error"}}``: operations that ended with an error (its class name).
``outcomes``
    ``{line: {"op", "outcome", "error", "message"}}``: for each operation the case
    expects a store may refuse, whether it was ``refused`` (with the store's error and
    message, the app's name replaced by ``<app>``), ``accepted`` or ``merged``.
``loops``
    ``{run: {"status", "result", "effects"}}``: how each run stands, its end result
    (without times), and how often each scripted tool really ran.
``threads``
    ``{thread: {"thread_id", "namespaces": {ns: {"latest", "history"}}, "reads": {…}}}``:
    what a checkpoint saver holds for each thread of the checkpointer ops, read back
    after a restart, and what each ``saver_get`` / ``saver_list`` got (see
    `steadyloop.replay._saver`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from steadyloop._errors import BackendUnavailable, EncodingError, SteadyloopError
from steadyloop.journal import Journal
from steadyloop.loop import load_run
from steadyloop.records import canonical_json, decode
from steadyloop.replay._journal_store import JournalStore
from steadyloop.replay._store import SessionRef, SessionStore
from steadyloop.sessions import KIND_MEMORY_ENTRY, memory_stream

__all__ = ["empty_snapshot", "read_loop", "read_memory", "read_session", "read_sessions"]


def empty_snapshot() -> dict[str, Any]:
    """Return a snapshot with every domain present and empty."""
    return {
        "sessions": {},
        "memory": {},
        "queries": {},
        "lists": {},
        "checkpoints": {},
        "errors": {},
        "outcomes": {},
        "loops": {},
        "threads": {},
    }


async def read_session(store: SessionStore, ref: SessionRef) -> dict[str, Any]:
    """Reload one session through the store and return its snapshot form."""
    try:
        stored = await store.get_session(ref)
    except BackendUnavailable:
        raise
    except Exception as exc:
        if isinstance(store, JournalStore) and not isinstance(exc, SteadyloopError):
            raise  # a bug of our own store: never a result
        return {"user_id": ref.user, "session_id": ref.session_id, "read_error": type(exc).__name__}
    if stored is None:
        return {"user_id": ref.user, "session_id": ref.session_id, "read_error": "SessionNotFound"}
    try:
        # A copy in plain JSON: the harness never touches the store's own objects, and
        # an adapter that hands back something else breaks its contract, visibly.
        body: dict[str, Any] = decode(canonical_json(stored.to_dict()))
    except EncodingError as exc:
        # The adapter broke its contract (plain JSON only): show it, never crash on it.
        return {
            "user_id": ref.user,
            "session_id": ref.session_id,
            "read_error": "NotJSON",
            "detail": str(exc),
        }
    return body


async def read_sessions(store: SessionStore, sessions: Mapping[str, SessionRef]) -> dict[str, Any]:
    """Reload every session of a case: ``{handle: snapshot form}``."""
    return {handle: await read_session(store, ref) for handle, ref in sessions.items()}


async def read_memory(journal: Journal, app: str, users: list[str]) -> dict[str, Any]:
    """Read every user's memory stream as stored: ``{user: {"entries": [...]}}``."""
    out: dict[str, Any] = {}
    for user in users:
        try:
            records = await journal.read(app, memory_stream(user))
        except SteadyloopError as exc:
            out[user] = {"read_error": type(exc).__name__}
            continue
        entries = []
        for rec in records:
            entry = dict(rec.payload)
            if rec.kind != KIND_MEMORY_ENTRY:
                entry["kind"] = rec.kind
            entries.append(entry)
        out[user] = {"entries": entries}
    return out


async def read_loop(journal: Journal, app: str, run_id: str, effects: Mapping[str, int]) -> Any:
    """Read how a run stands: status, end result (without times) and tool effects."""
    try:
        info = await load_run(journal, app, run_id)
    except SteadyloopError as exc:
        return {"read_error": type(exc).__name__, "effects": dict(sorted(effects.items()))}
    result = None
    if info.state.ended is not None:
        result = info.state.ended.comparable()
        result.pop("run_id", None)
    return {"status": info.status, "result": result, "effects": dict(sorted(effects.items()))}
