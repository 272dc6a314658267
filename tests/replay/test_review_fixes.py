"""Handles named like fields, White_Space folding, runs sharing a session, memory://, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest
from replay_helpers import replay_cli

from steadyloop.journal import _memory
from steadyloop.replay import (
    DOMAINS,
    Backend,
    Normaliser,
    normalise_text,
    parse_case,
    plain,
    replay,
)
from steadyloop.replay._normalise import _DOMAINS
from steadyloop.replay._snapshot import empty_snapshot

# Field names whose rules (data, times) the normaliser applies to a whole object under
# them; a case may just as well choose them as handles.
FIELD_NAMES = ["state", "state_delta", "arguments", "response", "returns", "time"]

# Every Unicode White_Space character.
WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def _case(lines: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def _renamed(value: Any, old: str, new: str) -> Any:
    """``value`` with every object key ``old`` renamed to ``new``."""
    if isinstance(value, dict):
        return {new if k == old else k: _renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, old, new) for v in value]
    return value


def _session_record(reading: int) -> dict[str, Any]:
    return {
        "user_id": "ada",
        "session_id": "gen-1",
        "events": [
            {
                "id": "gen-2",
                "author": "user",
                "parts": [{"type": "text", "text": "Order  A-17\thas shipped. "}],
                "state_delta": {"k": "gen-1"},
                "time": reading,
            }
        ],
        "historical_events": [],
        "state": {"session": {"k": " raw  "}, "user": {}, "app": {}, "temp": {}},
        "summaries": [],
    }


@pytest.mark.parametrize("handle", FIELD_NAMES)
def test_a_handle_named_like_a_field_is_normalised_like_any_handle(handle: str) -> None:
    """A session, user, query, checkpoint or run named like a field is normalised like any other."""
    normalise = Normaliser(ids=["gen-1", "gen-2"], times=[1, 2, 3])
    hit = {"event_id": "gen-2", "text": " a  b ", "time": 2}

    def snapshot(name: str) -> dict[str, Any]:
        sessions = {name: _session_record(1)}
        memory = {name: {"entries": [hit]}}
        return {
            "sessions": sessions,
            "memory": memory,
            "queries": {name: {"user": "ada", "query": " q ", "limit": 10, "hits": [hit]}},
            "checkpoints": {name: {"sessions": sessions, "memory": memory}},
            "errors": {"3": {"op": "run_loop", "error": "LoopError"}},
            "loops": {
                name: {
                    "status": "completed",
                    "result": {"output": " done  now "},
                    "effects": {name: 1},
                }
            },
        }

    named = plain(normalise(snapshot(handle)))
    assert named == _renamed(plain(normalise(snapshot("s1"))), "s1", handle)
    assert named["sessions"][handle]["events"][0]["time"] == "<t:1>"
    assert named["sessions"][handle]["events"][0]["parts"][0]["text"] == "Order A-17 has shipped."
    assert named["sessions"][handle]["state"]["session"] == {"k": " raw  "}
    assert named["checkpoints"][handle]["sessions"][handle]["events"][0]["time"] == "<t:1>"
    assert named["loops"][handle] == {
        "status": "completed",
        "result": {"output": "done now"},
        "effects": {handle: 1},
    }


def test_the_normaliser_knows_every_snapshot_domain() -> None:
    """The normaliser takes as a snapshot exactly what has the snapshot's domains as keys."""
    assert set(DOMAINS) == set(empty_snapshot().to_dict()) == _DOMAINS


async def test_cases_with_handles_named_like_fields_agree(tmp_path: Path) -> None:
    """Sessions with handles state, time and text agree on two backends, also with random ids."""
    lines: list[dict[str, Any]] = [
        {
            "op": "case",
            "case_id": "handles",
            "description": "Sessions whose handles are field names.",
            "expected": {
                "sessions": {
                    h: {
                        "events": [{"parts": [{"type": "text", "text": "Order A-17 has shipped."}]}]
                    }
                    for h in ("state", "time", "text")
                }
            },
        }
    ]
    for handle in ("state", "time", "text"):
        lines.append({"op": "create_session", "session": handle, "user": "ada"})
        lines.append(
            {
                "op": "append_event",
                "session": handle,
                "author": "agent",
                "text": "Order  A-17 has   shipped.",
            }
        )
    case = parse_case(_case(lines), "handles.jsonl")
    modes: tuple[Literal["sequential", "random"], ...] = ("sequential", "random")
    for ids in modes:
        report = await replay([case], ["memory", "sqlite"], ids=ids, workdir=tmp_path)
        assert [(d.backend, d.reference, d.pointer) for d in report.unexpected] == []


@pytest.mark.parametrize("separator", ["\x1c", "\x1d", "\x1e", "\x1f"])
def test_information_separators_are_not_whitespace(separator: str) -> None:
    """U+001C..U+001F are kept by text folding, so one a backend turned into a space differs."""
    assert normalise_text(f"a{separator}b") == f"a{separator}b"
    assert normalise_text(f"a{separator}b") != normalise_text("a b")
    assert normalise_text(f" {separator}a \t{separator} b{separator}\n") == (
        f"{separator}a {separator} b{separator}"
    )
    assert normalise_text(f"ｆｕｌｌ{separator}\u3000x") == f"full{separator} x"


def test_every_white_space_character_folds() -> None:
    """Each Unicode White_Space character folds into one space and is trimmed at the ends."""
    for char in WHITE_SPACE:
        assert normalise_text(f"{char}a{char}{char}b{char}") == "a b", hex(ord(char))
        assert normalise_text(f"{char}a{char}\x1cb{char}") == "a \x1cb", hex(ord(char))


async def test_two_runs_in_one_session_each_follow_their_script(tmp_path: Path) -> None:
    """A later run_loop in a session follows its own script, also when resumed after a crash."""
    tool = {"t": {"policy": "safe", "returns": 1}}
    lines: list[dict[str, Any]] = [
        {
            "op": "case",
            "case_id": "two_runs",
            "description": "Three turns of an agent in one session, the last one crashing.",
            "expected": {
                "loops": {
                    run: {"status": "completed", "result": {"output": out}}
                    for run, out in (("t1", "Hi!"), ("t2", "Goodbye!"), ("t3", "done"))
                }
            },
        },
        {"op": "create_session", "session": "s1", "user": "ada"},
        {"op": "run_loop", "run": "t1", "session": "s1", "input": "Hello", "script": ["Hi!"]},
        {
            "op": "run_loop",
            "run": "t2",
            "session": "s1",
            "input": "Bye",
            "script": [{"tool": "t"}, "Goodbye!"],
            "tools": tool,
        },
        {"op": "inject_failure", "kind": "crash_after_write", "after": 2},
        {
            "op": "run_loop",
            "run": "t3",
            "session": "s1",
            "input": "Again",
            "script": [{"tool": "t"}, "done"],
            "tools": tool,
        },
        {"op": "resume_loop", "run": "t3"},
    ]
    case = parse_case(_case(lines), "two_runs.jsonl")
    report = await replay([case], ["memory", "sqlite", "jsonl"], workdir=tmp_path)
    assert [(d.backend, d.reference, d.pointer) for d in report.unexpected] == []


async def test_nameless_memory_url_reaches_one_store_across_crashes(tmp_path: Path) -> None:
    """A nameless memory:// is one store for the whole replay: a reopen after a crash finds it."""
    lines: list[dict[str, Any]] = [
        {
            "op": "case",
            "case_id": "crash",
            "description": "A crash before an append, which is retried.",
            "expected": {"sessions": {"s1": {"events": [{"id": "e1"}, {"id": "e2"}]}}},
        },
        {"op": "create_session", "session": "s1", "user": "ada"},
        {"op": "inject_failure", "kind": "crash_after_write", "after": 0},
        {"op": "append_event", "session": "s1", "event_id": "e1", "author": "user", "text": "a"},
        {"op": "append_event", "session": "s1", "event_id": "e1", "author": "user", "text": "a"},
        {"op": "append_event", "session": "s1", "event_id": "e2", "author": "user", "text": "b"},
    ]
    case = parse_case(_case(lines), "crash.jsonl")
    before = set(_memory._NAMED)
    for url in ("memory://", "memory:", "memory:///?x=1"):
        report = await replay([case], [url, "sqlite"], workdir=tmp_path)
        assert report.backends == ["memory", "sqlite"]
        assert [(d.backend, d.reference, d.pointer) for d in report.unexpected] == []
    assert set(_memory._NAMED) == before
    named = Backend.from_url("memory://mine")
    assert named.dispose is None


@pytest.mark.parametrize("selection", ["", ",", " , "])
def test_an_empty_backend_selection_exits_2(selection: str, tmp_path: Path) -> None:
    """An empty ``-b`` selection exits 2 with a clear message instead of running the defaults."""
    case = tmp_path / "c.jsonl"
    case.write_text(
        _case(
            [
                {"op": "case", "case_id": "c", "description": "d"},
                {"op": "create_session", "session": "s1", "user": "ada"},
            ]
        ),
        encoding="utf-8",
    )
    out = replay_cli("run", str(case), "-b", selection)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "names no backend" in out.stderr
    assert "agree" not in out.stdout


def test_cli_prints_case_data_verbatim(tmp_path: Path) -> None:
    """Stored text, expectations and bad ops print verbatim: never as markup or emoji codes."""
    case = tmp_path / "c.jsonl"
    case.write_text(
        _case(
            [
                {
                    "op": "case",
                    "case_id": "verbatim",
                    "description": "d",
                    "expected": {
                        "sessions": {
                            "s1": {
                                "events": [{"parts": [{"type": "text", "text": ":smile: [b]x"}]}]
                            }
                        }
                    },
                },
                {"op": "create_session", "session": "s1", "user": "ada"},
                {"op": "append_event", "session": "s1", "author": "user", "text": ":+1: [/b]"},
            ]
        ),
        encoding="utf-8",
    )
    out = replay_cli("run", str(case), "-b", "memory")
    assert out.returncode == 1, out.stdout + out.stderr
    assert '":smile: [b]x" → ":+1: [/b]"' in out.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_case([{"op": "case", "case_id": "b", "description": "d"}, {"op": ":smile:"}]))
    out = replay_cli("check", str(bad))
    assert out.returncode == 2
    assert "unknown op ':smile:'" in out.stderr
