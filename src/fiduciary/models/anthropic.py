"""Anthropic models through the official ``anthropic`` SDK (extra ``anthropic``).

The Messages API, streamed: text, tool calls whose input JSON arrives in pieces, thinking blocks
(adaptive or with a token budget) whose signatures are kept and sent back on the next request,
redacted thinking, prompt caching on the tool list, the system layers and the latest message,
cache tokens in usage, every stop reason (``refusal`` included). SDK errors are translated into
``ModelError`` here; retries are fiduciary's own (``retry.py``), the SDK's are turned off.

The API key is read from the environment (``ANTHROPIC_API_KEY``) at each request and kept only by
the short-lived SDK client of that request.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

try:
    import anthropic
    from anthropic.types import (
        CacheControlEphemeralParam,
        ContentBlockParam,
        InputJSONDelta,
        MessageParam,
        OutputConfigParam,
        RawContentBlockDeltaEvent,
        RawContentBlockStartEvent,
        RawContentBlockStopEvent,
        RawMessageDeltaEvent,
        RawMessageStartEvent,
        RawMessageStopEvent,
        RawMessageStreamEvent,
        RedactedThinkingBlock,
        SignatureDelta,
        TextBlock,
        TextBlockParam,
        TextDelta,
        ThinkingBlock,
        ThinkingConfigParam,
        ThinkingDelta,
        ToolParam,
        ToolUseBlock,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fiduciary's Anthropic models need the anthropic SDK: pip install 'fiduciary[anthropic]'"
    ) from exc

from ..exceptions import ModelError
from ._errors import api_error, key_source, mapped_errors
from ._pool import ConnectionPool
from .base import (
    AssistantMessage,
    Message,
    ModelEvent,
    ModelRequest,
    StreamStop,
    StreamTextDelta,
    StreamThinkingDelta,
    StreamThinkingDone,
    StreamToolCall,
    StreamUsage,
    TextPart,
    ThinkingPart,
    ToolResultsMessage,
    ToolSpec,
    ToolUsePart,
    UserTextMessage,
)
from .pricing import Price
from .retry import RetryPolicy, parse_retry_after, retry_call, retry_stream, transport_error

if TYPE_CHECKING:
    import httpx2

__all__ = ["REDACTED_THINKING", "AnthropicModel", "ThinkingMode"]

# a redacted thinking block travels as a ThinkingPart whose signature is this prefix + its data
REDACTED_THINKING = "redacted_thinking:"

ThinkingMode = Literal["auto", "adaptive", "enabled", "off"]
# thinking budgets (tokens) by effort, for models that take a budget rather than an effort
THINKING_BUDGET = {"low": 2048, "medium": 8192, "high": 24576}


def claude_version(model: str) -> tuple[int, int] | None:
    """(major, minor) of a Claude model id: ``claude-sonnet-4-5-20250929`` → (4, 5)."""
    numbers = [int(t) for t in model.split("-") if t.isdigit() and len(t) <= 2]
    if not numbers:
        return None
    return numbers[0], numbers[1] if len(numbers) > 1 else 0


class AnthropicModel:
    """A Claude model. ``thinking="auto"`` picks adaptive thinking (Claude 4.6 and later), a
    thinking budget (3.7 to 4.5) or none, from the model id; the request's ``effort`` setting
    (``low`` / ``medium`` / ``high``, default ``medium``) sets how much."""

    def __init__(
        self,
        model: str,
        *,
        api_key_env: str = "ANTHROPIC_API_KEY",
        api_key: Callable[[], str | None] | None = None,
        base_url: str | None = None,
        http_client: httpx2.AsyncClient | None = None,
        max_tokens: int = 8192,
        thinking: ThinkingMode = "auto",
        cache: bool = True,
        cache_ttl: Literal["5m", "1h"] | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 600.0,
        price: Price | None = None,
    ) -> None:
        self.model = model
        self.price = price
        self._api_key_env = api_key_env
        self._api_key = api_key
        self._base_url = base_url
        self._pool = ConnectionPool(http_client, anthropic.DefaultAsyncHttpxClient)
        self._max_tokens = max_tokens
        self._thinking: ThinkingMode = thinking
        self._cache = cache
        self._cache_ttl = cache_ttl
        self._retry = retry or RetryPolicy()
        self._timeout = timeout

    @property
    def name(self) -> str:
        return f"anthropic:{self.model}"

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model!r})"

    # --- the client, made per request ------------------------------------------------------
    def _client(self) -> anthropic.AsyncAnthropic:
        key = self._api_key() if self._api_key is not None else os.environ.get(self._api_key_env)
        if not key:
            raise ModelError(
                f"{self.name}: no API key; set {self._api_key_env}", code="auth", retryable=False
            )
        return anthropic.AsyncAnthropic(
            api_key=key,
            base_url=self._base_url,
            http_client=self._pool.client(),
            max_retries=0,
            timeout=self._timeout,
        )

    async def aclose(self) -> None:
        """Close the connection pool this model opened (not one it was given)."""
        await self._pool.aclose()

    # --- streaming ------------------------------------------------------------------------
    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        return retry_stream(lambda: self._attempt(request), self._retry, model=self.name)

    async def _attempt(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        client = self._client()
        thinking, output_config, max_tokens = self._thinking_config(request)
        temperature = request.settings.get("temperature")
        turn = AnthropicTurn()
        with self._errors(stream=True):
            stream = await client.messages.create(
                model=self.model,
                max_tokens=max_tokens,
                system=self._system(request.system, request.stable_layers) or anthropic.omit,
                messages=to_messages(request.messages, cache=self._cache_control()),
                tools=self._tools(request.tools) or anthropic.omit,
                thinking=thinking,
                output_config=output_config,
                stream=True,
                # not every model takes a temperature (and none does while thinking)
                extra_body=(
                    {"temperature": float(temperature)}
                    if isinstance(temperature, int | float) and thinking is anthropic.omit
                    else None
                ),
            )
            async with stream:
                async for event in stream:
                    for out in turn.feed(event):
                        yield out
        for out in turn.finish(self.name):
            yield out

    def _cache_control(self) -> CacheControlEphemeralParam | None:
        if not self._cache:
            return None
        if self._cache_ttl is None:
            return {"type": "ephemeral"}
        return {"type": "ephemeral", "ttl": self._cache_ttl}

    def _system(self, layers: Sequence[str], stable: int | None = None) -> list[TextBlockParam]:
        blocks: list[TextBlockParam] = []
        last_stable: int | None = None  # the block after which the cached prefix ends
        for index, text in enumerate(layers):
            if not text:
                continue
            blocks.append({"type": "text", "text": text})
            if stable is None or index < stable:
                last_stable = len(blocks) - 1
        cache = self._cache_control()
        if last_stable is not None and cache is not None:
            # tools + the stable system layers form the cached prefix
            blocks[last_stable]["cache_control"] = cache
        return blocks

    def _tools(self, tools: Sequence[ToolSpec]) -> list[ToolParam]:
        params: list[ToolParam] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in tools
        ]
        cache = self._cache_control()
        if params and cache is not None:
            params[-1]["cache_control"] = cache
        return params

    def _thinking_mode(self) -> Literal["adaptive", "enabled", "off"]:
        if self._thinking != "auto":
            return self._thinking
        version = claude_version(self.model)
        if version is None:
            return "adaptive" if any(n in self.model for n in ("mythos", "fable")) else "off"
        if version >= (4, 6):
            return "adaptive"
        if version >= (3, 7):
            return "enabled"
        return "off"

    def _thinking_config(
        self, request: ModelRequest
    ) -> tuple[ThinkingConfigParam | anthropic.Omit, OutputConfigParam | anthropic.Omit, int]:
        wanted = request.settings.get("max_tokens")
        max_tokens = wanted if isinstance(wanted, int) and wanted > 0 else self._max_tokens
        wanted_effort = request.settings.get("effort")
        effort: Literal["low", "medium", "high"] = (
            wanted_effort if wanted_effort in ("low", "medium", "high") else "medium"
        )
        mode = self._thinking_mode()
        if mode == "adaptive":
            output: OutputConfigParam = {"effort": effort}
            return {"type": "adaptive"}, output, max_tokens
        if mode == "enabled":
            budget = THINKING_BUDGET[effort]
            return (
                {"type": "enabled", "budget_tokens": budget},
                anthropic.omit,
                max(max_tokens, budget + 4096),
            )
        return anthropic.omit, anthropic.omit, max_tokens

    # --- structured output ----------------------------------------------------------------
    async def complete_json(self, system: str, prompt: str, schema: dict[str, Any]) -> Any:
        """One JSON value matching ``schema``, through the API's structured outputs."""

        async def once() -> Any:
            client = self._client()
            with self._errors():
                message = await client.messages.create(
                    model=self.model,
                    max_tokens=self._max_tokens,
                    system=self._system([system]) or anthropic.omit,
                    messages=[{"role": "user", "content": prompt}],
                    output_config={"format": {"type": "json_schema", "schema": schema}},
                )
            if message.stop_reason == "refusal":
                raise ModelError(f"{self.name} refused to answer", code="refused")
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
            try:
                return json.loads(text)
            except ValueError as exc:
                raise ModelError(
                    f"{self.name} did not answer with JSON (stop reason {message.stop_reason})",
                    code="invalid_output",
                ) from exc

        return await retry_call(once, self._retry, model=self.name)

    # --- errors ---------------------------------------------------------------------------
    def _errors(self, *, stream: bool = False) -> contextlib.AbstractContextManager[None]:
        malformed = json.JSONDecodeError if stream else ()
        return mapped_errors(self.name, anthropic.AnthropicError, self._error, malformed=malformed)

    def _error(self, exc: anthropic.AnthropicError) -> ModelError:
        key_from = key_source(self._api_key, self._api_key_env)
        if isinstance(exc, anthropic.APIStatusError):
            error_type, message = _error_body(exc.body)
            return api_error(
                self.name,
                status=exc.status_code if exc.status_code >= 400 else None,  # 200: mid-stream
                error_type=error_type,
                label=error_type,
                message=message,
                key_from=key_from,
                retry_after=parse_retry_after(exc.response.headers),
            )
        if isinstance(exc, anthropic.APIConnectionError):
            return transport_error(exc, self.name)
        if isinstance(exc, anthropic.APIError):
            error_type, message = _error_body(exc.body)
            return api_error(
                self.name,
                status=None,
                error_type=error_type,
                message=message,
                key_from=key_from,
                fallback=type(exc).__name__,
            )
        return ModelError(f"{self.name}: {type(exc).__name__}", code="error")


def _error_body(body: object) -> tuple[str | None, str | None]:
    """(error type, message) from an Anthropic error body ``{"error": {"type", "message"}}``."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            error_type = error.get("type")
            message = error.get("message")
            return (
                error_type if isinstance(error_type, str) else None,
                message if isinstance(message, str) else None,
            )
    return None, None


# --- fiduciary messages → Anthropic ---------------------------------------------------------


def to_messages(
    messages: Sequence[Message], *, cache: CacheControlEphemeralParam | None = None
) -> list[MessageParam]:
    """The conversation in the API's shape: roles alternate, empty turns are dropped, thinking
    blocks go back exactly as they came (signature included), and the latest block carries a
    cache breakpoint so that the conversation so far is read from the cache next time."""
    out: list[MessageParam] = []
    for message in messages:
        role: Literal["user", "assistant"]
        blocks: list[ContentBlockParam]
        if isinstance(message, UserTextMessage):
            role, blocks = "user", [{"type": "text", "text": message.text or " "}]
        elif isinstance(message, ToolResultsMessage):
            role = "user"
            blocks = [
                {
                    "type": "tool_result",
                    "tool_use_id": r.tool_use_id,
                    "content": r.content,
                    "is_error": r.is_error,
                }
                for r in message.results
            ]
        elif isinstance(message, AssistantMessage):
            role, blocks = "assistant", _assistant_blocks(message)
        else:  # pragma: no cover - Message is a closed union
            continue
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            previous = out[-1]["content"]
            assert isinstance(previous, list)
            previous.extend(blocks)
        elif role == "user":
            out.append({"role": "user", "content": blocks})
        else:
            out.append({"role": "assistant", "content": blocks})
    if cache is not None and out and out[-1]["role"] == "user":
        last = out[-1]["content"]
        assert isinstance(last, list)
        block = last[-1]
        if block["type"] == "text" or block["type"] == "tool_result":
            block["cache_control"] = cache
    return out


def _assistant_blocks(message: AssistantMessage) -> list[ContentBlockParam]:
    blocks: list[ContentBlockParam] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ThinkingPart):
            if not part.signature:
                continue  # unsigned thinking (another provider's) cannot be sent back
            if part.signature.startswith(REDACTED_THINKING):
                blocks.append(
                    {"type": "redacted_thinking", "data": part.signature[len(REDACTED_THINKING) :]}
                )
            else:
                blocks.append(
                    {"type": "thinking", "thinking": part.text, "signature": part.signature}
                )
        elif isinstance(part, ToolUsePart):
            blocks.append(
                {"type": "tool_use", "id": part.id, "name": part.name, "input": part.input}
            )
    return blocks


# --- Anthropic stream → fiduciary events ----------------------------------------------------


@dataclass
class _Block:
    kind: Literal["text", "thinking", "redacted", "tool", "other"]
    ordinal: int = 0  # the thinking block's number within the turn
    id: str = ""
    name: str = ""
    pieces: list[str] = field(default_factory=list)
    initial_input: dict[str, Any] = field(default_factory=dict)
    signature: str = ""
    said: bool = False  # a thinking delta was yielded for this block


class AnthropicTurn:
    """Folds one streamed message (``RawMessageStreamEvent``s) into fiduciary's model events."""

    def __init__(self) -> None:
        self._blocks: dict[int, _Block] = {}
        self._thinking = 0
        self._input = 0
        self._output = 0
        self._cache_read = 0
        self._cache_write = 0
        self._stop = "end_turn"
        self._done = False

    def feed(self, event: RawMessageStreamEvent) -> Iterator[ModelEvent]:
        if isinstance(event, RawMessageStartEvent):
            start = event.message.usage
            self._input = start.input_tokens
            self._output = start.output_tokens
            self._cache_read = start.cache_read_input_tokens or 0
            self._cache_write = start.cache_creation_input_tokens or 0
        elif isinstance(event, RawContentBlockStartEvent):
            yield from self._start(event)
        elif isinstance(event, RawContentBlockDeltaEvent):
            yield from self._delta(event)
        elif isinstance(event, RawContentBlockStopEvent):
            yield from self._stop_block(event.index)
        elif isinstance(event, RawMessageDeltaEvent):
            if event.delta.stop_reason is not None:
                self._stop = event.delta.stop_reason
            usage = event.usage  # cumulative counts
            self._output = usage.output_tokens
            if usage.input_tokens is not None:
                self._input = usage.input_tokens
            if usage.cache_read_input_tokens is not None:
                self._cache_read = usage.cache_read_input_tokens
            if usage.cache_creation_input_tokens is not None:
                self._cache_write = usage.cache_creation_input_tokens
        elif isinstance(event, RawMessageStopEvent):
            self._done = True

    def _start(self, event: RawContentBlockStartEvent) -> Iterator[ModelEvent]:
        block = event.content_block
        if isinstance(block, TextBlock):
            self._blocks[event.index] = _Block("text")
            if block.text:
                yield StreamTextDelta(block.text)
        elif isinstance(block, ThinkingBlock):
            state = _Block("thinking", ordinal=self._thinking, signature=block.signature or "")
            self._thinking += 1
            self._blocks[event.index] = state
            if block.thinking:
                state.said = True
                yield StreamThinkingDelta(block.thinking, state.ordinal)
        elif isinstance(block, RedactedThinkingBlock):
            state = _Block("redacted", ordinal=self._thinking, signature=block.data)
            self._thinking += 1
            self._blocks[event.index] = state
        elif isinstance(block, ToolUseBlock):
            initial = block.input if isinstance(block.input, dict) else {}
            self._blocks[event.index] = _Block(
                "tool", id=block.id, name=block.name, initial_input=initial
            )
        else:  # server tools and the like: not fiduciary's to run
            self._blocks[event.index] = _Block("other")

    def _delta(self, event: RawContentBlockDeltaEvent) -> Iterator[ModelEvent]:
        state = self._blocks.get(event.index)
        delta = event.delta
        if state is None:
            return
        if isinstance(delta, TextDelta):
            if delta.text:
                yield StreamTextDelta(delta.text)
        elif isinstance(delta, InputJSONDelta):
            state.pieces.append(delta.partial_json)
        elif isinstance(delta, ThinkingDelta):
            state.said = True
            yield StreamThinkingDelta(delta.thinking, state.ordinal)
        elif isinstance(delta, SignatureDelta):
            state.signature += delta.signature

    def _stop_block(self, index: int) -> Iterator[ModelEvent]:
        state = self._blocks.pop(index, None)
        if state is None:
            return
        if state.kind == "tool":
            arguments = "".join(state.pieces)
            if not arguments.strip():
                arguments = json.dumps(state.initial_input)
            yield StreamToolCall(id=state.id, name=state.name, arguments=arguments)
        elif state.kind in ("thinking", "redacted"):
            if not state.said:  # no text (redacted, or display omitted): the block still counts
                yield StreamThinkingDelta("", state.ordinal)
            signature = state.signature
            if state.kind == "redacted":
                signature = REDACTED_THINKING + signature
            yield StreamThinkingDone(state.ordinal, signature or None)

    def finish(self, model: str) -> Iterator[ModelEvent]:
        """The closing events; raises a retryable ``ModelError`` if the stream broke off."""
        if not self._done:
            raise ModelError(
                f"{model}: the answer broke off before its end", code="stream_cut", retryable=True
            )
        yield StreamUsage(
            input_tokens=self._input,
            output_tokens=self._output,
            cache_read_tokens=self._cache_read,
            cache_write_tokens=self._cache_write,
        )
        yield StreamStop(self._stop)
