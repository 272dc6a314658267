"""Reports: located differences, allowed diffs by exact pointer, recorded tie allowances, schema."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
from replay_helpers import flawed_at, with_payload

from steadyloop.records import Record
from steadyloop.replay import (
    AllowedDiff,
    Case,
    CaseRun,
    Normaliser,
    compare_case,
    parse_case,
    replay,
    report_schema,
)
from steadyloop.replay._snapshot import empty_snapshot


def _shout(stream: str, record: Record) -> list[Record]:
    if record.kind != "session.event":
        return [record]
    event = dict(record.payload["event"])  # type: ignore[arg-type]
    event["author"] = str(event["author"]).upper()
    return [with_payload(record, {"event": event})]


async def test_difference_locations_and_allowed_diffs(
    cases_by_id: dict[str, Case], tmp_path: Path
) -> None:
    """Each difference names case, session, backend, reference, pointer, event and both values; an exact allowance covers it."""
    case = cases_by_id["single_turn"]
    url = "memory://report-test"
    backends = ["sqlite", flawed_at(url, "shouty", write=_shout)]
    report = await replay([case], backends, workdir=tmp_path)
    jsonschema.validate(report.to_dict(), report_schema())
    vs_ref = [d for d in report.unexpected if d.reference == "sqlite"]
    assert [(d.pointer, d.session, d.event_index, d.domain) for d in vs_ref] == [
        ("/sessions/s1/events/0/author", "s1", 0, "events"),
        ("/sessions/s1/events/1/author", "s1", 1, "events"),
    ]
    assert (vs_ref[0].reference_value, vs_ref[0].backend_value) == ("user", "USER")
    assert {d.reference for d in report.unexpected} == {"sqlite", "expected"}

    allowed = (
        AllowedDiff(backend="shouty", pointer="/sessions/s1/events/0/author", reason="test"),
        AllowedDiff(backend="shouty", pointer="/sessions/s1/events/1/author", reason="test"),
        AllowedDiff(backend="shouty", pointer="/sessions/s1/state", reason="never used"),
    )
    lenient = dataclasses.replace(case, allowed_diffs=allowed)
    report = await replay([lenient], backends, workdir=tmp_path)
    assert report.ok
    section = report.to_dict()["cases"][0]
    assert section["unused_allowed_diffs"] == [
        {
            "backend": "shouty",
            "pointer": "/sessions/s1/state",
            "reason": "never used",
            "why": "unused",
        }
    ]
    assert report.counts()["allowed"] == 4  # two against sqlite, two against the expectation


def _run(hits: list[dict[str, object]], backend: str) -> CaseRun:
    snap = empty_snapshot()
    snap.queries["q"] = {"user": "u", "query": "x", "limit": 10, "hits": hits}
    return CaseRun("c", backend, snap, Normaliser())


def test_memory_ties_are_the_only_builtin_allowance_and_each_use_is_recorded() -> None:
    """Tied hits in another order agree, and the report records the allowance; other orders differ."""
    case = parse_case('{"op": "case", "case_id": "c", "description": "d"}\n', "c.jsonl")
    a = {"event_id": "a", "score": 1, "text": "x"}
    b = {"event_id": "b", "score": 1, "text": "x"}
    top = {"event_id": "t", "score": 2, "text": "x"}
    report = compare_case(
        case, {"ref": _run([top, a, b], "ref"), "other": _run([top, b, a], "other")}, "ref"
    )
    assert report.agrees
    assert report.tie_allowances == [
        {"backend": "other", "reference": "ref", "query_id": "q", "pointer": "/queries/q/hits"}
    ]
    report = compare_case(
        case, {"ref": _run([top, a], "ref"), "other": _run([a, top], "other")}, "ref"
    )
    assert not report.agrees
    assert {d.query_id for d in report.unexpected} == {"q"}


def test_hash_covers_everything_but_timings() -> None:
    """The report hash changes with content and not with timings."""
    case = parse_case('{"op": "case", "case_id": "c", "description": "d"}\n', "c.jsonl")
    from steadyloop.replay import Report

    run = _run([], "m")
    report = Report("m", ["m"], [compare_case(case, {"m": run}, "m")], timings={"total_seconds": 1})
    first = report.to_dict()["hash"]
    report.timings = {"total_seconds": 2}
    assert report.to_dict()["hash"] == first
    assert report.to_json(timings=False) == report.to_json(timings=False)
    jsonschema.validate(report.to_dict(), report_schema())


def test_a_star_in_an_allowed_pointer_is_a_literal_key_not_a_wildcard() -> None:
    """An allowed-diff pointer with ``*`` in it is accepted and covers exactly the key that holds ``*``, never others."""
    header = {
        "op": "case",
        "case_id": "c",
        "description": "d",
        "allowed_diffs": [
            {"backend": "other", "pointer": "/queries/*/hits/0/text", "reason": "literal"},
            {
                "backend": "other",
                "pointer": "/queries/q*/hits",
                "reason": "literal too",
            },
        ],
    }
    case = parse_case(json.dumps(header) + "\n", "c.jsonl")

    def run(text: str, backend: str) -> CaseRun:
        snap = empty_snapshot()
        for query_id in ("*", "q"):
            hit = {"event_id": "a", "score": 1, "text": text}
            snap.queries[query_id] = {"user": "u", "query": "x", "limit": 10, "hits": [hit]}
        return CaseRun("c", backend, snap, Normaliser())

    report = compare_case(case, {"ref": run("x", "ref"), "other": run("y", "other")}, "ref")
    allowed = [d.pointer for d in report.differences if d.allowed]
    assert allowed == ["/queries/*/hits/0/text"]
    assert [d.pointer for d in report.unexpected] == ["/queries/q/hits/0/text"]
    assert report.to_dict()["unused_allowed_diffs"] == [
        {
            "backend": "other",
            "pointer": "/queries/q*/hits",
            "reason": "literal too",
            "why": "unused",
        }
    ]
