"""The LangGraph guard: intent before effect inside a graph's nodes and tools.

LangGraph runs a node at least once: after a crash it executes again every node whose
writes were not checkpointed (with ``durability="async"``, the default, also nodes of
steps whose checkpoint was still being written). A guarded effect finds its own record
when that happens.

**What identifies a re-executed effect.** Not the task id and not the model's
tool-call id: both change when the step before is executed again (a lost checkpoint
gives the next task a new checkpoint id, and a model called again issues new call
ids). What stays is the *position* of the effect in the thread:

``(thread id, checkpoint namespace without task ids, superstep, task path, effect
name, occurrence)``

where the occurrence counts the calls of that effect within one execution of the node
(the first call is 0; a node retried by its ``RetryPolicy`` counts from 0 again). Steps
number a thread's history monotonically, so the same position is the same effect.
Replaying or forking a thread from an earlier checkpoint (time travel) numbers its
steps anew: its effects are new effects, as LangGraph means a replay to be.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Coroutine, Generator
from typing import Any, ParamSpec, TypeVar, cast

from steadyloop._errors import EffectFailed, GuardError
from steadyloop.integrations._guard import (
    _CURRENT,
    Begun,
    Guard,
    Recorded,
    decision_from,
)
from steadyloop.journal import Journal
from steadyloop.loop import ReplayPolicy
from steadyloop.records import JSONValue, RecordFactory, canonical_json, check_canonical

try:
    from langgraph.config import get_config
    from langgraph.types import interrupt
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "steadyloop.integrations.langgraph needs LangGraph: install the extra "
        "'steadyloop[langgraph]'"
    ) from exc

__all__ = ["LangGraphGuard"]

P = ParamSpec("P")
R = TypeVar("R")

_SCRATCHPAD = "__pregel_scratchpad"
"""The configurable key under which LangGraph keeps a task execution's scratchpad."""
_RUNTIME = "__pregel_runtime"
"""The configurable key of the task's runtime (its execution info counts retries)."""
_KEPT_EXECUTIONS = 4096
"""How many node executions' call counters are kept (the oldest are dropped)."""


class LangGraphGuard(Guard):
    """Guards effects called inside LangGraph nodes with a Steadyloop journal.

    Args:
        url: The journal the intents and results go to (any Steadyloop backend,
            for example the PostgreSQL your checkpointer uses).
        namespace: The journal namespace for them.
        wrap: Wraps the opened journal (test kits use it to model a crash).
        records: Where record ids and times come from.

    Examples:
        ```python
        guard = LangGraphGuard("sqlite:effects.db")

        @guard.effect(policy=ReplayPolicy.NEVER)
        def charge(order: str, cents: int) -> dict:
            return payments.charge(order, cents)  # runs at most once per position

        def charge_node(state):
            return {"receipt": charge(state["order"], state["cents"])}
        ```
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "langgraph",
        wrap: Callable[[Journal], Journal] | None = None,
        records: RecordFactory | None = None,
    ) -> None:
        super().__init__(url, namespace=namespace, wrap=wrap, records=records)
        self._lock = threading.Lock()
        self._calls: OrderedDict[int, tuple[object, Counter[tuple[int, str]]]] = OrderedDict()

    def effect(
        self, policy: ReplayPolicy = ReplayPolicy.NEVER, *, name: str | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Guard a function (sync or async) that acts on the world.

        Call the guarded function from a node (or a tool a node runs). Its arguments
        and its return value must be JSON values: they are recorded.

        Args:
            policy: `SAFE` (may run again when its result is missing) or `NEVER`
                (an intent without a result stops the graph with an ``interrupt``
                until the caller resumes it with what really happened:
                ``Command(resume={"happened": True, "value": ...})``,
                ``{"happened": True, "error": "..."}`` or ``{"happened": False}``).
            name: The effect's name in the records (the function's name by default).
        """

        def decorate(fn: Callable[P, R]) -> Callable[P, R]:
            tool = name or fn.__name__
            signature = inspect.signature(fn)

            def arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> JSONValue:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                value = cast(JSONValue, dict(bound.arguments))
                try:
                    check_canonical(value)
                except ValueError as exc:
                    raise GuardError(
                        f"effect {tool!r}: arguments must be JSON values: {exc}"
                    ) from None
                return value

            if inspect.iscoroutinefunction(fn):

                @functools.wraps(fn)
                async def guarded_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                    steps = self._steps(tool, policy, arguments(args, kwargs))
                    sent: Any = None
                    while True:
                        try:
                            step = steps.send(sent)
                        except StopIteration as done:
                            found = done.value
                            break
                        sent = await self._bridge.run_async(step)
                    if isinstance(found, Recorded):
                        return _replayed(tool, found)
                    token = _CURRENT.set(found.intent_id)
                    try:
                        value = await fn(*args, **kwargs)
                    except Exception as exc:
                        await self._bridge.run_async(self.records.finish(found, error=_error(exc)))
                        raise
                    finally:
                        _CURRENT.reset(token)
                    await self._bridge.run_async(
                        self.records.finish(found, value=_json(tool, value))
                    )
                    return value

                return cast(Callable[P, R], guarded_async)

            @functools.wraps(fn)
            def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
                steps = self._steps(tool, policy, arguments(args, kwargs))
                sent: Any = None
                while True:
                    try:
                        step = steps.send(sent)
                    except StopIteration as done:
                        found = done.value
                        break
                    sent = self._bridge.run(step)
                if isinstance(found, Recorded):
                    return cast(R, _replayed(tool, found))
                token = _CURRENT.set(found.intent_id)
                try:
                    value = fn(*args, **kwargs)
                except Exception as exc:
                    self._bridge.run(self.records.finish(found, error=_error(exc)))
                    raise
                finally:
                    _CURRENT.reset(token)
                self._bridge.run(self.records.finish(found, value=_json(tool, value)))
                return value

            return guarded

        return decorate

    def _steps(
        self, tool: str, policy: ReplayPolicy, arguments: JSONValue
    ) -> Generator[Coroutine[Any, Any, Any], Any, Recorded | Begun]:
        """The guard's part before an effect, for a sync or an async caller to drive.

        Each coroutine it yields runs on the guard's loop, and what it returns is sent
        back. It ends with the recorded outcome, or with a new intent: run the effect.
        An unknown `NEVER` effect stops the graph here (``interrupt``) until a decision.
        """
        key = self._key(tool)
        # LangGraph matches resume values to interrupt() calls by position in the
        # task: ask again every question this effect already had answered (the
        # answers are recorded; what comes back is dropped), so that the node's
        # later questions, ours or its own, get their own answers.
        for _ in range(int((yield self.records.decisions(key)))):
            interrupt(
                {
                    "steadyloop": "effect_already_decided",
                    "tool": tool,
                    "key": list(key),
                    "note": "this effect's decision is recorded; resume with any value",
                }
            )
        found = yield self.records.begin(key, tool, policy, arguments)
        while not isinstance(found, Begun):
            if isinstance(found, Recorded):
                return found
            decided = yield self.records.decide(found, decision_from(interrupt(found.to_json())))
            if decided is not None:
                return cast(Recorded, decided)
            found = yield self.records.begin(key, tool, policy, arguments, again=True)
        return found

    def _key(self, tool: str) -> tuple[str | int, ...]:
        """The position of this call in its thread (see the module docstring)."""
        try:
            config = get_config()
        except RuntimeError:
            raise GuardError(
                f"guarded effect {tool!r} was called outside a LangGraph node"
            ) from None
        conf = config.get("configurable", {})
        meta = config.get("metadata", {})
        thread = conf.get("thread_id")
        if thread is None:
            raise GuardError(
                f"guarded effect {tool!r} needs a thread: compile the graph with a "
                "checkpointer and pass configurable.thread_id"
            )
        scratchpad = conf.get(_SCRATCHPAD)
        if scratchpad is None or "langgraph_step" not in meta:
            raise GuardError(f"guarded effect {tool!r}: this LangGraph gives no task context")
        runtime = conf.get(_RUNTIME)
        info = getattr(runtime, "execution_info", None)
        attempt = int(getattr(info, "node_attempt", 1) or 1)
        namespace = "|".join(
            part.split(":", 1)[0] for part in str(conf.get("checkpoint_ns", "")).split("|")
        )
        with self._lock:
            entry = self._calls.get(id(scratchpad))
            if entry is None or entry[0] is not scratchpad:
                entry = (scratchpad, Counter())
                self._calls[id(scratchpad)] = entry
                while len(self._calls) > _KEPT_EXECUTIONS:
                    self._calls.popitem(last=False)
            counts = entry[1]
            occurrence = counts[(attempt, tool)]
            counts[(attempt, tool)] += 1
        path = canonical_json([str(p) for p in meta.get("langgraph_path", ())])
        return (str(thread), namespace, int(meta["langgraph_step"]), path, tool, occurrence)


def _error(exc: Exception) -> str:
    """How a failed effect's error is recorded."""
    return f"{type(exc).__name__}: {exc}"


def _replayed(tool: str, found: Recorded) -> Any:
    if found.error is not None:
        raise EffectFailed(f"effect {tool!r} already ran and failed: {found.error}")
    return found.value


def _json(tool: str, value: object) -> JSONValue:
    try:
        check_canonical(value)
    except ValueError as exc:
        raise GuardError(
            f"effect {tool!r} returned a value with no JSON form, so its result cannot be "
            f"recorded and its intent stays open: {exc}"
        ) from None
    return cast(JSONValue, value)
