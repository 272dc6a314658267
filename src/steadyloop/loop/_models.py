"""Model clients: a scripted model for tests and notebooks, and an OpenAI-compatible one."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from steadyloop._errors import ModelError, UnknownBackend
from steadyloop._urls import parse_url
from steadyloop.loop._types import Message, ModelReply, ToolCall, ToolSpec
from steadyloop.records import JSONValue

if TYPE_CHECKING:  # httpx is imported when a request is made, not with the package
    import httpx

__all__ = ["OpenAIChatModel", "ScriptedModel"]

_BEARER = re.compile(r"(?i)\bbearer\s+[^\s\"',;]+")

Script = Sequence[ModelReply | str] | Callable[[int, Sequence[Message]], ModelReply | str]


class ScriptedModel:
    """A deterministic model that answers by call index, for tests and notebooks.

    The call index is the number of assistant turns already in the messages, so the
    same conversation always gets the same answer, also when resume repeats a call in
    a new process with a new [`ScriptedModel`][steadyloop.loop.ScriptedModel].

    Args:
        script: A list of replies (a ``str`` is a final answer), or a function of
            ``(index, messages)`` returning one.
        name: The model's name, as stored in intents.
        record: Keep every call's messages in [`calls`][steadyloop.loop.ScriptedModel] (turn off
            for very long runs: it keeps a reference per message per call).

    Attributes:
        calls: ``(index, messages)`` of every call, in order.

    Raises:
        ModelError: From [`complete`][steadyloop.loop.ScriptedModel.complete], when a list
            script has no reply at the index.
    """

    def __init__(self, script: Script, *, name: str = "scripted", record: bool = True) -> None:
        self.name = name
        self._script = script
        self._record = record
        self.calls: list[tuple[int, tuple[Message, ...]]] = []

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """Return the scripted reply for this call index."""
        index = sum(1 for m in messages if m.role == "assistant")
        if self._record:
            self.calls.append((index, tuple(messages)))
        if callable(self._script):
            reply = self._script(index, messages)
        else:
            if index >= len(self._script):
                raise ModelError(
                    f"scripted model {self.name!r} has {len(self._script)} replies; "
                    f"call {index} has none"
                )
            reply = self._script[index]
        return ModelReply.final(reply) if isinstance(reply, str) else reply


class OpenAIChatModel:
    """A client for OpenAI-compatible chat-completions APIs with tool calling.

    The API key is read from ``api_key`` or the environment variable ``api_key_env``
    and sent only in the ``Authorization`` header; it never appears in a
    [`ModelReply`][steadyloop.loop.ModelReply] (a reply that echoes it gets ``***`` instead), in
    an error message or in ``repr``, so it never reaches the journal. The same holds for user
    info and query values in ``base_url``; its query is sent with every request.

    Args:
        model: The model name the API expects.
        base_url: The API root, e.g. ``https://api.openai.com/v1`` or a local server.
        api_key: The key; ``None`` to read ``api_key_env`` (or send none).
        api_key_env: The environment variable holding the key.
        timeout: Seconds per request.
        max_retries: Extra attempts after a connection error, a 429 or a 5xx.
        backoff: Seconds before the first retry (doubling each time).
        temperature: Sampling temperature, sent when not ``None``.
        transport: An ``httpx`` transport (tests pass a mock one).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        temperature: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = model
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key if api_key is not None else os.environ.get(api_key_env)
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.temperature = temperature
        self._transport = transport
        try:
            root = parse_url(self.base_url)
        except UnknownBackend as exc:
            raise ModelError(f"base_url {exc}; write it as https://HOST/PATH") from None
        # The request goes to <path>/chat/completions, keeping the root's query (some
        # gateways take a key or a version there); the fragment is never sent.
        endpoint = root.raw_path.rstrip("/") + "/chat/completions"
        self._endpoint = root.build(path=endpoint, fragment=False)
        # What error messages and repr show: no user info, no query, no fragment.
        self._shown_url = root.build(userinfo=False, query=(), fragment=False)
        self._secrets = root.secrets()

    def __repr__(self) -> str:
        key = "set" if self._api_key else "unset"
        return f"OpenAIChatModel(model={self.name!r}, base_url={self._shown_url!r}, api_key={key})"

    def _strip_secrets(self, text: str) -> str:
        """Replace the key and the base URL's credentials and query values by ``***``."""
        if self._api_key:
            text = text.replace(self._api_key, "***")
        text = text.replace(self.base_url, self._shown_url)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _redact(self, text: str) -> str:
        """Remove the secrets, and anything like a bearer credential, from an error text.

        Applied to a whole text before it is cut short, so a cut cannot split a secret
        out of reach.
        """
        return _BEARER.sub("[credential removed]", self._strip_secrets(text))

    @staticmethod
    def _message(m: Message) -> dict[str, Any]:
        out: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in m.tool_calls
            ]
        if m.tool_call_id is not None:
            out["tool_call_id"] = m.tool_call_id
        return out

    def request_body(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The JSON body sent for one call."""
        body: dict[str, Any] = {
            "model": self.name,
            "messages": [self._message(m) for m in messages],
        }
        if tools:
            body["tools"] = [t.to_json() for t in tools]
            body["tool_choice"] = "auto"
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelReply:
        """POST ``/chat/completions`` and return the first choice as a reply.

        Raises:
            ModelError: The API refused the request, kept failing, or answered with
                something that is not a chat completion. The message never holds the key.
        """
        import httpx

        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        body = self.request_body(messages, tools)
        url = self._endpoint
        shown = f"{self._shown_url.rstrip('/')}/chat/completions"
        delay = self.backoff
        async with httpx.AsyncClient(timeout=self.timeout, transport=self._transport) as client:
            for attempt in range(self.max_retries + 1):
                last = attempt == self.max_retries
                try:
                    response = await client.post(url, json=body, headers=headers)
                except httpx.HTTPError as exc:
                    if last:
                        raise ModelError(
                            self._redact(f"{shown}: {type(exc).__name__}: {exc}")
                        ) from None
                else:
                    if response.status_code == 200:
                        return self._reply(response, shown)
                    retryable = response.status_code == 429 or response.status_code >= 500
                    if last or not retryable:
                        snippet = self._redact(response.text)[:300]
                        raise ModelError(f"{shown}: HTTP {response.status_code}: {snippet}")
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _reply(self, response: httpx.Response, url: str) -> ModelReply:
        try:
            data = response.json()
            message = data["choices"][0]["message"]
            calls = tuple(
                ToolCall(
                    id=str(c.get("id") or f"call-{i}"),
                    name=str(c["function"]["name"]),
                    arguments=self._strip_secrets(str(c["function"].get("arguments") or "")),
                )
                for i, c in enumerate(message.get("tool_calls") or ())
            )
            content = message.get("content")
            usage: Mapping[str, JSONValue] = {
                k: v for k, v in (data.get("usage") or {}).items() if isinstance(v, int)
            }
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ModelError(
                self._redact(f"{url}: not a chat completion ({type(exc).__name__}: {exc})")
            ) from None
        # A server that echoes the key (a debugging proxy, say) must not put it in the
        # reply, which is journaled: the exact secrets are replaced, nothing else is.
        text = None if content is None else self._strip_secrets(str(content))
        return ModelReply(text=text, tool_calls=calls, usage=usage)
