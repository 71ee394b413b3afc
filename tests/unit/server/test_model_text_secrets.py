"""What the console receives of a run whose model said secrets: the run's live SSE stream, the
same read back, the global event stream and the run's trace, through the HTTP API."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from fiduciary.events import TextDelta, decode_event, parse_sse
from fiduciary.stores.base import Store

from ..test_redaction_model_text import REDACTOR, REPLY, leaks, redacting_agent
from .conftest import AppFactory, Keys, bearer, client_for, settle, start_run
from .sse_client import blocks


async def live_text(client: httpx.AsyncClient, key: str, run_id: str) -> tuple[str, str]:
    """The text deltas of a run's live stream, joined, and everything it sent, until the end."""
    raw: list[str] = []
    text: list[str] = []
    async with client.stream("GET", f"/runs/{run_id}/events", headers=bearer(key)) as response:
        assert response.status_code == 200
        async for block in blocks(response):
            raw.append(block.raw)
            if block.message is None or block.message.id is None:
                continue
            event = decode_event(block.message.data)
            if isinstance(event, TextDelta):
                text.append(event.text)
            if event.type == "run_completed":
                return "".join(text), "\n".join(raw)
    raise AssertionError("the stream ended before the run completed")


@pytest.mark.parametrize(
    "chunk_chars", [pytest.param(3, id="split"), pytest.param(100_000, id="whole")]
)
async def test_the_console_receives_no_secret_the_model_said(
    store: Store, make_app: AppFactory, keys: Keys, chunk_chars: int
) -> None:
    app = make_app(agent=redacting_agent(store, chunk_chars))
    async with client_for(app) as client:
        run_id = str(await start_run(client, keys.alice, "what do you know about me?"))
        with anyio.fail_after(30):
            said, live = await live_text(client, keys.alice, run_id)
        await settle(app.state.server)
        replayed = await client.get(
            f"/runs/{run_id}/events?follow=false", headers=bearer(keys.alice)
        )
        bus = await client.get("/events?follow=false", headers=bearer(keys.alice))
        trace = await client.get(f"/runs/{run_id}/trace", headers=bearer(keys.alice))
    assert said == REDACTOR.redact_text(REPLY)  # the answer reached the console, redacted
    for response in (replayed, bus, trace):
        assert response.status_code == 200, response.text
    bus_text = "".join(
        str(json.loads(m.data)["text"]) for m in parse_sse(bus.text) if m.event == "text"
    )
    assert "That is everything I know." in bus_text
    received = {
        "live stream": live,
        "stream read back": replayed.text,
        "global stream": bus.text,
        "trace": trace.text,
    }
    assert {where: leaks(text) for where, text in received.items() if leaks(text)} == {}
