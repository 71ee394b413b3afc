"""Google Gemini models through the official ``google-genai`` SDK (extra ``gemini``).

The Gemini API's ``streamGenerateContent``, streamed: text, function calls (whole in one part,
often without an id: each gets a unique one, which is never sent back), thought summaries as
thinking, thought signatures kept and returned on the part they came with (Gemini 3 refuses a
function call sent back without its signature), thinking by level (Gemini 3) or token budget
(Gemini 2.5), cached tokens in usage, every finish reason. Tool schemas go as
``parametersJsonSchema`` (JSON Schema), trimmed to what Gemini accepts. SDK errors are
translated into ``ModelError`` here; retries are fiduciary's own (``retry.py``): the SDK's are
off.

The API key is read from the environment (``GEMINI_API_KEY``, else ``GOOGLE_API_KEY``) at each
request and kept only by the short-lived SDK client of that request.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Literal
from uuid import uuid4

try:
    import httpx2
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types as gt
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fiduciary's Gemini models need the google-genai SDK: pip install 'fiduciary[gemini]'"
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
    ToolResult,
    ToolResultsMessage,
    ToolUsePart,
    UserTextMessage,
)
from .pricing import Price
from .retry import RetryPolicy, retry_call, retry_stream

__all__ = [
    "GENERATED_ID",
    "KEY_VARIABLES",
    "SIGNATURE",
    "GeminiModel",
    "GeminiTurn",
    "gemini_schema",
    "to_contents",
]

# the variables a key is read from, in this order
KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
# a call Gemini sent without an id gets one starting with this; it is not sent back
GENERATED_ID = "gemini-call-"
# a thought signature travels as a ThinkingPart whose signature is this prefix + JSON
SIGNATURE = "gemini-thought:"

ThinkingMode = Literal["auto", "level", "budget", "off"]
THINKING_BUDGET = {"low": 1024, "medium": 8192, "high": 24576}
THINKING_LEVEL = {"low": "LOW", "medium": "HIGH", "high": "HIGH"}

_REFUSALS = {
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
    "LANGUAGE",
    "MODEL_ARMOR",
}
# Google's error statuses, as the codes ``classify_status`` knows
_STATUSES = {
    "RESOURCE_EXHAUSTED": "rate_limit_error",
    "UNAVAILABLE": "overloaded_error",
    "INTERNAL": "api_error",
    "DEADLINE_EXCEEDED": "timeout_error",
    "UNAUTHENTICATED": "authentication_error",
    "PERMISSION_DENIED": "permission_error",
    "INVALID_ARGUMENT": "invalid_request_error",
    "FAILED_PRECONDITION": "invalid_request_error",
    "NOT_FOUND": "not_found_error",
}
_KEY_REASONS = {"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED"}


def gemini_version(model: str) -> tuple[int, int] | None:
    """(major, minor) of a Gemini model id: ``gemini-2.5-flash`` → (2, 5)."""
    match = re.match(r"(?:models/)?gemini-(\d+)(?:\.(\d+))?", model)
    if match is None:
        return None
    return int(match[1]), int(match[2] or 0)


class GeminiModel:
    """A Gemini model. ``thinking="auto"`` asks Gemini 3 for a thinking level, Gemini 2.5 for a
    token budget, and older models for none; the request's ``effort`` setting (``low`` /
    ``medium`` / ``high``, default ``medium``) sets how much. Thought summaries are asked for and
    streamed as thinking."""

    def __init__(
        self,
        model: str,
        *,
        api_key_env: str | Sequence[str] = KEY_VARIABLES,
        api_key: Callable[[], str | None] | None = None,
        base_url: str | None = None,
        http_client: httpx2.AsyncClient | None = None,
        max_tokens: int | None = None,
        thinking: ThinkingMode = "auto",
        retry: RetryPolicy | None = None,
        timeout: float = 600.0,
        price: Price | None = None,
    ) -> None:
        self.model = model.removeprefix("models/")
        self.price = price
        self._api_key_env = (api_key_env,) if isinstance(api_key_env, str) else tuple(api_key_env)
        self._api_key = api_key
        self._base_url = base_url
        self._pool = ConnectionPool(http_client, httpx2.AsyncClient)
        self._max_tokens = max_tokens
        self._thinking: ThinkingMode = thinking
        self._retry = retry or RetryPolicy()
        self._timeout = timeout

    @property
    def name(self) -> str:
        return f"gemini:{self.model}"

    def __repr__(self) -> str:
        return f"GeminiModel({self.model!r})"

    # --- the client, made per request ------------------------------------------------------
    def _key(self) -> str:
        if self._api_key is not None:
            key = self._api_key()
        else:
            key = next((v for n in self._api_key_env if (v := os.environ.get(n))), None)
        if not key:
            raise ModelError(
                f"{self.name}: no API key; set {' or '.join(self._api_key_env)}",
                code="auth",
                retryable=False,
            )
        return key

    def _client(self) -> genai.Client:
        key = self._key()
        options = gt.HttpOptions(
            base_url=self._base_url,
            httpx_async_client=self._pool.client(),
            timeout=int(self._timeout * 1000),  # milliseconds
            retry_options=None,  # fiduciary retries (retry.py); the SDK does not
        )
        return genai.Client(vertexai=False, api_key=key, http_options=options)

    async def aclose(self) -> None:
        """Close the connection pool this model opened (not one it was given)."""
        await self._pool.aclose()

    # --- streaming ------------------------------------------------------------------------
    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        return retry_stream(lambda: self._attempt(request), self._retry, model=self.name)

    async def _attempt(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        client = self._client()
        turn = GeminiTurn(self.name)
        with self._errors(stream=True):
            stream = await client.aio.models.generate_content_stream(
                model=self.model,
                contents=to_contents(request.messages),
                config=self._config(request),
            )
            async for chunk in stream:
                for out in turn.feed(chunk):
                    yield out
        for out in turn.finish():
            yield out

    def _config(self, request: ModelRequest) -> gt.GenerateContentConfig:
        wanted = request.settings.get("max_tokens")
        max_tokens = wanted if isinstance(wanted, int) and wanted > 0 else self._max_tokens
        temperature = request.settings.get("temperature")
        system = "\n\n".join(s for s in request.system if s)
        tools: list[gt.Tool | Any] = [  # the SDK's list also takes callables: not invariant here
            gt.Tool(
                function_declarations=[
                    gt.FunctionDeclaration(
                        name=t.name,
                        description=t.description,
                        parameters_json_schema=gemini_schema(t.input_schema),
                    )
                    for t in request.tools
                ]
            )
        ]
        return gt.GenerateContentConfig(
            system_instruction=system or None,
            tools=tools if request.tools else None,
            automatic_function_calling=gt.AutomaticFunctionCallingConfig(disable=True),
            thinking_config=self._thinking_config(request),
            max_output_tokens=max_tokens,
            temperature=float(temperature) if isinstance(temperature, int | float) else None,
        )

    def _thinking_mode(self) -> Literal["level", "budget", "off"]:
        if self._thinking != "auto":
            return self._thinking
        version = gemini_version(self.model)
        if version is None:
            return "off"
        if version >= (3, 0):
            return "level"
        if version >= (2, 5):
            return "budget"
        return "off"

    def _thinking_config(self, request: ModelRequest) -> gt.ThinkingConfig | None:
        wanted = request.settings.get("effort")
        effort = wanted if wanted in ("low", "medium", "high") else "medium"
        mode = self._thinking_mode()
        if mode == "level":
            return gt.ThinkingConfig(
                include_thoughts=True, thinking_level=gt.ThinkingLevel(THINKING_LEVEL[effort])
            )
        if mode == "budget":
            return gt.ThinkingConfig(include_thoughts=True, thinking_budget=THINKING_BUDGET[effort])
        return None

    # --- structured output ----------------------------------------------------------------
    async def complete_json(self, system: str, prompt: str, schema: dict[str, Any]) -> Any:
        """One JSON value matching ``schema``, through the API's JSON-schema response mode."""

        async def once() -> Any:
            client = self._client()
            with self._errors():
                response = await client.aio.models.generate_content(
                    model=self.model,
                    contents=[gt.Content(role="user", parts=[gt.Part(text=prompt)])],
                    config=gt.GenerateContentConfig(
                        system_instruction=system or None,
                        response_mime_type="application/json",
                        response_json_schema=schema,
                        automatic_function_calling=gt.AutomaticFunctionCallingConfig(disable=True),
                        max_output_tokens=self._max_tokens,
                    ),
                )
            feedback = response.prompt_feedback
            candidate = response.candidates[0] if response.candidates else None
            finish = _finish_name(candidate.finish_reason) if candidate is not None else None
            if (feedback is not None and feedback.block_reason) or finish in _REFUSALS:
                raise ModelError(f"{self.name} refused to answer", code="refused")
            parts = (candidate.content.parts if candidate and candidate.content else None) or []
            text = "".join(p.text for p in parts if p.text and not p.thought)
            try:
                return json.loads(text)
            except ValueError as exc:
                raise ModelError(
                    f"{self.name} did not answer with JSON (finish reason {finish})",
                    code="invalid_output",
                ) from exc

        return await retry_call(once, self._retry, model=self.name)

    # --- errors ---------------------------------------------------------------------------
    def _errors(self, *, stream: bool = False) -> contextlib.AbstractContextManager[None]:
        # a garbled event raises a ValueError (UnknownApiResponseError, bad JSON)
        malformed = ValueError if stream else ()
        return mapped_errors(self.name, genai_errors.APIError, self._error, malformed=malformed)

    def _error(self, exc: genai_errors.APIError) -> ModelError:
        google_status = exc.status if isinstance(exc.status, str) else None
        reasons, retry_after = _details(exc.details)
        error_type = _STATUSES.get(google_status or "")
        if reasons & _KEY_REASONS:  # Gemini answers a bad key with 400 INVALID_ARGUMENT
            error_type = "authentication_error"
        return api_error(
            self.name,
            status=exc.code if isinstance(exc.code, int) and exc.code >= 400 else None,
            error_type=error_type,
            label=google_status,
            message=exc.message if isinstance(exc.message, str) else "",
            key_from=key_source(self._api_key, " or ".join(self._api_key_env)),
            retry_after=retry_after,
        )


def _details(body: object) -> tuple[set[str], float | None]:
    """(ErrorInfo reasons, RetryInfo delay in seconds) from a Google error body."""
    reasons: set[str] = set()
    delay: float | None = None
    error = body.get("error", body) if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else []:
        if not isinstance(detail, dict):
            continue
        reason = detail.get("reason")
        if isinstance(reason, str):
            reasons.add(reason)
        wait = detail.get("retryDelay")
        if isinstance(wait, str) and wait.endswith("s"):
            with contextlib.suppress(ValueError):
                delay = max(0.0, float(wait[:-1]))
    return reasons, delay


def _finish_name(reason: object) -> str | None:
    if reason is None:
        return None
    value = getattr(reason, "value", reason)
    return str(value)


# --- tool schemas ---------------------------------------------------------------------------

# JSON Schema keywords Gemini's ``parametersJsonSchema`` rejects or ignores
_DROPPED = {"$schema", "$id", "$comment", "examples", "deprecated", "readOnly", "writeOnly"}


def gemini_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A capability's JSON schema as Gemini takes it: an object at the root (with
    ``properties``, even empty), ``const`` as a one-value ``enum``, ``oneOf`` as ``anyOf``, and
    no keywords Gemini refuses."""
    out = _trim(schema)
    assert isinstance(out, dict)
    out.setdefault("type", "object")
    if out.get("type") == "object":
        out.setdefault("properties", {})
    return out


def _trim(value: Any) -> Any:
    if isinstance(value, list):
        return [_trim(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key in _DROPPED:
            continue
        if key == "const":
            out["enum"] = [item]
        elif key == "oneOf":
            out["anyOf"] = _trim(item)
        elif key in ("properties", "$defs", "definitions", "patternProperties"):
            out[key] = {name: _trim(sub) for name, sub in item.items()}
        else:
            out[key] = _trim(item)
    return out


# --- fiduciary messages → Gemini contents ---------------------------------------------------


def _signature_of(part: ThinkingPart) -> tuple[str | None, bytes] | None:
    """(call id or None, thought signature) of a thinking part that carries one of Gemini's."""
    if not part.signature or not part.signature.startswith(SIGNATURE):
        return None
    try:
        data = json.loads(part.signature[len(SIGNATURE) :])
        signature = base64.b64decode(data["signature"], validate=True)
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    call = data.get("call")
    return (call if isinstance(call, str) else None), signature


def to_contents(messages: Sequence[Message]) -> list[gt.Content]:
    """The conversation in the API's shape: ``user`` and ``model`` turns alternating, each
    function result named after its call, and each thought signature back on its part."""
    out: list[gt.Content] = []
    names: dict[str, str] = {}  # call id → function name (a function response must name it)
    for message in messages:
        role: Literal["user", "model"]
        parts: list[gt.Part]
        if isinstance(message, UserTextMessage):
            role, parts = "user", [gt.Part(text=message.text or " ")]
        elif isinstance(message, ToolResultsMessage):
            role, parts = "user", [_result_part(r, names) for r in message.results]
        elif isinstance(message, AssistantMessage):
            names.update((u.id, u.name) for u in message.tool_uses)
            role, parts = "model", _model_parts(message)
        else:  # pragma: no cover - Message is a closed union
            continue
        if not parts:
            continue
        if out and out[-1].role == role and out[-1].parts is not None:
            out[-1].parts.extend(parts)
        else:
            out.append(gt.Content(role=role, parts=parts))
    return out


def _result_part(result: ToolResult, names: dict[str, str]) -> gt.Part:
    # an id Gemini never gave is not sent: it pairs a response without one by name and order
    call_id = None if result.tool_use_id.startswith(GENERATED_ID) else result.tool_use_id
    return gt.Part(
        function_response=gt.FunctionResponse(
            id=call_id,
            name=names.get(result.tool_use_id, "unknown"),
            response={"error" if result.is_error else "output": result.content},
        )
    )


def _model_parts(message: AssistantMessage) -> list[gt.Part]:
    signatures: dict[str | None, bytes] = {}
    for part in message.parts:
        if isinstance(part, ThinkingPart):
            found = _signature_of(part)
            if found is not None:
                signatures[found[0]] = found[1]
    parts: list[gt.Part] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            if part.text:
                parts.append(gt.Part(text=part.text))
        elif isinstance(part, ToolUsePart):
            call_id = None if part.id.startswith(GENERATED_ID) else part.id
            parts.append(
                gt.Part(
                    function_call=gt.FunctionCall(id=call_id, name=part.name, args=part.input),
                    thought_signature=signatures.pop(part.id, None),
                )
            )
    text_signature = signatures.pop(None, None)
    if text_signature is not None:
        if parts and parts[0].function_call is None and parts[0].thought_signature is None:
            parts[0].thought_signature = text_signature
        else:
            parts.insert(0, gt.Part(text="", thought_signature=text_signature))
    return parts


# --- Gemini stream → fiduciary events -------------------------------------------------------


class GeminiTurn:
    """Folds one streamed answer (``GenerateContentResponse`` chunks) into fiduciary's events."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._ordinal = 0
        self._open = False  # a thinking block is open (its ordinal is self._ordinal)
        self._calls = 0
        self._usage: gt.GenerateContentResponseUsageMetadata | None = None
        self._finish: str | None = None
        self._blocked = False

    def feed(self, chunk: gt.GenerateContentResponse) -> Iterator[ModelEvent]:
        if chunk.usage_metadata is not None:
            self._usage = chunk.usage_metadata  # counts so far: the last chunk has them all
        feedback = chunk.prompt_feedback
        if feedback is not None and feedback.block_reason:
            self._blocked = True
            self._finish = "SAFETY"
        if not chunk.candidates:
            return
        candidate = chunk.candidates[0]
        for part in (candidate.content.parts if candidate.content else None) or []:
            yield from self._part(part)
        finish = _finish_name(candidate.finish_reason)
        if finish is not None and finish != "FINISH_REASON_UNSPECIFIED":
            self._finish = finish

    def _part(self, part: gt.Part) -> Iterator[ModelEvent]:
        if part.thought:
            if part.text:
                self._open = True
                yield StreamThinkingDelta(part.text, self._ordinal)
            if part.thought_signature:
                yield from self._close(_signature(None, part.thought_signature))
            return
        call = part.function_call
        if call is not None:
            call_id = call.id or f"{GENERATED_ID}{uuid4().hex}"
            if part.thought_signature:
                yield from self._close(_signature(call_id, part.thought_signature))
            else:
                yield from self._close(None)
            self._calls += 1
            yield StreamToolCall(call_id, call.name or "", json.dumps(call.args or {}))
            return
        if part.text or part.thought_signature:
            yield from self._close(
                _signature(None, part.thought_signature) if part.thought_signature else None
            )
        if part.text:
            yield StreamTextDelta(part.text)

    def _close(self, signature: str | None) -> Iterator[ModelEvent]:
        """End the open thinking block (with ``signature``), or make one to carry it."""
        if not self._open and signature is None:
            return
        if not self._open:
            yield StreamThinkingDelta("", self._ordinal)
        yield StreamThinkingDone(self._ordinal, signature)
        self._open = False
        self._ordinal += 1

    def finish(self) -> Iterator[ModelEvent]:
        """The closing events; raises a ``ModelError`` if the answer broke off or is unusable."""
        if self._finish is None:
            raise ModelError(
                f"{self._model}: the answer broke off before its end",
                code="stream_cut",
                retryable=True,
            )
        if self._finish in ("MALFORMED_FUNCTION_CALL", "MISSING_THOUGHT_SIGNATURE"):
            raise ModelError(
                f"{self._model}: the model's answer was unusable ({self._finish})",
                code="invalid_output",
                retryable=self._finish == "MALFORMED_FUNCTION_CALL",
            )
        yield from self._close(None)
        usage = self._usage
        if usage is not None:
            cached = usage.cached_content_token_count or 0
            prompt = (usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0)
            yield StreamUsage(
                input_tokens=max(0, prompt - cached),
                # thinking is billed as output
                output_tokens=(usage.candidates_token_count or 0)
                + (usage.thoughts_token_count or 0),
                cache_read_tokens=cached,
            )
        else:
            yield StreamUsage()
        if self._blocked or self._finish in _REFUSALS:
            yield StreamStop("refusal")
        elif self._finish == "MAX_TOKENS":
            yield StreamStop("max_tokens")
        elif self._finish == "STOP":
            yield StreamStop("tool_use" if self._calls else "end_turn")
        else:
            yield StreamStop(self._finish.lower())


def _signature(call_id: str | None, signature: bytes) -> str:
    data = {"call": call_id, "signature": base64.b64encode(signature).decode("ascii")}
    return SIGNATURE + json.dumps(data, separators=(",", ":"))
