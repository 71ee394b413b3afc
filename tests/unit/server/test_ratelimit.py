"""Messages per principal are limited: 429 with Retry-After, per principal, sliding window."""

from __future__ import annotations

import re

import pytest

from fiduciary import ManualClock
from fiduciary.server import RateLimit, RateLimiter, Server

from .conftest import AppFactory, Keys, bearer, client_for, problem, settle, start_run

pytestmark = pytest.mark.timeout(30)


def test_the_sliding_window(clock: ManualClock) -> None:
    limiter = RateLimiter(RateLimit(3, 60), clock=clock)
    assert [limiter.acquire("alice") for _ in range(3)] == [0, 0, 0]
    assert limiter.acquire("alice") == pytest.approx(60)
    assert limiter.acquire("bob") == 0
    clock.advance(20)
    assert limiter.acquire("alice") == pytest.approx(40)
    clock.advance(40)
    assert limiter.acquire("alice") == 0  # the first hit left the window
    assert limiter.acquire("alice") == 0
    assert limiter.acquire("alice") == 0
    assert limiter.acquire("alice") > 0
    assert RateLimiter.retry_after(0.2) == "1"
    assert RateLimiter.retry_after(39.1) == "40"


def test_parse() -> None:
    assert RateLimit.parse("10/60") == RateLimit(10, 60)
    assert RateLimit.parse("5") == RateLimit(5, 60)
    for bad in ["ten/60", "10/x", "0/60", "10/0"]:
        said = f"a rate limit is written N/SECONDS, like 10/60, not {bad!r}"
        with pytest.raises(ValueError, match=f"^{re.escape(said)}$"):
            RateLimit.parse(bad)


async def test_messages_over_the_limit_get_429_with_retry_after(
    make_app: AppFactory, keys: Keys, clock: ManualClock
) -> None:
    app = make_app(rate_limit=RateLimit(2, 60))
    server: Server = app.state.server
    async with client_for(app) as client:
        run_id = await start_run(client, keys.alice, "hello there")
        await settle(server)
        ok = await client.post(
            f"/runs/{run_id}/messages", json={"message": "again"}, headers=bearer(keys.alice)
        )
        assert ok.status_code == 202
        await settle(server)
        refused = await client.post("/runs", json={"message": "hello"}, headers=bearer(keys.alice))
        problem(refused, 429, "rate_limited")
        assert refused.headers["retry-after"] == "60"
        refused = await client.post(
            f"/runs/{run_id}/messages", json={"message": "more"}, headers=bearer(keys.alice)
        )
        problem(refused, 429, "rate_limited")
        # another principal has a budget of its own; reading is not limited
        assert (
            await client.post("/runs", json={"message": "hi"}, headers=bearer(keys.bob))
        ).status_code == 202
        assert (await client.get("/runs", headers=bearer(keys.alice))).status_code == 200
        clock.advance(45)
        assert (
            await client.post("/runs", json={"message": "x"}, headers=bearer(keys.alice))
        ).headers["retry-after"] == "15"
        clock.advance(15)
        assert (
            await client.post("/runs", json={"message": "hello"}, headers=bearer(keys.alice))
        ).status_code == 202
        await settle(server)


async def test_the_default_is_ten_per_minute(agent: object, keys: Keys) -> None:
    from fiduciary.server import create_app

    app = create_app(agent, keys=keys.store)  # type: ignore[arg-type]
    assert app.state.server.limiter.rule == RateLimit(10, 60)
    await app.state.server.close()
