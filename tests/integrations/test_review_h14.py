"""Review of issue 14: failing cases found in the guards and crash kits."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest
from agents import Agent, SQLiteSession
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from steadyloop import open_journal
from steadyloop.effects import Begun, EffectLedger, current_intent
from steadyloop.integrations._langgraph import _by_arguments as by_arguments
from steadyloop.integrations.langgraph import LangGraphGuard
from steadyloop.integrations.openai_agents import AgentsGuard
from steadyloop.loop import ReplayPolicy
from steadyloop.testing import EffectSink, ProcessDeath
from steadyloop.testing._death import Life, crash_every_boundary


class S(TypedDict, total=False):
    n: int
    out: list[str]


def _graph(node: Any, tmp_path: Path) -> Any:
    builder: StateGraph[S] = StateGraph(S)
    builder.add_node("act", node)
    builder.add_edge(START, "act")
    builder.add_edge("act", END)
    return builder.compile(
        checkpointer=SqliteSaver(sqlite3.connect(tmp_path / "cp.db", check_same_thread=False))
    )


def _plant(url: str, step: int, *effects: tuple[str, dict[str, Any]]) -> None:
    """Open intents without results for the act node's effects (a crash after each intent)."""

    async def plant() -> None:
        journal = await open_journal(url)
        records = EffectLedger(journal, "langgraph")
        path = json.dumps(["__pregel_pull", "act"], separators=(",", ":"))
        for tool, arguments in effects:
            key = ("t", "act", "[]", step, path, tool)
            begun = await records.begin(
                key,
                tool,
                ReplayPolicy.NEVER,
                arguments,
                call=by_arguments(arguments),
                execution="planted",
            )
            assert isinstance(begun, Begun)
            records.abandon(begun)
        await journal.close()

    asyncio.run(plant())


def _pending(graph: Any, config: Any) -> list[Any]:
    return [i.value for t in graph.get_state(config).tasks for i in t.interrupts]


def test_each_unknown_effect_gets_its_own_decision(tmp_path: Path) -> None:
    """Two unknown NEVER effects in one node, decided one resume after the other, each get the decision given for them."""
    url = f"sqlite:///{tmp_path / 'guard.db'}"
    calls: list[str] = []
    config: Any = {"configurable": {"thread_id": "t"}}
    with LangGraphGuard(url) as g:

        @g.effect(ReplayPolicy.NEVER)
        def charge() -> str:
            calls.append("charge")
            return "charged"

        @g.effect(ReplayPolicy.NEVER)
        def mail() -> str:
            calls.append("mail")
            return "mailed"

        graph = _graph(lambda s: {"out": [charge(), mail()]}, tmp_path)
        graph.invoke({"n": 0}, config, interrupt_before=["act"])
        step = graph.get_state(config).metadata["step"] + 1
        _plant(url, step, ("charge", {}), ("mail", {}))
        graph.invoke(None, config)
        asked = _pending(graph, config)[0]
        assert asked["tool"] == "charge"
        graph.invoke(Command(resume={asked["intent_id"]: {"happened": False}}), config)
        asked = _pending(graph, config)[0]
        assert asked["tool"] == "mail"
        result = graph.invoke(
            Command(resume={asked["intent_id"]: {"happened": True, "value": "mailed"}}), config
        )
    assert result["out"] == ["charged", "mailed"]
    assert calls == ["charge"]  # the mail was sent before the crash: never again


def test_users_interrupt_after_a_decided_effect_gets_its_own_answer(tmp_path: Path) -> None:
    """A node's own interrupt() after a decided unknown effect receives the caller's answer, not the decision."""
    url = f"sqlite:///{tmp_path / 'guard.db'}"
    config: Any = {"configurable": {"thread_id": "t"}}
    with LangGraphGuard(url) as g:

        @g.effect(ReplayPolicy.NEVER)
        def charge() -> str:
            return "charged"

        def node(state: S) -> S:
            receipt = charge()
            answer = interrupt("ship it?")
            return {"out": [receipt, str(answer)]}

        graph = _graph(node, tmp_path)
        graph.invoke({"n": 0}, config, interrupt_before=["act"])
        step = graph.get_state(config).metadata["step"] + 1
        _plant(url, step, ("charge", {}))
        graph.invoke(None, config)
        asked = _pending(graph, config)[0]
        graph.invoke(
            Command(resume={asked["intent_id"]: {"happened": True, "value": "charged"}}), config
        )
        assert _pending(graph, config) == ["ship it?"]
        result = graph.invoke(Command(resume="yes"), config)
    assert result["out"] == ["charged", "yes"]


def test_a_decision_is_not_applied_to_a_later_intent(tmp_path: Path) -> None:
    """A 'did not happen' decision given for one intent is not reused for the intent the rerun wrote after a crash."""
    url = f"sqlite:///{tmp_path / 'guard.db'}"
    calls: list[str] = []
    config: Any = {"configurable": {"thread_id": "t"}}
    with LangGraphGuard(url) as g:

        @g.effect(ReplayPolicy.NEVER)
        def charge() -> str:
            calls.append("charge")
            if len(calls) == 1:
                raise KeyboardInterrupt  # the process dies after the charge, before its result
            return "charged"

        graph = _graph(lambda s: {"out": [charge()]}, tmp_path)
        graph.invoke({"n": 0}, config, interrupt_before=["act"])
        step = graph.get_state(config).metadata["step"] + 1
        _plant(url, step, ("charge", {}))
        graph.invoke(None, config)
        asked = _pending(graph, config)[0]
        with pytest.raises(KeyboardInterrupt):
            graph.invoke(Command(resume={asked["intent_id"]: {"happened": False}}), config)
        graph.invoke(None, config)  # the run continued after the restart
        assert len(calls) == 1, "the charge ran again under the first intent's decision"
        pending = _pending(graph, config)
        assert [(p["tool"], p["reason"]) for p in pending] == [("charge", "no_result")]
        result = graph.invoke(
            Command(resume={pending[0]["intent_id"]: {"happened": True, "value": "charged"}}),
            config,
        )
    assert result["out"] == ["charged"]
    assert len(calls) == 1


class _SlowFirstRead(SQLiteSession):
    """A session whose first read of all items is slow, as a busy database's can be."""

    reads = 0

    async def get_items(self, limit: int | None = None) -> list[Any]:
        self.reads += limit == sys.maxsize  # the guard's reads
        if self.reads == 1 and limit == sys.maxsize:
            await asyncio.sleep(0.5)
        return await super().get_items(limit)


async def test_parallel_calls_are_keyed_in_response_order(tmp_path: Path) -> None:
    """Parallel calls of one tool in a response get occurrences in the response's order, however fast the session reads."""
    seen: dict[str, int] = {}
    with AgentsGuard(f"sqlite:///{tmp_path / 'guard.db'}") as g:

        @g.function_tool(ReplayPolicy.NEVER)
        def charge(order: str) -> str:
            intent = current_intent()
            assert intent is not None
            seen[order] = json.loads(intent.rsplit("#", 1)[0])[-1]
            return f"charged {order}"

        calls = [function_call("charge", {"order": f"o{k}"}, call_id=f"c{k}") for k in range(2)]
        model = ScriptedModel(
            [
                ModelStep.respond(lambda _: calls),
                ModelStep.respond(lambda _: [assistant_message("ok")]),
            ]
        )
        session = _SlowFirstRead("s", str(tmp_path / "conversation.db"))
        await g.run(Agent(name="shop", tools=[charge], model=model), "go", session=session)
    assert seen == {"o0": 0, "o1": 1}


def test_a_subgraph_run_twice_charges_twice(tmp_path: Path) -> None:
    """A subgraph node that runs on two steps of the parent is two executions: its effect runs on each."""
    calls: list[int] = []
    with LangGraphGuard(f"sqlite:///{tmp_path / 'guard.db'}") as g:

        @g.effect(ReplayPolicy.NEVER)
        def charge(n: int) -> str:
            calls.append(n)
            return f"charged {n}"

        inner: StateGraph[S] = StateGraph(S)
        inner.add_node("pay", lambda s: {"out": [charge(s["n"])]})
        inner.add_edge(START, "pay")
        inner.add_edge("pay", END)
        outer: StateGraph[S] = StateGraph(S)
        outer.add_node("sub", inner.compile())
        outer.add_node("next", lambda s: {"n": s["n"] + 1})
        outer.add_edge(START, "sub")
        outer.add_edge("sub", "next")
        outer.add_conditional_edges("next", lambda s: END if s["n"] > 2 else "sub")
        saver = SqliteSaver(sqlite3.connect(tmp_path / "cp.db", check_same_thread=False))
        result = outer.compile(checkpointer=saver).invoke(
            {"n": 1, "out": []}, {"configurable": {"thread_id": "t"}}
        )
    assert calls == [1, 2]
    assert result["n"] == 3


def test_a_crash_point_never_reached_is_not_reported_clean(tmp_path: Path) -> None:
    """A crash run that finishes without reaching its crash point is reported as not crashed, never as a clean point."""

    def start(folder: Path, death: ProcessDeath) -> tuple[Path, ProcessDeath, EffectSink]:
        return folder, death, EffectSink(folder / "effects.log")

    def finish(p: tuple[Path, ProcessDeath, EffectSink], new: bool) -> int:
        folder, death, sink = p
        done = folder / "done"
        if not done.exists():  # the reference run writes twice, the others once
            for _ in range(2 if folder.name == "reference" else 1):
                death.write("put", lambda: None)
            death.effect(sink, "charge", "never", "charge/o-1")
            done.write_text("ok")
        return 0

    life: Life[tuple[Path, ProcessDeath, EffectSink]] = Life(
        start=start,
        finish=finish,
        state=lambda p: (p[0] / "done").read_text(),
        sink=lambda p: p[2],
        end=lambda p, dead: None,
    )
    report = crash_every_boundary(
        life, framework="fake", mode="sync", guarded=False, workdir=tmp_path, sides=("after",)
    )
    second = report.points[1]
    assert second.boundary == 2
    assert second.error is not None
