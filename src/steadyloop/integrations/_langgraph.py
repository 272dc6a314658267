"""The LangGraph guard: intent before effect inside a graph's nodes and tools.

LangGraph runs a node at least once: after a crash it executes again every node whose
writes were not checkpointed (with ``durability="async"``, the default, also nodes of
steps whose checkpoint was still being written). A guarded effect finds its own record
when that happens.

**What identifies a re-executed effect.** Only what LangGraph's history keeps stable,
never thread order or timing. Not the task id and not the model's tool-call id either:
both change when the step before is executed again (a lost checkpoint gives the next
task a new checkpoint id, and a model called again issues new call ids). The key is

``(thread id, checkpoint namespace without task ids, steps of the enclosing graphs,
superstep, task path, effect name, call)``

* The *steps of the enclosing graphs* tell apart the runs of a subgraph that its
  parent runs on several steps (the subgraph's own steps start again each time).
* The *task path* holds a ``Send``'s index, so each task a ``Send`` fans out (one per
  tool call, say) is its own.
* The *call*, inside a tool run by ``ToolNode`` whose guarded function takes a
  ``runtime: ToolRuntime`` parameter (LangGraph injects it; the model never sees it,
  and it is not recorded): the **index of its tool call in the AIMessage** that asked
  for it, with the tool call's name. A model called again after a crash may issue new
  call ids and other arguments: the index stays, and changed arguments make a
  `NEVER` effect unknown (``arguments_changed``), asked about, never matched.
* The *call* anywhere else: the **digest of the call's arguments** (canonical JSON)
  and its occurrence among the calls of that effect **with equal arguments** in one
  execution of the node (a node retried by its ``RetryPolicy`` counts from 0 again).
  So calls made at once (``asyncio.gather``, the threads ``ToolNode`` runs calls in)
  are told apart however they interleave; equal calls are interchangeable. Such calls
  of one effect by one task share one **task stream** (the key without the call), so
  one read sees a call's siblings.
* A node that computes an effect's arguments from a model call in the same node, and
  calls it one call after another, declares it ``effect(one_at_a_time=True)``. When
  the model answers otherwise after a crash, the call with new arguments finds no
  record of its own while the earlier execution left an intent that no call of this
  execution has taken: it is unknown (``arguments_changed``, naming that intent) and
  asked about, and the decision is then recorded under the call's own identity.
  Without the flag such a call is a *new* effect: with calls at once, the untaken
  intent may be a sibling's that has not been called yet, so which one a changed call
  stands for cannot be told. Call the model in a node of its own (its answer is then
  checkpointed), or use ``ToolNode`` with a ``ToolRuntime``.

Steps number a thread's history monotonically, so the same key is the same effect.
Replaying or forking a thread from an earlier checkpoint (time travel) numbers its
steps anew: its effects are new effects, as LangGraph means a replay to be.

**Decisions are matched by intent id.** LangGraph hands resume values to a task's
``interrupt()`` calls by their order, and with calls made at once that order is
timing. So an unknown effect's question carries its ``intent_id``, and an answer must
name it: ``Command(resume={interrupt.id: {intent_id: decision}})`` (several decisions
may share one mapping), or a decision with an ``"intent_id"`` field. Whichever call
reads an answer records each decision for the intent it names; an answer that names
no intent is refused (the question is asked again, saying why), so a decision can
never be applied to another effect.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import threading
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Coroutine, Generator, Mapping
from typing import Any, ParamSpec, TypeVar, cast

from steadyloop._errors import EffectBusy, GuardError
from steadyloop.effects import (
    Begun,
    EffectLedger,
    Happened,
    NotHappened,
    Recorded,
    ReplayPolicy,
    Unknown,
    decision_from,
)
from steadyloop.integrations._guard import Guard, Raised, replayed
from steadyloop.journal import Journal
from steadyloop.records import JSONValue, RecordFactory, canonical_json, check_canonical

try:
    from langgraph._internal import _constants
    from langgraph.config import get_config
    from langgraph.errors import GraphInterrupt
    from langgraph.prebuilt import ToolRuntime
    from langgraph.types import interrupt
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "steadyloop.integrations.langgraph needs LangGraph: install the extra "
        "'steadyloop[langgraph]'"
    ) from exc

__all__ = ["LangGraphGuard"]

P = ParamSpec("P")
R = TypeVar("R")

# LangGraph offers no public accessor for these three configurable entries of a task:
# its scratchpad (one per execution of a node), its runtime (whose execution info
# counts retries) and the graph's checkpointer. Their names come from LangGraph
# itself; tests/integrations/test_langgraph_internals.py names each one and fails
# clearly when a release changes them.
_SCRATCHPAD = _constants.CONFIG_KEY_SCRATCHPAD
_RUNTIME = _constants.CONFIG_KEY_RUNTIME
_CHECKPOINTER = _constants.CONFIG_KEY_CHECKPOINTER
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
        self._calls: OrderedDict[int, _Execution] = OrderedDict()

    def effect(
        self,
        policy: ReplayPolicy = ReplayPolicy.NEVER,
        *,
        name: str | None = None,
        not_happened_on: Raised = (),
        wait: float | None = None,
        one_at_a_time: bool = False,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Guard a function (sync or async) that acts on the world.

        Call the guarded function from a node (or a tool a node runs). Its arguments
        and its return value must be JSON values: they are recorded. A parameter
        holding a ``ToolRuntime`` is not recorded; it identifies the tool call.

        Args:
            policy: `SAFE` (may run again when its result is missing) or `NEVER`
                (an intent without a result stops the graph with an ``interrupt``
                until the caller resumes it with what really happened, named by the
                question's ``intent_id``:
                ``Command(resume={interrupt.id: {intent_id: decision}})``, where a
                decision is ``{"happened": True, "value": ...}``,
                ``{"happened": True, "error": "..."}`` or ``{"happened": False}``).
            name: The effect's name in the records (the function's name by default).
            not_happened_on: Exception types the function raises only before it
                acts (a refused connection, a request the provider rejected): such
                an exception is recorded as "did not happen", so a ``RetryPolicy``
                retry runs the effect again under a new intent. Any other exception
                of a `NEVER` effect is recorded as raised: its next execution asks
                whether it acted (reason ``"raised"``), and after the decision the
                graph goes on.
            wait: Seconds to wait when another live process is running the same
                effect (two processes on one thread); by default the call raises
                [EffectBusy][steadyloop.EffectBusy] at once.
            one_at_a_time: Say that a node calls this effect one call after another,
                never several at once (no ``asyncio.gather``, no threads, no
                ``ToolNode`` parallel calls). A `NEVER` call whose arguments are new
                when its node runs again (a model in the node answered otherwise)
                is then asked about (reason ``"arguments_changed"``) if an earlier
                execution of the node left an intent that no call of this execution
                has taken: the first such one, which in a node calling one after
                another is the call in this one's place. Without it such a call is a
                new effect: with calls at once, which earlier intent a changed call
                stands for cannot be told.
        """

        def decorate(fn: Callable[P, R]) -> Callable[P, R]:
            tool = name or fn.__name__
            signature = inspect.signature(fn)

            def arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[JSONValue, Any]:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                # A ToolRuntime (LangGraph injects it into a tool run by ToolNode) is
                # not recorded: it says which tool call this is (see _key).
                runtime = next(
                    (v for v in bound.arguments.values() if isinstance(v, ToolRuntime)), None
                )
                value = cast(
                    JSONValue,
                    {k: v for k, v in bound.arguments.items() if not isinstance(v, ToolRuntime)},
                )
                try:
                    check_canonical(value)
                except ValueError as exc:
                    raise GuardError(
                        f"effect {tool!r}: arguments must be JSON values: {exc}"
                    ) from None
                return value, runtime

            if inspect.iscoroutinefunction(fn):

                @functools.wraps(fn)
                async def guarded_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                    value, runtime = arguments(args, kwargs)
                    key, site = self._key(tool, value, runtime, one_at_a_time=one_at_a_time)
                    release = site.pop("release", None)
                    try:
                        steps = self._steps(tool, policy, wait, value, key=key, site=site)
                        sent: Any = None
                        while True:
                            try:
                                step = steps.send(sent)
                            except StopIteration as done:
                                found = done.value
                                break
                            sent = await self._bridge.run_async(step)
                        if isinstance(found, Recorded):
                            return replayed(tool, found)
                        return await self.perform_async(
                            found, lambda: fn(*args, **kwargs), not_happened_on
                        )
                    finally:
                        if release is not None:
                            release()

                return cast(Callable[P, R], guarded_async)

            @functools.wraps(fn)
            def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
                value, runtime = arguments(args, kwargs)
                key, site = self._key(tool, value, runtime, one_at_a_time=one_at_a_time)
                release = site.pop("release", None)
                try:
                    steps = self._steps(tool, policy, wait, value, key=key, site=site)
                    sent: Any = None
                    while True:
                        try:
                            step = steps.send(sent)
                        except StopIteration as done:
                            found = done.value
                            break
                        sent = self._bridge.run(step)
                    if isinstance(found, Recorded):
                        return cast(R, replayed(tool, found))
                    return self.perform(found, lambda: fn(*args, **kwargs), not_happened_on)
                finally:
                    if release is not None:
                        release()

            return guarded

        return decorate

    def _steps(
        self,
        tool: str,
        policy: ReplayPolicy,
        wait: float | None,
        arguments: JSONValue,
        *,
        key: tuple[str | int, ...],
        site: dict[str, Any],
    ) -> Generator[Coroutine[Any, Any, Any], Any, Recorded | Begun]:
        """The guard's part before an effect, for a sync or an async caller to drive.

        Each coroutine it yields runs on the guard's loop, and what it returns is sent
        back. It ends with the recorded outcome, or with a new intent: run the effect.
        An unknown `NEVER` effect stops the graph here (``interrupt``) until a decision
        naming its intent id comes back (see the module docstring).
        """
        ledger = self.ledger
        # LangGraph hands resume values to interrupt() calls by their index in the
        # task: ask again every question this effect already had answered, so that the
        # node's later questions, ours or its own, get their own answers. An answer
        # read here that names another unknown effect is recorded for that effect.
        # When calls made at once read each other's answers, an effect may count more
        # answers than are left: once none is, asking again stops (no question).
        found = yield ledger.begin(
            key, tool, policy, arguments, wait=wait, decided_first=True, **site
        )
        for _ in range(found if isinstance(found, int) else 0):
            try:
                answer = interrupt(
                    {
                        "steadyloop": "effect_already_decided",
                        "tool": tool,
                        "key": list(key),
                        "note": "this effect's decision is recorded; resume with any value",
                    }
                )
            except GraphInterrupt:
                break
            for intent_id, outcome in _named(answer):
                yield _route(ledger, intent_id, outcome)
        if isinstance(found, int):
            found = yield ledger.begin(key, tool, policy, arguments, wait=wait, **site)
        refused = ""
        while not isinstance(found, Begun):
            if isinstance(found, Recorded):
                return found
            question = found.to_json()
            question["answer"] = {found.intent_id: "<one of the decisions in 'decide'>"}
            if refused:
                question["refused"] = refused
            answer = interrupt(question)
            mine: Happened | NotHappened | None = None
            named = _named(answer)
            refused = (
                ""
                if named
                else f"the answer {repr(answer)[:200]} names no intent: resume with "
                "{intent_id: decision}, so that it cannot be applied to another effect"
            )
            for intent_id, outcome in named:
                if intent_id == found.intent_id:
                    mine = outcome
                else:
                    yield _route(ledger, intent_id, outcome)
            if mine is None:
                # Nothing for this effect: look again (another call may have recorded
                # its decision), then ask again with the next interrupt.
                found = yield ledger.begin(key, tool, policy, arguments, wait=wait, **site)
                continue
            now = yield ledger.find(key, tool, policy, arguments, **_seen(site))
            if not (isinstance(now, Unknown) and now.intent_id == found.intent_id):
                found = yield ledger.begin(key, tool, policy, arguments, wait=wait, **site)
                continue
            decided = yield ledger.decide(found, mine)
            if decided is not None:
                return cast(Recorded, decided)
            found = yield ledger.begin(
                key, tool, policy, arguments, again=True, wait=wait, claims=found.claims, **site
            )
        return found

    def _key(
        self,
        tool: str,
        arguments: JSONValue = None,
        runtime: object = None,
        *,
        one_at_a_time: bool = False,
    ) -> tuple[tuple[str | int, ...], dict[str, Any]]:
        """The identity of this call in its thread (see the module docstring).

        Returns:
            The key, and what else identifies the call to the ledger: for a call
            outside a tool call, its task stream's ``call`` and, for an effect
            called one at a time, ``execution``, ``claimed`` (the calls this
            execution made so far) and ``release`` (call it when the call ends).

        Raises:
            GuardError: No node runs this call, or an effect declared one at a time
                is called while another call of it runs in the same execution.
        """
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
        if conf.get(_CHECKPOINTER) is None:
            raise GuardError(
                f"guarded effect {tool!r} runs in a graph compiled without a checkpointer: "
                "nothing would resume it after a crash; compile the graph with "
                "checkpointer=..."
            )
        scratchpad = conf.get(_SCRATCHPAD)
        if scratchpad is None or "langgraph_step" not in meta:
            raise GuardError(f"guarded effect {tool!r}: this LangGraph gives no task context")
        info = getattr(conf.get(_RUNTIME), "execution_info", None)
        attempt = int(getattr(info, "node_attempt", 1) or 1)
        own_ns = str(conf.get("checkpoint_ns", "")).split("|")
        namespace = "|".join(part.split(":", 1)[0] for part in own_ns)
        parents = _parent_steps(conf.get("checkpoint_map"), "|".join(own_ns[:-1]))
        call = _tool_call(runtime)
        if call is None:
            # Outside a tool call: the arguments say which call this is (calls at
            # once in one node, asyncio.gather, are told apart however they interleave).
            what: tuple[str | int, ...] = ("arguments", _digest(arguments))
        else:
            what = ("tool_call", call[0], call[1])
        with self._lock:
            execution = self._calls.get(id(scratchpad))
            if execution is None or execution.scratchpad is not scratchpad:
                execution = _Execution(scratchpad)
                self._calls[id(scratchpad)] = execution
                while len(self._calls) > _KEPT_EXECUTIONS:
                    self._calls.popitem(last=False)
            counts = execution.counts
            occurrence = counts[(attempt, tool, what)]
            counts[(attempt, tool, what)] += 1
            identity = canonical_json([*what, occurrence])
            made = execution.made.setdefault((attempt, tool), set())
            made.add(identity)
            if one_at_a_time and call is None:
                if execution.running[tool]:
                    raise GuardError(
                        f"effect {tool!r} is declared one_at_a_time, but this node calls "
                        "it while another call of it is running (asyncio.gather, threads): "
                        "which earlier intent a changed call stands for cannot be told "
                        "then; drop one_at_a_time"
                    )
                execution.running[tool] += 1
        path = canonical_json([str(p) for p in meta.get("langgraph_path", ())])
        task = (str(thread), namespace, parents, int(meta["langgraph_step"]), path, tool)
        if call is not None:
            return (*task, identity), {}
        if not one_at_a_time:
            return task, {"call": identity}

        def claimed() -> frozenset[str]:
            with self._lock:
                return frozenset(made)

        def release(running: Counter[str] = execution.running) -> None:
            with self._lock:
                running[tool] -= 1

        site = {
            "call": identity,
            "execution": f"{execution.id}/{attempt}",
            "claimed": claimed,
            "release": release,
        }
        return task, site


class _Execution:
    """One execution of a node task: its calls so far, counted and named."""

    __slots__ = ("counts", "id", "made", "running", "scratchpad")

    def __init__(self, scratchpad: object) -> None:
        self.scratchpad = scratchpad
        self.id = uuid.uuid4().hex
        self.counts: Counter[tuple[Any, ...]] = Counter()
        self.made: dict[tuple[int, str], set[str]] = {}
        self.running: Counter[str] = Counter()


def _seen(site: dict[str, Any]) -> dict[str, Any]:
    """``site`` for `EffectLedger.find`: the calls made so far, not how to read them."""
    if "claimed" not in site:
        return site
    return {**site, "claimed": site["claimed"]()}


def _digest(arguments: JSONValue) -> str:
    """A short fixed-length name of an effect's arguments (their canonical JSON)."""
    return hashlib.sha256(canonical_json(arguments).encode()).hexdigest()[:24]


def _by_arguments(arguments: JSONValue, occurrence: int = 0) -> str:
    """The call part of the key of a call outside a tool call (see the module docstring)."""
    return canonical_json(["arguments", _digest(arguments), occurrence])


def _parent_steps(checkpoint_map: object, own: str) -> str:
    """The steps of the graphs above a subgraph, outermost first, as canonical JSON.

    A subgraph's own steps start again on every run of it, and its namespace holds
    the parent's task id, which changes when the parent's checkpoint is written again
    after a crash. What stays is the step of each enclosing graph: LangGraph gives a
    checkpoint of step *s* an id whose clock sequence is *s* (uuid6, 14 bits), and
    ``checkpoint_map`` holds the checkpoint each enclosing graph runs from. A test
    checks this (``test_langgraph_shapes.py::test_checkpoint_ids_carry_their_step``).
    """
    if not isinstance(checkpoint_map, Mapping):
        return "[]"
    steps: list[list[str | int]] = []
    for ns, checkpoint_id in sorted(checkpoint_map.items(), key=lambda kv: len(str(kv[0]))):
        if str(ns) == own:
            continue
        stripped = "|".join(part.split(":", 1)[0] for part in str(ns).split("|"))
        try:
            parsed = uuid.UUID(str(checkpoint_id))
        except ValueError:
            steps.append([stripped, str(checkpoint_id)])
            continue
        steps.append([stripped, parsed.clock_seq if parsed.version == 6 else str(parsed)])
    return canonical_json(steps)


def _tool_call(runtime: object) -> tuple[int, str] | None:
    """The index and name of the tool call a ``ToolRuntime`` belongs to, in its AIMessage.

    None when there is no runtime or its state holds no message with that call.
    """
    if runtime is None:
        return None
    call_id = getattr(runtime, "tool_call_id", None)
    state = getattr(runtime, "state", None)
    if isinstance(state, Mapping):
        messages = state.get("messages", ())
    elif isinstance(state, list):
        messages = state
    else:
        messages = getattr(state, "messages", ())
    for message in reversed(list(messages or ())):
        for index, call in enumerate(getattr(message, "tool_calls", None) or ()):
            if call.get("id") == call_id:
                return index, str(call.get("name"))
    return None


def _named(answer: object) -> list[tuple[str, Happened | NotHappened]]:
    """The decisions an answer gives, each with the intent it names.

    An answer is ``{intent_id: decision, ...}`` or a decision with an ``"intent_id"``
    field. Anything else names no intent and gives nothing.
    """
    if not isinstance(answer, Mapping):
        return []
    if isinstance(answer.get("intent_id"), str) and "happened" in answer:
        rest = {k: v for k, v in answer.items() if k != "intent_id"}
        try:
            return [(str(answer["intent_id"]), decision_from(rest))]
        except GuardError:
            return []
    named: list[tuple[str, Happened | NotHappened]] = []
    for intent_id, value in answer.items():
        if isinstance(intent_id, str) and intent_id.startswith('["effect"'):
            try:
                named.append((intent_id, decision_from(value)))
            except GuardError:
                continue
    return named


async def _route(records: EffectLedger, intent_id: str, outcome: Happened | NotHappened) -> None:
    """Record a decision read by another call for the effect it names, if still unknown."""
    try:
        key = json.loads(intent_id.rsplit("#", 1)[0])[1:]
    except (ValueError, TypeError):
        return
    unknown = await records.open_intent(key, intent_id)
    if unknown is None:
        return  # already decided, or not an intent of this journal
    with contextlib.suppress(EffectBusy):
        await records.decide(unknown, outcome)
