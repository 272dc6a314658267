"""The checkpointer ops of the case language on a LangGraph saver (`langgraph+…` stores).

[`SaverOps`][steadyloop.replay.stores._langgraph_ops.SaverOps] is the part of
`CheckpointerStore` that implements [`SaverStore`][steadyloop.replay.SaverStore]: each
call is the one LangGraph call it names, with a config as a graph builds it
(`{"configurable": {"thread_id", "checkpoint_ns", "checkpoint_id"}}`); nothing is
repaired. A case's thread is the saver's thread `<app>/<thread id>`, so the case run's
threads stay apart and `cleanup(app)` deletes them. A checkpoint is LangGraph's
version-4 checkpoint dict with the harness's id, time, channel values and versions,
`versions_seen` empty and `updated_channels` the channels written. What a saver hands
back is turned into the plain form of `steadyloop.replay._saver`, the thread's `<app>/`
taken off; its pending writes are `[task_id, channel, value]` in the saver's order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SaverOps"]


class SaverOps:
    """`saver_*` calls on the store's LangGraph saver (mixed into `CheckpointerStore`)."""

    saver: Any
    _threads: dict[str, set[str]]

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    @staticmethod
    def _cp_config(app: str, thread_id: str, ns: str | None, checkpoint_id: str | None) -> Any:
        configurable: dict[str, Any] = {"thread_id": f"{app}/{thread_id}"}
        if ns is not None:
            configurable["checkpoint_ns"] = ns
        if checkpoint_id is not None:
            configurable["checkpoint_id"] = checkpoint_id
        return {"configurable": configurable}

    @staticmethod
    def _cp_form(app: str, tup: Any) -> dict[str, Any] | None:
        if tup is None:
            return None
        conf = tup.config["configurable"]
        parent = (tup.parent_config or {}).get("configurable", {})
        thread = conf.get("thread_id")
        checkpoint = tup.checkpoint
        return {
            "thread_id": thread.removeprefix(f"{app}/") if isinstance(thread, str) else thread,
            "ns": conf.get("checkpoint_ns"),
            "id": conf.get("checkpoint_id"),
            "parent_id": parent.get("checkpoint_id"),
            "ts": checkpoint.get("ts"),
            "values": dict(checkpoint.get("channel_values") or {}),
            "versions": dict(checkpoint.get("channel_versions") or {}),
            "metadata": dict(tup.metadata or {}),
            "writes": [list(w) for w in tup.pending_writes or ()],
        }

    def saver_next_version(self, current: Any) -> Any:
        return self.saver.get_next_version(current, None)

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
        self._threads.setdefault(app, set()).add(thread_id)
        body = {
            "v": 4,
            "id": checkpoint["id"],
            "ts": checkpoint["ts"],
            "channel_values": dict(checkpoint["channel_values"]),
            "channel_versions": dict(checkpoint["channel_versions"]),
            "versions_seen": {},
            "updated_channels": list(new_versions),
        }
        config = self._cp_config(app, thread_id, ns, parent_id)
        await self._call("put", config, body, dict(metadata), dict(new_versions))

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
        config = self._cp_config(app, thread_id, ns, checkpoint_id)
        await self._call("put_writes", config, list(writes), task_id, task_path)

    async def saver_get(
        self, app: str, thread_id: str, ns: str, checkpoint_id: str | None
    ) -> dict[str, Any] | None:
        got = await self._call("get_tuple", self._cp_config(app, thread_id, ns, checkpoint_id))
        return self._cp_form(app, got)

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
        before = None
        if before_id is not None:
            before = self._cp_config(app, thread_id, ns, before_id)
        found = await self._call(
            "list",
            self._cp_config(app, thread_id, ns, None),
            filter=dict(filter) or None,
            before=before,
            limit=limit,
        )
        return [f for f in (self._cp_form(app, t) for t in found) if f is not None]

    async def saver_delete_thread(self, app: str, thread_id: str) -> None:
        await self._call("delete_thread", f"{app}/{thread_id}")
