"""OpenAI models, and any OpenAI-compatible server, through the official ``openai`` SDK.

Two APIs, both streamed:

- the Responses API (``api="responses"``, the default for OpenAI): text, parallel function calls
  with arguments in pieces, reasoning summaries kept as thinking with the encrypted reasoning
  item as its signature (sent back on the next request: ``store`` is off), reasoning effort,
  cached tokens in usage;
- Chat Completions (``api="chat"``, always used for compatible servers: Ollama, vLLM, llama.cpp
  server, LM Studio): text, tool-call deltas, ``reasoning_effort``, usage through
  ``stream_options.include_usage``. Servers differ; this tolerates a stream without usage, tool
  calls in one piece, interleaved, or without an index or an id, and a ``reasoning_content``
  side channel. A call is handed out only once its arguments are whole.

Keys are read from the environment at each request (``OPENAI_API_KEY``; for a compatible server,
only the variable named by ``api_key_env``, never OpenAI's own key). Each API's messages and
stream fold live beside this module (``_openai_responses.py``, ``_openai_chat.py``); its errors
go through the providers' one skeleton (``_errors.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

try:
    import openai
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fiduciary's OpenAI models need the openai SDK: pip install 'fiduciary[openai]'"
    ) from exc

from ..exceptions import ModelError
from ._errors import api_error, key_source, mapped_errors
from ._openai_chat import ChatTurn, chat_tools, to_chat_messages
from ._openai_responses import ResponsesTurn, responses_tools, to_responses_input
from ._pool import ConnectionPool
from .base import ModelEvent, ModelRequest, ToolSpec
from .pricing import Price
from .retry import RetryPolicy, parse_retry_after, retry_call, retry_stream, transport_error

if TYPE_CHECKING:
    import httpx2

__all__ = ["OpenAIModel", "is_reasoning_model", "openai_compatible", "to_responses_input"]

Api = Literal["responses", "chat"]
_EFFORTS = ("low", "medium", "high")


def is_reasoning_model(model: str) -> bool:
    """OpenAI's reasoning models (o-series, gpt-5 family) take a reasoning effort."""
    name = model.rsplit("/", 1)[-1].lower()
    return name.startswith(("o1", "o3", "o4", "gpt-5", "codex"))


class OpenAIModel:
    """An OpenAI model, or one served by an OpenAI-compatible server (``compatible=True``)."""

    def __init__(
        self,
        model: str,
        *,
        api: Api = "responses",
        base_url: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        api_key: Callable[[], str | None] | None = None,
        http_client: httpx2.AsyncClient | None = None,
        compatible: bool = False,
        reasoning: bool | None = None,
        max_tokens: int | None = None,
        include_usage: bool = True,
        strict_json: bool = True,
        retry: RetryPolicy | None = None,
        timeout: float = 600.0,
        price: Price | None = None,
    ) -> None:
        if compatible and base_url is None:
            raise ValueError("an OpenAI-compatible model needs a base_url")
        self.model = model
        self.api: Api = "chat" if compatible else api
        self.base_url = base_url
        self.compatible = compatible
        self.price = price
        self._api_key_env = api_key_env
        self._api_key = api_key
        self._pool = ConnectionPool(http_client, openai.DefaultAsyncHttpxClient)
        self._reasoning = is_reasoning_model(model) if reasoning is None else reasoning
        self._max_tokens = max_tokens
        self._include_usage = include_usage
        self._strict_json = strict_json
        self._retry = retry or RetryPolicy()
        self._timeout = timeout

    @property
    def name(self) -> str:
        if self.compatible:
            return f"openai-compatible:{self.model}@{self.base_url}"
        return f"openai:{self.model}"

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model!r}, api={self.api!r}, base_url={self.base_url!r})"

    # --- the client, made per request ------------------------------------------------------
    def _client(self) -> openai.AsyncOpenAI:
        key: str | None
        if self._api_key is not None:
            key = self._api_key()
        elif self._api_key_env:
            key = os.environ.get(self._api_key_env)
        else:
            key = None
        if not key:
            if not self.compatible:
                raise ModelError(f"{self.name}: no API key; set {self._api_key_env}", code="auth")
            key = "not-needed"  # local servers ignore it, and the SDK needs one
        return openai.AsyncOpenAI(
            api_key=key,
            base_url=self.base_url if self.base_url is not None else openai.not_given,
            http_client=self._pool.client(),
            max_retries=0,
            timeout=self._timeout,
        )

    async def aclose(self) -> None:
        """Close the connection pool this model opened (not one it was given)."""
        await self._pool.aclose()

    def _effort(self, request: ModelRequest) -> Literal["low", "medium", "high"] | None:
        if not self._reasoning:
            return None
        effort = request.settings.get("effort")
        if effort == "low":
            return "low"
        if effort == "high":
            return "high"
        return "medium"

    def _max_output(self, request: ModelRequest) -> int | None:
        wanted = request.settings.get("max_tokens")
        return wanted if isinstance(wanted, int) and wanted > 0 else self._max_tokens

    # --- streaming ------------------------------------------------------------------------
    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        attempt = self._responses if self.api == "responses" else self._chat
        return retry_stream(lambda: attempt(request), self._retry, model=self.name)

    async def _responses(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        client = self._client()
        effort = self._effort(request)
        max_output = self._max_output(request)
        temperature = request.settings.get("temperature")
        instructions = "\n\n".join(s for s in request.system if s)
        tools = responses_tools(request.tools)
        turn = ResponsesTurn(self.name)
        with self._errors(stream=True):
            stream = await client.responses.create(
                model=self.model,
                input=to_responses_input(request.messages),
                instructions=instructions or openai.omit,
                tools=tools or openai.omit,
                parallel_tool_calls=True if tools else openai.omit,
                store=False,
                include=["reasoning.encrypted_content"] if self._reasoning else openai.omit,
                reasoning={"effort": effort, "summary": "auto"} if effort else openai.omit,
                max_output_tokens=max_output if max_output is not None else openai.omit,
                temperature=(
                    float(temperature)
                    if isinstance(temperature, int | float) and not self._reasoning
                    else openai.omit
                ),
                prompt_cache_key=_cache_key(instructions, request.tools),
                stream=True,
            )
            async with stream:
                async for event in stream:
                    for out in turn.feed(event):
                        yield out
        for out in turn.finish():
            yield out

    async def _chat(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        client = self._client()
        effort = self._effort(request)
        max_output = self._max_output(request)
        temperature = request.settings.get("temperature")
        tools = chat_tools(request.tools)
        turn = ChatTurn(self.name)
        with self._errors(stream=True):
            stream = await client.chat.completions.create(
                model=self.model,
                messages=to_chat_messages(request.system, request.messages),
                tools=tools or openai.omit,
                # compatible servers are not all ready for these: send only what they need
                parallel_tool_calls=True if tools and not self.compatible else openai.omit,
                reasoning_effort=effort if effort else openai.omit,
                max_completion_tokens=(
                    max_output if max_output is not None and not self.compatible else openai.omit
                ),
                max_tokens=(
                    max_output if max_output is not None and self.compatible else openai.omit
                ),
                temperature=(
                    float(temperature)
                    if isinstance(temperature, int | float) and not self._reasoning
                    else openai.omit
                ),
                stream_options={"include_usage": True} if self._include_usage else openai.omit,
                stream=True,
            )
            async with stream:
                async for chunk in stream:
                    for out in turn.feed(chunk):
                        yield out
        for out in turn.finish():
            yield out

    # --- structured output ----------------------------------------------------------------
    async def complete_json(self, system: str, prompt: str, schema: dict[str, Any]) -> Any:
        """One JSON value matching ``schema``, through the API's JSON-schema response format
        (strict when the schema allows it)."""
        strict = self._strict_json and is_strict_schema(schema)

        async def once() -> Any:
            client = self._client()
            with self._errors():
                if self.api == "responses":
                    response = await client.responses.create(
                        model=self.model,
                        instructions=system or openai.omit,
                        input=prompt,
                        store=False,
                        text={
                            "format": {
                                "type": "json_schema",
                                "name": "answer",
                                "schema": schema,
                                "strict": strict,
                            }
                        },
                    )
                    text = response.output_text
                    refused = any(
                        getattr(c, "type", "") == "refusal"
                        for item in response.output
                        for c in getattr(item, "content", None) or []
                    )
                else:
                    completion = await client.chat.completions.create(
                        model=self.model,
                        messages=[
                            {"role": "system", "content": system},
                            {"role": "user", "content": prompt},
                        ],
                        response_format={
                            "type": "json_schema",
                            "json_schema": {"name": "answer", "schema": schema, "strict": strict},
                        },
                    )
                    message = completion.choices[0].message
                    text = message.content or ""
                    refused = bool(message.refusal)
            if refused:
                raise ModelError(f"{self.name} refused to answer", code="refused")
            try:
                return json.loads(text)
            except ValueError as exc:
                raise ModelError(
                    f"{self.name} did not answer with JSON", code="invalid_output"
                ) from exc

        return await retry_call(once, self._retry, model=self.name)

    # --- errors ---------------------------------------------------------------------------
    def _errors(self, *, stream: bool = False) -> contextlib.AbstractContextManager[None]:
        malformed = json.JSONDecodeError if stream else ()
        return mapped_errors(self.name, openai.OpenAIError, self._error, malformed=malformed)

    def _error(self, exc: openai.OpenAIError) -> ModelError:
        key_from = key_source(
            self._api_key,
            self._api_key_env
            or "the server's key: name the variable that holds it with api_key_env=",
        )
        if isinstance(exc, openai.APIStatusError):
            error_type = _error_code(exc.body) or exc.code or exc.type
            return api_error(
                self.name,
                status=exc.status_code,
                error_type=error_type,
                label=error_type,
                message=_error_message(exc.body),
                key_from=key_from,
                retry_after=parse_retry_after(exc.response.headers),
            )
        if isinstance(exc, openai.APIConnectionError):
            return transport_error(exc, self.name)
        if isinstance(exc, openai.APIError):  # an error inside the stream
            return api_error(
                self.name,
                status=None,
                error_type=exc.code or exc.type,
                message=exc.message,
                key_from=key_from,
                fallback=type(exc).__name__,
            )
        return ModelError(f"{self.name}: {type(exc).__name__}", code="error")


def openai_compatible(
    model: str, base_url: str, *, api_key_env: str | None = None, **options: Any
) -> OpenAIModel:
    """A model served by an OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio)."""
    return OpenAIModel(
        model, base_url=base_url, compatible=True, api_key_env=api_key_env, **options
    )


def _error_code(body: object) -> str | None:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            for key in ("code", "type"):
                value = inner.get(key)
                if isinstance(value, str):
                    return value
    return None


def _error_message(body: object) -> str:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return ""


def _cache_key(instructions: str, tools: Sequence[ToolSpec]) -> str:
    """Requests sharing a prefix (instructions + tools) share a key: OpenAI routes them to the
    same cache."""
    digest = hashlib.sha256(instructions.encode())
    for tool in tools:
        digest.update(tool.name.encode())
    return "fiduciary-" + digest.hexdigest()[:24]


def is_strict_schema(schema: Any) -> bool:
    """Whether a JSON schema fits OpenAI's strict mode: every object closed, every property
    required."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            properties = schema.get("properties", {})
            if schema.get("additionalProperties") is not False:
                return False
            if set(schema.get("required", [])) != set(properties):
                return False
        return all(is_strict_schema(v) for v in schema.values())
    if isinstance(schema, list):
        return all(is_strict_schema(v) for v in schema)
    return True
