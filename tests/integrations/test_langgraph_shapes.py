"""The graph shapes people build most, crashed at every write boundary: no NEVER repeat, no lost effect.

Each shape is run by the crash kit with the guard; every crash point must end with
each `NEVER` effect done exactly once and the uninterrupted run's final state.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import operator
import time
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, ToolRuntime, tools_condition
from langgraph.types import Command, Send
from lg_graphs import sqlite_saver

from steadyloop.effects import Begun
from steadyloop.integrations._langgraph import _by_arguments as by_arguments
from steadyloop.integrations._langgraph import _parent_steps
from steadyloop.integrations.langgraph import LangGraphGuard
from steadyloop.loop import ReplayPolicy
from steadyloop.testing import GraphProcess, langgraph_crash_matrix


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


def _agent(calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """A model node: asks for ``calls`` at once (fresh call ids on every call), then answers."""

    def agent(state: Chat) -> Chat:
        if any(isinstance(m, ToolMessage) for m in state.get("messages", [])):
            return {"messages": [AIMessage(content="all done")]}
        tool_calls = [
            {"name": name, "args": args, "id": f"call-{uuid.uuid4().hex[:8]}", "type": "tool_call"}
            for name, args in calls
        ]
        return {"messages": [AIMessage(content="", tool_calls=tool_calls)]}

    return agent


_STARTS = itertools.count()
"""Counts the simulated processes, so that each one orders its parallel calls differently."""


def _tools(p: GraphProcess) -> list[Any]:
    late = "A" if next(_STARTS) % 2 else "B"  # which call comes last differs between processes

    @p.guarded(ReplayPolicy.NEVER)
    def pay(order: str) -> str:
        return p.effect("charge", "never", f"charge/{order}")

    def charge(order: str) -> str:
        """Charge an order."""
        time.sleep(0.05 if order == late else 0.0)
        return pay(order)

    @p.guarded(ReplayPolicy.SAFE)
    def lookup(order: str) -> str:
        """Look an order up."""
        return p.effect("lookup", "safe", f"lookup/{order}")

    return [tool(charge), tool(lookup)]


def _tool_node_graph(orders: list[str], p: GraphProcess) -> StateGraph[Chat]:
    calls = [("charge", {"order": o}) for o in orders] + [("lookup", {"order": orders[0]})]
    builder: StateGraph[Chat] = StateGraph(Chat)
    builder.add_node("agent", _agent(calls))
    builder.add_node("tools", ToolNode(_tools(p)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder


def _check(report: Any, never: int) -> None:
    print(report.summary())
    assert report.summary()["crash_points"] > 0
    report.assert_guarded()
    assert sum(1 for a in report.effects if a.startswith("charge/")) == never


@pytest.mark.parametrize("orders", [["A", "B"], ["A", "B", "C"]], ids=["two", "three"])
def test_tool_node_with_parallel_calls_of_one_never_tool(orders: list[str], tmp_path: Any) -> None:
    """ToolNode running 2-3 parallel calls of one NEVER tool and a SAFE one: no repeat, no loss at any crash point."""
    report = langgraph_crash_matrix(
        lambda p: _tool_node_graph(orders, p),
        sqlite_saver,
        {"messages": [("user", "pay")]},
        workdir=tmp_path,
        durability="async",
    )
    _check(report, len(orders))


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
        builder.add_node("agent", _agent([("charge", {"order": "A"})] * 3))
        builder.add_node("tools", ToolNode([tool(charge)]))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        return builder

    report = langgraph_crash_matrix(
        build, sqlite_saver, {"messages": [("user", "pay")]}, workdir=tmp_path, durability="async"
    )
    _check(report, 3)


def test_send_per_tool_call(tmp_path: Any) -> None:
    """A ToolNode task per tool call (the Send API): no repeat, no loss at any crash point."""

    def build(p: GraphProcess) -> StateGraph[Chat]:
        calls = [("charge", {"order": o}) for o in ("A", "B", "C")]
        calls.append(("lookup", {"order": "A"}))

        def fan_out(state: Chat) -> Any:
            last = state["messages"][-1]
            if not isinstance(last, AIMessage) or not last.tool_calls:
                return END
            return [
                Send(
                    "tools",
                    {"__type": "tool_call_with_context", "tool_call": call, "state": state},
                )
                for call in last.tool_calls
            ]

        builder: StateGraph[Chat] = StateGraph(Chat)
        builder.add_node("agent", _agent(calls))
        builder.add_node("tools", ToolNode(_tools(p)))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", fan_out, ["tools", END])
        builder.add_edge("tools", "agent")
        return builder

    report = langgraph_crash_matrix(
        build, sqlite_saver, {"messages": [("user", "pay")]}, workdir=tmp_path, durability="async"
    )
    _check(report, 3)


class Orders(TypedDict, total=False):
    n: int
    receipts: Annotated[list[str], operator.add]


def test_gather_of_two_charges_in_one_node(tmp_path: Any) -> None:
    """Two charges awaited at once in one node (asyncio.gather): no repeat, no loss, each decision applied to its own charge."""

    def build(p: GraphProcess) -> StateGraph[Orders]:
        @p.guarded(ReplayPolicy.NEVER)
        async def charge(order: str) -> str:
            return p.effect("charge", "never", f"charge/{order}")

        late = "c" if next(_STARTS) % 2 else "d"  # which charge comes last differs by process

        async def one(order: str) -> str:
            await asyncio.sleep(0.05 if order == late else 0.0)
            return await charge(order)

        async def both() -> list[str]:
            return list(await asyncio.gather(one("c"), one("d")))

        builder: StateGraph[Orders] = StateGraph(Orders)
        builder.add_node("pay", lambda s: {"receipts": asyncio.run(both())})
        builder.add_edge(START, "pay")
        builder.add_edge("pay", END)
        return builder

    report = langgraph_crash_matrix(
        build, sqlite_saver, {"n": 0, "receipts": []}, workdir=tmp_path, durability="async"
    )
    _check(report, 2)


def test_subgraph_run_on_several_parent_steps(tmp_path: Any) -> None:
    """A subgraph the parent runs on three steps, charging with equal arguments each time: three charges, none repeated or lost."""

    def build(p: GraphProcess) -> StateGraph[Orders]:
        run = {"n": 0}  # which parent step's run of the subgraph this is, for the sink only

        @p.guarded(ReplayPolicy.NEVER)
        def charge(order: str) -> str:
            return p.effect("charge", "never", f"charge/{order}/{run['n']}")

        def pay(s: Orders) -> Orders:
            run["n"] = s["n"]
            return {"receipts": [charge("same")]}

        inner: StateGraph[Orders] = StateGraph(Orders)
        inner.add_node("pay", pay)
        inner.add_edge(START, "pay")
        inner.add_edge("pay", END)
        outer: StateGraph[Orders] = StateGraph(Orders)
        outer.add_node("sub", inner.compile())
        outer.add_node("next", lambda s: {"n": s["n"] + 1})
        outer.add_edge(START, "sub")
        outer.add_edge("sub", "next")
        outer.add_conditional_edges("next", lambda s: END if s["n"] >= 3 else "sub")
        return outer

    report = langgraph_crash_matrix(
        build, sqlite_saver, {"n": 0, "receipts": []}, workdir=tmp_path, durability="async"
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
            key = ("t", "act", "[]", step, path, "charge", by_arguments({"order": order}))
            begun = await guard.ledger.begin(key, "charge", ReplayPolicy.NEVER, {"order": order})
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
