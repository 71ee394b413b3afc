"""The one inbound path: every message from a person, whatever the channel, goes through here.

The console, a signed webhook and Telegram all call ``Inbox.deliver(target, principal=...,
text=..., channel=...)``. A *target* is what answers: any ``async (principal, text, channel) ->
reply`` callable (an app's message hook, or ``AgentChat``: a plain agent whose principal's chat
continues one run). The inbox owns the two rules every channel shares:

- **One rate limit**: ``limit`` messages in any ``window_seconds`` (10 / 60 s) per target key,
  counted on arrival, on an injectable clock; the next one is refused with ``RateLimitError``,
  which says when to try again. Nothing is queued past the limit.
- **Serial per target, parallel across targets**: one message at a time reaches a target key
  (an asyncio lock each), so an app or a principal's chat never sees two messages at once;
  different keys run concurrently.

A target's key is its name (``per="target"``: an app, shared by everyone who talks to it), or
its name and the principal (``per="principal"``: each principal's own chat with an agent).
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from ..capabilities import Principal, principal_of
from ..clock import Clock, SystemClock
from ..exceptions import FiduciaryError
from ..stores.base import ApprovalRecord

__all__ = [
    "ChannelError",
    "Inbox",
    "RateLimitError",
    "Reply",
    "Target",
    "as_reply",
]


@dataclass(frozen=True, slots=True)
class Reply:
    """What a target answers: text for the person, and the actions now waiting for them."""

    text: str = ""
    pending: tuple[ApprovalRecord, ...] = ()


Target = Callable[[Principal, str, str], Awaitable["Reply | str | None"]]
"""``async (principal, text, channel) -> reply``: an app's message hook, or ``AgentChat``."""


def as_reply(value: Reply | str | None) -> Reply:
    """A target may answer with a ``Reply``, plain text, or nothing."""
    if value is None:
        return Reply()
    if isinstance(value, str):
        return Reply(value)
    return value


class ChannelError(FiduciaryError):
    """A message could not be delivered; ``code`` says why (``unknown_target``,
    ``rate_limited``, ``invalid``). Nothing reached the target."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RateLimitError(ChannelError):
    """Past the target's limit: ``retry_after`` seconds until the next message is accepted."""

    def __init__(self, retry_after: float) -> None:
        seconds = max(1, math.ceil(retry_after))
        super().__init__("rate_limited", f"too many messages: try again in {seconds} s")
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class _Registered:
    target: Target
    per: Literal["target", "principal"]


class Inbox:
    """Targets by name, one rate limit and one lock per target key (see the module docstring)."""

    def __init__(
        self, *, limit: int = 10, window_seconds: float = 60.0, clock: Clock | None = None
    ) -> None:
        if limit < 1 or not window_seconds > 0:
            raise ValueError("a rate limit needs limit >= 1 and window_seconds > 0")
        self.limit = limit
        self.window_seconds = window_seconds
        self._clock: Clock = clock or SystemClock()
        self._targets: dict[str, _Registered] = {}
        self._hits: dict[str, deque[float]] = {}
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def add(
        self, name: str, target: Target, *, per: Literal["target", "principal"] = "target"
    ) -> None:
        """Register ``target`` as ``name``: an app id (``per="target"``), or an agent whose
        principals each have their own chat (``per="principal"``)."""
        if not name or name in self._targets:
            raise ValueError(f"target {name!r} is empty or already registered")
        self._targets[name] = _Registered(target, per)

    def __contains__(self, name: object) -> bool:
        return name in self._targets

    def key(self, name: str, principal: Principal | str) -> str:
        """The key a message to ``name`` from ``principal`` is limited and serialised by."""
        registered = self._registered(name)
        if registered.per == "target":
            return name
        return f"{name}\x00{principal_of(principal).actor_id}"

    async def deliver(
        self, target: str, *, principal: Principal | str, text: str, channel: str
    ) -> Reply:
        """Hand ``text`` to ``target`` for ``principal``; its reply once it has answered.

        Raises ``RateLimitError`` past the limit and ``ChannelError`` for an unknown target or
        empty text, in both cases before the target sees anything."""
        who = principal_of(principal)
        if not isinstance(text, str) or not text.strip():
            raise ChannelError("invalid", "a message must be non-empty text")
        registered = self._registered(target)
        key = self.key(target, who)
        wait = self._acquire(key)
        if wait > 0:
            raise RateLimitError(wait)
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        async with lock:
            return as_reply(await registered.target(who, text, channel))

    def _registered(self, name: str) -> _Registered:
        registered = self._targets.get(name)
        if registered is None:
            raise ChannelError("unknown_target", f"no target {name!r}")
        return registered

    def _acquire(self, key: str) -> float:
        """0 when the message is allowed (and counted), else the seconds to wait."""
        now = self._clock.now().timestamp()
        hits = self._hits.setdefault(key, deque(maxlen=self.limit))
        while hits and hits[0] <= now - self.window_seconds:
            hits.popleft()
        if len(hits) >= self.limit:
            return max(hits[0] + self.window_seconds - now, 0.001)
        hits.append(now)
        return 0.0
