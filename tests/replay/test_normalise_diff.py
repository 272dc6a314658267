"""Normalisation hides representation only, and the diff engine locates every difference."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from steadyloop.replay import (
    MISSING,
    Difference,
    Normaliser,
    align_ties,
    diff,
    diff_subset,
    normalise_text,
    plain,
)
from steadyloop.replay._diff import subset_match

READINGS = [1_000_001, 1_000_002, 1_000_003]


def _norm(value: Any) -> Any:
    return Normaliser(ids=["gen-1", "gen-2"], times=READINGS)(value)


def test_text_is_nfkc_and_whitespace_folded_but_ids_and_data_are_not() -> None:
    """Text fields fold NFKC and whitespace; ids, state values and tool data stay exact."""
    assert normalise_text(" Cafe\u0301\t au\u00a0lait\n") == "Café au lait"
    doc = {
        "text": "ｆｕｌｌ  width",
        "id": "ｆｕｌｌ",
        "state_delta": {"text": "ｆｕｌｌ  width"},
        "arguments": {"text": " x "},
    }
    out = plain(_norm(doc))
    assert out == {
        "text": "full width",
        "id": "ｆｕｌｌ",
        "state_delta": {"text": "ｆｕｌｌ  width"},
        "arguments": {"text": " x "},
    }


def test_generated_ids_become_aliases_and_nothing_else_does() -> None:
    """Exactly the generated ids become <id:N>; a case-folded id stays raw and so differs."""
    out = plain(_norm({"a": "gen-2", "b": ["gen-1", "GEN-1", "gen-1 "]}))
    assert out == {"a": "<id:2>", "b": ["<id:1>", "GEN-1", "gen-1 "]}


def test_valid_times_become_positional_tokens() -> None:
    """Clock readings become <t:N>; missing, malformed, lossy and decreasing times stay raw."""
    events = [
        {"time": 1_000_001},
        {"time": 1_000_003},
        {"time": 1_000_002},
        {"time": 1_000_000},
        {"time": "1000001"},
        {"time": None},
        {},
    ]
    out = plain(_norm({"events": events}))["events"]
    assert out == [
        {"time": "<t:1>"},
        {"time": "<t:3>"},
        {"time": 1_000_002},
        {"time": 1_000_000},
        {"time": "1000001"},
        {"time": None},
        {},
    ]


def test_key_order_is_irrelevant_and_booleans_are_not_numbers() -> None:
    """Objects compare without regard to key order; true never equals 1, nor 1.0 equal 1."""
    assert diff(_norm({"a": 1, "b": [1, 2]}), _norm({"b": [1, 2], "a": 1})) == []
    found = diff(_norm({"flag": True, "n": 1, "x": [1.0]}), _norm({"flag": 1, "n": 1.0, "x": [1]}))
    assert [d.pointer for d in found] == ["/flag", "/n", "/x/0"]


def test_diff_reports_every_place_with_both_values() -> None:
    """Changed, missing and extra values are each reported at their exact JSON Pointer."""
    left = {"s": {"a/b": 1, "t~": [1, 2, 3]}, "gone": 1}
    right = {"s": {"a/b": 2, "t~": [1, 3]}, "new": 2}
    assert diff(left, right) == [
        Difference("/gone", 1, MISSING),
        Difference("/new", MISSING, 2),
        Difference("/s/a~1b", 1, 2),
        Difference("/s/t~0/1", 2, 3),
        Difference("/s/t~0/2", 3, MISSING),
    ]


def test_subset_semantics() -> None:
    """Expected objects may omit keys; arrays must match in length and element by element."""
    actual = {"events": [{"id": "e1", "time": 5}, {"id": "e2"}], "state": {"k": 1}}
    assert diff_subset({"events": [{"id": "e1"}, {}]}, actual) == []
    assert diff_subset({"events": [{"id": "e1"}]}, actual) == [
        Difference("/events/1", MISSING, {"id": "e2"})
    ]
    assert diff_subset({"state": {"k": 2, "j": 0}}, actual) == [
        Difference("/state/j", 0, MISSING),
        Difference("/state/k", 2, 1),
    ]


def test_ties_may_reorder_but_scores_may_not() -> None:
    """Hits that tie in score are aligned to the reference's order; others never move."""
    a = {"event_id": "a", "score": 1}
    b = {"event_id": "b", "score": 1}
    top = {"event_id": "t", "score": 2}
    aligned, moved = align_ties([top, a, b], [top, b, a], lambda x, y: x == y)
    assert aligned == [top, a, b] and moved
    aligned, moved = align_ties([a, top], [top, a], lambda x, y: x == y)
    assert aligned == [top, a] and not moved
    aligned, moved = align_ties([{"event_id": "b"}, {}], [a, b], subset_match)
    assert aligned == [b, a] and moved


def test_diff_of_large_snapshots_skips_equal_parts_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Of two 20,000-event snapshots differing in one field, each equal event is one comparison, never walked into.

    How fast that is, is measured by ``benchmarks/bench_replay.py``, not judged here.
    """
    diff_module = importlib.import_module("steadyloop.replay._diff")
    walk, visits = diff_module._walk, [0]

    def counting_walk(*args: Any) -> None:
        visits[0] += 1
        walk(*args)

    monkeypatch.setattr(diff_module, "_walk", counting_walk)
    events = [{"id": f"e{i}", "parts": [{"type": "text", "text": f"m{i}"}]} for i in range(20_000)]
    a, b = _norm({"events": events}), _norm({"events": [dict(e) for e in events]})
    b["events"][12_345]["id"] = "changed"
    found = diff(a, b)
    assert [d.pointer for d in found] == ["/events/12345/id"]
    # the root, "events", each of the 20,000 events, and the changed event's two fields
    assert visits[0] == 2 + 20_000 + 2
