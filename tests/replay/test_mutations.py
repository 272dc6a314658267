"""Deliberate corruptions of stored results are detected on every backend; a clean run is not flagged.

Each mutation is a flawed journal wrapped around the real backend under test: it
changes what gets written (``write``) or what comes back (``read``). The case runs on
the clean backend (the reference) and on the flawed one, and the report must show at
least one unexpected difference for the flawed backend in the expected domain.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from replay_helpers import ReadFlaw, WriteFlaw, backend_at, flawed_at, with_payload

from steadyloop.records import Record, StoredRecord
from steadyloop.replay import Case, Report, replay, report_schema


def _event_flaw(change: Any) -> WriteFlaw:
    """A write flaw that changes the event of ``session.event`` records."""

    def flaw(stream: str, record: Record) -> list[Record]:
        if record.kind != "session.event":
            return [record]
        event = copy.deepcopy(dict(record.payload["event"]))  # type: ignore[arg-type]
        change(event)
        return [with_payload(record, {"event": event})]

    return flaw


def _text(event: dict[str, Any]) -> None:
    for part in event["parts"]:
        if part["type"] == "text" and part["text"] == "It opens at 9:30.":
            part["text"] = "It opens at 9:31."


def _tool_response(event: dict[str, Any]) -> None:
    for part in event["parts"]:
        if part["type"] == "tool_result" and isinstance(part["response"], dict):
            part["response"] = {**part["response"], "temp_c": 12.5}


def _temp_leak(event: dict[str, Any]) -> None:
    if event["state_delta"]:
        event["state_delta"] = {**event["state_delta"], "temp:scratch": "leaked"}


def _state_value(stream: str, record: Record) -> list[Record]:
    if record.kind == "state.delta" and "user:lang" in record.payload["delta"]:  # type: ignore[operator]
        delta = {**record.payload["delta"], "user:lang": "xx"}  # type: ignore[dict-item]
        return [with_payload(record, {**record.payload, "delta": delta})]
    return [record]


def _memory_entry(stream: str, record: Record) -> list[Record]:
    if record.kind == "memory.entry" and record.payload["event_id"] == "m1":
        return [with_payload(record, {**record.payload, "text": "The tea room opens at nine."})]
    return [record]


def _duplicated_event(stream: str, record: Record) -> list[Record]:
    if record.kind == "session.event":
        twin = Record(record.kind, record.payload, record.id + "-twin", record.time)
        return [record, twin]
    return [record]


def _wrong_owner(stream: str, record: Record) -> list[Record]:
    if record.kind == "summary.begin":
        summary = {**record.payload["summary"], "session_id": "someone-else"}  # type: ignore[dict-item]
        return [with_payload(record, {"summary": summary})]
    return [record]


def _stale_summary() -> WriteFlaw:
    seen: list[dict[str, Any]] = []

    def flaw(stream: str, record: Record) -> list[Record]:
        if record.kind != "summary.begin":
            return [record]
        summary = dict(record.payload["summary"])  # type: ignore[arg-type]
        if seen:
            stale = seen[0]
            summary["text"] = stale["text"]
            summary["covers_through"] = stale["covers_through"]
        seen.append(dict(record.payload["summary"]))  # type: ignore[arg-type]
        return [with_payload(record, {"summary": summary})]

    return flaw


def _swap_events(stream: str, records: list[StoredRecord]) -> list[StoredRecord]:
    events = [i for i, r in enumerate(records) if r.kind == "session.event"]
    if len(events) < 4:
        return records
    out = list(records)
    a, b = events[2], events[3]
    out[a] = StoredRecord(stream, records[a].seq, records[b].record)
    out[b] = StoredRecord(stream, records[b].seq, records[a].record)
    return out


def _drop_commits(stream: str, records: list[StoredRecord]) -> list[StoredRecord]:
    return [r for r in records if r.kind != "summary.commit"]


def _fold_case(stream: str, record: Record) -> list[Record]:
    if record.kind == "session.event":
        event = dict(record.payload["event"])  # type: ignore[arg-type]
        event["id"] = event["id"].lower()
        return [with_payload(record, {"event": event})]
    return [record]


def _drop_microseconds(stream: str, record: Record) -> list[Record]:
    if record.kind == "session.event":
        event = dict(record.payload["event"])  # type: ignore[arg-type]
        event["time"] = event["time"] // 1_000_000 * 1_000_000
        return [with_payload(record, {"event": event})]
    return [record]


# (name, case, write flaw, read flaw, domains where the difference must show)
MUTATIONS: list[tuple[str, str, WriteFlaw | None, ReadFlaw | None, set[str]]] = [
    ("event_text", "single_turn", _event_flaw(_text), None, {"events"}),
    ("event_order", "multi_turn", None, _swap_events, {"events"}),
    ("tool_response", "tool_call", _event_flaw(_tool_response), None, {"events"}),
    ("state_value", "state_scopes", _state_value, None, {"state"}),
    ("memory_entry", "memory_search", _memory_entry, None, {"memory", "queries"}),
    ("summary_missing", "summary_chain", None, _drop_commits, {"summaries", "events"}),
    ("summary_stale_version", "summary_chain", _stale_summary(), None, {"summaries"}),
    ("summary_wrong_owner", "summary_chain", _wrong_owner, None, {"sessions", "errors"}),
    ("temp_state_leaked", "state_scopes", _event_flaw(_temp_leak), None, {"sessions", "errors"}),
    ("duplicated_event", "single_turn", _duplicated_event, None, {"sessions", "errors"}),
    ("identifier_case_folded", "storage_hostile", _fold_case, None, {"events"}),
    ("microseconds_dropped", "multi_turn", _drop_microseconds, None, {"events"}),
]


async def _run(case: Case, url: str, backend: str, *, write: Any, read: Any, tmp: Path) -> Report:
    return await replay(
        [case],
        [backend_at(url, backend), flawed_at(url, "flawed", write=write, read=read)],
        reference=backend,
        workdir=tmp,
    )


@pytest.mark.parametrize(
    ("case_id", "write", "read", "domains"),
    [pytest.param(c, w, r, d, id=name) for name, c, w, r, d in MUTATIONS],
)
async def test_mutation_is_detected(
    *,
    backend: str,
    journal_url: str,
    cases_by_id: dict[str, Case],
    tmp_path: Path,
    case_id: str,
    write: WriteFlaw | None,
    read: ReadFlaw | None,
    domains: set[str],
) -> None:
    """A corrupted stored result yields an unexpected difference for the flawed backend, where it belongs."""
    report = await _run(
        cases_by_id[case_id], journal_url, backend, write=write, read=read, tmp=tmp_path
    )
    flagged = [d for d in report.unexpected if d.backend == "flawed"]
    assert flagged, "the corruption went unnoticed"
    assert {d.domain for d in flagged} & domains, sorted({d.domain for d in flagged})
    assert not [d for d in report.unexpected if d.backend == backend]
    jsonschema.validate(report.to_dict(), report_schema())


async def test_no_false_positive_through_a_faithful_wrapper(
    backend: str, journal_url: str, suite: list[Case], tmp_path: Path
) -> None:
    """The same wrapper with no flaw agrees with the clean backend on every bundled case."""
    report = await replay(
        suite,
        [backend_at(journal_url, backend), flawed_at(journal_url, "flawed")],
        reference=backend,
        workdir=tmp_path,
    )
    assert [(d.case_id, d.pointer) for d in report.unexpected] == []
