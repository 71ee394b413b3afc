"""A model that remembers: each answer says how many turns its conversation holds and what it
said the turn before (so a test sees whether an app's session carries its past)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

from fiduciary.models.base import (
    AssistantMessage,
    ModelEvent,
    ModelRequest,
    StreamStop,
    StreamTextDelta,
    StreamUsage,
    UserTextMessage,
)


class Remembering:
    """``hang_at``: the turn at which it writes ``hang_file`` and never answers (a process to
    kill mid-turn)."""

    name = "remembering"

    def __init__(self, *, hang_at: int | None = None, hang_file: str = "") -> None:
        self.requests: list[ModelRequest] = []
        self.hang_at = hang_at
        self.hang_file = hang_file

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        users = [m for m in request.messages if isinstance(m, UserTextMessage)]
        if len(users) == self.hang_at:
            await asyncio.to_thread(Path(self.hang_file).write_text, "asked", encoding="utf-8")
            await asyncio.Event().wait()  # never answers: the test kills the process here
        said = [m.text for m in request.messages if isinstance(m, AssistantMessage) and m.text]
        before = _reply(said[-1]) if said else "nothing"
        turn = len(users)
        answer = {"reply": f"turn {turn}", "state": {"turn": turn, "before": before}}
        yield StreamTextDelta(json.dumps(answer))
        yield StreamUsage(input_tokens=sum(len(m.text) for m in users) // 4, output_tokens=8)
        yield StreamStop("end_turn")


def _reply(text: str) -> str:
    try:
        return str(json.loads(text)["reply"])
    except (ValueError, KeyError, TypeError):
        return "(not an answer of mine)"
