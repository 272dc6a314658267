"""The checkpointer domain of the case language: checked on load, skipped where a store lacks it, and run on every LangGraph saver with LangGraph's real divergences located.

Each divergence asserted here has a reproduction in plain LangGraph code in
`repro/test_langgraph_repro.py`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from backends import with_options
from framework_dbs import postgres_schema
from steadyloop._errors import CaseError
from steadyloop.replay import load_cases, pack_cases, parse_case, replay, report_schema
from steadyloop.replay._harness import run_case
from steadyloop.replay._store import parse_store_url
from steadyloop.replay.stores._langgraph import CheckpointerStore

HEADER = {"op": "case", "case_id": "c", "description": "d", "reference_only": True}


def _case(*ops: dict[str, Any]) -> str:
    return "\n".join(json.dumps(o) for o in (HEADER, *ops))


PUT = {"op": "saver_put", "thread": "t", "checkpoint": "c0", "values": {"a": 1}}


@pytest.mark.parametrize(
    ("op", "line", "field", "words"),
    [
        ({"op": "saver_put_writes", "checkpoint": "nope", "task_id": "x", "writes": [{"channel": "a"}]}, 3, "/checkpoint", "before its saver_put"),
        ({"op": "saver_get", "read": "r", "thread": "other"}, 3, "/thread", "before its first saver_put"),
        ({**PUT, "checkpoint": "c0"}, 3, "/checkpoint", "already put"),
        ({**PUT, "checkpoint": "c1", "thread_id": "T"}, 3, "/thread_id", "already has the id"),
        ({**PUT, "checkpoint": "c1", "versions": {"b": 1}}, 3, "/versions/b", "only for a channel written"),
        ({"op": "saver_list", "read": "r", "thread": "t", "before": "zz"}, 3, "/before", "before its saver_put"),
        ({"op": "saver_list", "read": "r", "thread": "t", "limit": -1}, 3, "/limit", ""),
        ({**PUT, "checkpoint": "c1", "values": {"a": float("inf")}}, 3, "/values/a", "finite"),
    ],
)  # fmt: skip
def test_a_bad_checkpointer_op_names_its_line_and_field(
    op: dict[str, Any], line: int, field: str, words: str
) -> None:
    """Every reference, handle and value of the checkpointer ops is checked before anything runs, naming line and field."""
    text = _case(PUT, op).replace("Infinity", "1e999")
    with pytest.raises(CaseError) as info:
        parse_case(text, "x.jsonl")
    assert (info.value.line, info.value.field) == (line, field), info.value.problems
    assert words in str(info.value)


def test_a_read_id_is_used_once_and_expectations_name_known_threads() -> None:
    """A read id may not repeat, and an expectation may only name threads the case defines."""
    get = {"op": "saver_get", "read": "r", "thread": "t"}
    with pytest.raises(CaseError, match="already used"):
        parse_case(_case(PUT, get, get))
    header = {**HEADER, "reference_only": False, "expected_everywhere": True}
    header["expected"] = {"threads": {"ghost": {}}}
    text = "\n".join(json.dumps(o) for o in (header, PUT))
    with pytest.raises(CaseError, match="no thread 'ghost'"):
        parse_case(text)


async def test_stores_without_the_checkpointer_capability_do_not_run_the_pack(
    tmp_path: Path,
) -> None:
    """On Steadyloop's own stores every checkpointer case is not_applicable, naming the capability, and counts as not compared."""
    report = await replay(load_cases([pack_cases("checkpointer")]), ["memory"], workdir=tmp_path)
    runs = [run for case in report.cases for run in case.runs.values()]
    assert runs and all(not run.applicable for run in runs)
    assert {m["capability"] for run in runs for m in run.missing} == {"checkpointer"}
    assert not report.compared


def _store(url: str, tmp_path: Path) -> CheckpointerStore:
    spec = parse_store_url(url, tmp_path)
    assert spec is not None
    return CheckpointerStore(spec)


@pytest.mark.parametrize("url", ["langgraph+memory", "langgraph+sqlite", "langgraph+async+sqlite"])
async def test_a_saver_reads_back_what_the_graph_put(url: str, tmp_path: Path) -> None:
    """After the restart a saver hands back each step's channels (the parent's carried over), its versions, metadata, parent and pending writes."""
    case = next(c for c in load_cases([pack_cases("checkpointer")]) if c.case_id == "saver_steps")
    run = await run_case(case, _store(url, tmp_path))
    thread = run.snapshot.threads["t1"]
    latest = thread["namespaces"][""]["latest"]
    assert latest["checkpoint"] == "cp:c2" and latest["parent"] == "cp:c1"
    assert latest["values"] == {
        "__start__": {"question": "hi"},
        "question": "hi",
        "branch:to:agent": None,
        "answer": "hello",
        "count": 2,
    }
    assert latest["versions"] == {
        "__start__": "v@c0",
        "question": "v@c1",
        "branch:to:agent": "v@c1",
        "answer": "v@c2",
        "count": "v@c2",
    }
    assert latest["metadata"] == {"source": "loop", "step": 2}
    history = thread["namespaces"][""]["history"]
    assert [c["checkpoint"] for c in history] == ["cp:c2", "cp:c1", "cp:c0"]
    writes = {(w["task"], w["channel"], json.dumps(w["value"])) for w in history[1]["writes"]}
    assert writes == {
        ("task-agent", "answer", '"hello"'),
        ("task-agent", "count", "1"),
        ("task-tool", "count", "2"),
    }
    reads = thread["reads"]
    assert reads["by_id"]["result"]["checkpoint"] == "cp:c1"
    assert [c["checkpoint"] for c in reads["before_c2"]["checkpoints"]] == ["cp:c1", "cp:c0"]
    assert [c["checkpoint"] for c in reads["before_c2_one"]["checkpoints"]] == ["cp:c1"]
    assert reads["missing_ns"]["result"] is None


# What every SQL saver does other than InMemorySaver (each reproduced in plain LangGraph).
SQL_DIVERGENCES = {
    # list() over every namespace: newest first across namespaces, InMemorySaver
    # namespace by namespace; the same limit or before gives other checkpoints.
    ("saver_nested_namespaces", "/threads/t1/reads/every_ns"),
    ("saver_nested_namespaces", "/threads/t1/reads/every_ns_limit_2"),
    ("saver_nested_namespaces", "/threads/t1/reads/every_ns_before_deep1"),
    # 300 levels of metadata: InMemorySaver refuses it (msgpack), the SQL savers keep it.
    ("saver_hostile_values", "/errors/17"),
    ("saver_hostile_values", "/threads/meta_deep300/namespaces"),
}
SQLITE_ONLY = {
    # A filter on a nested value with a non-ASCII character never matches.
    ("saver_list_filter", "/threads/t1/reads/nested"),
}
POSTGRES_ONLY = {
    # jsonb containment: a filter matches a superset object or list, true is not 1,
    # null does not match a missing key; a NUL in a filter is an error.
    ("saver_list_filter", f"/threads/t1/reads/{read}")
    for read in ("flag_true", "flag_one", "none_null", "obj_k", "obj_empty", "tags_red", "tags_empty", "nul")
} | {
    ("saver_list_filter", "/errors/20"),
    # 1e300 becomes an integer and -0.0 becomes 0.0 in inline channel values and metadata.
    ("saver_hostile_values", "/threads/t1/namespaces"),
    ("saver_hostile_values", "/threads/t1/reads/c0_now"),
    ("saver_hostile_values", "/threads/meta/namespaces"),
    # A NUL in a string channel or nested in metadata is refused.
    *(("saver_hostile_values", f"/errors/{n}") for n in (4, 14)),
    ("saver_hostile_values", "/threads/nul/namespaces"),
    ("saver_hostile_values", "/threads/meta_nul/namespaces"),
    ("saver_metadata_nul", "/errors/2"),
    ("saver_metadata_nul", "/threads/t1/namespaces"),
}  # fmt: skip


async def _run_pack(stores: list[str], tmp_path: Path) -> dict[str, Any]:
    report = await replay(load_cases([pack_cases("checkpointer")]), stores, workdir=tmp_path / "w")
    body = report.to_dict()
    jsonschema.validate(body, report_schema())
    assert body["references"]["langgraph"] == "langgraph+memory"
    assert body["counts"]["not_applicable"] == 0
    return body


def _against_reference(body: dict[str, Any], store: str) -> set[tuple[str, str]]:
    """`(case, where)` of a store's differences from its reference, cut to the read or thread."""
    out = set()
    for case in body["cases"]:
        for d in case["differences"]:
            if d["backend"] != store or d["reference"] == "expected":
                continue
            tokens = d["pointer"].split("/")
            if tokens[1] == "threads":
                tokens = tokens[: 5 if tokens[3] == "reads" else 4]
            out.add((d["case_id"], "/".join(tokens)))
    return out


def _nul_expected(body: dict[str, Any], store: str) -> set[str]:
    return {
        d["pointer"]
        for case in body["cases"]
        for d in case["differences"]
        if d["backend"] == store and d["reference"] == "expected"
    }


NUL_TOP = "/threads/t1/namespaces//latest/metadata/top"


async def test_pack_on_the_sqlite_savers(tmp_path: Path) -> None:
    """SqliteSaver and AsyncSqliteSaver differ from InMemorySaver exactly in the known ways; every saver drops a NUL from a top-level metadata string."""
    body = await _run_pack(["langgraph+sqlite", "langgraph+async+sqlite"], tmp_path)
    for store in ("langgraph+sqlite", "langgraph+async+sqlite"):
        assert _against_reference(body, store) == SQL_DIVERGENCES | SQLITE_ONLY
    for store in ("langgraph+memory", "langgraph+sqlite", "langgraph+async+sqlite"):
        assert _nul_expected(body, store) == {NUL_TOP}


@pytest.mark.server
async def test_pack_on_the_postgres_savers(tmp_path: Path) -> None:
    """PostgresSaver and AsyncPostgresSaver differ from InMemorySaver exactly in the known ways."""
    async with postgres_schema() as (url, schema):
        target = with_options(url, options=f"-csearch_path={schema}")
        body = await _run_pack([f"langgraph+{target}", f"langgraph+async+{target}"], tmp_path)
    for store in ("langgraph+postgresql", "langgraph+async+postgresql"):
        assert _against_reference(body, store) == SQL_DIVERGENCES | POSTGRES_ONLY


def test_expected_everywhere_needs_an_expectation_to_hold() -> None:
    """A reference_only case cannot also say expected_everywhere: it has no expectation."""
    header = {**HEADER, "expected_everywhere": True}
    with pytest.raises(CaseError) as info:
        parse_case("\n".join(json.dumps(o) for o in (header, PUT)))
    assert info.value.field == "/expected_everywhere"
