"""The LangGraph graphs the crash tests and benchmarks use, each effect a counted one.

``shop`` is lookup → charge → done. ``SHAPES`` are the shapes people build most
(parallel ``ToolNode`` calls, ``Send``, ``asyncio.gather``, ``RetryPolicy``, a subgraph
on several parent steps), each a builder taking the process whose effects it counts.
A process is anything with ``guard``, ``guarded(policy)`` and ``effect(tool, policy,
action)``: the crash kit's [GraphProcess][steadyloop.testing.GraphProcess], or a real
process's stand-in (``shape_child.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import os
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import RetryPolicy, Send

from steadyloop.loop import ReplayPolicy


class Order(TypedDict, total=False):
    order: str
    price: str
    receipt: str
    done: str


def shop(p: Any) -> StateGraph[Order]:
    """Three nodes, three effects: a safe lookup, a never-repeat charge, a safe notice."""

    @p.guarded(ReplayPolicy.SAFE)
    def lookup(order: str) -> str:
        return str(p.effect("lookup", "safe", f"lookup/{order}"))

    @p.guarded(ReplayPolicy.NEVER)
    def charge(order: str, price: str) -> str:
        return str(p.effect("charge", "never", f"charge/{order}"))

    @p.guarded(ReplayPolicy.SAFE)
    def notify(order: str) -> str:
        return str(p.effect("notify", "safe", f"notify/{order}"))

    builder: StateGraph[Order] = StateGraph(Order)
    builder.add_node("lookup", lambda s: {"price": lookup(s["order"])})
    builder.add_node("charge", lambda s: {"receipt": charge(s["order"], s["price"])})
    builder.add_node("done", lambda s: {"done": notify(s["order"])})
    builder.add_edge(START, "lookup")
    builder.add_edge("lookup", "charge")
    builder.add_edge("charge", "done")
    builder.add_edge("done", END)
    return builder


def sqlite_saver(folder: Path) -> SqliteSaver:
    """A fresh SqliteSaver on the store in ``folder``."""
    return SqliteSaver(sqlite3.connect(folder / "checkpoints.db", check_same_thread=False))


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


class Orders(TypedDict, total=False):
    n: int
    receipts: Annotated[list[str], operator.add]


_STARTS = itertools.count()
"""Counts the processes of one interpreter (the crash kit's simulated ones)."""


def _late(first: str, second: str) -> str:
    """Which of two parallel calls comes last: it differs from one process to the next."""
    return first if (next(_STARTS) + os.getpid()) % 2 else second


def agent(calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """A model node: asks for ``calls`` at once (fresh call ids on every call), then answers."""

    def model(state: Chat) -> Chat:
        if any(isinstance(m, ToolMessage) for m in state.get("messages", [])):
            return {"messages": [AIMessage(content="all done")]}
        tool_calls = [
            {"name": name, "args": args, "id": f"call-{uuid.uuid4().hex[:8]}", "type": "tool_call"}
            for name, args in calls
        ]
        return {"messages": [AIMessage(content="", tool_calls=tool_calls)]}

    return model


def shop_tools(p: Any) -> list[Any]:
    """A NEVER ``charge`` tool and a SAFE ``lookup`` tool; one parallel charge runs late."""
    late = _late("A", "B")

    @p.guarded(ReplayPolicy.NEVER)
    def pay(order: str) -> str:
        return str(p.effect("charge", "never", f"charge/{order}"))

    def charge(order: str) -> str:
        """Charge an order."""
        time.sleep(0.05 if order == late else 0.0)
        return pay(order)

    @p.guarded(ReplayPolicy.SAFE)
    def lookup(order: str) -> str:
        """Look an order up."""
        return str(p.effect("lookup", "safe", f"lookup/{order}"))

    return [tool(charge), tool(lookup)]


def tool_node(orders: list[str]) -> Callable[[Any], StateGraph[Chat]]:
    """The prebuilt agent loop: a model asking for a charge per order and a lookup, and a ToolNode."""

    def build(p: Any) -> StateGraph[Chat]:
        calls = [("charge", {"order": o}) for o in orders] + [("lookup", {"order": orders[0]})]
        builder: StateGraph[Chat] = StateGraph(Chat)
        builder.add_node("agent", agent(calls))
        builder.add_node("tools", ToolNode(shop_tools(p)))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        return builder

    return build


def send_per_call(p: Any) -> StateGraph[Chat]:
    """A ToolNode task per tool call (the Send API): three charges and a lookup."""
    calls = [("charge", {"order": o}) for o in ("A", "B", "C")]
    calls.append(("lookup", {"order": "A"}))

    def fan_out(state: Chat) -> Any:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return END
        return [
            Send("tools", {"__type": "tool_call_with_context", "tool_call": call, "state": state})
            for call in last.tool_calls
        ]

    builder: StateGraph[Chat] = StateGraph(Chat)
    builder.add_node("agent", agent(calls))
    builder.add_node("tools", ToolNode(shop_tools(p)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", fan_out, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder


def gather(p: Any) -> StateGraph[Orders]:
    """Two charges awaited at once in one node (``asyncio.gather``); the late one varies."""

    @p.guarded(ReplayPolicy.NEVER)
    async def charge(order: str) -> str:
        return str(p.effect("charge", "never", f"charge/{order}"))

    late = _late("c", "d")

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


def retried(p: Any) -> StateGraph[Orders]:
    """A NEVER charge that raises once before acting (a refused connection), under RetryPolicy."""
    refused: set[str] = set()

    def act(order: str) -> str:
        if order not in refused:  # the provider refuses the first attempt of each process
            refused.add(order)
            raise ConnectionRefusedError("provider down")
        return str(p.effect("charge", "never", f"charge/{order}"))

    charge = act
    if p.guard is not None:
        guarded = p.guard.effect(ReplayPolicy.NEVER, not_happened_on=(ConnectionRefusedError,))
        charge = guarded(act)
    retry = RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=ConnectionRefusedError)
    builder: StateGraph[Orders] = StateGraph(Orders)
    builder.add_node("pay", lambda s: {"receipts": [charge("r")]}, retry_policy=retry)
    builder.add_edge(START, "pay")
    builder.add_edge("pay", END)
    return builder


def subgraph(p: Any) -> StateGraph[Orders]:
    """A subgraph the parent runs on three steps, charging with equal arguments each time."""
    run = {"n": 0}  # which parent step's run of the subgraph this is, for the sink only

    @p.guarded(ReplayPolicy.NEVER)
    def charge(order: str) -> str:
        return str(p.effect("charge", "never", f"charge/{order}/{run['n']}"))

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


@dataclass(frozen=True)
class Shape:
    """A graph shape: how to build it, its input, and what it must end with.

    Attributes:
        title: What the shape is, for reports.
        build: The builder, given a process.
        graph_input: The graph's first input.
        charges: How many distinct NEVER charges one complete run makes.
        durability: The ``durability`` it runs under.
    """

    title: str
    build: Callable[[Any], StateGraph[Any]]
    graph_input: Callable[[], Any]
    charges: int
    durability: Literal["sync", "async"] = "async"


def _chat() -> Any:
    return {"messages": [("user", "pay")]}


def _orders() -> Any:
    return {"n": 0, "receipts": []}


def _order() -> Any:
    return {"order": "o-1"}


SHAPES: dict[str, Shape] = {
    "shop-sync": Shape("three nodes, durability sync", shop, _order, 1, "sync"),
    "shop-async": Shape("three nodes, durability async", shop, _order, 1),
    "toolnode-2": Shape("ToolNode, 2 parallel charges + a lookup", tool_node(["A", "B"]), _chat, 2),
    "toolnode-3": Shape(
        "ToolNode, 3 parallel charges + a lookup", tool_node(["A", "B", "C"]), _chat, 3
    ),
    "send": Shape("Send per tool call, 3 charges + a lookup", send_per_call, _chat, 3),
    "gather": Shape("asyncio.gather of two charges in one node", gather, _orders, 2),
    "retry": Shape("RetryPolicy, a charge refused once", retried, _orders, 1),
    "subgraph": Shape("a subgraph on three parent steps", subgraph, _orders, 3),
}
"""Every LangGraph shape the crash tests and ``bench_repeats.py`` run."""
