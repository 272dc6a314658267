"""The google-adk adapter: a faithful, lossless translation on every ADK store it offers."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from framework_dbs import ADK_STORES, framework_store_url, store_params
from steadyloop._errors import BackendUnavailable, MissingExtra, UnknownBackend
from steadyloop.replay._store import (
    Capability,
    EventEdit,
    SessionRef,
    StoreEvent,
    parse_store_url,
    store_opener,
)

T0 = 1_767_225_600_123_457  # 2026-01-01T00:00:00.123457Z in microseconds

EVENTS = [
    StoreEvent(
        id="e1",
        author="user",
        parts=({"type": "text", "text": "hello, needle"}, {"type": "text", "text": "second part"}),
        state_delta={"k": 2, "user:city": "Lyon", "app:flag": True, "temp:scratch": 1},
        time=T0,
        invocation_id="inv-1",
    ),
    StoreEvent(
        id="e2",
        author="agent",
        parts=(
            {
                "type": "tool_call",
                "call_id": "c1",
                "name": "lookup",
                "arguments": {"q": "x", "n": [1, 2.5]},
            },
            {
                "type": "tool_result",
                "call_id": "c1",
                "name": "lookup",
                "response": {"hits": 3},
                "error": None,
            },
            {
                "type": "tool_result",
                "call_id": "c2",
                "name": "lookup",
                "response": None,
                "error": "boom",
            },
        ),
        state_delta={},
        time=T0 + 1,
    ),
    StoreEvent(id="e3", author="agent", parts=(), state_delta={"k": 3}, time=T0 + 2_000_001),
]


def expected_event(event: StoreEvent) -> dict[str, Any]:
    """What ADK gives back: the event as handed, without `temp:` keys (ADK never stores them)."""
    d = event.to_dict()
    d["state_delta"] = {k: v for k, v in d["state_delta"].items() if not k.startswith("temp:")}
    return d


@pytest.fixture
async def adk_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """An opened adapter store of the parametrised ADK backend, on a private store."""
    backend = request.param
    async with framework_store_url("adk", backend, tmp_path) as url:
        spec = parse_store_url(url, tmp_path / "work")
        assert spec is not None
        store = store_opener("adk")(spec)
        await store.open()
        try:
            yield store
        finally:
            await store.close()
            await store.dispose()


async def restart(store: Any) -> None:
    await store.close()
    await store.open()


@pytest.mark.parametrize("adk_store", store_params(ADK_STORES), indirect=True)
async def test_events_and_state_round_trip_through_a_restart(adk_store: Any) -> None:
    """Text, tool calls and results, every state scope, ids, invocation ids and microsecond times read back exactly as written, from a fresh client."""
    app = "replay.adk-roundtrip.1"
    sid = await adk_store.create_session(
        app, "ada", "s1", {"k": 1, "user:lang": "fr", "app:v": 1.0}
    )
    ref = SessionRef(app, "ada", sid)
    for event in EVENTS:
        await adk_store.append_event(ref, event)
    await restart(adk_store)
    got = await adk_store.get_session(ref)
    assert got is not None
    assert (got.user_id, got.session_id) == ("ada", "s1")
    assert got.events == [expected_event(e) for e in EVENTS]
    assert got.state == {
        "session": {"k": 3},
        "user": {"user:lang": "fr", "user:city": "Lyon"},
        "app": {"app:v": 1.0, "app:flag": True},
        "temp": {},
    }
    assert await adk_store.list_sessions(app, "ada") == ["s1"]


@pytest.mark.parametrize("adk_store", store_params(ADK_STORES), indirect=True)
async def test_generated_ids_delete_and_cleanup(adk_store: Any) -> None:
    """A generated id is the one ADK reports; delete removes one session; cleanup removes the app's sessions and state and leaves another app alone."""
    app, other = "replay.adk-cleanup.1", "replay.adk-cleanup.2"
    sid = await adk_store.create_session(app, "u", None, {"user:x": 1})
    assert sid
    keep = await adk_store.create_session(app, "u", "keep", {})
    gone = await adk_store.create_session(app, "u", "gone", {})
    untouched = await adk_store.create_session(other, "u", "s", {"app:y": 2})
    await adk_store.delete_session(SessionRef(app, "u", gone))
    await restart(adk_store)
    assert sorted(await adk_store.list_sessions(app, "u")) == sorted([sid, keep])
    await adk_store.cleanup(app)
    await restart(adk_store)
    assert await adk_store.list_sessions(app, "u") == []
    fresh = await adk_store.create_session(app, "u", "again", {})
    got = await adk_store.get_session(SessionRef(app, "u", fresh))
    assert got is not None
    assert got.state["user"] == {}  # the app's user state went with it
    other_got = await adk_store.get_session(SessionRef(other, "u", untouched))
    assert other_got is not None
    assert other_got.state["app"] == {"app:y": 2}


@pytest.mark.parametrize("adk_store", store_params(["memory", "sqlite"]), indirect=True)
async def test_memory_search_reports_ids_author_and_time(adk_store: Any) -> None:
    """Memory hits carry the event's text, author, time, session and event id as ADK reports them."""
    assert Capability.MEMORY in adk_store.capabilities
    app = "replay.adk-memory.1"
    ref = SessionRef(app, "u", await adk_store.create_session(app, "u", "s", {}))
    await adk_store.append_event(ref, EVENTS[0])
    await adk_store.add_session_to_memory(ref)
    await restart(adk_store)
    hits = await adk_store.search_memory(app, "u", "needle", 10)
    assert len(hits) == 1
    hit = hits[0]
    assert hit["text"] == "hello, needle\nsecond part"
    assert (hit["author"], hit["time"], hit["event_id"]) == ("user", T0, "e1")
    if adk_store.backend == "sqlite":
        assert (hit["session_id"], hit["memory_id"]) == ("s", "1")
    else:
        assert (hit["session_id"], hit["memory_id"]) == (None, "e1")


@pytest.mark.parametrize("adk_store", store_params(ADK_STORES), indirect=True)
async def test_caller_edit_reaches_only_the_in_memory_service(adk_store: Any) -> None:
    """Editing the handed `Event` after the append changes what InMemorySessionService keeps and nothing any persistent ADK store keeps."""
    app = "replay.adk-edit.1"
    ref = SessionRef(app, "u", await adk_store.create_session(app, "u", "s", {}))
    await adk_store.append_event(ref, EVENTS[0])
    await adk_store.edit_appended(ref, "e1", EventEdit(text="edited", state_delta={"k": 99}))
    await restart(adk_store)
    got = await adk_store.get_session(ref)
    assert got is not None
    edited = adk_store.backend == "memory"
    assert got.events[0]["parts"][0]["text"] == ("edited" if edited else "hello, needle")
    assert got.events[0]["state_delta"]["k"] == (99 if edited else 2)
    assert got.state["session"]["k"] == 2


@pytest.mark.parametrize(
    ("url", "backend"),
    [
        ("adk+memory", "memory"),
        ("adk+sqlite", "sqlite"),
        ("adk+database+sqlite", "database+sqlite"),
        ("adk+sqlite+aiosqlite:///x.db", "database+sqlite"),
        ("adk+postgresql://h/db", "postgresql"),
        ("adk+postgres://h/db", "postgresql"),
        ("adk+database+postgresql+asyncpg://h/db", "postgresql"),
        ("adk+mariadb://h/db", "mysql"),
        ("adk+mysql://h/db", "mysql"),
    ],
)
def test_urls_select_backends(tmp_path: Path, url: str, backend: str) -> None:
    """Each documented URL form selects the ADK backend it names."""
    spec = parse_store_url(url, tmp_path)
    assert spec is not None
    store = store_opener("adk")(spec)
    assert (store.framework, store.backend) == ("adk", backend)
    assert (Capability.MEMORY in store.capabilities) == (backend in {"memory", "sqlite"})


@pytest.mark.parametrize("url", ["adk+redis://h", "adk+postgresql", "adk+sqlite:///"])
def test_unusable_urls_are_refused(tmp_path: Path, url: str) -> None:
    """A backend ADK lacks, a server backend without a URL and a file URL without a file are refused naming the URL."""
    spec = parse_store_url(url, tmp_path)
    assert spec is not None
    with pytest.raises(UnknownBackend, match="adk"):
        store_opener("adk")(spec)


@pytest.mark.parametrize(
    "url", ["adk+postgresql://bob:s3cret@127.0.0.1:1/x", "adk+mysql://bob:s3cret@127.0.0.1:1/x"]
)
async def test_unreachable_server_names_url_without_password(tmp_path: Path, url: str) -> None:
    """An unreachable server is BackendUnavailable, naming the URL with its password masked."""
    spec = parse_store_url(url, tmp_path)
    assert spec is not None
    store = store_opener("adk")(spec)
    with pytest.raises(BackendUnavailable) as caught:
        await store.open()
    assert "s3cret" not in str(caught.value)
    assert "bob:***@127.0.0.1:1/x" in str(caught.value)


def test_missing_extra_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without google-adk installed, selecting an adk store raises MissingExtra: one line naming the `adk` extra."""
    monkeypatch.setitem(sys.modules, "google.adk.sessions", None)
    spec = parse_store_url("adk+memory", tmp_path)
    assert spec is not None
    with pytest.raises(MissingExtra) as caught:
        store_opener("adk")(spec)
    assert caught.value.extra == "adk"
    assert "\n" not in str(caught.value)
    assert "steadyloop[adk]" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "module", "package"),
    [
        ("adk+mysql://h/db", "asyncmy", "asyncmy"),
        ("adk+postgresql+asyncpg://h/db", "asyncpg", "asyncpg"),
        ("adk+sqlite", "aiosqlite", "aiosqlite"),
        ("adk+database+sqlite", "greenlet", "greenlet"),
    ],
)
def test_missing_driver_is_a_missing_extra_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, module: str, package: str
) -> None:
    """A driver the selected ADK store needs but cannot import is reported at selection, naming the package and the extra."""
    monkeypatch.setitem(sys.modules, module, None)
    spec = parse_store_url(url, tmp_path)
    assert spec is not None
    with pytest.raises(MissingExtra, match=rf"needs {package}, .*steadyloop\[adk\]"):
        store_opener("adk")(spec)


def test_cli_exits_2_on_an_unreachable_framework_store() -> None:
    """`steadyloop replay run` on an unreachable adapter store exits 2, naming the URL without its password."""
    import os
    import subprocess

    store, expected = "adk+postgresql://bob:s3cret@127.0.0.1:1/x", "bob:***@127.0.0.1:1/x"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEADYLOOP_")}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "steadyloop",
            "replay",
            "run",
            "--pack",
            "hostile",
            "-b",
            f"adk+memory,{store}",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert expected in out.stderr
    assert "s3cret" not in out.stdout + out.stderr
