"""Compaction: keep what a model is sent under its context window, never losing the record.

Before each model call the loop measures the request (``tokens.measure_request``). At
``compact_at`` of the window (0.85 by default) it compacts, cheapest step first, until the request
is under ``compact_to`` (0.5):

1. microcompact (always on: ``shaping.microcompact``);
2. stub the results of calls older than the last ``keep_exchanges`` exchanges;
3. summarise the oldest exchanges (the summariser, by default the run's own model on its fast
   tier) and send the summary in their place;
4. if the summariser fails, drop those exchanges without a summary.

The outcome is a ``Shape``: where the conversation is cut, which results are stubbed, the
summary. The loop records it in the ``compaction`` end event, and the transcript fold replays it,
so a resumed run sends exactly what the first process would have. A cut is only ever made where
an exchange begins (a user message with no call left open before it), so a tool call is never
separated from its result, and the latest user message, pending approvals and the thinking
signatures of the kept turns always stay.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from .._logs import logger
from ..models.base import (
    AssistantMessage,
    Message,
    TextPart,
    ToolResultsMessage,
    ToolSpec,
    ToolUsePart,
    UserTextMessage,
)
from ..models.pricing import message_chars, prompt_chars
from .shaping import Dedup, cut_points, stub_message, summary_block

__all__ = [
    "CompactionPolicy",
    "SentView",
    "Shape",
    "Summarizer",
    "compact",
    "render_for_summary",
    "shaped",
]

log = logger("fiduciary.context")

Summarizer = Callable[[str], Awaitable[str]]
"""Given the earlier conversation as redacted text, return a summary of it."""

Method = Literal["stub", "summary", "drop"]


@dataclass(frozen=True, slots=True)
class Shape:
    """How a run's conversation is cut for the model (indexes into the transcript's messages)."""

    kept_from: int = 0  # messages before it are replaced by ``summary`` (or dropped)
    stubbed_before: int = 0  # tool results before it are stubbed
    summary: str | None = None


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """When and how far to compact. ``window`` is the model's context window in tokens."""

    window: int
    compact_at: float = 0.85
    compact_to: float = 0.5
    keep_exchanges: int = 2
    summary_tokens: int = 2_000  # room left for the summary when choosing the cut

    def __post_init__(self) -> None:
        if self.window <= 0:
            raise ValueError("context_window must be a positive number of tokens")
        if not 0 < self.compact_to < self.compact_at <= 1:
            raise ValueError("need 0 < compact_to < compact_at <= 1")
        if self.keep_exchanges < 1:
            raise ValueError("keep_exchanges must be at least 1")

    @property
    def threshold(self) -> int:
        return int(self.window * self.compact_at)

    @property
    def target(self) -> int:
        return int(self.window * self.compact_to)


class SentView:
    """What the model is sent of a conversation cut as ``shape`` says, microcompacted — kept up
    to date as the conversation grows.

    ``extend`` works on the messages added since its last call only (the conversation only ever
    grows at its end), so a model call costs what was added, not what the conversation holds.
    ``chars`` counts the sent messages as ``estimate_input_tokens`` does. ``shaped`` builds the
    same view whole: a resumed run, which builds it from the log, sends the same.
    """

    __slots__ = ("_dedup", "_names", "_tools", "_upto", "chars", "key", "messages", "shape")

    def __init__(
        self,
        shape: Shape,
        dedupable: Callable[[str], bool],
        *,
        first_turn: int = 1,
        key: object = None,
    ) -> None:
        self.shape = shape
        self.key = key  # what else the view was built for (its owner compares it)
        self.messages: list[Message] = []
        self.chars = 0
        self._upto = shape.kept_from  # the next message of the conversation to take
        self._names: dict[str, str] = {}  # tool_use_id -> capability, for the stubs
        self._dedup = Dedup(dedupable, first_turn=first_turn)
        self._tools: tuple[tuple[ToolSpec, ...], int] | None = None

    def extend(self, conversation: Sequence[Message]) -> None:
        """Take the messages of ``conversation`` (the same one, grown) added since."""
        shape = self.shape
        for index in range(self._upto, len(conversation)):
            message = conversation[index]
            if index < shape.stubbed_before:
                if isinstance(message, AssistantMessage):
                    self._names.update(
                        (p.id, p.name) for p in message.parts if isinstance(p, ToolUsePart)
                    )
                elif isinstance(message, ToolResultsMessage):
                    message = stub_message(message, self._names)
            if not self.messages and shape.summary is not None:
                block = summary_block(shape.summary)
                if isinstance(message, UserTextMessage):
                    message = UserTextMessage(f"{block}\n\n{message.text}")
                else:  # not at a cut point: should not happen, but never lose the summary
                    self._add(UserTextMessage(block))
            self._add(self._dedup.feed(message))
        self._upto = max(self._upto, len(conversation))

    def _add(self, message: Message) -> None:
        self.messages.append(message)
        self.chars += message_chars(message)

    def tools_chars(self, tools: tuple[ToolSpec, ...]) -> int:
        """``prompt_chars`` of ``tools``, kept while the same tuple is given (one per drive)."""
        if self._tools is None or self._tools[0] is not tools:
            self._tools = (tools, prompt_chars((), tools))
        return self._tools[1]


def shaped(
    messages: Sequence[Message],
    shape: Shape,
    dedupable: Callable[[str], bool],
    *,
    turns_before: Callable[[int], int] | None = None,
) -> tuple[Message, ...]:
    """What the model is sent for ``messages`` cut as ``shape`` says, microcompacted.

    Only the kept messages are worked on (a cut never separates a call from its result), so
    the cost follows what is sent, not the whole conversation (``turns_before(index)``: the
    assistant messages before an index, when the caller keeps that count)."""
    cut = shape.kept_from
    first_turn = 1 + (_turns(messages, cut) if turns_before is None else turns_before(cut))
    view = SentView(shape, dedupable, first_turn=first_turn)
    view.extend(messages)
    return tuple(view.messages)


def _turns(messages: Sequence[Message], index: int) -> int:
    """The assistant messages before ``messages[index]``."""
    return sum(1 for i in range(min(index, len(messages))) if _assistant(messages[i]))


def _assistant(message: Message) -> bool:
    return isinstance(message, AssistantMessage)


def render_for_summary(messages: Sequence[Message], previous: str | None) -> str:
    """The conversation as plain text for a summariser (the caller redacts it)."""
    lines: list[str] = []
    if previous:
        lines.append(f"Summary of what came before:\n{previous}\n")
    names: dict[str, str] = {}
    for message in messages:
        if isinstance(message, UserTextMessage):
            lines.append(f"User: {message.text}")
        elif isinstance(message, AssistantMessage):
            for part in message.parts:
                if isinstance(part, TextPart) and part.text:
                    lines.append(f"Assistant: {part.text}")
                elif isinstance(part, ToolUsePart):
                    names[part.id] = part.name
                    args = json.dumps(part.input, sort_keys=True, default=str)
                    lines.append(f"Assistant called {part.name}({args})")
        elif isinstance(message, ToolResultsMessage):
            for r in message.results:
                how = "failed" if r.is_error else "returned"
                lines.append(f"{names.get(r.tool_use_id, 'a call')} {how}: {r.content}")
    return "\n".join(lines)


async def compact(
    messages: Sequence[Message],
    shape: Shape,
    policy: CompactionPolicy,
    *,
    measure: Callable[[int], int],
    dedupable: Callable[[str], bool],
    summarize: Summarizer | None,
    redact: Callable[[str], str],
    turns_before: Callable[[int], int] | None = None,
) -> tuple[Shape, Method]:
    """The next shape of a conversation that measures over ``policy.threshold``.

    ``measure(chars)`` gives the tokens of a request whose messages count ``chars`` characters
    (``message_chars``); ``turns_before`` as for ``shaped``. The summariser's failure is logged
    and compaction goes on by dropping; this never raises because of it.
    """

    def size(candidate: Shape) -> int:
        cut = candidate.kept_from
        first_turn = 1 + (_turns(messages, cut) if turns_before is None else turns_before(cut))
        view = SentView(candidate, dedupable, first_turn=first_turn)
        view.extend(messages)
        return measure(view.chars)

    # the current cut is itself a cut point (no call open before it): the points after it are
    # found from it, however long the conversation before it
    points = [shape.kept_from + p for p in cut_points(messages[shape.kept_from :])]
    recent = points[-policy.keep_exchanges] if len(points) >= policy.keep_exchanges else None
    stub_from = max(shape.stubbed_before, recent if recent is not None else 0)
    stubbed = Shape(shape.kept_from, stub_from, shape.summary)
    if size(stubbed) <= policy.target:
        return stubbed, "stub"
    later = [p for p in points if p > shape.kept_from]
    if not later:  # one exchange fills the window: nothing may be cut without losing its start
        return stubbed, "stub"
    room = policy.target - policy.summary_tokens
    # the earliest cut whose tail fits keeps the most conversation (else the latest): found by
    # bisection, as a later cut sends no more (but for microcompact's pointers, a few
    # characters either way)
    lo, hi = 0, len(later) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if size(Shape(later[mid], max(stub_from, later[mid]), None)) <= room:
            hi = mid
        else:
            lo = mid + 1
    cut = later[lo]
    earlier = messages[shape.kept_from : cut]
    if summarize is not None:
        try:
            summary = await summarize(redact(render_for_summary(earlier, shape.summary)))
        except Exception as exc:  # the summariser is a model call: anything may go wrong
            log.warning("summarising the conversation failed (%s); dropping old turns", exc)
        else:
            return Shape(cut, max(stub_from, cut), redact(summary.strip())), "summary"
    return Shape(cut, max(stub_from, cut), shape.summary), "drop"
