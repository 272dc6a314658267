"""The canonical snapshot: what a store holds after a case, read back through its API.

A [`Snapshot`][steadyloop.replay.Snapshot] has one field per section, and
[`SECTIONS`][steadyloop.replay.SECTIONS] is read from those fields: the case loader (the
keys a case's ``expected`` may use), the normaliser, the diff and the report all take the
list from here. Adding a section is adding a field (with its place in the report's
domains, [`REPORT_DOMAINS`][steadyloop.replay.REPORT_DOMAINS], following from it).

The sections, each plain JSON:

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

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from steadyloop._errors import BackendUnavailable, EncodingError, SteadyloopError
from steadyloop.journal import Journal
from steadyloop.loop import load_run
from steadyloop.records import canonical_json, decode
from steadyloop.replay._store import SessionRef, SessionStore
from steadyloop.sessions import KIND_MEMORY_ENTRY, memory_stream

__all__ = [
    "SECTIONS",
    "Snapshot",
    "empty_snapshot",
    "read_loop",
    "read_memory",
    "read_session",
    "read_sessions",
]


@dataclass(frozen=True)
class Snapshot:
    """What one store held after one case: one field per section, each plain JSON.

    The fields are fixed; the harness fills each section's mapping as the case runs
    (a section is keyed by the case's names: session handles, users, query, list and
    checkpoint names, line numbers, run ids).

    Attributes:
        sessions: Every session of the case, by handle, as reloaded.
        memory: Every user's stored memory entries, by user.
        queries: The hits each ``search_memory`` got, by query id.
        lists: The ids each ``list_sessions`` got, by list id.
        checkpoints: Sessions and memory at each ``checkpoint``, by name.
        errors: Operations that ended with an error, by line.
        outcomes: Operations a store may refuse, and what it did, by line.
        loops: How each run stands, by run id.
        threads: What a LangGraph checkpointer reads back for each thread, after a
            restart, and what each checkpointer read got (the ``saver_*`` operations).
    """

    sessions: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    queries: dict[str, Any] = field(default_factory=dict)
    lists: dict[str, Any] = field(default_factory=dict)
    checkpoints: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, Any] = field(default_factory=dict)
    outcomes: dict[str, Any] = field(default_factory=dict)
    loops: dict[str, Any] = field(default_factory=dict)
    threads: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return the snapshot as one JSON object, its sections in `SECTIONS` order."""
        return {name: getattr(self, name) for name in SECTIONS}

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> Snapshot:
        """Build a snapshot from a JSON object holding some of the sections.

        Raises:
            ValueError: A key is not a section.
        """
        unknown = sorted(set(body) - set(SECTIONS))
        if unknown:
            raise ValueError(
                f"not snapshot sections: {', '.join(unknown)}; expected some of "
                + ", ".join(SECTIONS)
            )
        return cls(**{name: dict(value) for name, value in body.items()})


SECTIONS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Snapshot))
"""The sections of a snapshot, in order: the fields of [`Snapshot`][steadyloop.replay.Snapshot]."""


def empty_snapshot() -> Snapshot:
    """Return a snapshot with every section present and empty."""
    return Snapshot()


async def read_session(
    store: SessionStore, ref: SessionRef, *, own: bool = False
) -> dict[str, Any]:
    """Reload one session through the store and return its snapshot form.

    Args:
        store: The store under test.
        ref: The session.
        own: Whether `store` is Steadyloop's own: an error that is not a
            [`SteadyloopError`][steadyloop.SteadyloopError] is then a bug, raised,
            never a result.
    """
    try:
        stored = await store.get_session(ref)
    except BackendUnavailable:
        raise
    except Exception as exc:
        if own and not isinstance(exc, SteadyloopError):
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


async def read_sessions(
    store: SessionStore, sessions: Mapping[str, SessionRef], *, own: bool = False
) -> dict[str, Any]:
    """Reload every session of a case: ``{handle: snapshot form}`` (`own` as for `read_session`)."""
    return {handle: await read_session(store, ref, own=own) for handle, ref in sessions.items()}


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
