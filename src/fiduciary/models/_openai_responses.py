"""Private: the Responses API for ``OpenAIModel`` — fiduciary's messages and tools in the API's
shape, and a streamed response folded back into fiduciary's model events.

Reasoning items travel as a ``ThinkingPart``'s signature (the encrypted item, sent back on the
next request: ``store`` is off). A call is handed out once its item is done, whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from openai.types.responses import (
    FunctionToolParam,
    ResponseCompletedEvent,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseInputItemParam,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseReasoningItem,
    ResponseReasoningSummaryPartAddedEvent,
    ResponseReasoningSummaryTextDeltaEvent,
    ResponseReasoningTextDeltaEvent,
    ResponseRefusalDeltaEvent,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
    ResponseUsage,
)

from ..exceptions import ModelError
from .base import (
    AssistantMessage,
    Message,
    ModelEvent,
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
from .retry import classify_status

__all__ = ["ResponsesTurn", "responses_tools", "to_responses_input"]


# --- reasoning items travel as a ThinkingPart's signature -------------------------------------


def _reasoning_signature(item: ResponseReasoningItem) -> str | None:
    if not item.encrypted_content:
        return None
    return json.dumps({"id": item.id, "encrypted_content": item.encrypted_content})


def _reasoning_item(part: ThinkingPart) -> ResponseInputItemParam | None:
    if not part.signature:
        return None
    try:
        data = json.loads(part.signature)
    except ValueError:
        return None  # another provider's signature
    if not isinstance(data, dict) or "encrypted_content" not in data or "id" not in data:
        return None
    summary: list[Any] = [{"type": "summary_text", "text": part.text}] if part.text else []
    return {
        "type": "reasoning",
        "id": str(data["id"]),
        "summary": summary,
        "encrypted_content": str(data["encrypted_content"]),
    }


# --- fiduciary messages → Responses input ----------------------------------------------------


def responses_tools(tools: Sequence[ToolSpec]) -> list[FunctionToolParam]:
    return [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": t.input_schema,
            "strict": False,
        }
        for t in tools
    ]


def to_responses_input(messages: Sequence[Message]) -> list[ResponseInputItemParam]:
    items: list[ResponseInputItemParam] = []
    for message in messages:
        if isinstance(message, UserTextMessage):
            items.append({"role": "user", "content": message.text})
        elif isinstance(message, ToolResultsMessage):
            for r in message.results:
                items.append(
                    {"type": "function_call_output", "call_id": r.tool_use_id, "output": r.content}
                )
        elif isinstance(message, AssistantMessage):
            for part in message.parts:
                if isinstance(part, TextPart):
                    if part.text:
                        items.append({"role": "assistant", "content": part.text})
                elif isinstance(part, ThinkingPart):
                    reasoning = _reasoning_item(part)
                    if reasoning is not None:
                        items.append(reasoning)
                elif isinstance(part, ToolUsePart):
                    items.append(
                        {
                            "type": "function_call",
                            "call_id": part.id,
                            "name": part.name,
                            "arguments": json.dumps(part.input),
                        }
                    )
    return items


# --- Responses stream → fiduciary events -----------------------------------------------------


@dataclass
class _Reasoning:
    ordinal: int
    said: bool = False
    parts: int = 0


class ResponsesTurn:
    """Folds one streamed response (``ResponseStreamEvent``s) into fiduciary's model events."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._reasoning: dict[str, _Reasoning] = {}
        self._thinking = 0
        self._calls: dict[str, ResponseFunctionToolCall] = {}
        self._arguments: dict[str, list[str]] = {}
        self._emitted: set[str] = set()
        self._refused = False
        self._usage: ResponseUsage | None = None
        self._stop: str | None = None

    def feed(self, event: ResponseStreamEvent) -> Iterator[ModelEvent]:
        if isinstance(event, ResponseTextDeltaEvent):
            if event.delta:
                yield StreamTextDelta(event.delta)
        elif isinstance(event, ResponseRefusalDeltaEvent):
            self._refused = True
            if event.delta:
                yield StreamTextDelta(event.delta)
        elif isinstance(event, ResponseOutputItemAddedEvent):
            item = event.item
            if isinstance(item, ResponseReasoningItem):
                self._reasoning[item.id] = _Reasoning(self._thinking)
                self._thinking += 1
            elif isinstance(item, ResponseFunctionToolCall):
                self._calls[item.id or item.call_id] = item
        elif isinstance(event, ResponseReasoningSummaryPartAddedEvent):
            state = self._reasoning.get(event.item_id)
            if state is not None:
                if state.parts and state.said:  # a new summary part: keep them apart
                    yield StreamThinkingDelta("\n\n", state.ordinal)
                state.parts += 1
        elif isinstance(
            event, ResponseReasoningSummaryTextDeltaEvent | ResponseReasoningTextDeltaEvent
        ):
            state = self._reasoning.get(event.item_id)
            if state is not None and event.delta:
                state.said = True
                yield StreamThinkingDelta(event.delta, state.ordinal)
        elif isinstance(event, ResponseFunctionCallArgumentsDeltaEvent):
            self._arguments.setdefault(event.item_id, []).append(event.delta)
        elif isinstance(event, ResponseOutputItemDoneEvent):
            yield from self._item_done(event)
        elif isinstance(event, ResponseCompletedEvent | ResponseIncompleteEvent):
            self._usage = event.response.usage
            reason = (
                event.response.incomplete_details.reason
                if event.response.incomplete_details
                else None
            )
            if reason == "max_output_tokens":
                self._stop = "max_tokens"
            elif reason == "content_filter":
                self._stop = "refusal"
            elif isinstance(event, ResponseIncompleteEvent):
                self._stop = reason or "incomplete"
            else:
                self._stop = "completed"
        elif isinstance(event, ResponseFailedEvent):
            error = event.response.error
            code = error.code if error is not None else None
            message = error.message if error is not None else "the response failed"
            kind, retryable = classify_status(None, code)
            raise ModelError(
                f"{self._model}: {code or ''} {message}".strip(), code=kind, retryable=retryable
            )
        elif isinstance(event, ResponseErrorEvent):
            kind, retryable = classify_status(None, event.code)
            raise ModelError(
                f"{self._model}: {event.code or ''} {event.message}".strip(),
                code=kind,
                retryable=retryable,
            )

    def _item_done(self, event: ResponseOutputItemDoneEvent) -> Iterator[ModelEvent]:
        item = event.item
        if isinstance(item, ResponseReasoningItem):
            state = self._reasoning.pop(item.id, None) or _Reasoning(self._thinking)
            signature = _reasoning_signature(item)
            if not state.said and signature is None:
                return  # nothing to show and nothing to send back
            if not state.said:
                yield StreamThinkingDelta("", state.ordinal)
            yield StreamThinkingDone(state.ordinal, signature)
        elif isinstance(item, ResponseFunctionToolCall):
            key = item.id or item.call_id
            if key in self._emitted:
                return
            self._emitted.add(key)
            arguments = item.arguments or "".join(self._arguments.get(key, [])) or "{}"
            yield StreamToolCall(id=item.call_id, name=item.name, arguments=arguments)

    def finish(self) -> Iterator[ModelEvent]:
        if self._stop is None:
            raise ModelError(
                f"{self._model}: the answer broke off before its end",
                code="stream_cut",
                retryable=True,
            )
        usage = self._usage
        if usage is not None:
            details = getattr(usage, "input_tokens_details", None)
            cached = getattr(details, "cached_tokens", 0) or 0
            written = getattr(details, "cache_write_tokens", 0) or 0
            yield StreamUsage(
                input_tokens=max(0, usage.input_tokens - cached - written),
                output_tokens=usage.output_tokens,
                cache_read_tokens=cached,
                cache_write_tokens=written,
            )
        if self._stop != "completed":
            yield StreamStop(self._stop)
        elif self._emitted:
            yield StreamStop("tool_use")
        else:
            yield StreamStop("refusal" if self._refused else "end_turn")
