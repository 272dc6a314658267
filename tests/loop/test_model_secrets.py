"""The OpenAI-compatible client never lets a credential into an error, and so into the journal."""

from __future__ import annotations

import httpx
from loop_helpers import APP, all_records

from steadyloop.journal import MemoryJournal
from steadyloop.loop import Agent, OpenAIChatModel, StopReason, run

KEY = "sk-live-abcdefghijklmnopqrstuvwxyz0123456789ABCDEF"


def fragments(secret: str, size: int = 12) -> list[str]:
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


async def stored_text(journal: MemoryJournal) -> str:
    return str([r.record.to_dict() for r in await all_records(journal)])


async def test_a_key_echoed_past_the_cut_of_an_error_body_is_redacted() -> None:
    """No 12-character fragment of the key is stored, even when it straddles the snippet cut."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = '{"error": {"message": "' + "x" * 226 + " invalid key " + KEY + '"}}'
        return httpx.Response(401, text=body)

    journal = MemoryJournal()
    model = OpenAIChatModel(
        "gpt", api_key=KEY, transport=httpx.MockTransport(handler), max_retries=0
    )
    result = await run(Agent("a", model), journal, APP, "ada", "s1", "r1", "hi")
    assert result.stop_reason is StopReason.ERROR
    text = await stored_text(journal)
    assert not [f for f in fragments(KEY) if f in text]


async def test_credentials_and_query_of_the_base_url_are_not_stored() -> None:
    """A password, user name or query in the base URL appears in no error and no record."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach {request.url}", request=request)

    journal = MemoryJournal()
    model = OpenAIChatModel(
        "gpt",
        base_url="http://user:hunter2@127.0.0.1:9/v1?token=tok-secret-123",
        api_key=KEY,
        transport=httpx.MockTransport(handler),
        max_retries=0,
    )
    assert "hunter2" not in repr(model)
    result = await run(Agent("a", model), journal, APP, "ada", "s1", "r1", "hi")
    assert result.stop_reason is StopReason.ERROR
    text = await stored_text(journal) + result.detail
    assert "127.0.0.1:9/v1/chat/completions" in text
    for secret in ("hunter2", "tok-secret-123"):
        assert secret not in text


async def test_a_base_url_query_is_sent_and_its_values_never_stored() -> None:
    """The root's query reaches the server on the right path; a body quoting its value is redacted."""
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.url.query.decode()))
        return httpx.Response(401, text='{"error": "invalid api key: tok-secret-123"}')

    journal = MemoryJournal()
    model = OpenAIChatModel(
        "gpt",
        base_url="https://proxy.example/v1/?key=tok-secret-123",
        transport=httpx.MockTransport(handler),
        max_retries=0,
    )
    result = await run(Agent("a", model), journal, APP, "ada", "s1", "r1", "hi")
    assert seen == [("/v1/chat/completions", "key=tok-secret-123")]
    assert result.stop_reason is StopReason.ERROR and "HTTP 401" in result.detail
    assert "tok-secret-123" not in await stored_text(journal) + result.detail


async def test_a_reply_that_echoes_the_key_is_stored_without_it() -> None:
    """A completion whose text or tool arguments quote the key is journaled with *** instead."""

    def handler(request: httpx.Request) -> httpx.Response:
        message = {
            "role": "assistant",
            "content": f"headers seen: Authorization: Bearer {KEY}",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "t", "arguments": KEY}}
            ],
        }
        return httpx.Response(200, json={"choices": [{"message": message}]})

    model = OpenAIChatModel("gpt", api_key=KEY, transport=httpx.MockTransport(handler))
    reply = await model.complete([], [])
    assert reply.text == "headers seen: Authorization: Bearer ***"
    assert reply.tool_calls[0].arguments == "***"
