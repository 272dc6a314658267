"""The store under test: the protocol every session store the harness drives implements.

The replay harness (`replay()`) runs a case's operations on a
*store under test* through the [`SessionStore`][steadyloop.replay.SessionStore] protocol
below, reads back what the store kept, and leaves ids, the clock, normalisation,
comparison and the report to itself. Steadyloop's own session service on each journal
is one implementation; adapters to other frameworks' session stores are others. An
adapter **only translates**: it turns a case event into the framework's event, calls
the framework, and turns what the framework reads back into plain JSON. It never
repairs, sorts, de-duplicates or retries: whatever the framework does is the finding.

# Selecting a store by URL

`--backends` (and `replay()`'s `backends`) takes, besides
Steadyloop's journal names and URLs (`sqlite`, `postgres`, `memory://`, …), store URLs
of the form `FRAMEWORK+BACKEND://…` — `adk+memory://`, `adk+sqlite:///FILE`,
`adk+postgresql://…`, `trpc+redis://…`, `openai-agents+sqlite://…` — or just
`FRAMEWORK+BACKEND` (`adk+sqlite`), which asks the adapter for a fresh store of its
own under the harness's temporary directory. `FRAMEWORK` names an entry point in the
[`STORE_ENTRY_POINT_GROUP`][steadyloop.replay.STORE_ENTRY_POINT_GROUP] group; its object
is an *opener*, `open_store(spec: StoreSpec) -> SessionStore`, called once per selected
store ([`StoreSpec`][steadyloop.replay.StoreSpec] says what it gets). A package adds its
own store the same way:

```toml
[project.entry-points."steadyloop.replay_stores"]
mystore = "mypackage.replay:open_store"
```

An opener whose framework is not installed raises
[`MissingExtra`][steadyloop.replay.MissingExtra] (use
[`missing_extra`][steadyloop.replay.missing_extra]); the CLI prints its one line and exits
2. A store that cannot be reached raises
[`BackendUnavailable`][steadyloop.BackendUnavailable] from `open()`, naming the URL
through [`redact_url`][steadyloop.journal.redact_url] (never its password); exit 2 too.

# The life of a store in one case run

```
store = open_store(spec)              # once per selected store, before any case
for each case:
    await store.open()                # a fresh client
    ... create_session / append_event / ... as the case says ...
    await store.close(); await store.open()   # a restart before every read-back
    ... get_session / list_sessions / search_memory ...
    await store.cleanup(app)          # remove what this case created (unless kept)
    await store.close()
await store.dispose()                 # once, after every case: remove the store itself
```

Opening again is a *restart*: the new client must reach the same data through the
framework's own loading path, so nothing a read-back sees comes from a client's cache.
An in-memory store has no other process to reach, so its adapter keeps the framework's
service object across `close`/`open` (and says so); every other adapter builds a new
client. `close()` must work after a failed operation.

Every case runs in an *app* of its own that the harness names
(`replay.<case_id>.<hex>`); an adapter passes it to the framework as the app name, or
uses it as the namespace for a framework with no app (openai-agents), and `cleanup`
removes exactly that app's data.

# What an adapter receives and returns

Events come as a [`StoreEvent`][steadyloop.replay.StoreEvent]; parts are plain dicts:

```python
{"type": "text", "text": str}
{"type": "tool_call", "call_id": str, "name": str, "arguments": dict}
{"type": "tool_result", "call_id": str, "name": str, "response": JSON, "error": str | None}
```

State keys carry their scope prefix (`"k"`, `"user:k"`, `"app:k"`, `"temp:k"`; see
[`scope_of`][steadyloop.replay.scope_of]). Times are integer microseconds since the epoch;
an adapter whose framework counts float seconds converts with
[`us_to_seconds`][steadyloop.replay.us_to_seconds] and back with
[`seconds_to_us`][steadyloop.replay.seconds_to_us] — the one rule, which round-trips
every time a case can hold — so a store that loses precision shows as a difference.

`get_session` returns a [`StoredSession`][steadyloop.replay.StoredSession] (or `None`
when the store says there is no such session):

```python
StoredSession(
    user_id="ada", session_id="s1",
    events=[{"id": "e1", "author": "user", "parts": [{"type": "text", "text": "hi"}],
             "state_delta": {"k": 1}, "time": 1700000000123457, "invocation_id": None}],
    state={"session": {"k": 1}, "user": {"user:city": "Lyon"}, "app": {}, "temp": {}},
)
```

Each event dict has exactly the keys `id`, `author`, `parts`, `state_delta`, `time`
(integer microseconds, or `None` when the store keeps no time) and `invocation_id`
(`None` when the store keeps none); fields the framework does not keep are left out of
`capabilities` rather than invented. `state` has the four scopes, each a dict of the
keys (with prefixes) the store reports for that scope after a reload.
`search_memory` returns hits as dicts with at least `text`, and `session_id`,
`event_id`, `author`, `time` where the store reports them, in the store's order.

An operation the store refuses raises: any exception but
[`BackendUnavailable`][steadyloop.BackendUnavailable] (and ``BaseException``s such as
cancellation) is the store's *result* — the harness records its type and message and
goes on. [`BackendUnavailable`][steadyloop.BackendUnavailable] means the store went away;
the run stops. Where a case expects a store may refuse (a second `create_session` on an
existing id, the same event twice, the caller editing its event after appending it),
the harness records the [`Outcome`][steadyloop.replay.Outcome]: `refused` (it raised),
`accepted` (the operation took effect as a new thing) or `merged` (it was folded into
what the store already had: the existing session kept, one copy of the event kept).

# A minimal adapter

```python
from steadyloop.replay import Capability, StoredSession, StoreSpec

class DictStore:
    name = "dict+memory"
    framework, backend = "dict", "memory"
    # Session-scope state only: a case with user:, app: or temp: keys is not_applicable.
    capabilities = frozenset({
        Capability.EVENTS, Capability.STATE, Capability.EXPLICIT_SESSION_ID,
        Capability.GENERATED_SESSION_ID, Capability.EXPLICIT_EVENT_ID, Capability.EXPLICIT_TIME,
    })

    def __init__(self) -> None:
        self.data: dict[tuple[str, str, str], StoredSession] = {}

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def dispose(self) -> None: self.data.clear()

    async def create_session(self, app, user, session_id, state):
        sid = session_id or f"s{len(self.data)}"
        self.data[(app, user, sid)] = StoredSession(
            user, sid, [], {"session": dict(state), "user": {}, "app": {}, "temp": {}})
        return sid

    async def append_event(self, ref, event, *, idempotency_key=None):
        stored = self.data[(ref.app, ref.user, ref.session_id)]
        stored.events.append(event.to_dict())
        stored.state["session"].update(event.state_delta)

    async def get_session(self, ref):
        return self.data.get((ref.app, ref.user, ref.session_id))

    async def cleanup(self, app):
        for key in [k for k in self.data if k[0] == app]:
            del self.data[key]

    # list_sessions, delete_session, memory, edit_appended: outside its capabilities,
    # so never called; they may raise NotImplementedError.

def open_store(spec: StoreSpec) -> DictStore:
    return DictStore()
```

Operations outside the store's capabilities are never called: a case that needs one is
reported `not_applicable` for that store, naming the capability. Such methods may
simply raise `NotImplementedError`.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from steadyloop._errors import MissingExtra, UnknownBackend
from steadyloop._urls import URL, parse_url, redact_url, split_framework, without_passwords

__all__ = [
    "MAX_CASE_TIME_US",
    "SCOPE_NAMES",
    "STORE_ENTRY_POINT_GROUP",
    "Capability",
    "EventEdit",
    "Outcome",
    "SessionRef",
    "SessionStore",
    "StoreEvent",
    "StoreOpener",
    "StoreSpec",
    "StoredSession",
    "missing_extra",
    "parse_store_url",
    "scope_of",
    "seconds_to_us",
    "store_opener",
    "us_to_seconds",
    "without_passwords",
]

STORE_ENTRY_POINT_GROUP = "steadyloop.replay_stores"
"""Entry-point group naming each framework's store opener, by framework name.

The name is the `FRAMEWORK` of a `FRAMEWORK+BACKEND://…` URL; the object is a
[`StoreOpener`][steadyloop.replay.StoreOpener]. The shipped adapters register `adk`,
`openai-agents` and `trpc` here, exactly as a user's own package would."""

MAX_CASE_TIME_US = 2**51
"""Times a case may hold are integer microseconds in `[0, MAX_CASE_TIME_US)`.

2^51 µs is about 71 years after 1970 (mid-2041). Below it the float-seconds rule of
[`us_to_seconds`][steadyloop.replay.us_to_seconds] round-trips exactly: the division is
off by at most half a float step of the seconds (under 0.24 µs below 2^32 s) and the
multiplication back by at most a quarter microsecond (the float step below 2^51 is
0.5), together under the half microsecond that rounding forgives."""

SCOPE_NAMES: tuple[str, ...] = ("session", "user", "app", "temp")
"""The state scopes of a [`StoredSession`][steadyloop.replay.StoredSession], in order."""


def us_to_seconds(us: int) -> float:
    """Convert a case time in integer microseconds to float seconds: `us / 1_000_000`.

    The one rule every adapter shares; [`seconds_to_us`][steadyloop.replay.seconds_to_us]
    inverts it exactly for every `0 <= us < MAX_CASE_TIME_US`.

    Examples:
        >>> us_to_seconds(1_700_000_000_123_457)
        1700000000.123457
    """
    return us / 1_000_000


def seconds_to_us(seconds: float) -> int:
    """Convert float seconds back to integer microseconds: `round(seconds * 1_000_000)`.

    A value a store changed (a lost microsecond, a shifted time zone) converts to a
    different integer, so the harness sees the change.

    Examples:
        >>> seconds_to_us(us_to_seconds(1_700_000_000_123_457))
        1700000000123457
    """
    return round(seconds * 1_000_000)


class Capability(enum.StrEnum):
    """What a store under test can do; a case needing more is `not_applicable` there.

    Attributes:
        EVENTS: Create sessions, append events and read them back (every store).
        STATE: Session-scoped state: initial state and plain keys of state deltas.
        USER_STATE: `user:` keys, shared by a user's sessions.
        APP_STATE: `app:` keys, shared by every session of the app.
        TEMP_STATE: `temp:` keys are accepted (and, by the common contract, never stored).
        EXPLICIT_SESSION_ID: The caller chooses a session's id.
        GENERATED_SESSION_ID: The store chooses an id when the caller gives none.
        EXPLICIT_EVENT_ID: The caller's event id is kept.
        EXPLICIT_TIME: The caller's event time is kept (otherwise the store stamps it).
        INVOCATION_ID: An event's invocation id is kept.
        TOOL_PARTS: Tool-call and tool-result parts are kept.
        LIST_SESSIONS: A user's sessions can be listed.
        DELETE_SESSION: A session can be deleted.
        MEMORY: A session can be added to memory and memory searched.
        MEMORY_ENTRIES: Memory's stored entries can be read back (Steadyloop only).
        SUMMARIES: Summaries and failed summary attempts (Steadyloop only).
        LOOP: The crash-resume agent loop runs on the store (Steadyloop only).
        CRASH_INJECTION: Crashes, torn writes and dropped connections can be injected.
        IDEMPOTENCY: An append carries an idempotency key.
        CALLER_EDIT: The harness can edit the very event object it handed the store.
        CHECKPOINTER: The checkpointer ops (`saver_put`, `saver_get`, …) run on it: the
            store also implements [`SaverStore`][steadyloop.replay.SaverStore].
    """

    EVENTS = "events"
    STATE = "state"
    USER_STATE = "user_state"
    APP_STATE = "app_state"
    TEMP_STATE = "temp_state"
    EXPLICIT_SESSION_ID = "explicit_session_id"
    GENERATED_SESSION_ID = "generated_session_id"
    EXPLICIT_EVENT_ID = "explicit_event_id"
    EXPLICIT_TIME = "explicit_time"
    INVOCATION_ID = "invocation_id"
    TOOL_PARTS = "tool_parts"
    LIST_SESSIONS = "list_sessions"
    DELETE_SESSION = "delete_session"
    MEMORY = "memory"
    MEMORY_ENTRIES = "memory_entries"
    SUMMARIES = "summaries"
    LOOP = "loop"
    CRASH_INJECTION = "crash_injection"
    IDEMPOTENCY = "idempotency"
    CALLER_EDIT = "caller_edit"
    CHECKPOINTER = "checkpointer"


class Outcome(enum.StrEnum):
    """What became of an operation a case expects a store may refuse.

    Attributes:
        ACCEPTED: It took effect as a new thing (a second session, a second event,
            an edit that reached the store).
        REFUSED: The store raised; the snapshot keeps its error type and message.
        MERGED: It was folded into what the store already had (the existing session
            kept, one copy of the event kept, the edit not seen).
    """

    ACCEPTED = "accepted"
    REFUSED = "refused"
    MERGED = "merged"


def scope_of(key: str) -> Literal["session", "user", "app", "temp"]:
    """Return the scope a state key belongs to, by its prefix.

    `user:k` is user state, `app:k` app state, `temp:k` temporary; any other key (a
    colon elsewhere included) is session state.
    """
    if key.startswith("user:"):
        return "user"
    if key.startswith("app:"):
        return "app"
    if key.startswith("temp:"):
        return "temp"
    return "session"


@dataclass(frozen=True)
class SessionRef:
    """Which session an operation is about: the case's app, the user, the real id.

    Attributes:
        app: The case run's app (see the module doc).
        user: The user id, as the case gives it.
        session_id: The id the store returned from `create_session`.
    """

    app: str
    user: str
    session_id: str


@dataclass(frozen=True)
class StoreEvent:
    """An event of the case language, as the harness hands it to a store.

    Attributes:
        id: The event id (the case's `event_id`, or one from the harness's id source).
        author: Who produced it.
        parts: Its parts as plain dicts (see the module doc), in order.
        state_delta: State keys with their scope prefixes, every scope included.
        time: When it happened, integer microseconds since the epoch.
        invocation_id: The invocation it belongs to, or `None`.
    """

    id: str
    author: str
    parts: tuple[Mapping[str, Any], ...] = ()
    state_delta: Mapping[str, Any] = field(default_factory=dict)
    time: int = 0
    invocation_id: str | None = None

    @property
    def text(self) -> str:
        """The text parts joined by newlines (`""` when there are none)."""
        return "\n".join(str(p["text"]) for p in self.parts if p.get("type") == "text")

    def to_dict(self) -> dict[str, Any]:
        """Return the event in the snapshot's event form (a fresh, deep copy)."""
        return {
            "id": self.id,
            "author": self.author,
            "parts": [copy.deepcopy(dict(p)) for p in self.parts],
            "state_delta": copy.deepcopy(dict(self.state_delta)),
            "time": self.time,
            "invocation_id": self.invocation_id,
        }


@dataclass(frozen=True)
class EventEdit:
    """How the harness edits an event object after the store accepted it.

    The adapter applies the edit to the very object it handed its framework (not to a
    copy): whether the stored event changes is the finding.

    Attributes:
        text: The new text of the event's first text part (`None`: unchanged).
        state_delta: Keys to set in the object's state delta (`{}`: unchanged).
    """

    text: str | None = None
    state_delta: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class StoredSession:
    """A session as a store reads it back, in plain JSON.

    Attributes:
        user_id: The user id the store reports.
        session_id: The session id the store reports.
        events: The events, in the store's order, each in the event form of the
            module doc.
        state: `{"session": …, "user": …, "app": …, "temp": …}`, each the keys (with
            prefixes) the store reports in that scope.
        historical_events: Events a summary covers (Steadyloop only; else empty).
        summaries: Committed summaries (Steadyloop only; else empty).
    """

    user_id: str
    session_id: str
    events: list[dict[str, Any]]
    state: dict[str, dict[str, Any]]
    historical_events: list[dict[str, Any]] = field(default_factory=list)
    summaries: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Return the snapshot form: every scope present, in order."""
        return {
            "user_id": self.user_id,
            "session_id": self.session_id,
            "events": self.events,
            "historical_events": self.historical_events,
            "state": {scope: dict(self.state.get(scope, {})) for scope in SCOPE_NAMES},
            "summaries": self.summaries,
        }


@runtime_checkable
class SessionStore(Protocol):
    """A session store under test (see the module doc for the contract).

    Attributes:
        name: Its name in reports and in a case's `allowed_diffs` (`"sqlite"`,
            `"adk+sqlite"`, …); unique in one selection.
        framework: Whose store it is (`"steadyloop"`, `"adk"`, `"openai-agents"`,
            `"trpc"`, …); stores of one framework are compared with each other.
        backend: Which of the framework's backends (`"memory"`, `"sqlite"`, …); a
            framework's `"memory"` store is its default reference.
        capabilities: What it can do.
    """

    name: str
    framework: str
    backend: str
    capabilities: frozenset[Capability]

    async def open(self) -> None:
        """Start a fresh client; called again after `close` it is a restart."""

    async def close(self) -> None:
        """Drop the client (its caches with it); must work after a failed operation."""

    async def dispose(self) -> None:
        """Remove the store itself if the adapter made it (a temporary file, …)."""

    async def create_session(
        self, app: str, user: str, session_id: str | None, state: Mapping[str, Any]
    ) -> str:
        """Create a session with initial state (all scopes); return the id really used."""

    async def append_event(
        self, ref: SessionRef, event: StoreEvent, *, idempotency_key: str | None = None
    ) -> None:
        """Append an event (the store reads its session itself, as a caller would)."""

    async def edit_appended(self, ref: SessionRef, event_id: str, edit: EventEdit) -> None:
        """Apply `edit` to the object last handed to the framework for `event_id`."""

    async def get_session(self, ref: SessionRef) -> StoredSession | None:
        """Read a session back; `None` when the store says it does not exist."""

    async def list_sessions(self, app: str, user: str) -> list[str]:
        """Return the ids of the sessions the store lists for a user (its order)."""

    async def delete_session(self, ref: SessionRef) -> None:
        """Delete a session."""

    async def add_session_to_memory(self, ref: SessionRef) -> None:
        """Add a session's events to its user's memory."""

    async def search_memory(
        self, app: str, user: str, query: str, limit: int
    ) -> list[dict[str, Any]]:
        """Search a user's memory; return the hits in the store's order."""

    async def cleanup(self, app: str) -> None:
        """Remove everything the case run in `app` created, and nothing else."""


@dataclass(frozen=True)
class StoreSpec:
    """What an opener gets: the parsed URL and where temporary stores may go.

    Attributes:
        url: The URL as selected (`adk+sqlite:///tmp/a.db`, or just `adk+sqlite`).
        framework: The part before `+` (`adk`).
        backend: Everything between the first `+` and the `:`, lower case (`sqlite`;
            `database+sqlite` for `adk+database+sqlite:///F`): the adapter decides
            what its backend names mean.
        target: The URL without `FRAMEWORK+` (`sqlite:///tmp/a.db`), or `""` when the
            selection names no location (`adk+sqlite`): the adapter then makes a fresh
            store under `workdir` and removes it on `dispose`.
        workdir: A private temporary directory for such stores.
        name: The store's name in the report (`FRAMEWORK+BACKEND` by default).
        location: `target`, parsed (`None` when it is `""`): what an adapter reads the
            path, host, options and driver from.
    """

    url: str
    framework: str
    backend: str
    target: str
    workdir: Path
    name: str
    location: URL | None = None

    def __post_init__(self) -> None:
        if self.location is None and self.target:
            object.__setattr__(self, "location", parse_url(self.target))

    @property
    def redacted(self) -> str:
        """The URL with any password replaced by `***`, for messages."""
        return redact_url(self.url)


StoreOpener: TypeAlias = Callable[[StoreSpec], SessionStore]
"""`open_store(spec) -> SessionStore`: what a framework's entry point names."""


def parse_store_url(url: str, workdir: Path) -> StoreSpec | None:
    """Parse a `FRAMEWORK+BACKEND[://…]` selection; `None` when `url` is not one.

    Raises:
        UnknownBackend: The part after the scheme is malformed (for example
            `adk+sqlite:` with nothing after the colon).
    """
    split = split_framework(url)
    if split is None:
        return None
    framework, backend, location = split
    return StoreSpec(
        url=url,
        framework=framework,
        backend=backend,
        target=location.text if location is not None else "",
        workdir=workdir,
        name=f"{framework}+{backend}",
        location=location,
    )


def missing_extra(spec: StoreSpec, extra: str, package: str) -> MissingExtra:
    """The error an opener raises when its framework's package is not installed.

    Its message is one line: which store needs which extra, and how to install it.
    """
    return MissingExtra(
        f"store {spec.redacted!r} needs {package}, which is not installed: "
        f"pip install 'steadyloop[{extra}]'",
        extra=extra,
    )


def store_opener(framework: str) -> StoreOpener:
    """Return the opener registered for `framework` in the entry-point group.

    Raises:
        UnknownBackend: No package registers `framework`, or its entry point does not
            load (the message names the entry point and its error).
    """
    for ep in entry_points(group=STORE_ENTRY_POINT_GROUP, name=framework):
        try:
            opener = ep.load()
        except MissingExtra:
            raise
        except Exception as exc:
            raise UnknownBackend(
                f"store framework {framework!r} is registered by entry point {ep.value!r}, "
                f"which does not load: {type(exc).__name__}: {exc}"
            ) from exc
        return opener  # type: ignore[no-any-return]
    known = sorted({ep.name for ep in entry_points(group=STORE_ENTRY_POINT_GROUP)})
    raise UnknownBackend(
        f"unknown store framework {framework!r}; installed: {', '.join(known) or 'none'}"
    )
