"""The loader rejects every malformed case with file, line and field, and never with a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steadyloop.replay import (
    CaseError,
    bundled_cases,
    case_schema,
    load_case,
    load_cases,
    parse_case,
)
from steadyloop.replay._schema import generate_case_schema

HEADER = {"op": "case", "case_id": "c", "description": "d"}


def _text(*records: object) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


CREATE = {"op": "create_session", "session": "s1", "user": "ada"}
EVENT = {"op": "append_event", "session": "s1", "event_id": "e1", "author": "user", "text": "hi"}

# (label, records, line, field) — the first problem's line and field.
MALFORMED: list[tuple[str, tuple[object, ...], int, str]] = [
    ("not json", (HEADER, "{not json"), 2, ""),
    ("not an object", (HEADER, "[1, 2]"), 2, ""),
    ("nan", (HEADER, '{"op": "checkpoint", "name": NaN}'), 2, ""),
    ("no op", (HEADER, {"session": "s1"}), 2, "/op"),
    ("unknown op", (HEADER, {"op": "drop_table"}), 2, "/op"),
    ("no header", (CREATE,), 1, "/op"),
    ("header twice", (HEADER, HEADER), 2, "/op"),
    ("header missing case_id", ({"op": "case", "description": "d"},), 1, "/case_id"),
    ("bad case_id", ({**HEADER, "case_id": "a b"},), 1, "/case_id"),
    ("unknown field", (HEADER, {**CREATE, "colour": "red"}), 2, "/colour"),
    ("wrong type", (HEADER, {**CREATE, "user": 7}), 2, "/user"),
    ("session before creation", (HEADER, EVENT), 2, "/session"),
    ("session created twice", (HEADER, CREATE, CREATE), 3, "/session"),
    ("duplicate event id", (HEADER, CREATE, EVENT, EVENT), 4, "/event_id"),
    (
        "bad part",
        (HEADER, CREATE, {**EVENT, "text": None, "parts": [{"type": "text", "text": 5}]}),
        3,
        "/parts/0/text",
    ),
    (
        "unknown part type",
        (HEADER, CREATE, {**EVENT, "text": None, "parts": [{"type": "image"}]}),
        3,
        "/parts/0",
    ),
    ("parts and text", (HEADER, CREATE, {**EVENT, "parts": []}), 3, "/text"),
    (
        "bad scope",
        (HEADER, CREATE, {**EVENT, "state_delta": {"foo:x": 1}}),
        3,
        "/state_delta/foo:x",
    ),
    (
        "lone surrogate",
        (
            HEADER,
            CREATE,
            '{"op": "append_event", "session": "s1", "author": "u", "text": "\\ud800"}',
        ),
        3,
        "/text",
    ),
    ("huge integer", (HEADER, CREATE, {**EVENT, "state_delta": {"n": 2**70}}), 3, "/state_delta/n"),
    (
        "summary version skips",
        (
            HEADER,
            CREATE,
            EVENT,
            {
                "op": "summarize",
                "session": "s1",
                "summary_id": "x",
                "version": 2,
                "replaces": None,
                "covers_through": "e1",
                "text": "t",
            },
        ),
        4,
        "/version",
    ),
    (
        "summary replaces wrong",
        (
            HEADER,
            CREATE,
            EVENT,
            {
                "op": "summarize",
                "session": "s1",
                "summary_id": "x",
                "version": 1,
                "replaces": "y",
                "covers_through": "e1",
                "text": "t",
            },
        ),
        4,
        "/replaces",
    ),
    (
        "summary covers unknown event",
        (
            HEADER,
            CREATE,
            EVENT,
            {
                "op": "summarize",
                "session": "s1",
                "summary_id": "x",
                "version": 1,
                "replaces": None,
                "covers_through": "e9",
                "text": "t",
            },
        ),
        4,
        "/covers_through",
    ),
    (
        "query id reused",
        (
            HEADER,
            CREATE,
            {"op": "search_memory", "query_id": "q", "user": "ada", "query": "x"},
            {"op": "search_memory", "query_id": "q", "user": "ada", "query": "y"},
        ),
        4,
        "/query_id",
    ),
    (
        "search unknown user",
        (HEADER, {"op": "search_memory", "query_id": "q", "user": "zed", "query": "x"}),
        2,
        "/user",
    ),
    (
        "failure at the end",
        (HEADER, CREATE, {"op": "inject_failure", "kind": "torn_write"}),
        3,
        "/op",
    ),
    ("failure kind unknown", (HEADER, {"op": "inject_failure", "kind": "meteor"}), 2, "/kind"),
    (
        "duplicate before checkpoint",
        (
            HEADER,
            CREATE,
            {"op": "inject_failure", "kind": "duplicate_submission"},
            {"op": "checkpoint", "name": "c"},
        ),
        4,
        "/op",
    ),
    (
        "crash that never happens",
        (HEADER, CREATE, {"op": "inject_failure", "kind": "crash_after_write", "after": 1}, EVENT),
        4,
        "/op",
    ),
    ("resume before run", (HEADER, {"op": "resume_loop", "run": "r"}), 2, "/run"),
    (
        "script names unknown tool",
        (
            HEADER,
            CREATE,
            {
                "op": "run_loop",
                "run": "r",
                "session": "s1",
                "input": "x",
                "script": [{"tool": "t"}],
            },
        ),
        3,
        "/script/0/tool",
    ),
    (
        "script item malformed",
        (
            HEADER,
            CREATE,
            {
                "op": "run_loop",
                "run": "r",
                "session": "s1",
                "input": "x",
                "script": [{"tool": "t", "arguments": 3}],
                "tools": {"t": {"policy": "safe"}},
            },
        ),
        3,
        "/script/0/arguments",
    ),
    (
        "expected unknown domain",
        ({**HEADER, "expected": {"tables": {}}}, CREATE),
        1,
        "/expected/tables",
    ),
    (
        "expected unknown session",
        ({**HEADER, "expected": {"sessions": {"s9": {}}}}, CREATE),
        1,
        "/expected/sessions/s9",
    ),
    (
        "allowed diff without reason",
        ({**HEADER, "allowed_diffs": [{"backend": "redis", "pointer": "/sessions/s1"}]},),
        1,
        "/allowed_diffs/0/reason",
    ),
    (
        "duplicate key in the header",
        ('{"op": "case", "case_id": "c", "description": "d", "description": "e"}',),
        1,
        "/description",
    ),
    (
        "duplicate expected drops the first",
        (
            '{"op": "case", "case_id": "c", "description": "d",'
            ' "expected": {"sessions": {"s1": {}}}, "expected": {}}',
            CREATE,
        ),
        1,
        "/expected",
    ),
    (
        "duplicate key nested in an operation",
        (
            HEADER,
            CREATE,
            '{"op": "append_event", "session": "s1", "author": "user", "text": null,'
            ' "parts": [{"type": "text", "text": "a", "text": "b"}]}',
        ),
        3,
        "/parts/0/text",
    ),
    (
        "duplicate key that needs escaping",
        (
            HEADER,
            '{"op": "create_session", "session": "s1", "user": "u", "state": {"a/b": 1, "a/b": 2}}',
        ),
        2,
        "/state/a~1b",
    ),
    (
        "allowed diff root pointer",
        ({**HEADER, "allowed_diffs": [{"backend": "redis", "pointer": "", "reason": "r"}]},),
        1,
        "/allowed_diffs/0/pointer",
    ),
]


@pytest.mark.parametrize(
    ("records", "line", "field"),
    [pytest.param(r, n, f, id=label) for label, r, n, f in MALFORMED],
)
def test_malformed_case_is_rejected_with_its_place(
    records: tuple[object, ...], line: int, field: str
) -> None:
    """A hand-written malformed case raises CaseError naming the file, the line and the field."""
    with pytest.raises(CaseError) as info:
        parse_case(_text(*records), "bad.jsonl")
    err = info.value
    assert (err.file, err.line, err.field) == ("bad.jsonl", line, field), err.problems
    assert err.detail
    assert f"bad.jsonl:{line}" in str(err)


def test_duplicate_key_detail_names_the_key() -> None:
    """A repeated key in a case line is refused with its file, line, pointer and the key's name."""
    text = _text(HEADER, CREATE, '{"op": "checkpoint", "name": "a", "name": "b"}')
    with pytest.raises(CaseError) as info:
        parse_case(text, "dup.jsonl")
    assert (info.value.file, info.value.line, info.value.field) == ("dup.jsonl", 3, "/name")
    assert "'name' appears more than once" in info.value.detail


def test_empty_and_unreadable_files_are_rejected(tmp_path: Path) -> None:
    """An empty file, a missing file and invalid UTF-8 are case errors, not tracebacks."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(CaseError, match="no case header"):
        load_case(empty)
    with pytest.raises(CaseError, match="cannot read"):
        load_case(tmp_path / "missing.jsonl")
    garbled = tmp_path / "garbled.jsonl"
    garbled.write_bytes(json.dumps(HEADER).encode() + b"\n\xff\xfe\n")
    with pytest.raises(CaseError) as info:
        load_case(garbled)
    assert info.value.line == 2


def test_every_problem_of_every_file_is_reported(tmp_path: Path) -> None:
    """Loading several files reports the problems of all of them, and duplicate case ids."""
    (tmp_path / "a.jsonl").write_text(_text(HEADER, {"op": "nope"}))
    (tmp_path / "b.jsonl").write_text(_text(HEADER, CREATE, EVENT))
    (tmp_path / "c.jsonl").write_text(_text(HEADER, CREATE, EVENT))
    with pytest.raises(CaseError) as info:
        load_cases([tmp_path])
    places = [(Path(f).name, line, field) for f, line, field, _ in info.value.problems]
    assert ("a.jsonl", 2, "/op") in places
    assert ("c.jsonl", 1, "/case_id") in places


def test_bundled_cases_load_and_match_the_shipped_schema() -> None:
    """Every line of every bundled case validates against the shipped case schema."""
    validator = jsonschema.Draft202012Validator(case_schema())
    for path in sorted(bundled_cases().glob("*.jsonl")):
        load_case(path)
        for line in path.read_text(encoding="utf-8").splitlines():
            validator.validate(json.loads(line))


def test_shipped_case_schema_is_current() -> None:
    """The shipped case schema is exactly what the loader's models generate."""
    assert case_schema() == json.loads(json.dumps(generate_case_schema())), (
        "regenerate src/steadyloop/replay/schemas/case.schema.json from generate_case_schema()"
    )


# -- property-based corpus ------------------------------------------------------------

_VALID = [
    path.read_text(encoding="utf-8").splitlines()
    for path in sorted(bundled_cases().glob("*.jsonl"))
]

_JUNK = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.text(max_size=5),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.floats(allow_nan=False, allow_infinity=False),
)


@st.composite
def _broken(draw: st.DrawFn) -> tuple[str, int]:
    """A bundled case with one deliberate defect, and the line it is on."""
    lines = list(draw(st.sampled_from(_VALID)))
    index = draw(st.integers(min_value=0, max_value=len(lines) - 1))
    record = json.loads(lines[index])
    how = draw(st.sampled_from(["drop", "retype", "extra", "garble", "op", "dangling", "repeat"]))
    if how == "repeat":
        # The same key twice in one object, with the same value or another one.
        key = draw(st.sampled_from(sorted(record)))
        again = draw(st.one_of(st.just(record[key]), _JUNK))
        body = json.dumps(record)
        lines[index] = "{" + json.dumps(key) + ": " + json.dumps(again) + ", " + body[1:]
        return "\n".join(lines) + "\n", index + 1
    if how == "drop":
        required = [
            k
            for k in record
            if k
            in {
                "op",
                "case_id",
                "description",
                "session",
                "user",
                "author",
                "query_id",
                "query",
                "summary_id",
                "version",
                "covers_through",
                "text",
                "kind",
                "name",
                "run",
                "input",
                "script",
            }
        ]
        if not required or (record.get("op") == "append_event" and required == ["op"]):
            how = "extra"
        else:
            key = draw(st.sampled_from(required))
            if (record.get("op") == "append_event" and key == "text" and "parts" not in record) or (
                key == "text" and record.get("op") == "append_event"
            ):
                how = "extra"
            else:
                del record[key]
    if how == "retype":
        keys = [
            k
            for k in record
            if k
            not in {"note", "expected", "state", "state_delta", "response", "returns", "arguments"}
        ]
        # Every field of the language is a scalar, a list of objects or strings, or an
        # object of objects: a nested list or a foreign object fits none of them.
        record[draw(st.sampled_from(keys))] = draw(st.sampled_from([{"not": "valid"}, [[1]]]))
    if how == "extra":
        record[draw(st.sampled_from(["colour", "Session", "op_", "x"]))] = draw(_JUNK)
    if how == "op":
        record["op"] = draw(st.sampled_from(["", "CASE", "append", "drop", 7]))
    if how == "garble":
        text = lines[index]
        cut = draw(st.integers(min_value=1, max_value=max(1, len(text) - 1)))
        lines[index] = text[:cut]
        return "\n".join(lines) + "\n", index + 1
    if (
        how == "dangling"
        and "session" in record
        and record.get("op") not in ("case", "create_session")
    ):
        record["session"] = "no-such-session"
    elif how == "dangling":
        record["colour"] = 1
    lines[index] = json.dumps(record)
    return "\n".join(lines) + "\n", index + 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_broken())
def test_generated_malformed_cases_are_rejected_with_a_place(broken: tuple[str, int]) -> None:
    """A bundled case with one random defect raises CaseError at or after the defect's line, with a field."""
    text, line = broken
    with pytest.raises(CaseError) as info:
        parse_case(text, "gen.jsonl")
    err = info.value
    assert err.file == "gen.jsonl"
    assert err.line >= 1
    assert isinstance(err.field, str)
    assert err.field == "" or err.field.startswith("/")
    assert err.detail
    # The defect is found on its own line, or (for a reference it breaks) later.
    assert err.line >= line or err.line == 1


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_case_error(data: bytes) -> None:
    """Whatever bytes a case file holds, the loader either accepts them or raises CaseError."""
    problems: list[tuple[str, int, str, str]] = []
    try:
        parse_case(data, "noise.jsonl")
    except CaseError as exc:
        problems = exc.problems
    assert all(p[0] == "noise.jsonl" and p[1] >= 0 for p in problems)
