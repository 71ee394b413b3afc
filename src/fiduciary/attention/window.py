"""The judge's prompt: rendering a window as compact JSON, and fitting it into a token budget.

Tokens are estimated as one per four characters (no tokenizer dependency; the estimate is the
same one ``ScriptedModel`` reports). Trimming drops the oldest ``consequence`` and ``context``
events first and never an ``act`` or a ``flush``, so a window over budget because of its acts
alone is sent as it is (the model's rejection then halves it once, see ``judge``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from .types import JudgeInput, WindowEvent

__all__ = [
    "DROPPABLE",
    "event_json",
    "halve",
    "input_digest",
    "is_context_length_error",
    "render_input",
    "tokens_of",
    "trim_to",
]

DROPPABLE = frozenset({"consequence", "context"})

Render = Callable[[JudgeInput], str]


def tokens_of(text: str) -> int:
    """The estimated tokens of ``text`` (four characters each, rounded up)."""
    return math.ceil(len(text) / 4)


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _event(event: WindowEvent) -> dict[str, Any]:
    out: dict[str, Any] = {"role": event.role, "type": event.type, "at": event.at.isoformat()}
    if event.data:
        out["data"] = dict(event.data)
    return out


def _frame(judge_input: JudgeInput) -> dict[str, Any]:
    frame: dict[str, Any] = {}
    if judge_input.facts:
        frame["facts"] = dict(judge_input.facts)
    if judge_input.recent_routes:
        frame["recent_routes"] = list(judge_input.recent_routes)
    if judge_input.truncated:
        frame["gap_before_window"] = True
    if judge_input.omitted:
        frame["older_events_omitted"] = judge_input.omitted
    if judge_input.predicates:
        frame["predicates"] = {p.name: p.question for p in judge_input.predicates}
    return frame


def event_json(event: WindowEvent) -> str:
    """One window event as the default rendering writes it."""
    return _dump(_event(event))


def input_digest(judge_input: JudgeInput, encoded: Sequence[str] | None = None) -> str:
    """SHA-256 of the input's default rendering: its frame and each window event's JSON
    (``encoded``, when the caller kept them, saves encoding the window again)."""
    digest = hashlib.sha256(_dump(_frame(judge_input)).encode())
    for text in encoded if encoded is not None else map(event_json, judge_input.window):
        digest.update(b"\n")
        digest.update(text.encode())
    return digest.hexdigest()


def render_input(judge_input: JudgeInput) -> str:
    """The default prompt: the window, facts, recent routes and predicate questions as JSON."""
    frame = _frame(judge_input)
    frame["window"] = [_event(e) for e in judge_input.window]
    return _dump(frame)


def trim_to(judge_input: JudgeInput, max_tokens: int) -> JudgeInput:
    """``judge_input`` with its oldest droppable events removed until the default rendering
    fits ``max_tokens`` (acts and flushes stay even when that is not enough)."""
    sizes = [len(_dump(_event(e))) + 1 for e in judge_input.window]
    # the frame grows by the omitted counter once anything is dropped: count it up front
    fixed = len(_dump({**_frame(replace(judge_input, omitted=10**6)), "window": []}))
    total = fixed + sum(sizes)
    budget = max_tokens * 4
    keep = [True] * len(judge_input.window)
    for i, event in enumerate(judge_input.window):
        if total <= budget:
            break
        if event.role in DROPPABLE:
            keep[i] = False
            total -= sizes[i]
    return _kept(judge_input, keep)


def halve(judge_input: JudgeInput) -> JudgeInput:
    """The window with its oldest droppable events removed until at most half of them remain."""
    droppable = [i for i, e in enumerate(judge_input.window) if e.role in DROPPABLE]
    drop = set(droppable[: len(droppable) - len(droppable) // 2])
    return _kept(judge_input, [i not in drop for i in range(len(judge_input.window))])


def _kept(judge_input: JudgeInput, keep: list[bool]) -> JudgeInput:
    if all(keep):
        return judge_input
    window = tuple(e for e, k in zip(judge_input.window, keep, strict=True) if k)
    omitted = judge_input.omitted + len(judge_input.window) - len(window)
    return replace(judge_input, window=window, omitted=omitted)


_CONTEXT_WORDS = re.compile(
    r"context[ _-]?(length|window)|prompt is too long|too many tokens|maximum context|"
    r"input is too long|context_length_exceeded",
    re.IGNORECASE,
)


def is_context_length_error(exc: BaseException) -> bool:
    """Does ``exc`` say the prompt did not fit the model's context? (A 400 or 413 naming the
    context length, as Anthropic, OpenAI and OpenAI-compatible servers word it.)"""
    status = getattr(exc, "status", None) or getattr(exc, "status_code", None)
    if status not in (None, 400, 413):
        return False
    text = " ".join(str(x) for x in (getattr(exc, "message", ""), exc, getattr(exc, "code", "")))
    return bool(_CONTEXT_WORDS.search(text))
