"""The checkpointer adapter's layout is LangGraph's own: a graph reads back what the adapter wrote, and an append does not rewrite the event list."""

# No `from __future__ import annotations`: a test makes the graph's state class, and
# LangGraph reads its annotations (a DeltaChannel imported in the test) at compile time.
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from backends import with_options
from framework_dbs import postgres_schema
from steadyloop.replay._store import SessionRef, StoreEvent, parse_store_url
from steadyloop.replay.stores._langgraph import (
    MESSAGES,
    SNAPSHOT_EVERY,
    CheckpointerStore,
    _extend,
)

pytest.importorskip("langgraph.channels.delta", reason="the langgraph extra is not installed")

EVENTS = 2 * SNAPSHOT_EVERY + 37
"""Past two snapshots and between them, so both ways of restoring the channel are read."""


def _event(i: int) -> StoreEvent:
    return StoreEvent(
        id=f"e{i}",
        author="user" if i % 2 else "agent",
        parts=({"type": "text", "text": f"message {i}"},),
        state_delta={"turn": i},
        time=1_700_000_000_000_000 + i,
        invocation_id=None,
    )


async def _filled(url: str, tmp_path: Path) -> CheckpointerStore:
    store = CheckpointerStore(parse_store_url(url, tmp_path / "w"))
    await store.open()
    await store.create_session("app", "ada", "s1", {"turn": -1})
    ref = SessionRef("app", "ada", "s1")
    for i in range(EVENTS):
        await store.append_event(ref, _event(i))
    await store.close()
    await store.open()  # a restart: what follows reads only what the saver kept
    return store


@pytest.mark.parametrize(
    "kind",
    ["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.server)],
)
async def test_a_langgraph_graph_reads_back_the_adapters_events_and_state(
    kind: str, tmp_path: Path
) -> None:
    """A compiled StateGraph whose `messages` is a DeltaChannel gets, after a restart, exactly the events and state the adapter reads back."""
    from langgraph.channels.delta import DeltaChannel
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        messages: Annotated[list[Any], DeltaChannel(_extend)]
        turn: int

    async with AsyncExitStack() as stack:
        if kind == "postgresql":
            server, schema = await stack.enter_async_context(postgres_schema())
            url = "langgraph+" + with_options(server, options=f"-csearch_path={schema}")
        else:
            url = f"langgraph+{kind}"
        store = await _filled(url, tmp_path)
        try:
            graph = StateGraph(State)
            graph.add_node("noop", lambda state: {})
            graph.add_edge(START, "noop")
            graph.add_edge("noop", END)
            app = graph.compile(checkpointer=store.saver)
            seen = app.get_state({"configurable": {"thread_id": "app/s1"}}).values
            back = await store.get_session(SessionRef("app", "ada", "s1"))
        finally:
            await store.cleanup("app")
            await store.close()
            await store.dispose()
    assert back is not None
    assert [e["id"] for e in seen[MESSAGES]] == [f"e{i}" for i in range(EVENTS)]
    assert seen[MESSAGES] == back.events
    assert seen["turn"] == back.state["session"]["turn"] == EVENTS - 1


async def test_an_append_between_snapshots_stores_no_event_list(tmp_path: Path) -> None:
    """Only every SNAPSHOT_EVERY-th checkpoint holds the event list; the others hold no `messages` value at all."""
    store = await _filled("langgraph+sqlite", tmp_path)
    try:
        held = [
            len(t.checkpoint["channel_values"][MESSAGES].value)
            for t in await store._call("list", None)
            if MESSAGES in t.checkpoint["channel_values"]
        ]
        total = len(await store._call("list", None))
    finally:
        await store.cleanup("app")
        await store.close()
        await store.dispose()
    assert total == EVENTS + 1
    assert sorted(held) == [0, SNAPSHOT_EVERY, 2 * SNAPSHOT_EVERY]
