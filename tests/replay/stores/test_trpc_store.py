"""The trpc-agent-py adapter: it translates faithfully, on every backend, and the harness runs it.

The round trip checks that what the adapter hands the framework comes back unchanged on
values every trpc backend keeps, so any difference the harness reports for harder values
is the framework's. Server backends run on the real PostgreSQL, MariaDB and Redis (each
test on a schema, database or app of its own); under ``CI=true`` a missing server fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from replay_helpers import replay_cli

from steadyloop import BackendUnavailable
from steadyloop.replay import (
    Capability,
    EventEdit,
    MissingExtra,
    SessionRef,
    SessionStore,
    StoreEvent,
    bundled_cases,
    load_cases,
    parse_store_url,
    replay,
    report_schema,
    store_opener,
)
from trpc_stores import TRPC_BACKENDS, trpc_url

pytest.importorskip("trpc_agent_sdk", reason="the trpc extra is not installed")

T = 1_700_000_000_123_457


def open_url(url: str, tmp_path: Path) -> SessionStore:
    spec = parse_store_url(url, tmp_path)
    assert spec is not None
    return store_opener(spec.framework)(spec)


def full_event(event_id: str, time: int, state: dict[str, Any]) -> StoreEvent:
    return StoreEvent(
        id=event_id,
        author="planner",
        parts=(
            {"type": "text", "text": "Looking up the weather in Lyon."},
            {
                "type": "tool_call",
                "call_id": "c1",
                "name": "weather",
                "arguments": {"city": "Lyon", "days": [1, 2]},
            },
            {
                "type": "tool_result",
                "call_id": "c1",
                "name": "weather",
                "response": {"sky": "clear", "high": 21.5},
                "error": None,
            },
            {
                "type": "tool_result",
                "call_id": "c2",
                "name": "weather",
                "response": None,
                "error": "timeout",
            },
        ),
        state_delta=state,
        time=time,
        invocation_id="inv-7",
    )


@pytest.mark.parametrize("backend", TRPC_BACKENDS)
async def test_adapter_round_trips_what_every_backend_keeps(backend: str, tmp_path: Path) -> None:
    """Text, tool calls and results, ids, invocation, microsecond time and state come back as given."""
    async with trpc_url(backend, tmp_path) as url:
        store = open_url(url, tmp_path)
        app = f"roundtrip.{backend}"
        # Redis cannot read user:/app: state back at all (a finding of its own).
        scoped = backend != "redis"
        initial = {"topic": "weather", **({"user:city": "Lyon", "app:v": 2} if scoped else {})}
        delta = {"n": 1, "f": 1.5, "doc": {"a": [1, "x", None, True]}, "temp:scratch": "gone"}
        await store.open()
        try:
            sid = await store.create_session(app, "ada", "s1", initial)
            ref = SessionRef(app, "ada", sid)
            await store.append_event(ref, full_event("e1", T, delta))
            await store.append_event(ref, full_event("e2", T + 1_000_000, {}))
            await store.close()
            await store.open()
            back = await store.get_session(ref)
            assert back is not None
            assert (back.user_id, back.session_id) == ("ada", "s1")
            kept_delta = {k: v for k, v in delta.items() if not k.startswith("temp:")}
            expected = [
                full_event("e1", T, kept_delta).to_dict(),
                full_event("e2", T + 1_000_000, {}).to_dict(),
            ]
            assert back.events == expected
            assert back.state == {
                "session": {"topic": "weather", "n": 1, "f": 1.5, "doc": delta["doc"]},
                "user": {"user:city": "Lyon"} if scoped else {},
                "app": {"app:v": 2} if scoped else {},
                "temp": {},
            }
            assert await store.list_sessions(app, "ada") == ["s1"]
            await store.delete_session(ref)
            await store.close()
            await store.open()
            assert await store.get_session(ref) is None
        finally:
            await store.cleanup(app)
            await store.close()
            await store.dispose()


@pytest.mark.parametrize("backend", TRPC_BACKENDS)
async def test_memory_search_and_caller_edit_reach_the_framework(
    backend: str, tmp_path: Path
) -> None:
    """Memory hits carry text, author and time; an edit lands on the object the framework got."""
    async with trpc_url(backend, tmp_path) as url:
        store = open_url(url, tmp_path)
        app = f"memory.{backend}"
        await store.open()
        try:
            sid = await store.create_session(app, "ada", "s1", {})
            ref = SessionRef(app, "ada", sid)
            event = StoreEvent(
                "e1", "user", ({"type": "text", "text": "The café opens at nine"},), time=T
            )
            await store.append_event(ref, event)
            await store.add_session_to_memory(ref)
            hits = await store.search_memory(app, "ada", "opens", 10)
            assert hits == [{"text": "The café opens at nine", "author": "user", "time": T}]
            assert await store.search_memory(app, "bob", "opens", 10) == []
            await store.edit_appended(ref, "e1", EventEdit(text="edited", state_delta={"k": 1}))
            await store.close()
            await store.open()
            back = await store.get_session(ref)
            assert back is not None
            # Only the in-memory service keeps the caller's object (a finding, reproduced
            # in repro/test_trpc_sessions.py); every other backend stored a copy.
            edited = backend == "memory"
            assert back.events[0]["parts"][0]["text"] == (
                "edited" if edited else "The café opens at nine"
            )
        finally:
            await store.cleanup(app)
            await store.close()
            await store.dispose()


@pytest.mark.parametrize("backend", TRPC_BACKENDS)
async def test_cleanup_removes_the_app_and_nothing_else(backend: str, tmp_path: Path) -> None:
    """After cleanup(app) the app's sessions, state and memory are gone and another app's remain."""
    async with trpc_url(backend, tmp_path) as url:
        store = open_url(url, tmp_path)
        await store.open()
        try:
            for app in ("gone", "gone_", "kept"):
                sid = await store.create_session(app, "u", "s", {"k": 1})
                ref = SessionRef(app, "u", sid)
                event = StoreEvent("e", "user", ({"type": "text", "text": "hello there"},), time=T)
                await store.append_event(ref, event)
                await store.add_session_to_memory(ref)
            if backend != "redis":  # Redis cannot read scoped state back
                await store.append_event(
                    SessionRef("gone", "u", "s"),
                    StoreEvent("e2", "user", (), {"user:x": 1, "app:y": 2}, T),
                )
            await store.cleanup("gone")
            await store.close()
            await store.open()
            assert await store.get_session(SessionRef("gone", "u", "s")) is None
            assert await store.list_sessions("gone", "u") == []
            assert await store.search_memory("gone", "u", "hello", 10) == []
            if backend != "redis":
                fresh = await store.create_session("gone", "u", "t", {})
                back = await store.get_session(SessionRef("gone", "u", fresh))
                assert back is not None and back.state["user"] == back.state["app"] == {}
                await store.cleanup("gone")
            for app in ("gone_", "kept"):
                assert await store.get_session(SessionRef(app, "u", "s")) is not None
                assert len(await store.search_memory(app, "u", "hello", 10)) == 1
        finally:
            for app in ("gone_", "kept"):
                await store.cleanup(app)
            await store.close()
            await store.dispose()


def test_capabilities_are_those_of_the_framework(tmp_path: Path) -> None:
    """A trpc store offers what trpc's services do, and none of Steadyloop's own machinery."""
    store = open_url("trpc+sqlite", tmp_path)
    assert (store.name, store.framework, store.backend) == ("trpc+sqlite", "trpc", "sqlite")
    assert Capability.CALLER_EDIT in store.capabilities
    assert Capability.MEMORY in store.capabilities
    for steadyloop_only in (
        Capability.LOOP,
        Capability.SUMMARIES,
        Capability.CRASH_INJECTION,
        Capability.IDEMPOTENCY,
        Capability.MEMORY_ENTRIES,
    ):
        assert steadyloop_only not in store.capabilities


@pytest.mark.parametrize(
    "url", ["trpc+oracle://db", "trpc+redis+hiredis://x", "trpc+postgresql", "trpc+redis"]
)
def test_backends_trpc_lacks_are_refused_by_name(url: str, tmp_path: Path) -> None:
    """An unknown trpc backend, a driver on Redis, or a server store without a URL is an UnknownBackend."""
    from steadyloop._errors import UnknownBackend

    with pytest.raises(UnknownBackend, match="trpc"):
        open_url(url, tmp_path)


async def test_bundled_cases_run_and_the_report_validates(tmp_path: Path) -> None:
    """The bundled cases run on trpc's embedded stores; loop and summary cases are not applicable."""
    report = await replay(
        load_cases([bundled_cases()]), ["trpc+memory", "trpc+sqlite"], workdir=tmp_path
    )
    data = report.to_dict()
    jsonschema.validate(data, report_schema())
    runs = {(c["case_id"], r["backend"]): r for c in data["cases"] for r in c["runs"]}
    loop = runs[("loop_crash_resume", "trpc+sqlite")]
    assert loop["status"] == "not_applicable"
    assert {"capability": "loop", "line": 5} in loop["missing"]
    assert runs[("single_turn", "trpc+sqlite")]["status"] == "ran"
    assert list(tmp_path.iterdir()) == []  # the temporary SQLite file is removed


def test_missing_extra_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Without trpc-agent-py, `replay run -b trpc+memory` exits 2 with one line naming the extra."""
    blocker = tmp_path / "blocked" / "trpc_agent_sdk"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('trpc-agent-py is not installed')\n")
    case = bundled_cases() / "single_turn.jsonl"
    done = replay_cli(
        "run", "-b", "trpc+memory", str(case), env={"PYTHONPATH": str(blocker.parent)}
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "steadyloop[trpc]" in lines[0] and "trpc-agent-py" in lines[0]


@pytest.mark.parametrize(
    "url",
    [
        "trpc+postgresql://ada:s3cret-pw@127.0.0.1:1/db",
        "trpc+mysql://ada:s3cret-pw@127.0.0.1:1/db",
        "trpc+redis://:s3cret-pw@127.0.0.1:1/0",
    ],
)
def test_unreachable_store_exits_2_without_the_password(url: str) -> None:
    """An unreachable trpc server store exits 2 naming its URL, never its password."""
    case = bundled_cases() / "single_turn.jsonl"
    done = replay_cli("run", "-b", f"trpc+memory,{url}", str(case))
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "s3cret-pw" not in output
    assert "127.0.0.1:1" in output and "***" in output


async def test_unreachable_is_backend_unavailable_from_open(tmp_path: Path) -> None:
    """open() on a server that is not there raises BackendUnavailable, and close() still works."""
    store = open_url("trpc+postgresql://ada:pw@127.0.0.1:1/db", tmp_path)
    with pytest.raises(BackendUnavailable, match=r"127\.0\.0\.1:1") as caught:
        await store.open()
    assert ":pw@" not in str(caught.value)
    await store.close()


def test_missing_extra_error_type(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """open_store raises MissingExtra naming the `trpc` extra when the framework cannot be imported."""
    for name in [m for m in sys.modules if m.startswith("trpc_agent_sdk")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "trpc_agent_sdk", None)
    with pytest.raises(MissingExtra, match=r"steadyloop\[trpc\]") as caught:
        open_url("trpc+memory", tmp_path)
    assert caught.value.extra == "trpc"
    assert json.dumps(str(caught.value)).count("\\n") == 0
