"""The openai-agents adapter: a faithful translation of events to SDK items on every SDK session backend."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from framework_dbs import OPENAI_AGENTS_STORES, framework_store_url, store_params
from steadyloop._errors import BackendUnavailable, MissingExtra, UnknownBackend
from steadyloop.replay._store import (
    Capability,
    EventEdit,
    SessionRef,
    StoreEvent,
    parse_store_url,
    store_opener,
)

EVENTS = [
    StoreEvent(
        id="u1",
        author="user",
        parts=({"type": "text", "text": "hello"}, {"type": "text", "text": ""}),
    ),
    StoreEvent(
        id="a1",
        author="assistant",
        parts=(
            {"type": "text", "text": "let me look"},
            {
                "type": "tool_call",
                "call_id": "c1",
                "name": "lookup",
                "arguments": {"q": "x", "n": [1, 1.0, 2**63 - 1]},
            },
        ),
    ),
    StoreEvent(
        id="t1",
        author="tool",
        parts=(
            {
                "type": "tool_result",
                "call_id": "c1",
                "name": "lookup",
                "response": {"hits": [None, -0.0]},
                "error": None,
            },
            {
                "type": "tool_result",
                "call_id": "c1",
                "name": "lookup",
                "response": None,
                "error": "boom",
            },
        ),
    ),
    StoreEvent(id="u2", author="user"),
]


def expected(event: StoreEvent) -> dict[str, Any]:
    """The event as the SDK keeps it: no state, time or invocation id."""
    return {**event.to_dict(), "state_delta": {}, "time": None, "invocation_id": None}


@pytest.fixture
async def oa_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """An opened adapter store of the parametrised SDK backend, on a private store."""
    backend, options = request.param if isinstance(request.param, tuple) else (request.param, {})
    async with framework_store_url("openai-agents", backend, tmp_path, **options) as url:
        spec = parse_store_url(url, tmp_path / "work")
        assert spec is not None
        store = store_opener("openai-agents")(spec)
        await store.open()
        try:
            yield store
        finally:
            await store.close()
            await store.dispose()


async def restart(store: Any) -> None:
    await store.close()
    await store.open()


ROUND_TRIP = [p for p in store_params(OPENAI_AGENTS_STORES) if p.values[0] != "mysql"]  # type: ignore[attr-defined]
ROUND_TRIP.append(
    pytest.param(("mysql", {"tables": "adapter"}), id="mysql-tables", marks=pytest.mark.server)
)


@pytest.mark.parametrize("oa_store", ROUND_TRIP, indirect=True)
async def test_events_round_trip_through_a_restart(oa_store: Any) -> None:
    """Text, tool calls and results (typed values included), ids and authors read back as written, from a fresh client; delete and cleanup empty the session."""
    app = "replay.oa-roundtrip.1"
    assert await oa_store.create_session(app, "ada", "s1", {}) == "s1"
    ref = SessionRef(app, "ada", "s1")
    for event in EVENTS:
        await oa_store.append_event(ref, event)
    await restart(oa_store)
    got = await oa_store.get_session(ref)
    assert got is not None
    assert got.events == [expected(e) for e in EVENTS]
    other = SessionRef(app, "ada", "s2")
    await oa_store.append_event(other, EVENTS[0])
    await oa_store.delete_session(ref)
    await restart(oa_store)
    assert (await oa_store.get_session(ref)).events == []
    assert len((await oa_store.get_session(other)).events) == 1
    await oa_store.cleanup(app)
    await restart(oa_store)
    assert (await oa_store.get_session(other)).events == []


@pytest.mark.parametrize("oa_store", store_params(["memory", "sqlite", "redis"]), indirect=True)
async def test_caller_edit_never_reaches_the_stored_items(oa_store: Any) -> None:
    """The SDK serialises items when they are added, so editing the handed item afterwards changes nothing stored."""
    app = "replay.oa-edit.1"
    ref = SessionRef(app, "u", await oa_store.create_session(app, "u", "s", {}))
    await oa_store.append_event(ref, EVENTS[0])
    await oa_store.edit_appended(ref, "u1", EventEdit(text="edited"))
    await restart(oa_store)
    got = await oa_store.get_session(ref)
    assert got.events[0]["parts"][0]["text"] == "hello"


@pytest.mark.server
@pytest.mark.parametrize("oa_store", [pytest.param("mysql", id="mysql")], indirect=True)
async def test_mariadb_as_shipped_reports_the_sdks_own_error(oa_store: Any) -> None:
    """On MariaDB the SDK's `create_tables=True` raises its CompileError on every operation, and the adapter passes exactly that error on."""
    from sqlalchemy.exc import CompileError

    app = "replay.oa-maria.1"
    ref = SessionRef(app, "u", await oa_store.create_session(app, "u", "s", {}))
    with pytest.raises(CompileError, match=r"VARCHAR requires a length on dialect mysql"):
        await oa_store.append_event(ref, EVENTS[0])
    with pytest.raises(CompileError, match=r"VARCHAR requires a length on dialect mysql"):
        await oa_store.get_session(ref)
    await oa_store.cleanup(app)  # nothing was made, nothing fails


@pytest.mark.parametrize(
    ("url", "backend", "name"),
    [
        ("openai-agents+memory", "memory", "openai-agents+memory"),
        ("openai-agents+sqlite", "sqlite", "openai-agents+sqlite"),
        ("openai-agents+sqlalchemy+sqlite", "sqlalchemy+sqlite", "openai-agents+sqlalchemy+sqlite"),
        ("openai-agents+postgresql://h/db", "postgresql", "openai-agents+postgresql"),
        (
            "openai-agents+postgresql+asyncpg://h/db",
            "postgresql",
            "openai-agents+postgresql+asyncpg",
        ),
        ("openai-agents+mariadb://h/db", "mysql", "openai-agents+mariadb"),
        ("openai-agents+mysql://h/db?tables=adapter", "mysql", "openai-agents+mysql+tables"),
        ("openai-agents+redis://h:6379/0", "redis", "openai-agents+redis"),
    ],
)
def test_urls_select_backends(tmp_path: Path, url: str, backend: str, name: str) -> None:
    """Each documented URL form selects the SDK backend it names; the SDK only ever offers events."""
    spec = parse_store_url(url, tmp_path)
    assert spec is not None
    store = store_opener("openai-agents")(spec)
    assert (store.framework, store.backend, store.name) == ("openai-agents", backend, name)
    assert Capability.STATE not in store.capabilities
    assert Capability.EVENTS in store.capabilities


@pytest.mark.parametrize(
    "url",
    ["openai-agents+mongodb://h", "openai-agents+redis", "openai-agents+mysql://h/db?tables=maybe"],
)
def test_unusable_urls_are_refused(tmp_path: Path, url: str) -> None:
    """A backend the SDK lacks, a server backend without a URL and an unknown `tables` are refused naming the store."""
    spec = parse_store_url(url, tmp_path)
    assert spec is not None
    with pytest.raises(UnknownBackend, match="openai-agents"):
        store_opener("openai-agents")(spec)


@pytest.mark.parametrize(
    "url",
    [
        "openai-agents+postgresql://bob:s3cret@127.0.0.1:1/x",
        "openai-agents+mysql://bob:s3cret@127.0.0.1:1/x",
        "openai-agents+redis://:s3cret@127.0.0.1:1/0",
    ],
)
async def test_unreachable_server_names_url_without_password(tmp_path: Path, url: str) -> None:
    """An unreachable server is BackendUnavailable, naming the URL with its password masked."""
    spec = parse_store_url(url, tmp_path)
    assert spec is not None
    store = store_opener("openai-agents")(spec)
    with pytest.raises(BackendUnavailable) as caught:
        await store.open()
    assert "s3cret" not in str(caught.value)
    assert ":***@127.0.0.1:1" in str(caught.value)


def test_missing_extra_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without openai-agents installed, selecting its store raises MissingExtra: one line naming the extra."""
    monkeypatch.setitem(sys.modules, "agents.memory", None)
    spec = parse_store_url("openai-agents+memory", tmp_path)
    assert spec is not None
    with pytest.raises(MissingExtra) as caught:
        store_opener("openai-agents")(spec)
    assert caught.value.extra == "openai-agents"
    assert "\n" not in str(caught.value)
    assert "steadyloop[openai-agents]" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "module", "package"),
    [
        ("openai-agents+mysql://h/db", "asyncmy", "asyncmy"),
        ("openai-agents+postgresql://h/db", "psycopg", "psycopg"),
        ("openai-agents+redis://h", "redis.asyncio", "redis"),
        ("openai-agents+sqlalchemy+sqlite", "greenlet", "greenlet"),
    ],
)
def test_missing_driver_is_a_missing_extra_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, module: str, package: str
) -> None:
    """A driver the selected SDK store needs but cannot import is reported at selection, naming the package and the extra."""
    monkeypatch.setitem(sys.modules, module, None)
    spec = parse_store_url(url, tmp_path)
    assert spec is not None
    with pytest.raises(MissingExtra, match=rf"needs {package}, .*steadyloop\[openai-agents\]"):
        store_opener("openai-agents")(spec)
