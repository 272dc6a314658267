"""The harness drives any store through the protocol: references per framework, not_applicable, CLI errors."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from dict_store import ALL, DictStore
from replay_helpers import replay_cli
from typer.testing import CliRunner

from steadyloop.replay import (
    Capability,
    StoreSpec,
    load_cases,
    missing_extra,
    pack_cases,
    parse_case,
    replay,
    report_schema,
)

HARNESS = importlib.import_module("steadyloop.replay._harness")
LOAD = importlib.import_module("steadyloop.replay._load")


def _case(*ops: str, header: str = "") -> Any:
    head = (
        '{"op": "case", "case_id": "c", "description": "d", "reference_only": true' + header + "}"
    )
    return parse_case("\n".join([head, *ops]) + "\n", "c.jsonl")


async def test_a_framework_is_compared_with_its_own_in_memory_store(tmp_path: Path) -> None:
    """Two stores of one framework are compared with each other (its memory store the reference), never with Steadyloop's."""
    cases = load_cases([pack_cases("hostile")])
    stores = [DictStore("dict+other", backend="other"), DictStore("dict+memory"), "sqlite"]
    report = await replay(cases, stores, workdir=tmp_path)
    assert report.references == {"dict": "dict+memory", "steadyloop": "sqlite"}
    assert report.unexpected == []
    body = report.to_dict()
    jsonschema.validate(body, report_schema())
    assert body["frameworks"] == {
        "dict+other": "dict",
        "dict+memory": "dict",
        "sqlite": "steadyloop",
    }
    for section in body["cases"]:
        by_store = {c["backend"]: c for c in section["comparisons"]}
        assert by_store["sqlite"]["status"] == "reference"
        assert by_store["dict+memory"]["status"] == "reference"
        if by_store["dict+other"]["status"] == "compared":
            assert by_store["dict+other"]["reference"] == "dict+memory"
    ran = {
        c["backend"]: c["status"]
        for s in body["cases"]
        for c in s["comparisons"]
        if c["backend"] == "dict+other"
    }
    assert set(ran.values()) == {"compared"}


async def test_a_missing_capability_makes_the_case_not_applicable_naming_it(tmp_path: Path) -> None:
    """A case needing user: state on a store without user_state is not_applicable there, naming the capability and line, never agreement."""
    case = _case(
        '{"op": "create_session", "session": "s", "user": "u"}',
        '{"op": "append_event", "session": "s", "event_id": "e", "author": "a", "text": "x", "state_delta": {"user:k": 1}}',
    )
    lacking = DictStore("dict+memory", ALL - {Capability.USER_STATE})
    full = DictStore("dict+full", backend="full")
    report = await replay([case], [lacking, full], workdir=tmp_path)
    section = report.to_dict()["cases"][0]
    runs = {r["backend"]: r for r in section["runs"]}
    assert runs["dict+memory"]["status"] == "not_applicable"
    assert runs["dict+memory"]["missing"] == [{"capability": "user_state", "line": 3}]
    assert runs["dict+memory"]["snapshot_hash"] is None
    assert runs["dict+full"]["status"] == "ran"
    comparisons = {c["backend"]: c["status"] for c in section["comparisons"]}
    assert comparisons == {"dict+memory": "not_applicable", "dict+full": "reference_not_applicable"}
    assert report.counts()["not_applicable"] == 1
    assert report.counts()["comparisons"] == 0
    assert lacking.opened == 1, "only the reachability probe: a not_applicable case never runs"
    jsonschema.validate(report.to_dict(), report_schema())

    alone = await replay(
        [case], [DictStore("dict+memory", ALL - {Capability.USER_STATE})], workdir=tmp_path
    )
    assert alone.cases[0].status == "not_applicable"
    assert alone.counts()["cases_agreeing"] == 0


async def test_fields_a_store_does_not_keep_are_blanked_not_compared(tmp_path: Path) -> None:
    """Without explicit_time the harness blanks event times, and a case that sets a time is not_applicable."""
    case = _case(
        '{"op": "create_session", "session": "s", "user": "u"}',
        '{"op": "append_event", "session": "s", "event_id": "e", "author": "a", "text": "x"}',
    )
    timed = _case(
        '{"op": "create_session", "session": "s", "user": "u"}',
        '{"op": "append_event", "session": "s", "event_id": "e", "author": "a", "text": "x", "time": 5}',
    )
    store = DictStore("dict+memory", ALL - {Capability.EXPLICIT_TIME})
    run = await HARNESS.run_case(case, store)
    assert run.snapshot.sessions["s"]["events"][0]["time"] is None
    run = await HARNESS.run_case(timed, store)
    assert run.missing == [{"capability": "explicit_time", "line": 3}]


async def test_a_case_runs_under_its_time_zone_and_restores_the_one_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A case's tz is TZ while it runs (time.localtime follows) and the previous TZ is back afterwards."""
    import os
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    seen: list[float] = []

    class Watching(DictStore):
        async def create_session(self, *args: Any) -> str:
            seen.append(time.localtime(1_700_000_000).tm_gmtoff)
            return await super().create_session(*args)

    case = _case(
        '{"op": "create_session", "session": "s", "user": "u"}', header=', "tz": "Asia/Kathmandu"'
    )
    await HARNESS.run_case(case, Watching())
    assert seen == [5 * 3600 + 45 * 60]
    assert os.environ["TZ"] == "UTC"
    assert time.localtime(1_700_000_000).tm_gmtoff == 0


def test_a_missing_extra_exits_2_with_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store whose framework is not installed exits 2 with one line: the extra and how to install it."""
    from steadyloop.cli import app

    def opener(framework: str) -> Any:
        def open_store(spec: StoreSpec) -> Any:
            raise missing_extra(spec, "fakefw", "fake-framework-package")

        return open_store

    monkeypatch.setattr(LOAD, "store_opener", opener)
    out = CliRunner().invoke(app, ["replay", "run", "-b", "fakefw+postgresql://u:pw@db.example/x"])
    assert out.exit_code == 2, out.output
    lines = [line for line in out.output.splitlines() if line.strip()]
    assert len(lines) == 1, out.output
    assert "pip install 'steadyloop[fakefw]'" in lines[0]
    assert "pw@" not in lines[0]
    assert "Traceback" not in out.output


def test_an_unreachable_store_exits_2_naming_the_url_without_its_password() -> None:
    """An unreachable store exits 2 and names its URL with the password replaced."""
    out = replay_cli("run", "-b", "steadyloop+postgresql://u:hunter2@127.0.0.1:1/x")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "hunter2" not in out.stdout + out.stderr
    assert "postgresql://u:***@127.0.0.1:1/x" in out.stderr
    assert "Traceback" not in out.stderr


def test_an_unknown_framework_exits_2_naming_it() -> None:
    """A FRAMEWORK+BACKEND store whose framework no package registers exits 2 naming it."""
    out = replay_cli("run", "-b", "nosuchfw+memory")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "'nosuchfw'" in out.stderr


async def test_a_failed_generated_create_leaves_later_operations_an_error_not_a_crash(
    tmp_path: Path,
) -> None:
    """When a create_session with a generated id fails, later operations on its handle are errors, and the run goes on."""

    class Refusing(DictStore):
        async def create_session(self, app: str, user: str, session_id: Any, state: Any) -> str:
            if session_id is None:
                raise RuntimeError("no generated ids here")
            return await super().create_session(app, user, session_id, state)

    case = _case(
        '{"op": "create_session", "session": "g", "user": "u", "session_id": null}',
        '{"op": "append_event", "session": "g", "event_id": "e", "author": "a", "text": "x"}',
        '{"op": "create_session", "session": "s", "user": "u"}',
    )
    run = await HARNESS.run_case(case, Refusing())
    assert run.snapshot.errors == {
        "2": {"op": "create_session", "error": "RuntimeError"},
        "3": {"op": "append_event", "error": "NotCreated"},
    }
    assert list(run.snapshot.sessions) == ["s"]


async def test_memory_hits_are_blanked_like_events_for_a_store_without_explicit_time(
    tmp_path: Path,
) -> None:
    """A store that keeps no caller time has the times of its memory hits blanked too."""

    class Stamping(DictStore):
        async def search_memory(self, app: str, user: str, query: str, limit: int) -> Any:
            return [
                {**h, "time": 123} for h in await super().search_memory(app, user, query, limit)
            ]

    case = _case(
        '{"op": "create_session", "session": "s", "user": "u"}',
        '{"op": "append_event", "session": "s", "event_id": "e", "author": "a", "text": "zebra"}',
        '{"op": "store_memory", "session": "s"}',
        '{"op": "search_memory", "query_id": "q", "user": "u", "query": "zebra"}',
    )
    run = await HARNESS.run_case(case, Stamping("dict+memory", ALL - {Capability.EXPLICIT_TIME}))
    assert [h["time"] for h in run.snapshot.queries["q"]["hits"]] == [None]


def test_the_cli_shows_not_applicable_runs_and_which_comparisons_ran(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`replay run` marks a case a store cannot run as n/a and says how many comparisons ran, exiting 0."""
    from steadyloop.cli import app

    def opener(framework: str) -> Any:
        def open_store(spec: StoreSpec) -> Any:
            caps = ALL if spec.backend == "memory" else ALL - {Capability.USER_STATE}
            return DictStore(spec.name, caps, backend=spec.backend)

        return open_store

    monkeypatch.setattr(LOAD, "store_opener", opener)
    out = CliRunner().invoke(
        app,
        ["replay", "run", "--pack", "hostile", "-b", "dict+memory,dict+partial"],
        env={"COLUMNS": "200"},
    )
    assert out.exit_code == 0, out.output
    assert "n/a" in out.output
    assert "reference dict: dict+memory" in out.output
    assert "run(s) not applicable" in out.output
    assert "hostile_shared_scopes dict+partial: needs user_state (line 2)" in out.output


async def test_a_store_failing_to_open_is_reported_without_a_password(tmp_path: Path) -> None:
    """A store whose open() fails with the driver's message has any URL password in it replaced."""
    from steadyloop import BackendUnavailable

    class Failing(DictStore):
        async def open(self) -> None:
            raise OSError("cannot reach postgresql://app:s3cret@db.example:5432/x")

    case = _case('{"op": "create_session", "session": "s", "user": "u"}')
    with pytest.raises(BackendUnavailable) as caught:
        await replay([case], [Failing()], workdir=tmp_path)
    assert "s3cret" not in str(caught.value)
    assert "postgresql://app:***@db.example:5432/x" in str(caught.value)


async def test_the_bundled_suite_runs_beside_another_framework_without_crossing_over(
    tmp_path: Path,
) -> None:
    """Steadyloop-only cases are not_applicable on another framework's store; both frameworks agree with their own references."""
    from steadyloop.replay import bundled_cases

    cases = load_cases([bundled_cases()])
    report = await replay(cases, ["memory", "sqlite", DictStore("dict+memory")], workdir=tmp_path)
    assert report.ok, [(d.case_id, d.backend, d.pointer) for d in report.unexpected][:5]
    by_case = {c.case.case_id: c.runs["dict+memory"] for c in report.cases}
    assert not by_case["loop_crash_resume"].applicable
    assert {m["capability"] for m in by_case["summary_chain"].missing} == {"summaries"}
    assert by_case["single_turn"].applicable
    jsonschema.validate(report.to_dict(), report_schema())
