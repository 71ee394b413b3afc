"""What the model is sent, shaped from what the log holds: pure functions over messages.

Nothing here changes the record. The log keeps every message; these functions decide what a model
call carries instead:

- ``microcompact``: a read or preview call whose arguments and output repeat an earlier call's
  exactly gets ``[Same result as turn N]`` instead of the output again. Writes and failed calls are
  never deduplicated.
- ``stub_results``: results of calls older than the last few exchanges are replaced by a one-line
  stub (the call itself, with its arguments, stays visible).
- ``exchanges`` / ``cut_points``: where the conversation may be cut without separating a tool call
  from its result (an exchange begins at a user message).
- ``with_summary``: the conversation from a cut on, the summary of what came before it merged into
  the first kept user message.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..models.base import (
    AssistantMessage,
    Message,
    ToolResult,
    ToolResultsMessage,
    ToolUsePart,
    UserTextMessage,
)

__all__ = [
    "SUMMARY_CLOSE",
    "SUMMARY_OPEN",
    "Dedup",
    "cut_points",
    "microcompact",
    "stub_message",
    "stub_results",
    "summary_block",
    "with_summary",
]

SUMMARY_OPEN = "<earlier_conversation_summary>"
SUMMARY_CLOSE = "</earlier_conversation_summary>"
STUB_ABOVE = 200  # results shorter than this are kept as they are: a stub would save nothing
# what json.dumps(args, sort_keys=True, separators=(",", ":"), default=str) builds at each
# call (one a tool call, each model call), built once
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def _digest(name: str, args: dict[str, Any]) -> str:
    text = _CANONICAL.encode(args)
    return hashlib.sha256(f"{name}\0{text}".encode()).hexdigest()


class Dedup:
    """``microcompact`` fed one message at a time: what it remembers of the calls seen so far.

    Turns are numbered from ``first_turn``, one per assistant message, so that a pointer names
    the same turn however much of the conversation before it was cut.
    """

    __slots__ = ("_calls", "_dedupable", "_first", "_turn")

    def __init__(self, dedupable: Callable[[str], bool], *, first_turn: int = 1) -> None:
        self._dedupable = dedupable
        self._turn = first_turn - 1
        self._calls: dict[str, tuple[str, str, int]] = {}  # tool_use_id -> (name, digest, turn)
        self._first: dict[str, tuple[str, int]] = {}  # digest -> (output, turn that returned it)

    def feed(self, message: Message) -> Message:
        """``message`` as it is sent: itself, or its results pointing to earlier turns."""
        if isinstance(message, AssistantMessage):
            self._turn += 1
            for part in message.parts:
                if isinstance(part, ToolUsePart):
                    digest = _digest(part.name, part.input)
                    self._calls[part.id] = (part.name, digest, self._turn)
            return message
        if not isinstance(message, ToolResultsMessage):
            return message
        results: list[ToolResult] = []
        changed = False
        for result in message.results:
            call = self._calls.get(result.tool_use_id)
            if call is None or result.is_error or not self._dedupable(call[0]):
                results.append(result)
                continue
            _name, digest, at = call
            seen = self._first.get(digest)
            if seen is None or seen[0] != result.content:
                self._first[digest] = (result.content, at)
                results.append(result)
                continue
            marker = f"[Same result as turn {seen[1]}]"
            if len(marker) < len(result.content):
                results.append(ToolResult(result.tool_use_id, marker, result.is_error))
                changed = True
            else:
                results.append(result)
        return ToolResultsMessage(tuple(results)) if changed else message


def microcompact(
    messages: Sequence[Message], dedupable: Callable[[str], bool], *, first_turn: int = 1
) -> tuple[Message, ...]:
    """Repeated identical read results replaced by a pointer to the turn that first returned them.

    ``dedupable(name)`` says whether a capability's results may be deduplicated (reads and
    previews). Turns are numbered from ``first_turn`` (see ``Dedup``).
    """
    dedup = Dedup(dedupable, first_turn=first_turn)
    return tuple(dedup.feed(message) for message in messages)


def cut_points(messages: Sequence[Message]) -> list[int]:
    """Indexes where the conversation may be cut: each user message that opens an exchange in
    which every tool call before it has its result before it (no call is separated from its
    result), in order. The first is 0 when the conversation starts with a user message."""
    open_calls: set[str] = set()
    points: list[int] = []
    for index, message in enumerate(messages):
        if isinstance(message, UserTextMessage) and not open_calls:
            points.append(index)
        elif isinstance(message, AssistantMessage):
            open_calls.update(p.id for p in message.parts if isinstance(p, ToolUsePart))
        elif isinstance(message, ToolResultsMessage):
            open_calls.difference_update(r.tool_use_id for r in message.results)
    return points


def stub_results(messages: Sequence[Message], before: int) -> tuple[Message, ...]:
    """Tool results in ``messages[:before]`` replaced by one-line stubs (long ones only)."""
    names: dict[str, str] = {}
    out: list[Message] = []
    for index, message in enumerate(messages):
        if isinstance(message, AssistantMessage):
            names.update((p.id, p.name) for p in message.parts if isinstance(p, ToolUsePart))
        if index >= before or not isinstance(message, ToolResultsMessage):
            out.append(message)
            continue
        out.append(stub_message(message, names))
    return tuple(out)


def stub_message(message: ToolResultsMessage, names: Mapping[str, str]) -> ToolResultsMessage:
    """``message`` with its long results replaced by one-line stubs (``names``: tool_use_id ->
    the capability called)."""
    results = []
    for r in message.results:
        if len(r.content) <= STUB_ABOVE:
            results.append(r)
            continue
        how = "failed" if r.is_error else "succeeded"
        stub = (
            f"[Older result of {names.get(r.tool_use_id, 'this call')} removed to save "
            f"context ({len(r.content)} characters; the call {how}). Call it again if "
            "you need it.]"
        )
        results.append(ToolResult(r.tool_use_id, stub, r.is_error))
    return ToolResultsMessage(tuple(results))


def summary_block(summary: str) -> str:
    return f"{SUMMARY_OPEN}\n{summary}\n{SUMMARY_CLOSE}"


def with_summary(messages: Sequence[Message], kept_from: int, summary: str | None) -> list[Message]:
    """``messages[kept_from:]``, the summary (if any) merged into its first user message."""
    kept = list(messages[kept_from:])
    if summary is None or not kept:
        return kept
    head = kept[0]
    block = summary_block(summary)
    if isinstance(head, UserTextMessage):
        kept[0] = UserTextMessage(f"{block}\n\n{head.text}")
    else:  # not at a cut point: should not happen, but never lose the summary
        kept.insert(0, UserTextMessage(block))
    return kept
