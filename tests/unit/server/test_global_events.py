"""``GET /events``: the global stream of the caller's runs — every run in one order, resumed
with Last-Event-ID exactly after the last event received, filtered by the caller's principal,
by the runs' status and by the kind of event."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anyio
import httpx
import pytest

from fiduciary.bus import bus_event
from fiduciary.server import Server
from fiduciary.stores.base import RunStatus

from .conftest import AppFactory, Keys, bearer, client_for, problem, settle, start_run
from .sse_client import blocks

pytestmark = pytest.mark.timeout(60)

Message = tuple[int, str, dict[str, Any]]  # (id, event, data)


async def read_bus(
    client: httpx.AsyncClient,
    key: str,
    count: int,
    *,
    query: str = "",
    last_event_id: int | None = None,
    opened: asyncio.Event | None = None,
) -> list[Message]:
    """The first ``count`` events of the global stream (bounded)."""
    headers = bearer(key)
    if last_event_id is not None:
        headers["last-event-id"] = str(last_event_id)
    got: list[Message] = []
    with anyio.fail_after(30):
        async with client.stream("GET", f"/events{query}", headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
            if count == 0:
                return got
            async for block in blocks(response):
                message = block.message
                if message is None or message.id is None:  # the opening lines: subscribed
                    if opened is not None:
                        opened.set()
                    continue
                got.append((int(message.id), message.event, json.loads(message.data)))
                if len(got) == count:
                    break
    return got


async def expected(
    server: Server,
    *,
    principal: str | None,
    statuses: set[RunStatus] | None = None,
    after: int = 0,
) -> list[tuple[int, str, str, int]]:
    """(id, event, run_id, seq) of the bus events the store holds for these filters."""
    read = await server.agent.store.read_global(
        after=after, limit=10_000, principal=principal, statuses=statuses
    )
    out: list[tuple[int, str, str, int]] = []
    for g in read.events:
        bus = bus_event(g)
        if bus is not None:
            out.append((bus.position, bus.type, str(bus.run_id), bus.seq))
    return out


def brief(messages: list[Message]) -> list[tuple[int, str, str, int]]:
    return [(i, event, data["run_id"], data["seq"]) for i, event, data in messages]


async def test_the_caller_sees_every_run_of_theirs_in_one_order_and_only_theirs(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    hello = await start_run(client, keys.alice, "hello")
    waiting = await start_run(client, keys.alice, "send 60")  # waits for alice's approval
    theirs = await start_run(client, keys.bob, "hello")
    await settle(server)
    alices = await expected(server, principal="alice")
    bobs = await expected(server, principal="bob")

    seen = brief(await read_bus(client, keys.alice, len(alices)))

    assert seen == alices
    assert {run for _, _, run, _ in seen} == {str(hello), str(waiting)}
    assert len({i for i, *_ in seen}) == len(seen)
    assert brief(await read_bus(client, keys.bob, len(bobs))) == bobs
    assert {run for _, _, run, _ in bobs} == {str(theirs)}
    everyone = await read_bus(client, keys.admin, len(alices) + len(bobs))
    assert sorted(brief(everyone)) == sorted(alices + bobs)


async def test_the_events_say_what_happens(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "send 60")
    await settle(server)
    messages = await read_bus(client, keys.alice, len(await expected(server, principal="alice")))
    data = [(event, d) for _, event, d in messages]

    assert data[0][0] == "run_status"
    assert data[0][1]["status"] == "running"
    assert data[0][1]["principal"] == "alice"
    waiting = data[-1][1]
    assert data[-1][0] == "run_status"
    assert waiting["status"] == "awaiting_approval"
    assert (waiting["name"], waiting["tier"], waiting["amount_usd"]) == ("send", "confirm", "60")
    assert waiting["run_id"] == str(run_id)
    started = [d for event, d in data if event == "tool_call" and d["phase"] == "started"]
    assert [d["name"] for d in started] == ["send"]
    assert set(started[0]) == {  # names, kinds and ids: never arguments nor results
        "type", "position", "run_id", "seq", "at", "principal", "tool_use_id", "phase", "name",
        "kind", "reason", "recovery",
    }  # fmt: skip


async def test_last_event_id_resumes_exactly_after_the_last_event_received(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    await start_run(client, keys.alice, "hello")
    await start_run(client, keys.bob, "hello")  # interleaved in the order, never sent to alice
    await start_run(client, keys.alice, "two parts")
    await settle(server)
    everything = brief(
        await read_bus(client, keys.alice, len(await expected(server, principal="alice")))
    )
    assert len(everything) > 20

    for cut in (1, 7, len(everything) // 2, len(everything) - 1):
        last_id = everything[cut - 1][0]
        rest = await read_bus(client, keys.alice, len(everything) - cut, last_event_id=last_id)
        assert brief(rest) == everything[cut:], f"resumed after {cut} events"
        again = await read_bus(client, keys.alice, len(everything) - cut, query=f"?after={last_id}")
        assert brief(again) == everything[cut:]


async def test_a_subscriber_receives_new_runs_live(make_app: AppFactory, keys: Keys) -> None:
    # no polling to speak of: the store's commit bell wakes the stream
    app = make_app(poll_seconds=60.0, heartbeat_seconds=60.0)
    server = app.state.server
    async with client_for(app) as client:
        hello = await start_run(client, keys.alice, "hello")
        await settle(server)
        opened = asyncio.Event()
        reading = asyncio.ensure_future(
            read_bus(client, keys.alice, 4, query="?type=run_status", opened=opened)
        )
        with anyio.fail_after(30):
            await opened.wait()
        run_id = await start_run(client, keys.alice, "send 60")
        with anyio.fail_after(30):
            live = await reading

    assert [(d["run_id"], d["status"]) for _, _, d in live] == [
        (str(hello), "running"),  # the past first...
        (str(hello), "completed"),
        (str(run_id), "running"),  # ... then the new run, as it happens
        (str(run_id), "awaiting_approval"),
    ]


async def test_filters_by_the_kind_of_event_and_the_runs_status(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    done = await start_run(client, keys.alice, "hello")
    waiting = await start_run(client, keys.alice, "send 60")
    await settle(server)

    tools = await read_bus(client, keys.alice, 1, query="?type=tool_call")
    assert [(e, d["name"], d["phase"]) for _, e, d in tools] == [("tool_call", "send", "started")]
    status_and_text = await read_bus(client, keys.alice, 4, query="?type=run_status,text")
    assert {e for _, e, _ in status_and_text} <= {"run_status", "text"}

    want = await expected(server, principal="alice", statuses={"awaiting_approval"})
    assert {run for _, _, run, _ in want} == {str(waiting)}
    seen = await read_bus(client, keys.alice, len(want), query="?status=awaiting_approval")
    assert brief(seen) == want
    both = await read_bus(client, keys.alice, 2, query="?status=completed,failed&type=run_status")
    assert [(d["run_id"], d["status"]) for _, _, d in both] == [
        (str(done), "running"),
        (str(done), "completed"),
    ]


async def test_bad_filters_and_ids_are_refused_clearly(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    body = problem(
        await client.get("/events?type=text,everything", headers=bearer(keys.alice)),
        422,
        "invalid_request",
    )
    assert "unknown type everything: choose among run_status, text, tool_call" in json.dumps(body)
    problem(
        await client.get("/events?status=asleep", headers=bearer(keys.alice)),
        422,
        "invalid_request",
    )
    problem(
        await client.get("/events", headers={**bearer(keys.alice), "last-event-id": "12abc"}),
        400,
        "invalid_last_event_id",
    )
    problem(await client.get("/events"), 401, "unauthenticated")


async def test_follow_false_sends_what_is_stored_and_ends(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    await start_run(client, keys.alice, "hello")
    await settle(server)
    want = await expected(server, principal="alice")

    response = await client.get("/events?follow=false", headers=bearer(keys.alice))

    assert response.status_code == 200
    ids = [int(line[4:]) for line in response.text.splitlines() if line.startswith("id: ")]
    assert ids == [i for i, *_ in want]
