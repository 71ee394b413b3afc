"""Live events over SSE: resume without gap or duplicate, many subscribers, slow subscribers,
heartbeats, and every event committed before it is sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import anyio
import httpx
import pytest
from starlette.applications import Starlette

from fiduciary import Agent, ManualClock
from fiduciary.demo import Billing
from fiduciary.events import Event, RunCompleted, decode_event, encode_event
from fiduciary.models.base import ModelEvent, ModelRequest, StreamTextDelta
from fiduciary.server import Server
from fiduciary.stores.base import Store
from fiduciary.testing import ScriptedModel

from ..conftest import Effects
from .asgi import StreamingASGITransport
from .conftest import (
    AppFactory,
    Keys,
    all_events,
    bearer,
    billing_agent,
    client_for,
    problem,
    scripts,
    settle,
    start_run,
)
from .sse_client import blocks

pytestmark = pytest.mark.timeout(60)


class GatedModel:
    """The scripted model, holding each text delta until the test lets one through."""

    def __init__(self) -> None:
        self.inner = ScriptedModel(scripts())
        self.gate = asyncio.Semaphore(0)

    @property
    def name(self) -> str:
        return "gated"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        async for item in self.inner.stream(request):
            if isinstance(item, StreamTextDelta):
                await self.gate.acquire()
            yield item


async def read_events(
    client: httpx.AsyncClient,
    key: str,
    run_id: UUID,
    *,
    after: int | None = None,
    last_event_id: int | None = None,
    count: int | None = None,
    until_seq: int | None = None,
    until_type: str | None = None,
    opened: asyncio.Event | None = None,
) -> tuple[list[tuple[int, str]], dict[str, Any] | None]:
    """(seq, data) of the events read, and the reconnect message if one came."""
    headers = bearer(key)
    if last_event_id is not None:
        headers["last-event-id"] = str(last_event_id)
    url = f"/runs/{run_id}/events" + (f"?after={after}" if after is not None else "")
    got: list[tuple[int, str]] = []
    async with client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        async for block in blocks(response):
            if block.message is None:
                continue
            if block.message.event == "reconnect":
                return got, json.loads(block.message.data)
            if block.message.id is None:  # the opening "retry:" line: subscribed from here on
                if opened is not None:
                    opened.set()
                continue
            got.append((int(block.message.id), block.message.data))
            if count is not None and len(got) >= count:
                break
            if until_seq is not None and got[-1][0] >= until_seq:
                break
            if until_type is not None and block.message.event == until_type:
                break
    return got, None


def stored(events: list[Event]) -> list[tuple[int, str]]:
    return [(e.seq, encode_event(e)) for e in events]


async def test_resume_after_a_disconnect_at_every_position(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "hello there")
    await settle(server)
    log = stored(await all_events(client, keys.alice, run_id))
    last = log[-1][0]
    assert last > 40
    with anyio.fail_after(30):
        for k in range(0, last + 1):
            first, _ = await read_events(client, keys.alice, run_id, count=k) if k else ([], None)
            resume_from = first[-1][0] if first else 0
            # browsers resume with Last-Event-ID; other clients with ?after=
            if resume_from < last:
                rest, _ = await read_events(
                    client, keys.alice, run_id, last_event_id=resume_from, until_seq=last
                )
            else:
                rest = [
                    (e.seq, encode_event(e))
                    for e in await all_events(client, keys.alice, run_id)
                    if e.seq > resume_from
                ]
            assert first + rest == log, f"disconnected after {k} events"
            if k % 7 == 0 and resume_from < last:
                rest2, _ = await read_events(
                    client, keys.alice, run_id, after=resume_from, until_seq=last
                )
                assert first + rest2 == log
    assert server.hub.subscriber_count == 0


async def test_last_event_id_wins_over_after_and_bad_ids_are_refused(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "hello there")
    await settle(server)
    got, _ = await read_events(client, keys.alice, run_id, after=2, last_event_id=5, count=1)
    assert got[0][0] == 6
    for bad in ["-1", "abc", "1.5", "9" * 30]:
        response = await client.get(
            f"/runs/{run_id}/events", headers={**bearer(keys.alice), "last-event-id": bad}
        )
        problem(response, 400, "invalid_last_event_id")
    problem(
        await client.get(f"/runs/{run_id}/events?after=-3", headers=bearer(keys.alice)),
        422,
        "invalid_request",
    )
    problem(await client.get(f"/runs/{run_id}/events"), 401, "unauthenticated")


@pytest.fixture
def gated() -> GatedModel:
    return GatedModel()


@pytest.fixture
def gated_app(
    make_app: AppFactory,
    store: Store,
    clock: ManualClock,
    effects: Effects,
    billing: Billing,
    gated: GatedModel,
) -> Starlette:
    agent = billing_agent(store, clock, effects, billing).with_options(model=gated)
    return make_app(agent=agent)


async def test_live_reconnects_after_every_event_lose_nothing_and_repeat_nothing(
    gated_app: Starlette, gated: GatedModel, keys: Keys, store: Store
) -> None:
    server: Server = gated_app.state.server
    async with client_for(gated_app) as client:
        run_id = await start_run(client, keys.alice, "hello there")
        seen: list[tuple[int, str]] = []
        with anyio.fail_after(30):
            while not seen or json.loads(seen[-1][1])["type"] != "run_completed":
                gated.gate.release()  # one more delta may be streamed meanwhile
                got, _ = await read_events(
                    client, keys.alice, run_id, last_event_id=seen[-1][0] if seen else 0, count=1
                )
                seq, data = got[0]
                # committed before it was sent: the store has exactly this event already
                (in_store,) = await store.read_events(run_id, after_seq=seq - 1, limit=1)
                assert encode_event(in_store) == data
                seen.append(got[0])
            for _ in range(100):
                gated.gate.release()
            await settle(server)
    assert [s for s, _ in seen] == list(range(1, len(seen) + 1))
    assert seen == stored(await store.read_events(run_id))


async def test_many_subscribers_receive_the_same_events(
    gated_app: Starlette, gated: GatedModel, keys: Keys, store: Store
) -> None:
    server: Server = gated_app.state.server
    async with client_for(gated_app) as client:
        run_id = await start_run(client, keys.alice, "hello there")
        with anyio.fail_after(30):
            opened = [asyncio.Event() for _ in range(20)]
            readers = [
                asyncio.create_task(
                    read_events(client, keys.alice, run_id, until_seq=10_000, opened=o)
                )
                for o in opened
            ]
            await asyncio.gather(*(o.wait() for o in opened))
            assert server.hub.subscriber_count == 20
            assert len(server.hub._followers) == 1  # one follower per run, whatever the fan-out
            for _ in range(200):
                gated.gate.release()
            await settle(server)
            final = stored(await store.read_events(run_id))
            last = final[-1][0]
            results = await asyncio.gather(
                *(read_events(client, keys.alice, run_id, until_seq=last) for _ in range(3))
            )
            for r in readers:  # the first readers have what they need once the log is complete
                r.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
        assert all(got == final for got, _ in results)
    assert isinstance(decode_event(final[-1][1]), RunCompleted)


async def test_a_slow_subscriber_never_slows_the_run_and_is_told_to_reconnect(
    make_app: AppFactory, keys: Keys, store: Store
) -> None:
    app = make_app(subscriber_buffer=4)
    server: Server = app.state.server
    slow = httpx.AsyncClient(
        transport=StreamingASGITransport(app, max_chunks=1), base_url="http://test"
    )
    async with client_for(app) as client, slow:
        run_id = await start_run(client, keys.alice, "two parts")  # a short first answer
        await settle(server)
        # a long run starts while the slow client is connected but not reading
        async with slow.stream(
            "GET", f"/runs/{run_id}/events", headers=bearer(keys.alice)
        ) as response:
            with anyio.fail_after(10):
                stream = blocks(response)
                first = await anext(stream)  # the opening line: subscribed from here on
            assert first.message is not None
            assert first.message.retry == 2000
            assert server.hub.subscriber_count == 1
            response2 = await client.post(  # then a long one
                f"/runs/{run_id}/messages", json={"message": "more"}, headers=bearer(keys.alice)
            )
            assert response2.status_code == 202
            with anyio.fail_after(10):
                await settle(server)  # the run finished while the client read nothing
                await anyio.wait_all_tasks_blocked()  # and the follower fanned it all out
            got: list[int] = []
            reconnect: dict[str, Any] | None = None
            with anyio.fail_after(10):
                async for block in stream:
                    if block.message is None or block.message.event == "message":
                        continue
                    if block.message.event == "reconnect":
                        reconnect = json.loads(block.message.data)
                        break
                    assert block.message.id is not None
                    got.append(int(block.message.id))
        assert reconnect is not None
        assert reconnect == {"after": got[-1]}
        assert got == list(range(1, len(got) + 1))
        final = await store.read_events(run_id)
        assert got[-1] < final[-1].seq
        resumed, _ = await read_events(
            client, keys.alice, run_id, last_event_id=got[-1], until_seq=final[-1].seq
        )
        assert [s for s, _ in resumed] == list(range(got[-1] + 1, final[-1].seq + 1))
    assert server.hub.subscriber_count == 0


async def test_heartbeats_while_quiet(make_app: AppFactory, keys: Keys) -> None:
    app = make_app(heartbeat_seconds=0.01)
    server: Server = app.state.server
    async with client_for(app) as client:
        run_id = await start_run(client, keys.alice, "hello there")
        await settle(server)
        comments = 0
        with anyio.fail_after(10):
            async with client.stream(
                "GET", f"/runs/{run_id}/events", headers=bearer(keys.alice)
            ) as response:
                async for block in blocks(response):
                    if block.comment == "keep-alive":
                        comments += 1
                        if comments == 3:
                            break
    assert comments == 3
    assert server.hub.subscriber_count == 0


async def test_events_of_another_process_are_followed(
    client: httpx.AsyncClient, keys: Keys, server: Server, agent: Agent, store: Store
) -> None:
    """A run driven outside the server (another worker on the same store) is followed too."""
    run_id = await start_run(client, keys.alice, "Please pay my open bills")
    await settle(server)
    card = (await client.get("/approvals", headers=bearer(keys.alice))).json()["approvals"][0]
    opened = asyncio.Event()
    reader = asyncio.create_task(
        read_events(
            client, keys.alice, run_id, last_event_id=0, until_type="run_completed", opened=opened
        )
    )
    with anyio.fail_after(10):
        await opened.wait()
        await agent.approve(card["approval_id"], by="alice", args_digest=card["args_digest"])
        async for _ in agent.resume(run_id):  # as another worker would
            pass
        got, _ = await reader
    assert got == stored(await store.read_events(run_id))


async def test_shutting_down_ends_every_stream_with_a_reconnect(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "hello there")
    await settle(server)
    opened = asyncio.Event()
    reader = asyncio.create_task(
        read_events(client, keys.alice, run_id, until_seq=10_000, opened=opened)
    )
    with anyio.fail_after(10):
        await opened.wait()
        server.hub.end_all()
        got, reconnect = await reader
    assert reconnect == {"after": got[-1][0]}
    assert server.hub.subscriber_count == 0


async def test_head_answers_the_headers_without_opening_a_stream(
    make_app: AppFactory, keys: Keys
) -> None:
    app = make_app()
    server: Server = app.state.server
    async with client_for(app) as client:
        run_id = await start_run(client, keys.alice, "hello there")
        await settle(server)
        with anyio.fail_after(10):  # a stream that followed the run would never end
            response = await client.head(f"/runs/{run_id}/events", headers=bearer(keys.alice))
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert response.content == b""
        assert server.hub.subscriber_count == 0
        assert (await client.head(f"/runs/{run_id}/events")).status_code == 401
