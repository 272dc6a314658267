from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any, TypedDict

import pytest
from agents import Agent, RunState, SQLiteSession
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, RetryPolicy

from steadyloop import open_journal
from steadyloop.effects import Begun, EffectLedger, Recorded, Unknown, decision_from
from steadyloop.integrations import EffectBusy, GuardError
from steadyloop.integrations._langgraph import _by_arguments as by_arguments
from steadyloop.integrations.langgraph import LangGraphGuard
from steadyloop.integrations.openai_agents import AgentsGuard
from steadyloop.loop import Happened, NotHappened, ReplayPolicy


class S(TypedDict, total=False):
    n: int
    out: list[str]


def one_node(fn: Any, retry: RetryPolicy | None = None) -> StateGraph[S]:
    builder: StateGraph[S] = StateGraph(S)
    builder.add_node("act", fn, retry_policy=retry)
    builder.add_edge(START, "act")
    builder.add_edge("act", END)
    return builder


def saver(tmp_path: Path) -> SqliteSaver:
    return SqliteSaver(sqlite3.connect(tmp_path / "cp.db", check_same_thread=False))


@pytest.fixture
def guard(tmp_path: Path) -> Any:
    with LangGraphGuard(f"sqlite:///{tmp_path / 'guard.db'}") as g:
        yield g


def test_effect_outside_a_node_is_refused(guard: LangGraphGuard) -> None:
    """A guarded effect called outside a LangGraph node raises GuardError and does nothing."""
    calls = []

    @guard.effect(ReplayPolicy.NEVER)
    def charge() -> str:
        calls.append(1)
        return "x"

    with pytest.raises(GuardError, match="outside a LangGraph node"):
        charge()
    assert calls == []


def test_graph_without_checkpointer_is_refused_even_with_a_thread(guard: LangGraphGuard) -> None:
    """A guarded effect in a graph compiled without a checkpointer raises GuardError before acting."""
    calls: list[int] = []

    @guard.effect(ReplayPolicy.NEVER)
    def charge() -> str:
        calls.append(1)
        return "x"

    graph = one_node(lambda s: {"out": [charge()]}).compile()
    with pytest.raises(GuardError, match="without a checkpointer"):
        graph.invoke({"n": 0}, {"configurable": {"thread_id": "t"}})
    assert calls == []


def test_graph_without_thread_is_refused(guard: LangGraphGuard) -> None:
    """A guarded effect in a graph without a checkpointer thread raises GuardError naming the fix."""

    @guard.effect(ReplayPolicy.NEVER)
    def charge() -> str:
        return "x"

    graph = one_node(lambda s: {"out": [charge()]}).compile()
    with pytest.raises(GuardError, match="thread_id"):
        graph.invoke({"n": 0})


def test_node_retry_does_not_repeat_a_never_effect(guard: LangGraphGuard, tmp_path: Path) -> None:
    """A node retried by LangGraph's RetryPolicy gets the recorded result instead of charging again."""
    calls: list[int] = []
    attempts: list[int] = []

    @guard.effect(ReplayPolicy.NEVER)
    def charge(n: int) -> str:
        calls.append(n)
        return f"charged {n}"

    def node(state: S) -> S:
        receipt = charge(state["n"])
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("the network blinked after the charge")
        return {"out": [receipt]}

    retry = RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=ConnectionError)
    graph = one_node(node, retry).compile(checkpointer=saver(tmp_path))
    result = graph.invoke({"n": 7}, {"configurable": {"thread_id": "t"}})
    assert result["out"] == ["charged 7"]
    assert calls == [7]
    assert len(attempts) == 2


def test_two_calls_in_one_node_are_two_effects(guard: LangGraphGuard, tmp_path: Path) -> None:
    """Two calls of one effect in a node are two effects, each found again when the node runs again."""
    calls: list[int] = []
    attempts: list[int] = []

    @guard.effect(ReplayPolicy.NEVER)
    def charge(n: int) -> str:
        calls.append(n)
        return f"charged {n}"

    def node(state: S) -> S:
        out = [charge(1), charge(2)]
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("lost after both charges")
        return {"out": out}

    retry = RetryPolicy(max_attempts=2, initial_interval=0.01, retry_on=ConnectionError)
    graph = one_node(node, retry).compile(checkpointer=saver(tmp_path))
    result = graph.invoke({"n": 0}, {"configurable": {"thread_id": "t"}})
    assert result["out"] == ["charged 1", "charged 2"]
    assert calls == [1, 2]


def test_unknown_effect_interrupts_and_a_decision_completes(tmp_path: Path) -> None:
    """An intent without a result stops the graph with an interrupt; Command(resume=...) decides it."""
    url = f"sqlite:///{tmp_path / 'guard.db'}"
    calls: list[str] = []

    def build(g: LangGraphGuard) -> Any:
        @g.effect(ReplayPolicy.NEVER)
        def charge(order: str) -> str:
            calls.append(order)
            return f"charged {order}"

        return one_node(lambda s: {"out": [charge("o-1")]}).compile(checkpointer=saver(tmp_path))

    config: Any = {"configurable": {"thread_id": "t"}}
    with LangGraphGuard(url) as g:
        graph = build(g)
        graph.invoke({"n": 0}, config, interrupt_before=["act"])
        key = _first_key(graph, g, config)

    async def plant() -> None:  # a crash between the intent and the charge
        journal = await open_journal(url)
        records = EffectLedger(journal, "langgraph")
        begun = await records.begin(
            key,
            "charge",
            ReplayPolicy.NEVER,
            {"order": "o-1"},
            call=by_arguments({"order": "o-1"}),
            execution="planted",
        )
        assert not isinstance(begun, (Recorded, Unknown))
        records.abandon(begun)
        await journal.close()

    asyncio.run(plant())
    with LangGraphGuard(url) as g:
        graph = build(g)
        graph.invoke(None, config)
        pending = [i for t in graph.get_state(config).tasks for i in t.interrupts]
        assert len(pending) == 1
        value = pending[0].value
        assert value["steadyloop"] == "effect_state_unknown"
        assert value["reason"] == "no_result"
        assert value["arguments"] == {"order": "o-1"}
        result = graph.invoke(
            Command(
                resume={
                    value["intent_id"]: {
                        "happened": True,
                        "value": "charged o-1",
                        "note": "seen at the bank",
                    }
                }
            ),
            config,
        )
    assert result["out"] == ["charged o-1"]
    assert calls == []


def _first_key(graph: Any, g: LangGraphGuard, config: Any) -> tuple[Any, ...]:
    """The task stream key of the act node's charges: thread, namespace, parents, step, path, effect."""
    step = graph.get_state(config).metadata["step"] + 1
    return (
        "t",
        "act",
        "[]",
        step,
        json.dumps(["__pregel_pull", "act"], separators=(",", ":")),
        "charge",
    )


def test_a_value_without_json_form_is_recorded_as_happened(
    guard: LangGraphGuard, tmp_path: Path
) -> None:
    """An effect returning a non-JSON value still counts as happened: the graph ends, nothing runs twice."""
    calls: list[int] = []

    @guard.effect(ReplayPolicy.NEVER)
    def charge() -> object:
        calls.append(1)
        return object()

    def node(s: Any) -> dict[str, Any]:
        first = charge()
        return {"out": [type(first).__name__]}

    graph = one_node(node).compile(checkpointer=saver(tmp_path))
    config: Any = {"configurable": {"thread_id": "t"}}
    assert graph.invoke({"n": 0}, config)["out"] == ["object"]
    assert calls == [1]


async def test_raised_effects_by_policy() -> None:
    """A NEVER effect that raised is asked about (reason raised); a SAFE one runs again."""
    journal = await open_journal("memory://")
    records = EffectLedger(journal)
    for policy in (ReplayPolicy.NEVER, ReplayPolicy.SAFE):
        key = ("k", policy.value)
        begun = await records.begin(key, "t", policy, {})
        assert isinstance(begun, Begun)
        await records.fail(begun, ValueError("declined"))
        again = await records.begin(key, "t", policy, {})
        if policy is ReplayPolicy.NEVER:
            assert isinstance(again, Unknown)
            assert (again.reason, again.error) == ("raised", "ValueError: declined")
        else:
            assert isinstance(again, Begun)
    await journal.close()


async def test_two_live_executions_of_one_effect_exclude_each_other(tmp_path: Path) -> None:
    """Of many executions beginning one NEVER effect at once, exactly one may run it."""
    journal = await open_journal(f"sqlite:///{tmp_path / 'g.db'}")
    records = EffectLedger(journal)
    results = await asyncio.gather(
        *(records.begin(("k",), "t", ReplayPolicy.NEVER, {}) for _ in range(8)),
        return_exceptions=True,
    )
    await journal.close()
    began = [r for r in results if not isinstance(r, (EffectBusy, Unknown))]
    assert len(began) == 1, results
    assert all(isinstance(r, (EffectBusy, Unknown)) for r in results if r is not began[0])


async def test_changed_arguments_are_unknown_for_never() -> None:
    """A NEVER effect executed again with other arguments than it recorded is unknown, not replayed."""
    journal = await open_journal("memory://")
    records = EffectLedger(journal)
    begun = await records.begin(("k",), "pay", ReplayPolicy.NEVER, {"cents": 100})
    assert not isinstance(begun, (Recorded, Unknown))
    await records.finish(begun, value="paid")
    found = await records.begin(("k",), "pay", ReplayPolicy.NEVER, {"cents": 120})
    assert isinstance(found, Unknown)
    assert found.reason == "arguments_changed"
    assert found.recorded_arguments == {"cents": 100}
    assert await records.decide(found, NotHappened()) is None
    rerun = await records.begin(("k",), "pay", ReplayPolicy.NEVER, {"cents": 120}, again=True)
    assert not isinstance(rerun, (Recorded, Unknown))
    await journal.close()


def test_decisions_are_read_strictly() -> None:
    """A decision is happened/value, happened/error or not happened; anything else is a GuardError."""
    assert decision_from({"happened": False}) == NotHappened()
    assert decision_from({"happened": True, "value": 3}) == Happened(value=3)
    for bad in ("yes", {"happened": "true"}, {"happened": True, "error": 5}):
        with pytest.raises(GuardError):
            decision_from(bad)


def test_agents_decision_in_another_process(tmp_path: Path) -> None:
    """An unknown call stops the run for approval; a new guard and agent decide it and finish the run."""
    url = f"sqlite:///{tmp_path / 'guard.db'}"
    calls: list[str] = []

    def build(g: AgentsGuard) -> Agent[Any]:
        @g.function_tool(ReplayPolicy.NEVER)
        def charge(order: str) -> str:
            calls.append(order)
            return f"charged {order}"

        def reply(call: Any) -> list[Any]:
            if "charged" in json.dumps(call.input, default=str):
                return [assistant_message("done")]
            return [function_call("charge", {"order": "o-1"}, call_id=f"c{len(calls)}{id(call)}")]

        model = ScriptedModel([ModelStep.respond(reply) for _ in range(5)])
        return Agent(name="shop", tools=[charge], model=model)

    session = SQLiteSession("s", str(tmp_path / "conv.db"))

    async def crashed_once() -> str:
        with AgentsGuard(url) as g:
            await session.add_items([{"role": "user", "content": "buy"}])
            # The intent of the charge at its position is durable; the process then died.
            begun = await g.ledger.begin(
                ("s", 1, "charge", 0), "charge", ReplayPolicy.NEVER, {"order": "o-1"}
            )
            assert isinstance(begun, Begun)
            g.ledger.abandon(begun)
            result = await g.continue_run(build(g), "buy", session=session)
            assert result is not None
            assert [i.tool_name for i in result.interruptions] == ["charge"]
            unknown = await g.unknown(result.interruptions[0])
            assert unknown is not None and unknown.reason == "no_result"
            return json.dumps(result.to_state().to_json())

    saved = asyncio.run(crashed_once())

    async def decided_elsewhere() -> Any:
        with AgentsGuard(url) as g:
            agent = build(g)
            state = await RunState.from_json(agent, json.loads(saved))
            await g.decide(state, state.get_interruptions()[0], Happened(value="charged o-1"))
            return await g.run(agent, state, session=session)

    result = asyncio.run(decided_elsewhere())
    assert result.final_output == "done"
    assert calls == []


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_retry_after_an_error_declared_not_happened_charges_once(
    guard: LangGraphGuard, tmp_path: Path, is_async: bool
) -> None:
    """A NEVER effect that raised a not_happened_on error before acting runs again under RetryPolicy, once."""
    charged: list[str] = []
    attempts: list[int] = []

    def act(order: str) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionRefusedError("provider down")
        charged.append(order)
        return f"charged {order}"

    if is_async:

        async def charge_async(order: str) -> str:
            return act(order)

        charge = guard.effect(ReplayPolicy.NEVER, not_happened_on=(ConnectionRefusedError,))(
            charge_async
        )

        async def node(s: Any) -> dict[str, Any]:
            return {"out": [await charge("o-1")]}

    else:
        sync = guard.effect(ReplayPolicy.NEVER, not_happened_on=(ConnectionRefusedError,))(act)

        def node(s: Any) -> dict[str, Any]:
            return {"out": [sync("o-1")]}

    retry = RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=ConnectionRefusedError)
    graph = one_node(node, retry).compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}}
    if is_async:
        result = asyncio.run(graph.ainvoke({"n": 0}, config))
    else:
        result = graph.invoke({"n": 0}, config)
    assert result["out"] == ["charged o-1"]
    assert charged == ["o-1"] and len(attempts) == 2


def test_a_retry_after_an_undeclared_error_asks_and_then_completes(
    guard: LangGraphGuard, tmp_path: Path
) -> None:
    """A NEVER effect that raised after acting is asked about on retry; the decision lets invoke finish."""
    charged: list[str] = []

    @guard.effect(ReplayPolicy.NEVER)
    def charge(order: str) -> str:
        charged.append(order)
        if len(charged) == 1:
            raise TimeoutError("the provider charged, then the read timed out")
        return f"charged {order}"

    retry = RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=TimeoutError)
    graph = one_node(lambda s: {"out": [charge("o-1")]}, retry).compile(
        checkpointer=saver(tmp_path)
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"n": 0}, config)
    asked = [i.value for t in graph.get_state(config).tasks for i in t.interrupts]
    assert [(q["reason"], q["error"]) for q in asked] == [
        ("raised", "TimeoutError: the provider charged, then the read timed out")
    ]
    decision = {"happened": True, "value": "charged o-1", "note": "the provider shows it"}
    result = graph.invoke(Command(resume={asked[0]["intent_id"]: decision}), config)
    assert result["out"] == ["charged o-1"]
    assert charged == ["o-1"]
    assert graph.invoke(None, config)["out"] == ["charged o-1"]
