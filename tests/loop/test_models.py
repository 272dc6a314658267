"""Model clients: the scripted model, and the OpenAI-compatible client on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from loop_helpers import APP, all_records

from steadyloop._errors import ModelError
from steadyloop.journal import open_journal
from steadyloop.loop import (
    Agent,
    Message,
    ModelReply,
    OpenAIChatModel,
    ReplayPolicy,
    ScriptedModel,
    StopReason,
    ToolRegistry,
    run,
)

SECRET = "sk-test-5ecret-DO-NOT-STORE"


class FakeAPI:
    """A chat-completions server on 127.0.0.1 that answers from a queue of (status, body)."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, Any]] = []
        self.requests: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                api.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                status, answer = api.answers.pop(0)
                if answer == "echo-auth":  # a badly behaved server that echoes the key
                    answer = {"error": f"bad key {self.headers.get('Authorization')}"}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI()
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()


def completion(
    content: str | None = None, calls: list[tuple[str, str, str]] = ()
) -> dict[str, Any]:  # type: ignore[assignment]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    return {
        "id": "x",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }


def weather_tools() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(
        policy=ReplayPolicy.SAFE,
        description="Current weather in a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    )
    def weather(city: str) -> dict[str, Any]:
        return {"city": city, "celsius": 21}

    return tools


async def test_openai_model_runs_a_tool_calling_loop_against_a_local_server(
    api: FakeAPI, tmp_path: Path
) -> None:
    """The client sends messages and tools in chat-completions form and parses tool calls."""
    api.answers = [
        (200, completion(None, [("call_1", "weather", '{"city": "Lyon"}')])),
        (200, completion("It is 21 °C in Lyon.")),
    ]
    model = OpenAIChatModel("gpt-test", base_url=api.url, api_key=SECRET, backoff=0)
    agent = Agent("weather", model, weather_tools(), system_prompt="Be brief.")
    async with await open_journal(f"sqlite:///{tmp_path}/j.db") as journal:
        result = await run(agent, journal, APP, "ada", "s1", "r1", "Weather in Lyon?")
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "It is 21 °C in Lyon.")
    first, second = (r["body"] for r in api.requests)
    assert api.requests[0]["path"] == "/v1/chat/completions"
    assert api.requests[0]["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert first["model"] == "gpt-test"
    assert first["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Lyon?"},
    ]
    assert first["tools"][0]["function"]["name"] == "weather"
    assert second["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Lyon"}'},
                }
            ],
        },
        {"role": "tool", "content": '{"celsius":21,"city":"Lyon"}', "tool_call_id": "call_1"},
    ]


async def test_secrets_never_reach_the_journal(api: FakeAPI, tmp_path: Path) -> None:
    """No stored record holds the API key or an Authorization header, even after errors."""
    api.answers = [
        (500, {"error": "overloaded"}),  # retried
        (200, completion(None, [("call_1", "weather", '{"city": "Oslo"}')])),
        (401, "echo-auth"),  # the server echoes the key back in its error
    ]
    model = OpenAIChatModel("gpt-test", base_url=api.url, api_key=SECRET, backoff=0)
    agent = Agent("weather", model, weather_tools())
    async with await open_journal(f"sqlite:///{tmp_path}/j.db") as journal:
        result = await run(agent, journal, APP, "ada", "s1", "r1", "Weather in Oslo?")
        assert result.stop_reason is StopReason.ERROR
        assert "HTTP 401" in result.detail
        assert "[credential removed]" in result.detail
        stored = "\n".join(r.record.to_json() for r in await all_records(journal))
    assert len(api.requests) == 3
    assert SECRET not in stored
    assert "Authorization" not in stored
    assert "Bearer" not in stored
    assert SECRET not in repr(model)


async def test_openai_model_reads_the_key_from_the_environment(
    api: FakeAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without api_key, the key comes from OPENAI_API_KEY (or the named variable)."""
    monkeypatch.setenv("MY_KEY", SECRET)
    api.answers = [(200, completion("hi"))]
    model = OpenAIChatModel("m", base_url=api.url, api_key_env="MY_KEY")
    reply = await model.complete([Message("user", "hello")], [])
    assert reply == ModelReply(
        text="hi", usage={"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
    )
    assert api.requests[0]["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert "tools" not in api.requests[0]["body"]


async def test_openai_model_reports_a_non_completion_and_an_unreachable_server(
    api: FakeAPI,
) -> None:
    """An answer that is not a chat completion, or no server, raises ModelError."""
    api.answers = [(200, {"unexpected": True})]
    model = OpenAIChatModel("m", base_url=api.url, api_key=SECRET, max_retries=0)
    with pytest.raises(ModelError, match="not a chat completion"):
        await model.complete([Message("user", "x")], [])
    host, port = api.server.server_address[:2]
    api.server.shutdown()
    api.server.server_close()
    dead = OpenAIChatModel("m", base_url=f"http://{host!s}:{port}/v1", max_retries=1, backoff=0)
    with pytest.raises(ModelError, match="ConnectError"):
        await dead.complete([Message("user", "x")], [])


async def test_scripted_model_answers_by_call_index() -> None:
    """The reply depends on how many assistant turns the messages hold, not on history."""
    model = ScriptedModel(["first", ModelReply.call("t", {"x": 1})])
    one = await model.complete([Message("user", "a")], [])
    two = await model.complete(
        [Message("user", "a"), Message("assistant", "first"), Message("user", "b")], []
    )
    again = await model.complete([Message("user", "a")], [])
    assert (one.text, two.tool_calls[0].name, again.text) == ("first", "t", "first")
    assert [index for index, _ in model.calls] == [0, 1, 0]
    with pytest.raises(ModelError, match="call 2 has none"):
        await model.complete([Message("assistant", "x"), Message("assistant", "y")], [])
