"""Defects found by hand-written cases (issue 10, item 6): each test fails on the code before the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from replay_helpers import replay_cli

from steadyloop.replay import (
    CaseRun,
    JSONFloat,
    Normaliser,
    case_schema,
    compare_case,
    diff_subset,
    load_cases,
    parse_case,
    replay,
    steadyloop_limits,
)
from steadyloop.replay._snapshot import empty_snapshot


def _nest_lists(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _nest_objects(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def _write(path: Path, *records: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


HEADER = {"op": "case", "case_id": "c", "description": "d"}


async def test_deep_state_and_tool_arguments_compare_without_recursion_error(
    tmp_path: Path,
) -> None:
    """A state value 500 lists deep and tool arguments 500 objects deep run and agree, no RecursionError."""
    path = _write(
        tmp_path / "deep.jsonl",
        {**HEADER, "reference_only": True},
        {"op": "create_session", "session": "s", "user": "u", "state": {"k": _nest_lists(500)}},
        {
            "op": "append_event",
            "session": "s",
            "event_id": "e",
            "author": "a",
            "state_delta": {"d": _nest_lists(500)},
            "parts": [
                {
                    "type": "tool_call",
                    "call_id": "c",
                    "name": "n",
                    "arguments": {"x": _nest_objects(500)},
                }
            ],
        },
    )
    report = await replay(load_cases([path]), ["memory", "sqlite", "jsonl"], workdir=tmp_path)
    assert report.ok
    report.to_json()


def test_negative_zero_and_zero_differ() -> None:
    """A store that gives back 0.0 for -0.0 differs: numbers compare by canonical text."""
    assert JSONFloat(-0.0) != JSONFloat(0.0)
    assert JSONFloat(1.5) == JSONFloat(1.5)
    case = parse_case(json.dumps({**HEADER, "reference_only": True}) + "\n")

    def run(value: float, name: str) -> CaseRun:
        snap = empty_snapshot()
        snap.sessions["s"] = {"state": {"session": {"z": value}}}
        return CaseRun("c", name, snap, Normaliser())

    report = compare_case(case, {"ref": run(-0.0, "ref"), "lossy": run(0.0, "lossy")}, "ref")
    assert [d.pointer for d in report.unexpected] == ["/sessions/s/state/session/z"]


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (
            {"op": "create_session", "session": "s", "user": "u", "state": {"k": _nest_lists(509)}},
            "/state/k",
        ),
        ({"op": "create_session", "session": "s", "user": "u" * 500}, "/user"),
        (
            {"op": "create_session", "session": "s", "user": "u", "session_id": "x" * 500},
            "/session_id",
        ),
    ],
)
async def test_values_beyond_steadyloops_limits_are_refused_before_anything_runs(
    record: dict[str, Any], field: str, tmp_path: Path
) -> None:
    """A value Steadyloop's journals refuse is reported at load for Steadyloop stores, naming line and field; exit 2."""
    path = _write(tmp_path / "c.jsonl", HEADER, record)
    [case] = load_cases([path])
    problems = await steadyloop_limits(case)
    assert len(problems) == 1
    assert problems[0][1] == 2
    assert problems[0][2].startswith(field)
    for command in (["check", str(path)], ["run", str(path), "-b", "sqlite"]):
        out = replay_cli(*command)
        assert out.returncode == 2, out.stdout + out.stderr
        assert f"{path}:2: field {field}" in out.stderr
        assert "Traceback" not in out.stderr
    assert replay_cli("check", "--foreign", str(path)).returncode == 0


async def test_a_nul_in_an_idempotency_key_is_refused_at_load(tmp_path: Path) -> None:
    """An idempotency key with NUL is refused before anything runs, naming its field."""
    path = _write(
        tmp_path / "c.jsonl",
        HEADER,
        {"op": "create_session", "session": "s", "user": "u"},
        {
            "op": "append_event",
            "session": "s",
            "author": "a",
            "text": "x",
            "idempotency_key": "a\u0000b",
        },
    )
    [problem] = await steadyloop_limits(load_cases([path])[0])
    assert problem[1:3] == (3, "/idempotency_key")


async def test_an_injection_that_can_never_fire_is_refused(tmp_path: Path) -> None:
    """crash_after_write with 'after' beyond the loop's writes is refused at load, not run to exit 0."""
    path = _write(
        tmp_path / "c.jsonl",
        HEADER,
        {"op": "create_session", "session": "s", "user": "u"},
        {"op": "inject_failure", "kind": "crash_after_write", "after": 40},
        {"op": "run_loop", "run": "r", "session": "s", "input": "hi", "script": ["done"]},
    )
    [problem] = await steadyloop_limits(load_cases([path])[0])
    assert problem[1:3] == (3, "/after")
    assert "never fire" in problem[3]
    out = replay_cli("run", str(path), "-b", "memory")
    assert out.returncode == 2, out.stdout + out.stderr


def test_an_empty_object_in_an_expectation_means_nothing_is_there() -> None:
    """`"temp": {}` fails against a non-empty temp scope; `{}` as an array element still stands for any object."""
    assert diff_subset({"state": {"temp": {}}}, {"state": {"temp": {"temp:x": 1}}}) != []
    assert diff_subset({"state": {"temp": {}}}, {"state": {"temp": {}}}) == []
    assert diff_subset({"events": [{}]}, {"events": [{"id": "e"}]}) == []


async def test_a_case_can_say_a_key_must_be_absent(tmp_path: Path) -> None:
    """A pointer under 'absent' that the snapshot holds is a difference against the expectation."""
    header = {
        **HEADER,
        "absent": ["/sessions/s/state/session/secret", "/sessions/s/state/session/gone"],
    }
    path = _write(
        tmp_path / "c.jsonl",
        header,
        {"op": "create_session", "session": "s", "user": "u", "state": {"secret": 1}},
    )
    report = await replay(load_cases([path]), ["memory"], workdir=tmp_path)
    assert [(d.pointer, d.reference, d.backend_value) for d in report.unexpected] == [
        ("/sessions/s/state/session/secret", "expected", 1)
    ]


async def test_an_allowed_diff_naming_a_backend_that_does_not_exist_is_reported(
    tmp_path: Path,
) -> None:
    """An allowed_diffs entry for a misspelt backend is listed as unused ('unknown_backend'); one for an unselected real backend is not."""
    header = {
        **HEADER,
        "allowed_diffs": [
            {"backend": "postgress", "pointer": "/sessions/s", "reason": "typo"},
            {"backend": "postgres", "pointer": "/sessions/s", "reason": "real, not selected"},
        ],
    }
    path = _write(
        tmp_path / "c.jsonl", header, {"op": "create_session", "session": "s", "user": "u"}
    )
    report = await replay(load_cases([path]), ["memory"], workdir=tmp_path)
    unused = report.to_dict()["cases"][0]["unused_allowed_diffs"]
    assert unused == [
        {
            "backend": "postgress",
            "pointer": "/sessions/s",
            "reason": "typo",
            "why": "unknown_backend",
        }
    ]


def test_the_schema_and_the_loader_agree_on_integral_floats() -> None:
    """`"version": 1.0` is refused by the shipped schema exactly when the loader refuses it."""
    record = {
        "op": "summarize",
        "session": "s",
        "summary_id": "x",
        "version": 1.0,
        "replaces": None,
        "covers_through": "e",
        "text": "t",
    }
    validator = jsonschema.Draft202012Validator(case_schema())
    schema_ok = validator.is_valid(record)
    text = "\n".join(
        json.dumps(r)
        for r in (
            HEADER,
            {"op": "create_session", "session": "s", "user": "u"},
            {"op": "append_event", "session": "s", "event_id": "e", "author": "a", "text": "x"},
            record,
        )
    )
    try:
        parse_case(text + "\n")
        loader_ok = True
    except Exception:
        loader_ok = False
    assert schema_ok == loader_ok


async def test_a_jsonl_store_is_left_as_it_was_found(tmp_path: Path) -> None:
    """A replay on jsonl://DIR leaves no file behind: no namespace, no .lock per case."""
    from steadyloop.replay import bundled_cases

    store = tmp_path / "store"
    store.mkdir()
    (store / "keep.txt").write_text("mine")
    cases = load_cases([bundled_cases()])
    report = await replay(cases, [f"jsonl://{store}"], workdir=tmp_path / "work")
    assert report.ok
    assert sorted(p.name for p in store.iterdir()) == ["keep.txt"]


def test_directories_load_every_jsonl_whatever_its_case_but_no_hidden_file(tmp_path: Path) -> None:
    """A directory loads X.JSONL as well as x.jsonl, and skips hidden ._x.jsonl files."""
    _write(tmp_path / "a.jsonl", {**HEADER, "case_id": "lower"})
    _write(tmp_path / "B.JSONL", {**HEADER, "case_id": "upper"})
    (tmp_path / "._a.jsonl").write_bytes(b"\x00\x05\x16\x07 AppleDouble junk")
    (tmp_path / "notes.txt").write_text("not a case")
    assert [c.case_id for c in load_cases([tmp_path])] == ["upper", "lower"]


async def test_appending_does_not_reread_the_session(tmp_path: Path) -> None:
    """The journal reads of a case do not grow with its events: appends never reload and refold the session."""
    from steadyloop.journal import ForwardingJournal, Journal, MemoryJournal, open_journal
    from steadyloop.replay import Backend, JournalStore, run_case

    def case(events: int) -> Any:
        lines = [HEADER, {"op": "create_session", "session": "s", "user": "u"}]
        lines += [
            {
                "op": "append_event",
                "session": "s",
                "author": "a",
                "text": f"m{i}",
                "state_delta": {"i": i},
            }
            for i in range(events)
        ]
        return parse_case("".join(json.dumps(r) + "\n" for r in lines))

    reads = {"n": 0}

    class Counting(ForwardingJournal):
        def on_read(self, namespace: str, stream: str, records: list[Any]) -> list[Any]:
            reads["n"] += 1
            return records

    counts = []
    for events in (10, 200):
        name = f"linear-{events}"

        async def opener(name: str = name) -> Journal:
            return Counting(await open_journal(f"memory://{name}"))

        reads["n"] = 0
        run = await run_case(case(events), JournalStore(Backend("counting", opener)))
        MemoryJournal.forget(name)
        assert len(run.snapshot.sessions["s"]["events"]) == events
        counts.append(reads["n"])
    assert counts[1] == counts[0], counts
