"""The graph shapes people build most, crashed at every write boundary: no NEVER repeat, no lost effect.

Each shape of ``lg_graphs.SHAPES`` is run by the crash kit with the guard; every crash
point must end with each `NEVER` effect done exactly once and the uninterrupted run's
final state. Without the guard, the kit must see the repeats.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode, ToolRuntime, tools_condition
from langgraph.types import Command
from lg_graphs import SHAPES, Chat, Orders, _late, agent, sqlite_saver

from steadyloop import GuardError
from steadyloop.effects import Begun
from steadyloop.integrations._langgraph import _by_arguments as by_arguments
from steadyloop.integrations._langgraph import _parent_steps
from steadyloop.integrations.langgraph import LangGraphGuard
from steadyloop.loop import ReplayPolicy
from steadyloop.testing import GraphProcess, langgraph_crash_matrix


def _check(report: Any, never: int) -> None:
    print(report.summary())
    assert report.summary()["crash_points"] > 0
    report.assert_guarded()
    assert sum(1 for a in report.effects if a.startswith("charge/")) == never


@pytest.mark.chaos(smoke=["shop-sync", "toolnode-2"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_every_shape_guarded_at_every_crash_point(name: str, tmp_path: Any) -> None:
    """Each shape, guarded, ends with each NEVER charge done once and the uninterrupted state at every crash point."""
    shape = SHAPES[name]
    report = langgraph_crash_matrix(
        shape.build,
        sqlite_saver,
        shape.graph_input(),
        workdir=tmp_path,
        durability=shape.durability,
    )
    _check(report, shape.charges)


@pytest.mark.chaos(smoke=["toolnode-2"])
@pytest.mark.parametrize("name", ["toolnode-2", "gather", "retry"])
def test_unguarded_shapes_repeat_at_some_crash_point(name: str, tmp_path: Any) -> None:
    """Without the guard the kit sees a repeated charge at some crash point of these shapes."""
    shape = SHAPES[name]
    report = langgraph_crash_matrix(
        shape.build,
        sqlite_saver,
        shape.graph_input(),
        workdir=tmp_path,
        durability=shape.durability,
        guarded=False,
    )
    assert report.repeated_points("never"), report.summary()


def test_tool_node_calls_with_equal_arguments_are_told_apart_by_their_index(
    tmp_path: Any,
) -> None:
    """Three equal-argument calls of a NEVER tool taking a ToolRuntime are three effects, each done once at every crash point."""

    def build(p: GraphProcess) -> StateGraph[Chat]:
        @p.guarded(ReplayPolicy.NEVER)
        def charge(order: str, runtime: ToolRuntime) -> str:
            """Charge an order."""
            ai = next(
                m
                for m in reversed(runtime.state["messages"])
                if isinstance(m, AIMessage) and m.tool_calls
            )
            index = [c["id"] for c in ai.tool_calls].index(runtime.tool_call_id)
            return p.effect("charge", "never", f"charge/{order}/{index}")

        builder: StateGraph[Chat] = StateGraph(Chat)
        builder.add_node("agent", agent([("charge", {"order": "A"})] * 3))
        builder.add_node("tools", ToolNode([tool(charge)]))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        return builder

    report = langgraph_crash_matrix(
        build, sqlite_saver, {"messages": [("user", "pay")]}, workdir=tmp_path, durability="async"
    )
    _check(report, 3)


def test_checkpoint_ids_carry_their_step(tmp_path: Any) -> None:
    """The guard reads an enclosing graph's step from its checkpoint id (LangGraph's uuid6 clock sequence): true of every checkpoint."""
    builder: StateGraph[Orders] = StateGraph(Orders)
    builder.add_node("next", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "next")
    builder.add_conditional_edges("next", lambda s: END if s["n"] >= 4 else "next")
    graph = builder.compile(checkpointer=sqlite_saver(tmp_path))
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"n": 0, "receipts": []}, config)
    history = list(graph.get_state_history(config))
    assert len(history) > 4
    for snapshot in history:
        checkpoint_id = snapshot.config["configurable"]["checkpoint_id"]
        step = snapshot.metadata["step"] & 0x3FFF
        assert _parent_steps({"": checkpoint_id, "sub:x": "y"}, "sub:x") == f'[["",{step}]]'


def _two_unknown_charges(tmp_path: Any) -> tuple[Any, Any, dict[str, str], list[str]]:
    """A node charging c then d, whose process died after both intents (no results)."""
    url = f"sqlite:///{tmp_path / 'guard.db'}"
    calls: list[str] = []
    guard = LangGraphGuard(url)

    @guard.effect(ReplayPolicy.NEVER)
    def charge(order: str) -> str:
        calls.append(order)
        return f"charged {order}"

    builder: StateGraph[Orders] = StateGraph(Orders)
    builder.add_node("act", lambda s: {"receipts": [charge("c"), charge("d")]})
    builder.add_edge(START, "act")
    builder.add_edge("act", END)
    graph = builder.compile(checkpointer=sqlite_saver(tmp_path))
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"n": 0, "receipts": []}, config, interrupt_before=["act"])
    step = graph.get_state(config).metadata["step"] + 1
    path = json.dumps(["__pregel_pull", "act"], separators=(",", ":"))
    intents: dict[str, str] = {}

    async def plant() -> None:
        for order in ("c", "d"):
            key = ("t", "act", "[]", step, path, "charge")
            begun = await guard.ledger.begin(
                key,
                "charge",
                ReplayPolicy.NEVER,
                {"order": order},
                call=by_arguments({"order": order}),
                execution="planted",
            )
            assert isinstance(begun, Begun)
            guard.ledger.abandon(begun)
            intents[order] = begun.intent_id

    guard._bridge.run(plant())
    return guard, graph, intents, calls


def _asked(graph: Any) -> list[Any]:
    config: Any = {"configurable": {"thread_id": "t"}}
    return [i.value for t in graph.get_state(config).tasks for i in t.interrupts]


def test_a_decision_read_by_another_effects_question_goes_to_the_effect_it_names(
    tmp_path: Any,
) -> None:
    """An answer naming charge d, given where charge c asked, decides d and never c; c is asked again."""
    guard, graph, intents, calls = _two_unknown_charges(tmp_path)
    config: Any = {"configurable": {"thread_id": "t"}}
    with guard:
        graph.invoke(None, config)
        assert [q["intent_id"] for q in _asked(graph)] == [intents["c"]]
        answer = {intents["d"]: {"happened": True, "value": "charged d"}}
        graph.invoke(Command(resume=answer), config)
        assert [q["intent_id"] for q in _asked(graph)] == [intents["c"]]
        result = graph.invoke(Command(resume={intents["c"]: {"happened": False}}), config)
    assert result["receipts"] == ["charged c", "charged d"]
    assert calls == ["c"]


def test_an_answer_naming_no_intent_is_refused(tmp_path: Any) -> None:
    """A decision that names no intent is applied to no effect: the question comes again, saying why."""
    guard, graph, intents, calls = _two_unknown_charges(tmp_path)
    config: Any = {"configurable": {"thread_id": "t"}}
    with guard:
        graph.invoke(None, config)
        graph.invoke(Command(resume={"happened": True, "value": "charged ?"}), config)
        asked = _asked(graph)
        assert [q["intent_id"] for q in asked] == [intents["c"]]
        assert "names no intent" in asked[0]["refused"]
        answer = {intents["c"]: {"happened": True, "value": "charged c"}}
        graph.invoke(Command(resume=answer), config)
        answer = {intents["d"]: {"happened": True, "value": "charged d"}}
        result = graph.invoke(Command(resume=answer), config)
    assert result["receipts"] == ["charged c", "charged d"]
    assert calls == []


def _model_in_node(p: GraphProcess, cents: int) -> StateGraph[Orders]:
    """One node that asks a model for an amount (``cents``: this life's answer), then charges it."""

    @p.guarded(ReplayPolicy.NEVER, one_at_a_time=True)
    def charge(order: str, cents: int) -> str:
        return p.effect("charge", "never", f"charge/{order}")

    builder: StateGraph[Orders] = StateGraph(Orders)
    builder.add_node("order", lambda s: {"receipts": [charge("o-1", cents)]})
    builder.add_edge(START, "order")
    builder.add_edge("order", END)
    return builder


def test_a_model_in_the_node_answering_otherwise_after_a_crash_is_asked_about(
    tmp_path: Any,
) -> None:
    """A charge re-executed with the amount a model in its node answered anew is asked about, never run twice."""
    lives = iter(range(1000))
    report = langgraph_crash_matrix(
        lambda p: _model_in_node(p, 100 + next(lives)),
        sqlite_saver,
        {"receipts": []},
        workdir=tmp_path,
        durability="sync",
    )
    _check(report, 1)


def _gather_model_in_node(p: GraphProcess, cents: int) -> StateGraph[Orders]:
    """Two charges at once (``asyncio.gather``); a model in the node answers d's amount (``cents``)."""

    @p.guarded(ReplayPolicy.NEVER)
    async def charge(order: str, cents: int) -> str:
        return p.effect("charge", "never", f"charge/{order}")

    late = _late("c", "d")

    async def one(order: str, amount: int) -> str:
        await asyncio.sleep(0.05 if order == late else 0.0)
        return await charge(order, amount)

    async def both() -> list[str]:
        return list(await asyncio.gather(one("c", 50), one("d", cents)))

    builder: StateGraph[Orders] = StateGraph(Orders)
    builder.add_node("pay", lambda s: {"receipts": asyncio.run(both())})
    builder.add_edge(START, "pay")
    builder.add_edge("pay", END)
    return builder


def test_gathered_charges_one_answered_otherwise_after_a_crash_confine_the_price_to_it(
    tmp_path: Any,
) -> None:
    """Two charges at once, one of whose amounts a model in the node answers anew after each crash: the other is done exactly once at every crash point, nothing is lost, and only the changed one may repeat."""
    lives = iter(range(1000))
    report = langgraph_crash_matrix(
        lambda p: _gather_model_in_node(p, 100 + next(lives)),
        sqlite_saver,
        {"n": 0, "receipts": []},
        workdir=tmp_path,
        durability="async",
    )
    summary = report.summary()
    assert summary["crash_points"] > 0 and summary["unfinished"] == 0, summary
    assert not [p for p in report.points if p.lost], summary
    repeated = {r.action for p in report.points for r in p.repeated if r.policy == "never"}
    assert repeated <= {"charge/d"}, repeated


def _equal_twice(p: GraphProcess, one_at_a_time: bool) -> StateGraph[Orders]:
    """One node charging the same order the same amount twice, one after the other."""
    which = {"i": 0}

    @p.guarded(ReplayPolicy.NEVER, one_at_a_time=one_at_a_time)
    def charge(order: str, cents: int) -> str:
        return p.effect("charge", "never", f"charge/{order}/{which['i']}")

    def pay(s: Orders) -> Orders:
        receipts = []
        for i in range(2):
            which["i"] = i
            receipts.append(charge("o-1", 100))
        return {"receipts": receipts}

    builder: StateGraph[Orders] = StateGraph(Orders)
    builder.add_node("pay", pay)
    builder.add_edge(START, "pay")
    builder.add_edge("pay", END)
    return builder


@pytest.mark.parametrize("one_at_a_time", [True, False])
def test_the_same_arguments_twice_in_one_node_are_two_charges_each_done_once(
    tmp_path: Any, one_at_a_time: bool
) -> None:
    """Two real charges with equal arguments in one node both happen, each exactly once, at every crash point."""
    report = langgraph_crash_matrix(
        lambda p: _equal_twice(p, one_at_a_time),
        sqlite_saver,
        {"n": 0, "receipts": []},
        workdir=tmp_path,
        durability="sync",
    )
    _check(report, 2)


def _safe_model_in_node(p: GraphProcess, cents: int) -> StateGraph[Orders]:
    """A SAFE quote whose amount a model in the node answers anew each life, then done."""

    @p.guarded(ReplayPolicy.SAFE, one_at_a_time=True)
    def quote(order: str, cents: int) -> str:
        return p.effect("quote", "safe", f"quote/{order}")

    builder: StateGraph[Orders] = StateGraph(Orders)
    builder.add_node("quote", lambda s: {"receipts": [quote("o-1", cents)]})
    builder.add_edge(START, "quote")
    builder.add_edge("quote", END)
    return builder


def test_a_safe_effect_with_changed_arguments_just_runs_again(tmp_path: Any) -> None:
    """A SAFE effect re-executed with new arguments runs again: nobody is ever asked."""
    lives = iter(range(1000))
    report = langgraph_crash_matrix(
        lambda p: _safe_model_in_node(p, 100 + next(lives)),
        sqlite_saver,
        {"n": 0, "receipts": []},
        workdir=tmp_path,
        durability="sync",
    )
    summary = report.summary()
    assert summary["crash_points"] > 0 and summary["unfinished"] == 0, summary
    assert summary["interrupts"] == 0, summary
    assert report.repeated_points("safe"), summary  # it did run again somewhere
    report.assert_guarded()


def _planted_then_asked(tmp_path: Any, cents: int) -> tuple[Any, Any, str, list[int]]:
    """A node charging ``cents``; an earlier execution of its task left an open intent for 100."""
    url = f"sqlite:///{tmp_path / 'guard.db'}"
    calls: list[int] = []
    guard = LangGraphGuard(url)

    @guard.effect(ReplayPolicy.NEVER, one_at_a_time=True)
    def charge(order: str, cents: int) -> str:
        calls.append(cents)
        return f"charged {cents}"

    builder: StateGraph[Orders] = StateGraph(Orders)
    builder.add_node("act", lambda s: {"receipts": [charge("o-1", cents)]})
    builder.add_edge(START, "act")
    builder.add_edge("act", END)
    graph = builder.compile(checkpointer=sqlite_saver(tmp_path))
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"n": 0, "receipts": []}, config, interrupt_before=["act"])
    step = graph.get_state(config).metadata["step"] + 1
    path = json.dumps(["__pregel_pull", "act"], separators=(",", ":"))
    arguments = {"order": "o-1", "cents": 100}

    async def plant() -> str:
        begun = await guard.ledger.begin(
            ("t", "act", "[]", step, path, "charge"),
            "charge",
            ReplayPolicy.NEVER,
            arguments,
            call=by_arguments(arguments),
            execution="an earlier one",
        )
        assert isinstance(begun, Begun)
        guard.ledger.abandon(begun)
        return begun.intent_id

    return guard, graph, guard._bridge.run(plant()), calls


@pytest.mark.parametrize("happened", [True, False])
def test_a_call_with_new_arguments_is_asked_about_the_intent_an_earlier_execution_left(
    tmp_path: Any, happened: bool
) -> None:
    """New arguments where an earlier execution left an unclaimed intent ask about that intent; the answer decides whether the call runs."""
    guard, graph, planted, calls = _planted_then_asked(tmp_path, 101)
    config: Any = {"configurable": {"thread_id": "t"}}
    with guard:
        graph.invoke(None, config)
        (question,) = _asked(graph)
        assert question["reason"] == "arguments_changed"
        assert question["intent_id"] == planted
        assert question["recorded_arguments"] == {"order": "o-1", "cents": 100}
        assert question["arguments"] == {"order": "o-1", "cents": 101}
        assert calls == []
        decision = {"happened": True, "value": "charged 100"} if happened else {"happened": False}
        result = graph.invoke(Command(resume={planted: decision}), config)
        assert result["receipts"] == ["charged 100" if happened else "charged 101"]
        assert calls == ([] if happened else [101])
        assert _asked(graph) == []


def test_an_effect_declared_one_at_a_time_called_at_once_is_refused(tmp_path: Any) -> None:
    """A one_at_a_time effect called while another call of it runs in the node is refused with GuardError before it acts."""
    calls: list[str] = []
    with LangGraphGuard(f"sqlite:///{tmp_path / 'guard.db'}") as guard:

        @guard.effect(ReplayPolicy.NEVER, one_at_a_time=True)
        async def charge(order: str) -> str:
            calls.append(order)
            await asyncio.sleep(0.2)
            return f"charged {order}"

        async def both() -> Orders:
            first = asyncio.ensure_future(charge("c"))
            await asyncio.sleep(0.05)  # c is running now
            try:
                return {"receipts": [await charge("d")]}
            finally:
                await first

        builder: StateGraph[Orders] = StateGraph(Orders)
        builder.add_node("pay", lambda s: asyncio.run(both()))
        builder.add_edge(START, "pay")
        builder.add_edge("pay", END)
        graph = builder.compile(checkpointer=sqlite_saver(tmp_path))
        config: Any = {"configurable": {"thread_id": "t"}}
        with pytest.raises(GuardError, match="one_at_a_time"):
            graph.invoke({"n": 0, "receipts": []}, config)
    assert calls == ["c"]
