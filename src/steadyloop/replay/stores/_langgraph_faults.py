"""A planted faulty LangGraph checkpointer: a real saver with one known fault, to test the harness.

[`FaultySaver`][steadyloop.replay.stores._langgraph_faults.FaultySaver] wraps any
`BaseCheckpointSaver` (sync or async) and plants one fault of
[`SAVER_FAULTS`][steadyloop.replay.stores._langgraph_faults.SAVER_FAULTS] in what passes
through `put`, `put_writes`, `get_tuple`, `list` and `delete_thread`. Replaying the
hostile pack on `langgraph+sqlite` with the fault planted, next to `InMemorySaver`, must
report a difference for every fault, and so must the checkpointer pack for the faults
only its operations reach (namespaces, `before`, `limit`, special writes): a
checkpointer adapter that hid one would hide a real saver's divergence too.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, BaseCheckpointSaver, CheckpointTuple

from steadyloop.replay._store import StoreSpec
from steadyloop.replay.stores._langgraph import CheckpointerStore

__all__ = ["SAVER_FAULTS", "FaultySaver", "faulty_checkpointer"]

SAVER_FAULTS: dict[str, str] = {
    "drop_writes": "put_writes is acknowledged but nothing is stored",
    "repeat_writes": "a checkpoint's pending writes read back twice",
    "oldest_as_latest": "get_tuple without a checkpoint id returns the thread's oldest checkpoint",
    "forget_unchanged": "put keeps only the channels named in new_versions",
    "ignore_filter": "list ignores its metadata filter (every thread is listed)",
    "fold_case": "thread ids that differ only by letter case are one thread",
    "keep_deleted": "delete_thread is acknowledged but deletes nothing",
    "ints_as_floats": "integer channel values read back as floats",
    "cut_at_nul": "strings in channel values are cut at the first NUL",
    "drop_user": "checkpoint metadata reads back without its 'user' key",
    "merge_namespaces": "every checkpoint namespace is stored as the root namespace ''",
    "before_inclusive": "list(before=…) also returns the checkpoint `before` names",
    "ignore_limit": "list ignores its limit",
    "drop_special_writes": "ERROR, INTERRUPT and the other special writes are dropped",
}
"""Every fault a `FaultySaver` can plant, with what it does."""


def _walk(value: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(value, list):
        return [_walk(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, fn) for k, v in value.items()}
    return fn(value)


def _float(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _nul(value: Any) -> Any:
    return value.split("\x00", 1)[0] if isinstance(value, str) else value


class FaultySaver(BaseCheckpointSaver[Any]):
    """A checkpointer that passes everything to a real one, but for one planted fault.

    Args:
        inner: The honest saver.
        fault: One of `SAVER_FAULTS`.

    Raises:
        ValueError: The fault is not one of `SAVER_FAULTS`.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any], fault: str) -> None:
        if fault not in SAVER_FAULTS:
            raise ValueError(f"unknown fault {fault!r}; the faults are: {', '.join(SAVER_FAULTS)}")
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.fault = fault

    # -- what the fault changes -------------------------------------------------------

    def _config(self, config: Any) -> Any:
        if self.fault not in {"fold_case", "merge_namespaces"} or config is None:
            return config
        config = copy.deepcopy(config)
        configurable = config.setdefault("configurable", {})
        if self.fault == "merge_namespaces" and configurable.get("checkpoint_ns"):
            configurable["checkpoint_ns"] = ""
        if self.fault == "fold_case" and "thread_id" in configurable:
            configurable["thread_id"] = str(configurable["thread_id"]).lower()
        return config

    def _list_args(self, before: Any, limit: int | None) -> tuple[Any, int | None, str | None]:
        """`(before, limit)` to pass on, and the id up to which to keep (before_inclusive)."""
        if self.fault == "ignore_limit":
            return self._config(before), None, None
        if self.fault == "before_inclusive" and before is not None:
            upto = before["configurable"].get("checkpoint_id")
            if upto:
                return None, None, upto
        return self._config(before), limit, None

    def _writes(self, writes: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
        if self.fault == "drop_special_writes":
            return [w for w in writes if w[0] not in WRITES_IDX_MAP]
        return list(writes)

    @staticmethod
    def _keep(tup: CheckpointTuple, upto: str | None) -> bool:
        return upto is None or str(tup.config["configurable"]["checkpoint_id"]) <= upto

    def _put_args(self, checkpoint: Any, new_versions: Any) -> Any:
        if self.fault != "forget_unchanged":
            return checkpoint
        checkpoint = dict(checkpoint)
        values = checkpoint["channel_values"]
        checkpoint["channel_values"] = {k: v for k, v in values.items() if k in new_versions}
        return checkpoint

    def _out(self, tup: CheckpointTuple | None) -> CheckpointTuple | None:
        if tup is None:
            return None
        checkpoint, metadata, writes = tup.checkpoint, tup.metadata, tup.pending_writes
        if self.fault == "repeat_writes" and writes:
            writes = [*writes, *writes]
        elif self.fault in {"ints_as_floats", "cut_at_nul"}:
            fn = _float if self.fault == "ints_as_floats" else _nul
            checkpoint = {**checkpoint, "channel_values": _walk(checkpoint["channel_values"], fn)}
        elif self.fault == "drop_user":
            metadata = {k: v for k, v in metadata.items() if k != "user"}  # type: ignore[assignment]
        return tup._replace(checkpoint=checkpoint, metadata=metadata, pending_writes=writes)

    def _oldest(self, config: Any) -> bool:
        return self.fault == "oldest_as_latest" and not config["configurable"].get("checkpoint_id")

    # -- sync -------------------------------------------------------------------------

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    def get_tuple(self, config: Any) -> CheckpointTuple | None:
        config = self._config(config)
        if self._oldest(config):
            found = list(self.inner.list(config))
            return self._out(found[-1] if found else None)
        return self._out(self.inner.get_tuple(config))

    def list(
        self,
        config: Any,
        *,
        filter: dict[str, Any] | None = None,
        before: Any = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if self.fault == "ignore_filter":
            filter = None
        before, wanted, upto = self._list_args(before, limit)
        given = 0
        for tup in self.inner.list(
            self._config(config), filter=filter, before=before, limit=wanted
        ):
            if not self._keep(tup, upto):
                continue
            if upto is not None and limit is not None and given >= limit:
                break
            given += 1
            out = self._out(tup)
            assert out is not None
            yield out

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        checkpoint = self._put_args(checkpoint, new_versions)
        return self.inner.put(self._config(config), checkpoint, metadata, new_versions)

    def put_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        if self.fault == "drop_writes":
            return
        self.inner.put_writes(self._config(config), self._writes(writes), task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        if self.fault == "keep_deleted":
            return
        if self.fault == "fold_case":
            thread_id = thread_id.lower()
        self.inner.delete_thread(thread_id)

    # -- async ------------------------------------------------------------------------

    async def aget_tuple(self, config: Any) -> CheckpointTuple | None:
        config = self._config(config)
        if self._oldest(config):
            found = [t async for t in self.inner.alist(config)]
            return self._out(found[-1] if found else None)
        return self._out(await self.inner.aget_tuple(config))

    async def alist(
        self,
        config: Any,
        *,
        filter: dict[str, Any] | None = None,
        before: Any = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if self.fault == "ignore_filter":
            filter = None
        before, wanted, upto = self._list_args(before, limit)
        given = 0
        async for tup in self.inner.alist(
            self._config(config), filter=filter, before=before, limit=wanted
        ):
            if not self._keep(tup, upto):
                continue
            if upto is not None and limit is not None and given >= limit:
                break
            given += 1
            out = self._out(tup)
            assert out is not None
            yield out

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        checkpoint = self._put_args(checkpoint, new_versions)
        return await self.inner.aput(self._config(config), checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        if self.fault == "drop_writes":
            return
        await self.inner.aput_writes(self._config(config), self._writes(writes), task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        if self.fault == "keep_deleted":
            return
        if self.fault == "fold_case":
            thread_id = thread_id.lower()
        await self.inner.adelete_thread(thread_id)


def faulty_checkpointer(spec: StoreSpec, fault: str) -> CheckpointerStore:
    """The checkpointer store `spec` names, its saver wrapped in a `FaultySaver` on every open.

    The store is named `<spec name>+<fault>` and is compared with `InMemorySaver`.

    Raises:
        ValueError: The fault is not one of `SAVER_FAULTS`.
    """
    if fault not in SAVER_FAULTS:
        raise ValueError(f"unknown fault {fault!r}; the faults are: {', '.join(SAVER_FAULTS)}")
    store = CheckpointerStore(spec, wrap=lambda saver: FaultySaver(saver, fault))
    store.name = f"{spec.name}+{fault}"
    store.backend = "faulty"
    return store
