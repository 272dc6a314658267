"""Memory: storing sessions into a user's memory, and one search semantics for all."""

from __future__ import annotations

import pytest
from session_helpers import APP

from steadyloop import ConflictError, Journal
from steadyloop.sessions import (
    KIND_MEMORY_ENTRY,
    SessionError,
    SessionService,
    TextPart,
    ToolCallPart,
    memory_stream,
    tokenize,
)


def test_tokenize_folds_width_and_case() -> None:
    """Full-width and upper-case text tokenises like its plain lower-case form."""
    assert tokenize("Ｃａｆé CAFÉ café") == ["café", "café", "café"]
    assert tokenize("Straße") == ["strasse"]


def test_tokenize_splits_on_punctuation_and_underscore() -> None:
    """Punctuation, spaces and underscores separate tokens; digits are tokens."""
    assert tokenize("tool_call, v2.0-beta!") == ["tool", "call", "v2", "0", "beta"]


def test_tokenize_han_and_kana_by_character() -> None:
    """Han and kana characters are a token each, even inside a run of Latin letters."""
    assert tokenize("今天天气很好") == ["今", "天", "天", "气", "很", "好"]
    assert tokenize("用Python写") == ["用", "python", "写"]
    assert tokenize("カタカナ") == ["カ", "タ", "カ", "ナ"]
    assert tokenize("안녕 세계") == ["안녕", "세계"]


async def _seed(service: SessionService) -> None:
    s1 = await service.create_session("u1", "s1")
    for text in ["The weather in Paris is rainy", "Book a table in Paris", "unrelated"]:
        s1 = await service.append_event(s1, service.new_event("user", [TextPart(text)]))
    s2 = await service.create_session("u1", "s2")
    for text in ["北京今天天气很好", "上海下雨了", "Paris weather: sunny"]:
        s2 = await service.append_event(s2, service.new_event("user", [TextPart(text)]))
    assert await service.store_memory(s1) == 3
    assert await service.store_memory(s2) == 3


async def test_search_ranks_by_distinct_tokens_matched(service: SessionService) -> None:
    """Hits come by number of distinct query tokens matched, ties by session then event."""
    await _seed(service)
    hits = await service.search_memory("u1", "paris WEATHER weather")
    assert [(h.session_id, h.text, h.score) for h in hits] == [
        ("s1", "The weather in Paris is rainy", 2),
        ("s2", "Paris weather: sunny", 2),
        ("s1", "Book a table in Paris", 1),
    ]
    assert [h.session_id for h in await service.search_memory("u1", "paris", limit=1)] == ["s1"]


async def test_search_chinese(service: SessionService) -> None:
    """Chinese text, written without spaces, is found by the characters it shares."""
    await _seed(service)
    hits = await service.search_memory("u1", "天气")
    assert [(h.text, h.score) for h in hits] == [("北京今天天气很好", 2)]
    hits = await service.search_memory("u1", "今天下雨吗")
    assert [(h.text, h.score) for h in hits] == [("北京今天天气很好", 2), ("上海下雨了", 2)]


async def test_search_misses_and_edge_queries(service: SessionService) -> None:
    """No match, an empty query or limit 0 give no hits; a negative limit is refused."""
    await _seed(service)
    assert await service.search_memory("u1", "zebra") == []
    assert await service.search_memory("u1", "  ,; ") == []
    assert await service.search_memory("u1", "paris", limit=0) == []
    assert await service.search_memory("nobody", "paris") == []
    with pytest.raises(SessionError, match="limit"):
        await service.search_memory("u1", "paris", limit=-1)


async def test_memory_is_per_user(service: SessionService) -> None:
    """One user's memory is never searched for another user."""
    await _seed(service)
    other = await service.create_session("u2", "s1")
    other = await service.append_event(other, service.new_event("u", [TextPart("Paris")]))
    await service.store_memory(other)
    assert [h.session_id for h in await service.search_memory("u2", "paris")] == ["s1"]
    assert len(await service.search_memory("u1", "paris")) == 3


async def test_store_twice_adds_only_new_events(service: SessionService, journal: Journal) -> None:
    """Storing a session again adds only its new text events; textless events are skipped."""
    s = await service.create_session("u1", "s1")
    s = await service.append_event(s, service.new_event("u", [TextPart("alpha")]))
    s = await service.append_event(s, service.new_event("a", [ToolCallPart("c", "f")]))
    assert await service.store_memory(s) == 1
    assert await service.store_memory(s) == 0
    s = await service.append_event(s, service.new_event("u", [TextPart("beta")]))
    assert await service.store_memory(s) == 1
    records = await journal.read(APP, memory_stream("u1"))
    assert [r.kind for r in records] == [KIND_MEMORY_ENTRY] * 2
    assert [r.payload["text"] for r in records] == ["alpha", "beta"]


async def test_memory_outlives_its_session(service: SessionService) -> None:
    """Deleting a session leaves what it stored in memory."""
    await _seed(service)
    await service.delete_session("u1", "s2")
    assert [h.session_id for h in await service.search_memory("u1", "sunny")] == ["s2"]


async def test_concurrent_store_conflicts(service: SessionService, journal: Journal) -> None:
    """A store racing another writer of the memory stream fails whole, and a retry works."""
    s = await service.create_session("u1", "s1")
    s = await service.append_event(s, service.new_event("u", [TextPart("alpha")]))
    real_read = journal.read

    async def read_then_race(namespace: str, stream: str, **kw: object) -> object:
        out = await real_read(namespace, stream, **kw)  # type: ignore[arg-type]
        if stream == memory_stream("u1"):
            other = await service.create_session("u1", "s0")
            other = await service.append_event(other, service.new_event("u", [TextPart("x")]))
            journal.read = real_read  # type: ignore[method-assign]
            await service.store_memory(other)
        return out

    journal.read = read_then_race  # type: ignore[assignment,method-assign]
    with pytest.raises(ConflictError):
        await service.store_memory(s)
    assert await service.store_memory(s) == 1
    assert [h.session_id for h in await service.search_memory("u1", "alpha x")] == ["s0", "s1"]
