"""Running the checkpointer ops on a store, and reading its threads back.

A store with the [`CHECKPOINTER`][steadyloop.replay.Capability] capability implements
[`SaverStore`][steadyloop.replay.SaverStore]: plain calls that an adapter translates to
its checkpoint saver (LangGraph's `put`, `put_writes`, `get_tuple`, `list`,
`delete_thread`), every checkpoint handed back in one plain form:

```python
{"thread_id": str, "ns": str, "id": str, "parent_id": str | None, "ts": str,
 "values": {channel: JSON}, "versions": {channel: version}, "metadata": {…},
 "writes": [[task_id, channel, JSON], …]}
```

The harness keeps what a graph keeps between its steps: each checkpoint's channels and
versions, so a step's `put` hands the saver the parent's channels with the written ones
replaced and `new_versions` naming exactly those, at the saver's own
`get_next_version`. Ids are the case's: a rising checkpoint id the harness makes (the
same on every store), the thread's id, times fixed by the step. In what is read back,
each id and version the harness handed over is replaced by the case's handle for it
(`cp:<handle>`; a version, `v@<handle>` of the checkpoint that made it), so savers
whose versions are of other types (an integer, a string with a random tail) compare
equal, and one that hands back another version, or another checkpoint, shows as a
difference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from steadyloop._errors import BackendUnavailable
from steadyloop.replay._saver_cases import (
    SaverDeleteThread,
    SaverGet,
    SaverList,
    SaverOp,
    SaverPut,
    SaverPutWrites,
)

__all__ = ["SaverDriver", "SaverStore"]


@runtime_checkable
class SaverStore(Protocol):
    """The checkpointer calls of a store with the `checkpointer` capability.

    Every `thread_id` is the case's; the adapter keeps the case run's threads apart
    under `app` (and `cleanup(app)` removes them).
    """

    def saver_next_version(self, current: Any) -> Any:
        """The saver's `get_next_version(current, None)`."""

    async def saver_put(
        self,
        app: str,
        thread_id: str,
        ns: str,
        *,
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        new_versions: Mapping[str, Any],
        parent_id: str | None,
    ) -> None:
        """`put` a checkpoint (`id`, `ts`, `channel_values`, `channel_versions`)."""

    async def saver_put_writes(
        self,
        app: str,
        thread_id: str,
        ns: str,
        *,
        checkpoint_id: str,
        writes: list[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        """`put_writes` for a task against a checkpoint."""

    async def saver_get(
        self, app: str, thread_id: str, ns: str, checkpoint_id: str | None
    ) -> dict[str, Any] | None:
        """`get_tuple` by id, or the latest; the plain form, or `None`."""

    async def saver_list(
        self,
        app: str,
        thread_id: str,
        ns: str | None,
        *,
        filter: Mapping[str, Any],
        before_id: str | None,
        limit: int | None,
    ) -> list[dict[str, Any]]:
        """`list` a thread's checkpoints, in the saver's order, in plain form."""

    async def saver_delete_thread(self, app: str, thread_id: str) -> None:
        """`delete_thread`."""


_NONE = object()
_ID_BASE = "1f0c0000-0000-6000-8000-"
_TS_BASE = 1_700_000_000


def _checkpoint_id(n: int) -> str:
    return f"{_ID_BASE}{n:012x}"


def _ts(n: int) -> str:
    whole, frac = divmod(n, 1000)
    return f"2023-11-14T22:{13 + whole // 60 % 46:02d}:{whole % 60:02d}.{frac:03d}000+00:00"


def _plain(value: Any) -> Any:
    """A value read back, as plain JSON (anything else shown by its type)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return {"$type": type(value).__name__, "repr": repr(value)[:200]}


def _version_key(value: Any) -> tuple[str, str]:
    return (type(value).__name__, repr(value))


@dataclass
class _Made:
    thread: str
    ns: str
    id: str
    values: dict[str, Any]
    versions: dict[str, Any]
    creators: dict[str, str]


@dataclass
class SaverDriver:
    """Runs one case's checkpointer ops on a store and reads its threads back."""

    store: SaverStore
    app: str
    threads: dict[str, Any]  # the snapshot's ``threads`` section, filled here
    thread_ids: dict[str, str] = field(default_factory=dict)
    made: dict[str, _Made] = field(default_factory=dict)
    last: dict[tuple[str, str], str] = field(default_factory=dict)
    steps: dict[tuple[str, str], int] = field(default_factory=dict)
    namespaces: dict[str, list[str]] = field(default_factory=dict)

    def _thread(self, handle: str) -> dict[str, Any]:
        threads = self.threads
        if handle not in threads:
            threads[handle] = {"thread_id": self.thread_ids[handle], "namespaces": {}, "reads": {}}
        body: dict[str, Any] = threads[handle]
        return body

    def _use_ns(self, thread: str, ns: str) -> None:
        seen = self.namespaces.setdefault(thread, [])
        if ns not in seen:
            seen.append(ns)

    async def do(self, op: SaverOp) -> None:
        """Run one op (an error it raises is the store's result)."""
        store = self.store
        if isinstance(op, SaverPut):
            tid = self.thread_ids.setdefault(op.thread, op.thread_id or op.thread)
            self._thread(op.thread)
            self._use_ns(op.thread, op.ns)
            where = (op.thread, op.ns)
            parent_handle = self.last.get(where) if op.parent == "" else op.parent
            parent = self.made.get(parent_handle) if parent_handle else None
            values = dict(parent.values) if parent else {}
            versions = dict(parent.versions) if parent else {}
            creators = dict(parent.creators) if parent else {}
            new_versions: dict[str, Any] = {}
            for channel, value in op.values.items():
                values[channel] = value
                if channel in op.versions:
                    new_versions[channel] = op.versions[channel]
                else:
                    new_versions[channel] = store.saver_next_version(versions.get(channel))
                creators[channel] = op.checkpoint
            versions.update(new_versions)
            n = len(self.made)
            cid = op.checkpoint_id or _checkpoint_id(n + 1)
            step = self.steps.get(where, 0)
            self.steps[where] = step + 1
            self.made[op.checkpoint] = _Made(op.thread, op.ns, cid, values, versions, creators)
            self.last[where] = op.checkpoint
            checkpoint = {
                "id": cid,
                "ts": _ts(n + 1),
                "channel_values": values,
                "channel_versions": versions,
            }
            metadata = {"source": "loop", "step": step, **op.metadata}
            await store.saver_put(
                self.app,
                tid,
                op.ns,
                checkpoint=checkpoint,
                metadata=metadata,
                new_versions=new_versions,
                parent_id=parent.id if parent else None,
            )
        elif isinstance(op, SaverPutWrites):
            made = self.made[op.checkpoint]
            writes = [(w.channel, w.value) for w in op.writes]
            await store.saver_put_writes(
                self.app,
                self.thread_ids[made.thread],
                made.ns,
                checkpoint_id=made.id,
                writes=writes,
                task_id=op.task_id,
                task_path=op.task_path,
            )
        elif isinstance(op, SaverGet):
            reads = self._thread(op.thread)["reads"]
            wanted = self.made[op.checkpoint].id if op.checkpoint is not None else None
            reads[op.read] = {"op": "get", "result": None}
            got = await store.saver_get(self.app, self.thread_ids[op.thread], op.ns, wanted)
            reads[op.read]["result"] = self._form(got)
        elif isinstance(op, SaverList):
            reads = self._thread(op.thread)["reads"]
            before = self.made[op.before].id if op.before is not None else None
            reads[op.read] = {"op": "list", "checkpoints": None}
            found = await store.saver_list(
                self.app,
                self.thread_ids[op.thread],
                op.ns,
                filter=op.filter,
                before_id=before,
                limit=op.limit,
            )
            reads[op.read]["checkpoints"] = [self._form(t) for t in found]
        elif isinstance(op, SaverDeleteThread):
            await store.saver_delete_thread(self.app, self.thread_ids[op.thread])

    def _form(self, got: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """A checkpoint read back, its ids and versions replaced by the case's names."""
        if got is None:
            return None
        by_id = {m.id: name for name, m in self.made.items()}
        thread_by_id = {tid: handle for handle, tid in self.thread_ids.items()}

        def named(cid: Any) -> Any:
            return f"cp:{by_id[cid]}" if isinstance(cid, str) and cid in by_id else _plain(cid)

        made = self.made.get(by_id.get(got.get("id"), ""))  # type: ignore[arg-type]

        def version(channel: str, value: Any) -> Any:
            # The version put for this channel of this checkpoint, named by the
            # checkpoint that made it; any other version, as the saver has it.
            put = made.versions.get(channel, _NONE) if made is not None else _NONE
            if made is not None and _version_key(put) == _version_key(value):
                return f"v@{made.creators[channel]}"
            return _plain(value)

        thread_id = got.get("thread_id")
        return {
            "thread": thread_by_id.get(thread_id, _plain(thread_id))
            if isinstance(thread_id, str)
            else _plain(thread_id),
            "ns": _plain(got.get("ns")),
            "checkpoint": named(got.get("id")),
            "parent": named(got.get("parent_id")),
            "ts": _plain(got.get("ts")),
            "values": _plain(got.get("values")),
            "versions": {
                str(k): version(str(k), v) for k, v in dict(got.get("versions") or {}).items()
            },
            "metadata": _plain(got.get("metadata")),
            "writes": [
                {"task": _plain(w[0]), "channel": _plain(w[1]), "value": _plain(w[2])}
                for w in got.get("writes") or ()
            ],
        }

    async def read_back(self) -> None:
        """After the restart: every thread's latest and history, per namespace used.

        A read that fails is recorded as ``{"read_error": <error class>}``;
        [`BackendUnavailable`][steadyloop.BackendUnavailable] stops the run.
        """
        for handle, spaces in self.namespaces.items():
            body = self._thread(handle)
            tid = self.thread_ids[handle]
            for ns in spaces:
                out: dict[str, Any] = {}
                try:
                    out["latest"] = self._form(await self.store.saver_get(self.app, tid, ns, None))
                except BackendUnavailable:
                    raise
                except Exception as exc:
                    out["latest"] = {"read_error": type(exc).__name__}
                try:
                    found = await self.store.saver_list(
                        self.app, tid, ns, filter={}, before_id=None, limit=None
                    )
                    out["history"] = [self._form(t) for t in found]
                except BackendUnavailable:
                    raise
                except Exception as exc:
                    out["history"] = {"read_error": type(exc).__name__}
                body["namespaces"][ns] = out
