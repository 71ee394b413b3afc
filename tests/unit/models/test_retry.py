"""Retries: backoff with jitter, retry-after, and never repeating a stream that called tools."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import UTC, datetime

import pytest

from fiduciary.exceptions import ModelError
from fiduciary.models.base import (
    ModelEvent,
    StreamRetry,
    StreamStop,
    StreamTextDelta,
    StreamToolCall,
)
from fiduciary.models.retry import (
    RetryPolicy,
    classify_status,
    is_transport_error,
    parse_retry_after,
    retry_call,
    retry_stream,
)

from .helpers import Sleeps

BUSY = ModelError("busy", code="overloaded", retryable=True)


def test_backoff_doubles_up_to_the_ceiling_with_full_jitter() -> None:
    policy = RetryPolicy(max_attempts=10, initial_delay=1.0, max_delay=5.0, jitter=lambda: 1.0)
    assert [policy.delay(n, None) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    none = RetryPolicy(max_attempts=10, jitter=lambda: 0.0)
    assert none.delay(3, None) == 0.0
    assert policy.delay(10, None) is None  # the attempts are spent


def test_retry_after_is_a_floor_and_has_a_ceiling() -> None:
    policy = RetryPolicy(jitter=lambda: 0.5, max_retry_after=60)
    assert policy.delay(1, 12.0) == 12.0
    assert policy.delay(1, 0.1) == 0.5
    assert policy.delay(1, 61.0) is None


def test_parse_retry_after() -> None:
    now = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after({"Retry-After": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    date = "Sun, 01 Mar 2026 12:00:30 GMT"
    assert parse_retry_after({"retry-after": date}, now=lambda: now) == 30.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "-3"}) == 0.0
    assert parse_retry_after({}) is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize(
    ("status", "error_type", "expected"),
    [
        (429, None, ("rate_limited", True)),
        (429, "insufficient_quota", ("quota", False)),
        (529, None, ("overloaded", True)),
        (None, "overloaded_error", ("overloaded", True)),
        (500, None, ("server_error", True)),
        (503, None, ("server_error", True)),
        (408, None, ("timeout", True)),
        (400, None, ("bad_request", False)),
        (400, "invalid_request_error", ("bad_request", False)),
        (401, None, ("auth", False)),
        (404, None, ("not_found", False)),
        (None, None, ("error", False)),
    ],
)
def test_classify_status(
    status: int | None, error_type: str | None, expected: tuple[str, bool]
) -> None:
    assert classify_status(status, error_type) == expected


def test_transport_errors_are_recognised_by_library_generation() -> None:
    httpx2 = pytest.importorskip("httpx2")

    assert is_transport_error(httpx2.RemoteProtocolError("cut"))
    assert is_transport_error(httpx2.ReadTimeout("slow"))
    assert not is_transport_error(ValueError("x"))


def attempts(*plans: list[ModelEvent | ModelError]) -> tuple[list[int], object]:
    """An attempt factory that plays ``plans`` in turn (an error ends its plan by raising)."""
    count = [0]

    async def attempt() -> AsyncGenerator[ModelEvent, None]:
        plan = plans[count[0]]
        count[0] += 1
        for item in plan:
            if isinstance(item, ModelError):
                raise item
            yield item

    return count, attempt


async def test_a_failure_before_any_output_is_retried_quietly() -> None:
    sleeps = Sleeps()
    count, attempt = attempts([BUSY], [StreamTextDelta("ok"), StreamStop("end_turn")])
    policy = RetryPolicy(sleep=sleeps, jitter=lambda: 0.5)
    events = [e async for e in retry_stream(attempt, policy, model="m")]  # type: ignore[arg-type]
    assert events == [StreamTextDelta("ok"), StreamStop("end_turn")]
    assert count == [2]
    assert sleeps.waits == [0.5]


async def test_a_failure_after_text_tells_the_consumer_to_drop_it() -> None:
    _, attempt = attempts([StreamTextDelta("Sen"), BUSY], [StreamTextDelta("Sent.")])
    policy = RetryPolicy(sleep=Sleeps(), jitter=lambda: 0.5)
    events = [e async for e in retry_stream(attempt, policy, model="m")]  # type: ignore[arg-type]
    assert events == [
        StreamTextDelta("Sen"),
        StreamRetry(1, "overloaded"),
        StreamTextDelta("Sent."),
    ]


async def test_a_failure_after_a_tool_call_is_never_retried() -> None:
    call = StreamToolCall("c1", "send", "{}")
    count, attempt = attempts([call, BUSY], [call])
    policy = RetryPolicy(sleep=Sleeps())
    with pytest.raises(ModelError) as caught:
        async for _ in retry_stream(attempt, policy, model="m"):  # type: ignore[arg-type]
            pass
    assert count == [1]
    assert not caught.value.retryable
    assert caught.value.code == "overloaded"
    assert "not asked again" in str(caught.value)


async def test_errors_that_are_not_retryable_pass_through() -> None:
    final = ModelError("no", code="bad_request")
    count, attempt = attempts([final])
    with pytest.raises(ModelError) as caught:
        async for _ in retry_stream(attempt, RetryPolicy(sleep=Sleeps()), model="m"):  # type: ignore[arg-type]
            pass
    assert caught.value is final
    assert count == [1]


async def test_retry_call() -> None:
    sleeps = Sleeps()
    calls = [0]

    async def flaky() -> str:
        calls[0] += 1
        if calls[0] < 3:
            raise ModelError("slow", code="rate_limited", retryable=True, retry_after=2.0)
        return "done"

    assert (
        await retry_call(flaky, RetryPolicy(sleep=sleeps, jitter=lambda: 0.0), model="m") == "done"
    )
    assert sleeps.waits == [2.0, 2.0]
