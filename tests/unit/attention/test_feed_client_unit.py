"""The decision feed's client against scripted HTTP answers (httpx's MockTransport): it opens
the stream again from its cursor after a failure or an end, pausing longer each time; a key
refused or a server without the feed is not retried."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from fiduciary.attention.feed_client import FeedRefusedError, FileCursor, decision_feed


def frame(seq: int, kind: str = "attention.decision") -> str:
    data = {"seq": seq, "decision_id": f"d-{seq}", "event_id": f"ev-{seq}"}
    return f"id: {seq}\nevent: {kind}\ndata: {json.dumps(data)}\n\n"


async def test_it_reconnects_from_its_cursor_and_persists_it(tmp_path: Path) -> None:
    answers = [
        httpx.Response(503),
        httpx.Response(200, text=frame(1) + ": heartbeat\n\n"),  # then the stream ends
        httpx.Response(200, text=frame(2, "attention.dead_letter")),
    ]
    asked: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("last-event-id"))
        assert request.headers["authorization"] == "Bearer k"
        assert request.url.path == "/attention/decisions"
        return answers.pop(0)

    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    cursor = FileCursor(tmp_path / "cursor")
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        feed = decision_feed(
            "http://feed.test/", api_key="k", cursor=cursor, client=client, sleep=pause
        )
        items = [await anext(feed) for _ in range(3)]
        await feed.aclose()  # type: ignore[attr-defined]
    assert [(i.kind, i.cursor, i.event_id) for i in items] == [
        ("decision", "1", "d-1"),
        ("cursor", "1", None),
        ("dead_letter", "2", "d-2"),
    ]
    assert asked == [None, None, "1"]  # after the 503 from the start; after the end from 1
    assert pauses == [0.2, 0.2]  # the pause doubles on failures, and resets once items arrive
    assert cursor.load() == "1"  # the dead letter was being acted on when the consumer stopped


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_a_refusal_is_not_retried(status: int) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(status))
    async with httpx.AsyncClient(transport=transport) as client:
        feed = decision_feed("http://feed.test/attention/decisions", api_key="k", client=client)
        with pytest.raises(FeedRefusedError, match=str(status)):
            await anext(feed)
