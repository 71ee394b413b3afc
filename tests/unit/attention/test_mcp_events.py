"""The MCP events source against a server written with the official SDK (in process)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp import Client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from pydantic import ConfigDict

from fiduciary import ManualClock
from fiduciary.attention.mcp_events import McpEvents, McpEventsExtension
from fiduciary.attention.types import Batch, PermanentError
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(60)


class Params(types.RequestParams):
    model_config = ConfigDict(extra="allow")


class EventsServer:
    """An MCP server speaking the draft's events methods over a list of events.

    Event ``i`` has id ``e<i>`` and cursor ``str(i + 1)``. A stream sends ``active``, then the
    events after its cursor (``first`` of them at once, the rest once ``go`` is set), then
    waits. ``script`` can replace what a stream sends.
    """

    def __init__(self, count: int, *, push: bool = True, first: int | None = None) -> None:
        self.count = count
        self.push = push
        self.first = count if first is None else first
        self.go = anyio.Event()
        self.sent = anyio.Event()
        self.opened: list[str | None] = []
        self.next_poll_ms: int | None = None
        self.server: Server[Any] = Server("events")
        self.server.add_request_handler("events/list", Params, self.list)
        self.server.add_request_handler("events/poll", Params, self.poll)
        self.server.add_request_handler("events/stream", Params, self.stream)
        self.extra: list[tuple[str, dict[str, Any]]] = []

    async def list(self, ctx: ServerRequestContext[Any, Any], params: Params) -> dict[str, Any]:
        return {"events": [{"name": "payments", "push": self.push}]}

    def _start(self, params: Params) -> int:
        cursor = (params.model_extra or {}).get("cursor")
        self.opened.append(cursor)
        return int(cursor) if cursor else 0

    async def poll(self, ctx: ServerRequestContext[Any, Any], params: Params) -> dict[str, Any]:
        start = self._start(params)
        events = [
            {"eventId": f"e{i}", "cursor": str(i + 1), "data": {"i": i}}
            for i in range(start, min(self.count, start + 3))
        ]
        page: dict[str, Any] = {"events": events, "cursor": str(start + len(events))}
        if self.next_poll_ms is not None:
            page["nextPollMs"] = self.next_poll_ms
        return page

    async def stream(self, ctx: ServerRequestContext[Any, Any], params: Params) -> dict[str, Any]:
        start = self._start(params)
        sub = (params.model_extra or {})["subscriptionId"]

        async def send(method: str, payload: dict[str, Any]) -> None:
            note = types.Notification[dict[str, Any], str](
                method=f"notifications/events/{method}", params={"subscriptionId": sub, **payload}
            )
            await ctx.session.send_notification(note, related_request_id=ctx.request_id)  # type: ignore[arg-type]
            await (
                anyio.lowlevel.checkpoint()
            )  # as a transport would: the client's reader gets to run

        await send("active", {})
        for method, payload in self.extra:
            await send(method, payload)
        for i in range(start, self.count):
            if i == start + self.first:
                await self.go.wait()
            await send("event", {"eventId": f"e{i}", "cursor": str(i + 1), "data": {"i": i}})
        self.sent.set()
        await anyio.sleep_forever()
        return {}


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the loop until ``condition`` holds (the SDK's queues offer no hook to await)."""
    await eventually(condition, what="the SDK's queues to get there", interval=0)


class Gate:
    """An injectable sleep that waits until the test lets it go."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self._release = asyncio.Event()
        self.waiting = 0

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        self.waiting += 1
        try:
            await self._release.wait()
        finally:
            self.waiting -= 1
        self._release.clear()

    def release(self) -> None:
        self._release.set()


def ids(batches: list[Batch]) -> list[str]:
    return [e.id for b in batches for e in b.events]


async def test_overflow_persists_what_is_held_and_reopens_from_the_cursor_losing_nothing() -> None:
    server = EventsServer(1002, first=1)
    extension = McpEventsExtension()
    async with Client(server.server, extensions=[extension]) as client:
        source = McpEvents(client, extension, name="payments", sleep=Gate())
        batches = source.batches(None)
        first = await anext(batches)
        assert ids([first]) == ["e0"]
        server.go.set()
        await server.sent.wait()
        await until(lambda: sum(len(s.items) for s in extension._streams.values()) == 1001)
        held = await anext(batches)  # 1,001 buffered: the stream stops, what it held is yielded
        assert len(held.events) == 1001
        assert held.cursor == "1002"
        assert [e.kind for e in source.errors] == ["overflow"]
        assert source.errors[0].data == {"buffered": 1001}
        reopened = asyncio.ensure_future(anext(batches))
        await until(lambda: len(server.opened) == 2)
        assert server.opened == [None, "1002"]  # at once, from the committed cursor
        reopened.cancel()
        assert ids([first, held]) == [f"e{i}" for i in range(1002)]


async def test_silence_on_a_manual_clock_is_idle_and_reopens() -> None:
    clock = ManualClock(datetime(2026, 3, 1, tzinfo=UTC))
    server = EventsServer(2)
    gate = Gate()
    extension = McpEventsExtension()
    async with Client(server.server, extensions=[extension]) as client:
        source = McpEvents(client, extension, name="payments", clock=clock, sleep=gate)
        batches = source.batches(None)
        batch = await anext(batches)
        if len(batch.events) < 2:
            batch2 = await anext(batches)
            assert ids([batch, batch2]) == ["e0", "e1"]
        waiting = asyncio.ensure_future(anext(batches))
        await until(lambda: gate.waiting == 1)
        assert gate.asked[-1] == 300
        clock.advance(299)
        asked = len(gate.asked)
        gate.release()
        await until(lambda: gate.waiting == 1 and len(gate.asked) > asked)
        assert gate.asked[-1] == pytest.approx(1)  # not idle yet: waits the rest
        clock.advance(1)
        gate.release()
        await until(lambda: [e.kind for e in source.errors] == ["idle"])
        await until(lambda: gate.waiting == 1)
        assert gate.asked[-1] == 5  # the pause before reopening
        gate.release()
        await until(lambda: len(server.opened) == 2)
        assert server.opened == [None, "2"]
        waiting.cancel()


async def test_poll_when_the_server_offers_no_push_every_next_poll_ms_or_ten_seconds() -> None:
    server = EventsServer(5, push=False)
    gate = Gate()
    extension = McpEventsExtension()
    async with Client(server.server, extensions=[extension]) as client:
        source = McpEvents(client, extension, name="payments", sleep=gate)
        batches = source.batches(None)
        first = await anext(batches)
        assert (ids([first]), first.cursor) == (["e0", "e1", "e2"], "3")
        server.next_poll_ms = 2500
        task = asyncio.ensure_future(anext(batches))
        await until(lambda: gate.waiting == 1)
        assert gate.asked == [10.0]
        gate.release()
        second = await task
        assert (ids([second]), second.cursor) == (["e3", "e4"], "5")
        task = asyncio.ensure_future(anext(batches))
        await until(lambda: gate.waiting == 1)
        assert gate.asked == [10.0, 2.5]
        task.cancel()
    assert server.opened == [None, "3"]


async def test_malformed_payloads_are_skipped_keeping_the_cursor_and_strays_reported() -> None:
    server = EventsServer(0)
    server.extra = [
        ("heartbeat", {"subscriptionId": "nobody"}),
        ("event", {"cursor": "x1", "data": "no id"}),
    ]
    extension = McpEventsExtension()
    async with Client(server.server, extensions=[extension]) as client:
        source = McpEvents(client, extension, name="payments", sleep=Gate())
        skipped = await anext(source.batches(None))
        assert (skipped.events, skipped.cursor) == ((), "x1")  # skipped, its cursor kept
    assert sorted(e.kind for e in source.errors) == ["malformed", "stray"]


async def test_a_closed_client_is_a_permanent_error() -> None:
    server = EventsServer(1)
    extension = McpEventsExtension()
    async with Client(server.server, extensions=[extension]) as client:
        source = McpEvents(client, extension, name="payments", sleep=Gate())
    with pytest.raises(PermanentError, match="closed"):
        await anext(source.batches(None))


# --- the decision feed served as MCP events --------------------------------------------------


async def test_decisions_served_as_mcp_events_round_trip_through_the_source() -> None:
    from fiduciary.attention.actions import RouteAction
    from fiduciary.attention.mcp_feed import serve_decisions
    from fiduciary.attention.record import AttentionRecord
    from fiduciary.attention.testing import RuleJudge
    from fiduciary.attention.types import Incoming, JudgeInput, Judgment
    from fiduciary.attention.watch import Attention

    class Judge:
        name = "j"

        async def __call__(self, judge_input: JudgeInput) -> Judgment:
            if judge_input.window[-1].type == "bad":
                raise PermanentError("refused")
            return await RuleJudge(lambda _: "notify")(judge_input)

    record = AttentionRecord()
    watcher = Attention(
        judge=Judge(),
        record=record,
        routes={"notify": RouteAction(do="notify"), "drop": RouteAction(do="drop")},
        clock=ManualClock(datetime(2026, 3, 1, tzinfo=UTC)),
    )

    def event(i: int, kind: str = "tick") -> Incoming:
        return Incoming(id=f"ev-{i}", source="s", type=kind, at=datetime(2026, 3, 1, tzinfo=UTC))

    await watcher.accept("s", Batch(events=(event(1), event(2, "bad")), cursor="2"))
    server: Server[Any] = Server("fiduciary")
    serve_decisions(server, record, wake=watcher.decided, heartbeat_seconds=3600)
    extension = McpEventsExtension()
    async with Client(server, extensions=[extension]) as client:
        decisions = McpEvents(client, extension, name="attention.decision", sleep=Gate())
        stream = decisions.batches(None)
        first = await anext(stream)
        while not first.events:
            first = await anext(stream)
        assert [e.data["event_id"] for e in first.events] == ["ev-1"]
        assert first.events[0].data["route"] == "notify"
        waiting = asyncio.ensure_future(anext(stream))
        await watcher.accept("s", Batch(events=(event(3),), cursor="3"))
        live = await asyncio.wait_for(waiting, 10)
        while not live.events:
            live = await anext(stream)
        assert [e.data["event_id"] for e in live.events] == ["ev-3"]
        assert live.cursor == "3"
        dead = McpEvents(client, extension, name="attention.dead_letter", mode="poll", sleep=Gate())
        page = await anext(dead.batches("0"))
        assert [e.data["error"] for e in page.events] == ["refused"]
        assert page.cursor == "3"
