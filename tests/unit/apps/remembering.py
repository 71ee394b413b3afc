"""A model that remembers: each answer says how many turns its conversation holds and what it
said the turn before (so a test sees whether an app's session carries its past)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

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
    name = "remembering"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        users = [m for m in request.messages if isinstance(m, UserTextMessage)]
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
