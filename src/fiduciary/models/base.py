"""The ``Model`` seam: a model streams ``ModelEvent``s for a ``ModelRequest``.

Messages here are fiduciary's own, provider-neutral types; each provider module translates them
to and from its wire format. The loop never sees a provider SDK type.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "AssistantMessage",
    "Message",
    "Model",
    "ModelEvent",
    "ModelRequest",
    "StreamFallback",
    "StreamRetry",
    "StreamStop",
    "StreamTextDelta",
    "StreamThinkingDelta",
    "StreamThinkingDone",
    "StreamToolCall",
    "StreamUsage",
    "StructuredModel",
    "TextPart",
    "ThinkingPart",
    "ToolResult",
    "ToolResultsMessage",
    "ToolSpec",
    "ToolUsePart",
    "UserTextMessage",
]


# --- messages -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingPart:
    text: str
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class ToolUsePart:
    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True, slots=True)
class UserTextMessage:
    text: str
    role: Literal["user"] = "user"


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    parts: tuple[TextPart | ThinkingPart | ToolUsePart, ...]
    role: Literal["assistant"] = "assistant"

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_uses(self) -> list[ToolUsePart]:
        return [p for p in self.parts if isinstance(p, ToolUsePart)]


@dataclass(frozen=True, slots=True)
class ToolResult:
    tool_use_id: str
    content: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class ToolResultsMessage:
    results: tuple[ToolResult, ...]
    role: Literal["tool"] = "tool"


Message = UserTextMessage | AssistantMessage | ToolResultsMessage


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as a model is offered it. ``kind``: the capability's kind (``read``, ``preview``,
    ``propose``, ``approve``, ``execute``; None when unknown), for a provider that must know
    whether a call can have an effect (``CodexCLIModel``)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    kind: str | None = None


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """What a model is asked: system layers (stable first), the conversation, the tools.

    ``settings`` keys every provider understands: ``max_tokens``, ``temperature``, ``tier``
    (``fast`` | ``standard`` | ``powerful``, read by ``TieredModel``) and ``effort`` (``low`` |
    ``medium`` | ``high``, the thinking / reasoning effort). Unknown keys are ignored.

    ``stable_layers``: how many leading system layers stay the same from one user message to the
    next (the rest — domain context, recalled memory — may change); a provider with prompt caching
    puts its breakpoint on the last stable layer. None: every layer is stable.
    """

    system: tuple[str, ...]
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    stable_layers: int | None = None


# --- stream events --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamTextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class StreamThinkingDelta:
    text: str
    block_index: int = 0


@dataclass(frozen=True, slots=True)
class StreamThinkingDone:
    block_index: int = 0
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class StreamToolCall:
    """A complete tool call: ``arguments`` is the raw JSON text the model produced."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class StreamUsage:
    """Tokens of one model call. ``input_tokens`` counts only the input that was neither read
    from nor written to the cache, so each count is priced at its own rate. ``model`` names the
    model that answered when it differs from the ``Model``'s own name (a tiered model)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    model: str | None = None


@dataclass(frozen=True, slots=True)
class StreamStop:
    reason: str  # end_turn | tool_use | max_tokens | refusal | ...


@dataclass(frozen=True, slots=True)
class StreamRetry:
    """The call failed part-way and is being asked again: drop what this stream yielded so far.

    Only sent when text or thinking had already been yielded; never after a tool call (a stream
    that produced tool calls is not retried).
    """

    attempt: int
    reason: str


@dataclass(frozen=True, slots=True)
class StreamFallback:
    """A ``FallbackModel``'s ``model`` failed before it streamed anything (``reason``: its
    error's code) and ``next`` is asked instead. Nothing was yielded before it: there is
    nothing to drop. The loop records it on the turn (``turn_complete.fallbacks``)."""

    model: str
    reason: str
    next: str


ModelEvent = (
    StreamTextDelta
    | StreamThinkingDelta
    | StreamThinkingDone
    | StreamToolCall
    | StreamUsage
    | StreamStop
    | StreamRetry
    | StreamFallback
)


class Model(Protocol):
    """Anything that can stream a model's answer to a request."""

    @property
    def name(self) -> str: ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...


@runtime_checkable
class StructuredModel(Protocol):
    """A model that can also answer with one JSON value matching a schema (judges, summaries).

    Providers use their native JSON-schema mode; the answer is parsed, not trusted: a caller
    validates it against its own types.
    """

    @property
    def name(self) -> str: ...

    async def complete_json(self, system: str, prompt: str, schema: dict[str, Any]) -> Any: ...
