"""Private: Chat Completions for ``OpenAIModel`` — fiduciary's messages and tools in the API's
shape, and a streamed completion folded back into fiduciary's model events.

Servers differ in how they stream tool calls: in one piece or many, interleaved by index,
without an index or without an id. Calls are handed out whole and in the model's order, each
with an id of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
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
    ToolResultsMessage,
    ToolSpec,
    UserTextMessage,
)

__all__ = ["ChatTurn", "chat_tools", "to_chat_messages"]


# --- fiduciary messages → Chat Completions ---------------------------------------------------


def chat_tools(tools: Sequence[ToolSpec]) -> list[ChatCompletionFunctionToolParam]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            },
        }
        for t in tools
    ]


def to_chat_messages(
    system: Sequence[str], messages: Sequence[Message]
) -> list[ChatCompletionMessageParam]:
    out: list[ChatCompletionMessageParam] = []
    instructions = "\n\n".join(s for s in system if s)
    if instructions:
        out.append({"role": "system", "content": instructions})
    for message in messages:
        if isinstance(message, UserTextMessage):
            out.append({"role": "user", "content": message.text})
        elif isinstance(message, ToolResultsMessage):
            for r in message.results:
                out.append({"role": "tool", "tool_call_id": r.tool_use_id, "content": r.content})
        elif isinstance(message, AssistantMessage):
            uses = message.tool_uses
            text = message.text
            if not text and not uses:
                continue
            if uses:
                out.append(
                    {
                        "role": "assistant",
                        "content": text or None,
                        "tool_calls": [
                            {
                                "id": u.id,
                                "type": "function",
                                "function": {"name": u.name, "arguments": json.dumps(u.input)},
                            }
                            for u in uses
                        ],
                    }
                )
            else:
                out.append({"role": "assistant", "content": text})
    return out


# --- Chat Completions stream → fiduciary events ----------------------------------------------


@dataclass
class _Call:
    id: str
    generated: bool = False  # the server sent no id (yet)
    name: str = ""
    pieces: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether the arguments so far are a whole JSON object (nothing valid can follow)."""
        try:
            return isinstance(json.loads("".join(self.pieces)), dict)
        except ValueError:
            return False


class ChatTurn:
    """Folds streamed chat completion chunks into fiduciary's model events.

    Calls are handed out in the model's order, each once its arguments are a whole JSON object
    and a later call has begun (servers may interleave the pieces of several calls by index),
    the rest at the end of the stream. A call the server sent without an id gets a unique one.
    """

    def __init__(self, model: str) -> None:
        self._model = model
        self._calls: dict[int, _Call] = {}
        self._order: list[int] = []
        self._yielded = 0
        self._current: int | None = None
        self._thinking = False
        self._thinking_done = False
        self._refused = False
        self._finish: str | None = None
        self._usage: StreamUsage | None = None

    def feed(self, chunk: ChatCompletionChunk) -> Iterator[ModelEvent]:
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            details = getattr(usage, "prompt_tokens_details", None)
            cached = getattr(details, "cached_tokens", 0) or 0
            self._usage = StreamUsage(
                input_tokens=max(0, (usage.prompt_tokens or 0) - cached),
                output_tokens=usage.completion_tokens or 0,
                cache_read_tokens=cached,
            )
        for choice in chunk.choices or []:
            if getattr(choice, "index", 0) not in (0, None):
                continue
            delta = choice.delta
            if delta is not None:
                yield from self._delta(delta)
            if choice.finish_reason is not None:
                self._finish = choice.finish_reason

    def _delta(self, delta: Any) -> Iterator[ModelEvent]:
        extra = getattr(delta, "model_extra", None) or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            self._thinking = True
            yield StreamThinkingDelta(reasoning, 0)
        content = getattr(delta, "content", None)
        refusal = getattr(delta, "refusal", None)
        calls = getattr(delta, "tool_calls", None) or []
        if (content or refusal or calls) and self._thinking and not self._thinking_done:
            self._thinking_done = True
            yield StreamThinkingDone(0, None)
        if content:
            yield StreamTextDelta(content)
        if refusal:
            self._refused = True
            yield StreamTextDelta(refusal)
        for position, call in enumerate(calls):
            yield from self._tool_delta(position, call)

    def _tool_delta(self, position: int, call: Any) -> Iterator[ModelEvent]:
        index = getattr(call, "index", None)
        call_id = getattr(call, "id", None)
        function = getattr(call, "function", None)
        name = getattr(function, "name", None) if function is not None else None
        if index is None:  # some servers leave it out: find which call this piece belongs to
            index = self._index_of(position, call_id, name)
        state = self._calls.get(index)
        if state is None:
            state = _Call(id=call_id or f"call_{uuid4().hex}", generated=not call_id)
            self._calls[index] = state
            self._order.append(index)
        elif call_id and state.generated:
            state.id, state.generated = call_id, False
        self._current = index
        if function is not None:
            if name and not state.name:
                state.name = name
            if function.arguments:
                state.pieces.append(function.arguments)
        # the calls before the newest are handed out once their arguments are whole
        yield from self._flush(upto=len(self._order) - 1, whole_only=True)

    def _index_of(self, position: int, call_id: str | None, name: str | None) -> int:
        """The index of a piece the server sent without one. A new call begins with a new id,
        with a name while the current call has one already, or at any position past the first
        of one delta (one delta never carries two pieces of one call)."""
        fresh = max(self._calls, default=-1) + 1
        if self._current is None or position > 0:
            return fresh
        current = self._calls[self._current]
        if call_id:  # a new id begins a new call, unless it is the id of the current one
            new = call_id != current.id and (not current.generated or bool(name and current.name))
        else:
            new = bool(name and current.name)
        return fresh if new else self._current

    def _flush(self, upto: int, *, whole_only: bool = False) -> Iterator[ModelEvent]:
        while self._yielded < upto:
            state = self._calls[self._order[self._yielded]]
            if whole_only and not state.complete:
                return  # in order: nothing after it is handed out before it
            self._yielded += 1
            yield StreamToolCall(
                id=state.id, name=state.name, arguments="".join(state.pieces) or "{}"
            )

    def finish(self) -> Iterator[ModelEvent]:
        if self._finish is None:
            raise ModelError(
                f"{self._model}: the answer broke off before its end",
                code="stream_cut",
                retryable=True,
            )
        if self._thinking and not self._thinking_done:
            yield StreamThinkingDone(0, None)
        yield from self._flush(upto=len(self._order))
        if self._usage is not None:
            yield self._usage
        if self._order:
            yield StreamStop("tool_use")
        elif self._refused or self._finish == "content_filter":
            yield StreamStop("refusal")
        elif self._finish == "length":
            yield StreamStop("max_tokens")
        else:
            yield StreamStop("end_turn")
