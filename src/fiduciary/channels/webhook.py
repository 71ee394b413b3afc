"""Signed webhook messages into the inbox: the server's HMAC channel, answered by a target.

``SignedMessages`` checks a message exactly as ``POST /hooks/{name}`` does (the same
``InboundChannel`` secrets, the same ``SignatureVerifier``: timestamp window, replays refused),
then hands ``{"text": ...}`` to ``Inbox.deliver`` as the channel's principal, with channel
``"webhook"`` — so a webhook shares the rate limit and the serial order of the console and
Telegram. ``route()`` serves it as ``POST /adapters/webhook/{channel}`` (Starlette, the
``server`` extra): 200 ``{"reply": ..., "pending": [approval ids]}``, or a problem document
(401 bad signature, 404 unknown channel, 400 invalid body, 429 with ``Retry-After``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..signing import InboundChannel, SignatureError, SignatureVerifier
from .inbox import ChannelError, Inbox, RateLimitError, Reply

__all__ = ["SignedMessages"]

_STATUS = {
    "unknown_channel": 404,
    "invalid": 400,
    "unknown_target": 404,
    "rate_limited": 429,
    "invalid_signature": 401,
    "stale_signature": 401,
    "replayed": 401,
}


class SignedMessages:
    """Signed messages of ``channels``, each delivered to ``targets[channel name]`` (or to
    ``target`` for every channel)."""

    def __init__(
        self,
        inbox: Inbox,
        *,
        channels: Sequence[InboundChannel],
        target: str | None = None,
        targets: Mapping[str, str] | None = None,
        verifier: SignatureVerifier | None = None,
    ) -> None:
        self.inbox = inbox
        self._channels = {c.name: c for c in channels}
        self._targets = dict(targets or {})
        self._target = target
        self.verifier = verifier or SignatureVerifier()

    async def receive(self, name: str, headers: Mapping[str, str], body: bytes) -> Reply:
        """Verify, parse and deliver one message; ``ChannelError`` (``code`` as in the
        module docstring) when it is refused."""
        channel = self._channels.get(name)
        target = self._targets.get(name, self._target)
        if channel is None or target is None:
            raise ChannelError("unknown_channel", "no such channel")
        try:
            self.verifier.verify(channel.secret, headers, body)
        except SignatureError as exc:
            raise ChannelError(exc.code, exc.message) from None
        try:
            parsed: Any = json.loads(body)
        except ValueError:
            parsed = None
        text = parsed.get("text") if isinstance(parsed, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ChannelError("invalid", 'the body must be JSON: {"text": "..."}')
        return await self.inbox.deliver(
            target, principal=channel.principal, text=text, channel="webhook"
        )

    def route(self, path: str = "/adapters/webhook/{channel}") -> Route:
        async def endpoint(request: Request) -> JSONResponse:
            body = await request.body()
            try:
                reply = await self.receive(
                    str(request.path_params["channel"]), request.headers, body
                )
            except ChannelError as exc:
                headers = {}
                if isinstance(exc, RateLimitError):
                    headers["retry-after"] = str(max(1, math.ceil(exc.retry_after)))
                return JSONResponse(
                    {"type": exc.code, "title": exc.message, "status": _STATUS.get(exc.code, 400)},
                    status_code=_STATUS.get(exc.code, 400),
                    headers=headers,
                    media_type="application/problem+json",
                )
            return JSONResponse(
                {"reply": reply.text, "pending": [str(p.approval_id) for p in reply.pending]}
            )

        return Route(path, endpoint, methods=["POST"])
