"""The one place that names the LangGraph internals the guard reads (issue 21, item 7).

LangGraph has no public accessor for a task's scratchpad, its runtime's execution
info, or the graph's checkpointer; the guard reads them from the task's config under
LangGraph's own constants. A release that renames or drops one fails here, by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from langgraph._internal import _constants
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph

import steadyloop

INTERNALS = {
    "CONFIG_KEY_SCRATCHPAD": "__pregel_scratchpad",
    "CONFIG_KEY_RUNTIME": "__pregel_runtime",
    "CONFIG_KEY_CHECKPOINTER": "__pregel_checkpointer",
}


class S(TypedDict):
    n: int


def test_the_internals_the_guard_reads_are_where_it_reads_them() -> None:
    """Each LangGraph constant the guard uses exists, keeps its name, and is filled in a node's config."""
    for constant, value in INTERNALS.items():
        assert getattr(_constants, constant, None) == value, f"LangGraph changed {constant}"
    seen: dict[str, Any] = {}

    def node(state: S) -> dict[str, int]:
        conf = get_config()["configurable"]
        seen.update({name: conf.get(value) for name, value in INTERNALS.items()})
        return {"n": 1}

    builder: StateGraph[S] = StateGraph(S)
    builder.add_node("a", node)
    builder.add_edge(START, "a")
    builder.add_edge("a", END)
    saver = InMemorySaver()
    builder.compile(checkpointer=saver).invoke({"n": 0}, {"configurable": {"thread_id": "t"}})
    assert seen["CONFIG_KEY_CHECKPOINTER"] is saver
    assert seen["CONFIG_KEY_SCRATCHPAD"] is not None
    assert hasattr(seen["CONFIG_KEY_RUNTIME"], "execution_info")
    assert hasattr(seen["CONFIG_KEY_RUNTIME"].execution_info, "node_attempt")
    builder.compile().invoke({"n": 0}, {"configurable": {"thread_id": "t"}})
    assert seen["CONFIG_KEY_CHECKPOINTER"] is None  # how a graph without one looks


def test_no_other_source_file_names_a_pregel_internal() -> None:
    """No module of steadyloop spells a __pregel_ key: they come from LangGraph's constants."""
    src = Path(steadyloop.__file__).parent
    spelled = [p for p in src.rglob("*.py") if "__pregel_" in p.read_text(encoding="utf-8")]
    assert spelled == []
