"""The crash kit for LangGraph graphs: die at every checkpoint write, resume, count effects.

Give it a graph builder and a checkpointer factory. It runs the graph once without a
crash and counts the write boundaries of that run: every ``put``/``put_writes`` (and
their async twins) of the checkpointer and, when guarded, every append of the guard's
journal. Then, for each boundary *k*, it runs the graph in a fresh store and lets the
simulated process die just **before** write *k* and just **after** it, under the crash
model of [ProcessDeath][steadyloop.testing.ProcessDeath]: from that moment nothing of
that process reaches the checkpointer, the guard's journal or the effect sink, even
from LangGraph's background writers. It then "restarts": a new checkpointer on the same
store, a new graph, a new guard, and continues the thread the way LangGraph documents
(``invoke(None, config)`` from the last checkpoint, or the input again when no
checkpoint survived). A guarded `NEVER` effect left unknown surfaces as an
``interrupt``; the kit answers it with the truth from the sink (as a person would after
checking the payment provider) through ``Command(resume=…)``.

Every effect is counted in an [EffectSink][steadyloop.testing.EffectSink] outside both
stores; each crash point reports repeated effects, lost effects, and whether the final
state equals the uninterrupted run's.

Examples:
    ```python
    def build(p: GraphProcess) -> StateGraph:
        @p.guarded(ReplayPolicy.NEVER)
        def charge(order: str) -> str:
            return p.effect("charge", "never", f"charge/{order}")

        builder = StateGraph(State)
        builder.add_node("charge", lambda s: {"receipt": charge(s["order"])})
        ...
        return builder

    report = langgraph_crash_matrix(
        build, lambda d: SqliteSaver(sqlite3.connect(d / "cp.db", check_same_thread=False)),
        {"order": "o-1"}, workdir=tmp_path, durability="async", guarded=True,
    )
    report.assert_guarded()
    ```
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from steadyloop.effects import decision_from
from steadyloop.loop import ReplayPolicy
from steadyloop.testing._death import (
    FrameworkCrashReport,
    KitProcess,
    Life,
    ProcessDeath,
    ProcessJournal,
    crash_every_boundary,
)
from steadyloop.testing._effects import EffectSink

try:
    from langchain_core.messages import BaseMessage
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.graph import StateGraph
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "the LangGraph crash kit needs LangGraph: install the extra 'steadyloop[langgraph]'"
    ) from exc

from steadyloop.integrations._langgraph import LangGraphGuard

__all__ = ["GraphProcess", "ProcessCheckpointer", "langgraph_crash_matrix"]

F = TypeVar("F", bound=Callable[..., Any])
Durability = Literal["sync", "async", "exit"]
MAX_DECISIONS = 20


class GraphProcess(KitProcess[LangGraphGuard]):
    """What a graph built for the crash kit may touch: its effects, and its guard."""

    def guarded(self, policy: ReplayPolicy, **options: Any) -> Callable[[F], F]:
        """Guard a function with this process's guard (no guard in an unguarded run).

        Args:
            policy: Its replay policy.
            **options: More options of
                [LangGraphGuard.effect][steadyloop.integrations.langgraph.LangGraphGuard.effect]
                (``one_at_a_time=True``, say).
        """

        def decorate(fn: F) -> F:
            if self.guard is None:
                return fn
            return cast(F, self.guard.effect(policy, **options)(fn))

        return decorate


class ProcessCheckpointer(BaseCheckpointSaver[Any]):
    """A LangGraph checkpointer of a simulated process: each write a boundary, nothing after death.

    Args:
        inner: The checkpointer that stores the checkpoints.
        death: The process it belongs to: every ``put``/``put_writes`` (and async
            twin) passes its write boundaries, named ``"put"``/``"put_writes"``.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any], death: ProcessDeath) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.death = death

    def get_tuple(self, config: Any) -> Any:
        self.death.check()
        return self.inner.get_tuple(config)

    def list(self, config: Any, **kwargs: Any) -> Iterator[Any]:
        self.death.check()
        return self.inner.list(config, **kwargs)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self.death.write(
            "put", lambda: self.inner.put(config, checkpoint, metadata, new_versions)
        )

    def put_writes(
        self, config: Any, writes: Sequence[Any], task_id: str, task_path: str = ""
    ) -> None:
        self.death.write(
            "put_writes", lambda: self.inner.put_writes(config, writes, task_id, task_path)
        )

    def delete_thread(self, thread_id: str) -> None:
        self.death.write("delete_thread", lambda: self.inner.delete_thread(thread_id))

    async def aget_tuple(self, config: Any) -> Any:
        self.death.check()
        return await self.inner.aget_tuple(config)

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
        self.death.check()
        async for item in self.inner.alist(config, **kwargs):
            self.death.check()
            yield item

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return await self.death.awrite(
            "put", lambda: self.inner.aput(config, checkpoint, metadata, new_versions)
        )

    async def aput_writes(
        self, config: Any, writes: Sequence[Any], task_id: str, task_path: str = ""
    ) -> None:
        await self.death.awrite(
            "put_writes", lambda: self.inner.aput_writes(config, writes, task_id, task_path)
        )

    async def adelete_thread(self, thread_id: str) -> None:
        await self.death.awrite("delete_thread", lambda: self.inner.adelete_thread(thread_id))

    def get_next_version(self, current: Any, channel: Any) -> Any:
        return self.inner.get_next_version(current, channel)


def _plain(value: Any) -> Any:
    """A graph state as comparable JSON (messages without their random ids)."""
    return json.loads(json.dumps(value, sort_keys=True, default=_comparable))


_RANDOM_IDS = frozenset({"id", "tool_call_id"})
"""Message fields LangGraph and models fill with fresh random ids on every run."""


def _comparable(value: Any) -> Any:
    """A message as its fields without ids; anything else as its repr."""
    if isinstance(value, BaseMessage):
        return _without_ids({"type": type(value).__name__, **value.model_dump()})
    return repr(value)


def _without_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k not in _RANDOM_IDS}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


def langgraph_crash_matrix(
    build: Callable[[GraphProcess], StateGraph[Any]],
    checkpointer: Callable[[Path], BaseCheckpointSaver[Any]],
    graph_input: Any,
    *,
    workdir: Path,
    durability: Durability = "async",
    guarded: bool = True,
    guard_url: Callable[[Path], str] | None = None,
    thread_id: str = "crash-kit",
    sides: Sequence[Literal["before", "after"]] = ("before", "after"),
    recovery_crashes: bool = False,
) -> FrameworkCrashReport:
    """Crash a LangGraph graph at every write boundary, resume it, and count its effects.

    Args:
        build: Builds the (uncompiled) graph for one simulated process; its effects
            go through [GraphProcess.effect][steadyloop.testing.GraphProcess.effect],
            guarded with [GraphProcess.guarded][steadyloop.testing.GraphProcess.guarded].
        checkpointer: A fresh checkpointer on the store in the given folder (called
            once per simulated process; the same folder is the same store).
        graph_input: The graph's input.
        workdir: An empty folder; each crash point gets a folder of its own in it.
        durability: LangGraph's ``durability`` for ``invoke``.
        guarded: Whether the effects run under a
            [LangGraphGuard][steadyloop.integrations.langgraph.LangGraphGuard].
        guard_url: The guard's journal URL for a folder (SQLite in it by default).
        thread_id: The thread the graph runs on.
        sides: Which sides of each boundary to crash at.
        recovery_crashes: Also crash the first run after each crash at every write
            boundary it passes (a second crash during recovery); the points grow
            with the square of the boundaries.
    """
    url_for = guard_url or (lambda d: f"sqlite:///{d / 'guard.db'}")
    config: Any = {"configurable": {"thread_id": thread_id}}

    def start(folder: Path, death: ProcessDeath) -> tuple[Any, GraphProcess]:
        guard = None
        if guarded:
            guard = LangGraphGuard(
                url_for(folder), wrap=lambda j: ProcessJournal(j, death, "guard.append")
            )
        process = GraphProcess(death, EffectSink(folder / "effects.log"), guard)
        graph = build(process).compile(
            checkpointer=ProcessCheckpointer(checkpointer(folder), death)
        )
        return graph, process

    def finish(running: tuple[Any, GraphProcess], first: bool) -> int:
        """Drive the thread to its end in this process; return the interrupts decided."""
        graph, process = running
        decided = 0
        snapshot = graph.get_state(config)
        command: Any = graph_input if first or not snapshot.created_at else None
        for _ in range(MAX_DECISIONS):
            graph.invoke(command, config, durability=durability)
            snapshot = graph.get_state(config)
            pending = [i for task in snapshot.tasks for i in task.interrupts]
            if not pending:
                return decided
            decided += len(pending)
            command = Command(
                resume={item.id: _truth(item.value, process.sink) for item in pending}
            )
        raise RuntimeError(f"the graph was still interrupted after {MAX_DECISIONS} decisions")

    life: Life[tuple[Any, GraphProcess]] = Life(
        start=start,
        finish=finish,
        state=lambda running: _plain(running[0].get_state(config).values),
        sink=lambda running: running[1].sink,
        end=lambda running, dead: running[1].end(dead),
    )
    return crash_every_boundary(
        life,
        framework="langgraph",
        mode=durability,
        guarded=guarded,
        workdir=workdir,
        sides=sides,
        recovery_crashes=recovery_crashes,
    )


def _truth(value: Any, sink: EffectSink) -> Any:
    """Answer an unknown effect with what the sink says really happened."""
    if isinstance(value, dict) and value.get("steadyloop") == "effect_already_decided":
        return None  # asked again only to keep LangGraph's answers in order; any value does
    if not isinstance(value, dict) or value.get("steadyloop") != "effect_state_unknown":
        raise RuntimeError(f"the graph stopped at an interrupt the kit cannot answer: {value!r}")
    intent_id = value["intent_id"]  # the answer names its intent: never applied to another
    for effect in sink.effects():
        if effect.get("intent_id") == intent_id:
            return {intent_id: decision_json(effect.get("value"))}
    return {intent_id: {"happened": False, "note": "the sink holds no such effect"}}


def decision_json(value: Any) -> dict[str, Any]:
    """The JSON decision 'it happened, with this value' (checked by the guard's reader)."""
    decision = {"happened": True, "value": value, "note": "checked in the effect sink"}
    decision_from(decision)
    return decision
