"""``ScriptedModel``: a model that plays scripts, for tests and the offline demo.

A script is chosen by the run's first user message; its steps are tool calls (whose arguments
may be computed from earlier tool results) or text streamed in chunks. The step to play is
derived from the transcript alone (the number of assistant turns so far), so a run resumed in a
new process continues at the right step.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._text import NOTES_MARKER
from ..exceptions import ModelError
from .base import (
    AssistantMessage,
    ModelEvent,
    ModelRequest,
    StreamStop,
    StreamTextDelta,
    StreamToolCall,
    StreamUsage,
    TextPart,
    ToolResultsMessage,
    ToolUsePart,
    UserTextMessage,
)
from .pricing import Price

__all__ = ["Call", "Reply", "Results", "Script", "ScriptedModel", "ToolCalls"]


class Results:
    """The tool results of a run so far, by tool name (the latest wins) and by call id."""

    def __init__(self, request: ModelRequest) -> None:
        names: dict[str, str] = {}
        self.by_name: dict[str, Any] = {}
        self.errors: dict[str, str] = {}
        self.by_id: dict[str, Any] = {}
        for message in request.messages:
            if isinstance(message, AssistantMessage):
                for use in message.tool_uses:
                    names[use.id] = use.name
            elif isinstance(message, ToolResultsMessage):
                for result in message.results:
                    value = _parse(result.content)
                    self.by_id[result.tool_use_id] = value
                    name = names.get(result.tool_use_id, result.tool_use_id)
                    if result.is_error:
                        self.errors[name] = result.content
                        self.by_name.pop(name, None)
                    else:
                        self.by_name[name] = value
                        self.errors.pop(name, None)
        self.user_messages = [m.text for m in request.messages if isinstance(m, UserTextMessage)]

    def __getitem__(self, name: str) -> Any:
        return self.by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def get(self, name: str, default: Any = None) -> Any:
        return self.by_name.get(name, default)


def _parse(content: str) -> Any:
    # results may carry guard notes after the JSON body; parse the body when there is one
    body = content.split(NOTES_MARKER, 1)[0]
    try:
        return json.loads(body)
    except ValueError:
        return content


Args = dict[str, Any] | Callable[[Results], dict[str, Any]]
_ARGUMENTS = json.JSONEncoder(default=str)  # json.dumps(args, default=str)'s, built once


@dataclass(frozen=True)
class Call:
    name: str
    args: Args = field(default_factory=dict)
    raw: str | None = None  # send this exact argument text (to test malformed calls)


@dataclass(frozen=True)
class ToolCalls:
    calls: Sequence[Call]
    text: str = ""  # text before the calls in the same turn


@dataclass(frozen=True)
class Reply:
    text: str | Callable[[Results], str]
    chunk_chars: int = 24


Step = ToolCalls | Reply


@dataclass(frozen=True)
class Script:
    match: str | re.Pattern[str] | Callable[[str], bool]
    steps: Sequence[Step]
    name: str = ""

    def matches(self, first_message: str) -> bool:
        if isinstance(self.match, str):
            return self.match.lower() in first_message.lower()
        if isinstance(self.match, re.Pattern):
            return self.match.search(first_message) is not None
        return self.match(first_message)


class ScriptedModel:
    """Plays the first matching script; unmatched conversations get ``fallback`` text."""

    def __init__(
        self,
        scripts: Sequence[Script],
        *,
        name: str = "scripted",
        fallback: str = "I can only follow my scripts, and none matches this request.",
        keep_requests: int = 100,
        json_answer: Any = None,
        price: Price | None = None,
    ) -> None:
        self._scripts = list(scripts)
        self._name = name
        self._fallback = fallback
        # the latest requests, for tests to inspect (bounded: a long-lived process must not grow)
        self.requests: deque[ModelRequest] = deque(maxlen=keep_requests)
        # what complete_json answers: a value, or a function of (system, prompt, schema)
        self._json_answer = json_answer
        self.price = price  # what its "tokens" cost, to test budgets (free by default)

    @property
    def name(self) -> str:
        return self._name

    def _script(self, request: ModelRequest) -> Script | None:
        first = next((m for m in request.messages if isinstance(m, UserTextMessage)), None)
        if first is None:
            return None
        return next((s for s in self._scripts if s.matches(first.text)), None)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        script = self._script(request)
        step_index, input_tokens = _measure(request)
        step: Step
        if script is None or step_index >= len(script.steps):
            step = Reply(self._fallback if script is None else "")
        else:
            step = script.steps[step_index]
        made: list[Results] = []

        def results() -> Results:  # made only for a step that computes from them
            if not made:
                made.append(Results(request))
            return made[0]

        output_chars = 0
        if isinstance(step, ToolCalls):
            if step.text:
                output_chars += len(step.text)
                yield StreamTextDelta(step.text)
            for i, call in enumerate(step.calls):
                if call.raw is not None:
                    arguments = call.raw
                else:
                    args = call.args(results()) if callable(call.args) else call.args
                    arguments = _ARGUMENTS.encode(args)
                output_chars += len(arguments)
                yield StreamToolCall(
                    id=f"toolu_{step_index:03d}_{i}", name=call.name, arguments=arguments
                )
            yield StreamUsage(input_tokens=input_tokens, output_tokens=max(1, output_chars // 4))
            yield StreamStop("tool_use")
            return
        text = step.text(results()) if callable(step.text) else step.text
        size = max(1, step.chunk_chars)
        for start in range(0, len(text), size):
            yield StreamTextDelta(text[start : start + size])
        yield StreamUsage(input_tokens=input_tokens, output_tokens=max(1, len(text) // 4))
        yield StreamStop("end_turn")

    async def complete_json(self, system: str, prompt: str, schema: dict[str, Any]) -> Any:
        """The scripted JSON answer (``json_answer``), or a ``ModelError`` when there is none."""
        answer = self._json_answer
        if callable(answer):
            answer = answer(system, prompt, schema)
        if answer is None:
            raise ModelError(f"{self._name} has no scripted JSON answer", code="invalid_output")
        return json.loads(json.dumps(answer, default=str))  # a copy, as JSON would give it


def _measure(request: ModelRequest) -> tuple[int, int]:
    """The number of assistant turns so far (the step to play) and the "input tokens"."""
    turns = 0
    chars = sum(map(len, request.system))
    for m in request.messages:
        if isinstance(m, UserTextMessage):
            chars += len(m.text)
        elif isinstance(m, AssistantMessage):
            turns += 1
            for part in m.parts:
                if isinstance(part, TextPart):
                    chars += len(part.text)
                elif isinstance(part, ToolUsePart):
                    chars += len(str(part.input))
        else:
            for result in m.results:
                chars += len(result.content)
    return turns, max(1, chars // 4)
