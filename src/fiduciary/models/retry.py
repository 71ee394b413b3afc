"""Retries of model calls: backoff with jitter, ``retry-after`` honoured, tool calls never repeated.

Providers translate their failures into ``ModelError`` (with ``retryable`` and ``retry_after``)
and hand each attempt to ``retry_stream`` or ``retry_call``. A stream that already yielded a tool
call is never asked again: the loop may have started running that call. A stream that yielded
only text or thinking is asked again after a ``StreamRetry`` event, which tells the consumer to
drop what it received.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import random
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

from .._logs import logger
from ..exceptions import ModelError
from ..redaction import redact_text
from .base import ModelEvent, StreamRetry, StreamToolCall

__all__ = [
    "RetryPolicy",
    "auth_error",
    "classify_status",
    "is_transport_error",
    "parse_retry_after",
    "retry_call",
    "retry_stream",
    "scrub_provider_text",
]

log = logger("fiduciary.models")

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait before asking a model again.

    The n-th retry waits a random time in ``[0, min(max_delay, initial_delay * 2**(n-1))]``
    ("full jitter"), or the provider's ``retry-after`` when that is longer. A ``retry-after``
    beyond ``max_retry_after`` is not waited for: the call fails at once with the provider's
    error, so a run never hangs for minutes on a rate limit. ``sleep`` and ``random`` are
    injectable (``jitter`` returns a number in [0, 1)) so that tests neither sleep nor depend
    on chance.
    """

    max_attempts: int = 4
    initial_delay: float = 1.0
    max_delay: float = 30.0
    max_retry_after: float = 60.0
    sleep: Sleep = field(default=asyncio.sleep, compare=False)
    jitter: Callable[[], float] = field(default=random.random, compare=False)

    def delay(self, attempt: int, retry_after: float | None) -> float | None:
        """Seconds to wait after failed attempt ``attempt`` (1-based); None: do not retry."""
        if attempt >= self.max_attempts:
            return None
        if retry_after is not None and retry_after > self.max_retry_after:
            return None
        ceiling = min(self.max_delay, self.initial_delay * (2 ** (attempt - 1)))
        jittered: float = ceiling * self.jitter()
        return max(jittered, retry_after or 0.0)


NO_RETRY = RetryPolicy(max_attempts=1)


async def retry_stream(
    attempt: Callable[[], AsyncGenerator[ModelEvent, None]],
    policy: RetryPolicy,
    *,
    model: str,
) -> AsyncIterator[ModelEvent]:
    """Yield the events of ``attempt()``, asking again on retryable failures (see module doc)."""
    number = 0
    while True:
        number += 1
        yielded = False
        called = False
        try:
            async with contextlib.aclosing(attempt()) as events:
                async for event in events:
                    if isinstance(event, StreamToolCall):
                        called = True
                    yielded = True
                    yield event
            return
        except ModelError as exc:
            if called:
                raise ModelError(
                    f"{exc.message} (the answer broke off after it called tools; it is not asked "
                    "again, so that no call is made twice)",
                    code=exc.code,
                    status=exc.status,
                ) from exc
            wait = policy.delay(number, exc.retry_after) if exc.retryable else None
            if wait is None:
                raise
            log.warning(
                "model %s: %s (attempt %d of %d); asking again in %.1fs",
                model,
                exc.code,
                number,
                policy.max_attempts,
                wait,
            )
            if yielded:
                yield StreamRetry(attempt=number, reason=exc.code)
            await policy.sleep(wait)


async def retry_call(call: Callable[[], Awaitable[T]], policy: RetryPolicy, *, model: str) -> T:
    """Await ``call()``, asking again on retryable ``ModelError``s."""
    number = 0
    while True:
        number += 1
        try:
            return await call()
        except ModelError as exc:
            wait = policy.delay(number, exc.retry_after) if exc.retryable else None
            if wait is None:
                raise
            log.warning("model %s: %s; asking again in %.1fs", model, exc.code, wait)
            await policy.sleep(wait)


def parse_retry_after(
    headers: Mapping[str, str] | None, *, now: Callable[[], datetime] | None = None
) -> float | None:
    """The wait a response asks for: ``retry-after-ms``, ``retry-after`` (seconds or a date)."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now() if now is not None else datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())


# error types providers put in bodies (Anthropic ``error.type``, OpenAI ``code`` / ``type``)
_RETRYABLE_TYPES = {
    "overloaded_error": "overloaded",
    "rate_limit_error": "rate_limited",
    "rate_limit_exceeded": "rate_limited",
    "api_error": "server_error",
    "server_error": "server_error",
    "timeout_error": "timeout",
}
_FINAL_TYPES = {
    "insufficient_quota": "quota",
    "billing_error": "quota",
    "authentication_error": "auth",
    "invalid_api_key": "auth",
    "permission_error": "auth",
    "invalid_request_error": "bad_request",
    "not_found_error": "not_found",
    "request_too_large": "bad_request",
}


def classify_status(status: int | None, error_type: str | None) -> tuple[str, bool]:
    """``(code, retryable)`` for an HTTP status and the provider's error type, if any."""
    if status == 401:  # whatever type a server gives it (some say invalid_request_error)
        return "auth", False
    if error_type in _FINAL_TYPES:
        return _FINAL_TYPES[error_type], False
    if error_type in _RETRYABLE_TYPES:
        return _RETRYABLE_TYPES[error_type], True
    if status is None:
        return "error", False
    if status == 429:
        return "rate_limited", True
    if status == 529:
        return "overloaded", True
    if status in (408, 409):  # request timeout, lock conflict: both are worth one more try
        return ("timeout" if status == 408 else "server_error"), True
    if status >= 500:
        return "server_error", True
    if status in (401, 403):
        return "auth", False
    if status == 404:
        return "not_found", False
    if 400 <= status < 500:
        return "bad_request", False
    return "error", False


def is_transport_error(exc: BaseException) -> bool:
    """A network failure raised by httpx / httpx2 / httpcore (a dropped connection, a cut body).

    Checked by class name along the MRO so that this works whichever HTTP library generation
    the installed SDK uses.
    """
    for cls in type(exc).__mro__:
        module = cls.__module__.split(".", 1)[0]
        if module in ("httpx", "httpx2", "httpcore", "httpcore2") and cls.__name__ in (
            "TransportError",
            "NetworkError",
            "TimeoutException",
            "RemoteProtocolError",
            "ProtocolError",
        ):
            return True
    return False


def transport_error(exc: BaseException, model: str) -> ModelError:
    """A ``ModelError`` for a network failure (retryable)."""
    timeout = any("Timeout" in cls.__name__ for cls in type(exc).__mro__)
    return ModelError(
        f"{model}: the connection failed ({type(exc).__name__})",
        code="timeout" if timeout else "connection",
        retryable=True,
    )


# A key, or a piece of one: ``sk-…``/``rk_…`` of any length, and masked echoes such as
# OpenAI's ``sk-proj-****…cdef`` (the shapes the Redactor knows need 17+ characters).
_KEY_FRAGMENT = re.compile(
    r"(?<![A-Za-z0-9])(?:sk|rk|pk)[-_][^\s\"',;]*|[^\s\"',;]*\*{3,}[^\s\"',;]*"
)


def scrub_provider_text(text: str) -> str:
    """A provider's error text with anything that looks like a key, or a piece of one,
    replaced: it reaches events, logs and people."""
    return _KEY_FRAGMENT.sub("[REDACTED]", text)


def auth_error(
    model: str, status: int | None, detail: str, *, key_from: str, retry_after: float | None
) -> ModelError:
    """The provider refused the credentials: say where the key came from, so the person knows
    what to check, and never echo the key (or the provider's masked copy of it)."""
    shown = scrub_provider_text(redact_text(detail)).strip()
    refused = "is not allowed this request" if status == 403 else "was refused"
    return ModelError(
        f"{model}: the API key {refused}; check {key_from}"
        + (f" ({status} {shown})" if status is not None else f" ({shown})" if shown else ""),
        code="auth",
        retryable=False,
        retry_after=retry_after,
        status=status,
    )
