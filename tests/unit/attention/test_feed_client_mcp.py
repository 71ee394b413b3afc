"""The decision feed's client over MCP (``mcp_decision_feed``), against ``serve_decisions``
through the SDK's client: decisions in order with their cursors, persisted to a cursor file,
and a second consumer resuming after it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client
from mcp.server.lowlevel.server import Server

from fiduciary import ManualClock
from fiduciary.attention.actions import RouteAction
from fiduciary.attention.feed_client import FeedItem, FileCursor, mcp_decision_feed
from fiduciary.attention.mcp_events import McpEventsExtension
from fiduciary.attention.mcp_feed import serve_decisions
from fiduciary.attention.record import AttentionRecord
from fiduciary.attention.testing import RuleJudge
from fiduciary.attention.types import Batch, Incoming
from fiduciary.attention.watch import Attention

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def event(i: int) -> Incoming:
    return Incoming(id=f"ev-{i}", source="s", type="tick", at=T0)


async def decisions(feed: AsyncIterator[FeedItem], count: int) -> list[FeedItem]:
    got: list[FeedItem] = []
    while len(got) < count:
        item = await asyncio.wait_for(anext(feed), 10)
        if item.kind != "cursor":
            got.append(item)
    return got


async def test_the_mcp_feed_yields_decisions_and_resumes_from_the_cursor_file(
    tmp_path: Path,
) -> None:
    record = AttentionRecord()
    watcher = Attention(
        judge=RuleJudge(lambda _: "notify"),
        record=record,
        routes={"notify": RouteAction(do="notify"), "drop": RouteAction(do="drop")},
        clock=ManualClock(T0),
    )
    await watcher.accept("s", Batch(events=(event(1), event(2), event(3)), cursor="3"))
    server: Server[Any] = Server("fiduciary")
    serve_decisions(server, record, wake=watcher.decided, heartbeat_seconds=3600)
    cursor = FileCursor(tmp_path / "cursor")
    extension = McpEventsExtension()
    async with Client(server, extensions=[extension]) as client:
        feed = mcp_decision_feed(client, extension, cursor=cursor)
        first = await decisions(feed, 2)
        assert [(i.cursor, i.data["event_id"]) for i in first] == [("1", "ev-1"), ("2", "ev-2")]
        assert first[0].event_id == str(first[0].data["decision_id"])
        await feed.aclose()  # type: ignore[attr-defined]
    assert cursor.load() == "1"  # the second was being acted on

    extension = McpEventsExtension()
    async with Client(server, extensions=[extension]) as client:
        feed = mcp_decision_feed(client, extension, cursor=cursor)
        waiting = asyncio.ensure_future(decisions(feed, 3))
        await watcher.accept("s", Batch(events=(event(4),), cursor="4"))
        again = await waiting
        assert [i.data["event_id"] for i in again] == ["ev-2", "ev-3", "ev-4"]
        await feed.aclose()  # type: ignore[attr-defined]
