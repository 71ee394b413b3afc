"""The decision feed: in order, resumable after a cursor, in process and as SSE."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from starlette.applications import Starlette

from fiduciary import ManualClock
from fiduciary.attention.actions import RouteAction
from fiduciary.attention.feed import decision_feed_route, follow
from fiduciary.attention.record import AttentionRecord
from fiduciary.attention.testing import RuleJudge
from fiduciary.attention.types import Batch, Incoming, JudgeInput, Judgment, PermanentError
from fiduciary.attention.watch import Attention

from ..server.asgi import StreamingASGITransport
from ..server.sse_client import blocks

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def incoming(i: int) -> Incoming:
    return Incoming(id=f"ev-{i}", source="s", type="tick", at=T0 + timedelta(minutes=i))


def attention(record: AttentionRecord) -> Attention:
    def rule(judge_input: object) -> str:
        return "notify"

    return Attention(
        judge=RuleJudge(rule),
        record=record,
        routes={"notify": RouteAction(do="notify"), "drop": RouteAction(do="drop")},
        clock=ManualClock(T0),
    )


async def test_follow_yields_in_order_from_a_cursor_and_wakes_on_new_decisions() -> None:
    record = AttentionRecord()
    watcher = attention(record)
    await watcher.accept("s", Batch(events=(incoming(1), incoming(2)), cursor="2"))
    feed = follow(record, after=1, wake=watcher.decided, poll=30)
    first = await anext(feed)
    assert (first.seq, first.event_id, first.action) == (2, "ev-2", "notified")
    waiting = asyncio.ensure_future(anext(feed))
    await watcher.accept("s", Batch(events=(incoming(3),), cursor="3"))
    third = await asyncio.wait_for(waiting, 10)
    assert (third.seq, third.event_id) == (3, "ev-3")
    await feed.aclose()  # type: ignore[attr-defined]


async def test_the_feed_stops_before_a_decision_still_being_acted_on() -> None:
    record = AttentionRecord()
    await attention(record).accept("s", Batch(events=(incoming(1), incoming(2)), cursor="2"))
    record._db.conn.execute("UPDATE attention_decisions SET action = NULL WHERE seq = 1")
    assert await record.decisions() == []
    await record.acted((await record.unacted())[0].decision_id, "notified")
    assert [d.seq for d in await record.decisions()] == [1, 2]


async def test_sse_resumes_after_last_event_id_with_dead_letters() -> None:
    record = AttentionRecord()
    watcher = attention(record)
    await watcher.accept("s", Batch(events=(incoming(1), incoming(2)), cursor="2"))

    class Refusing:
        name = "refusing"

        async def __call__(self, judge_input: JudgeInput) -> Judgment:
            raise PermanentError("refused")

    watcher.judge = Refusing()
    await watcher.accept("s", Batch(events=(incoming(3),), cursor="3"))
    app = Starlette(routes=[decision_feed_route(record, wake=watcher.decided, poll=30)])
    async with (
        httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://test") as client,
        client.stream("GET", "/attention/decisions", headers={"Last-Event-ID": "1"}) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        seen = []
        async for block in blocks(response):
            assert block.message is not None
            seen.append(block.message)
            if len(seen) == 2:
                break
    assert [(m.id, m.event) for m in seen] == [
        ("2", "attention.decision"),
        ("3", "attention.dead_letter"),
    ]
    second = json.loads(seen[0].data)
    assert second["event_id"] == "ev-2"
    assert second["route"] == "notify"
    assert second["probabilities"] == pytest.approx({"notify": 0.8, "drop": 0.2})
    assert second["action"] == "notified"
    assert json.loads(seen[1].data)["error"] == "refused"
