"""A limit on how many messages one principal may send in a window of time.

A sliding window: a principal may send ``limit`` messages in any ``window_seconds``; the next one
is refused until the oldest leaves the window, and the refusal says when (``Retry-After``). The
memory held is at most ``limit`` timestamps per principal seen within the window.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from ..clock import Clock, SystemClock

__all__ = ["RateLimit", "RateLimiter"]


@dataclass(frozen=True, slots=True)
class RateLimit:
    limit: int = 10
    window_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.limit < 1 or not self.window_seconds > 0:
            raise ValueError("a rate limit needs limit >= 1 and window_seconds > 0")

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """``"10/60"``: 10 messages per 60 seconds."""
        count, sep, window = text.partition("/")
        try:
            return cls(int(count), float(window) if sep else 60.0)
        except ValueError as exc:
            raise ValueError(
                f"a rate limit is written N/SECONDS, like 10/60, not {text!r}"
            ) from exc


class RateLimiter:
    """``acquire(key)`` returns 0 when allowed (and counts it), else the seconds to wait."""

    def __init__(self, rule: RateLimit, *, clock: Clock | None = None) -> None:
        self.rule = rule
        self._clock = clock or SystemClock()
        self._hits: dict[str, deque[float]] = {}
        self._calls = 0

    def acquire(self, key: str) -> float:
        now = self._clock.now().timestamp()
        window = self.rule.window_seconds
        self._calls += 1
        if self._calls % 1024 == 0:
            self._forget(now)
        hits = self._hits.setdefault(key, deque(maxlen=self.rule.limit))
        while hits and hits[0] <= now - window:
            hits.popleft()
        if len(hits) >= self.rule.limit:
            return max(hits[0] + window - now, 0.001)
        hits.append(now)
        return 0.0

    @staticmethod
    def retry_after(wait: float) -> str:
        """The ``Retry-After`` header's value: whole seconds, rounded up."""
        return str(max(1, math.ceil(wait)))

    def _forget(self, now: float) -> None:
        stale = [
            k for k, h in self._hits.items() if not h or h[-1] <= now - self.rule.window_seconds
        ]
        for key in stale:
            del self._hits[key]
