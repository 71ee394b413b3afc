"""Live app channels over a real server's ``GET /events`` (uvicorn on a loopback socket, read by
an HTTP client as a user's would): a hook's ``emit: {channel, data}`` arrives as it happens, and
an action a person decides is told on ``action:resolved``, then ``action:executed`` and the
result hook's ``agent:message`` — on a denial only ``action:resolved``. Another principal's key
hears nothing of the apps; each emit is in the app's log too."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from fiduciary import Agent, ManualClock
from fiduciary.apps import AppEngine
from fiduciary.apps.live import AppChannels, AppEmit
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.server.features import Features
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import ScriptedModel

from .support import Book, Hooks, engine

pytestmark = pytest.mark.timeout(120)

ASKER = """---
id: asker
hooks: [tick, result]
tier: standard
capabilities: [balance, repay]
permissions: [repay]
limits: {repay: 100}
---
Repay when asked, and say what happened.
"""


def answers(hooks: Hooks) -> None:
    hooks.on(
        "asker",
        "tick",
        lambda ctx: {
            "reply": "asking",
            "emit": {"channel": "health", "data": {"factor": "1.4"}},
            "intents": [
                {
                    "summary": "repay 30",
                    "permissions": ["repay"],
                    "action": {"capability": "repay", "args": {"usd": "30"}},
                }
            ],
        },
    )
    hooks.on("asker", "result", lambda ctx: {"reply": f"repaid: {ctx['results'][0]['status']}"})


@dataclass
class Heard:
    """The ``app_emit`` events one stream received, in order."""

    emits: list[dict[str, Any]] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # the other events' names
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def until(self, predicate: Any) -> None:
        async with asyncio.timeout(30):
            while not predicate(self.emits):
                self.changed.clear()
                await self.changed.wait()


@asynccontextmanager
async def served(eng: AppEngine, store: SQLiteStore) -> AsyncIterator[tuple[str, str, str]]:
    """The app served for real; (its address, alice's key, bob's key)."""
    import uvicorn

    keys = MemoryKeyStore()
    alice, _ = await keys.create("alice", ["runs:write", "runs:read", "approvals:decide"])
    bob, _ = await keys.create("bob", ["runs:write", "runs:read", "approvals:decide"])
    agent = Agent(model=ScriptedModel([]), capabilities=[], store=store, clock=eng.clock)
    # the scheduler steps often: a decided action continues without the test driving it
    features = Features(apps=eng, tick_seconds=0.05)
    app = create_app(agent, keys=keys, heartbeat_seconds=5, features=features)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", alice, bob
    finally:
        server.should_exit = True
        await serving


@asynccontextmanager
async def listening(base: str, key: str, query: str = "") -> AsyncIterator[Heard]:
    """Follow ``GET /events`` as a client does, from its first byte (the stream is open)."""
    heard = Heard()
    opened = asyncio.Event()

    async def read() -> None:
        headers = {"authorization": f"Bearer {key}"}
        async with (
            httpx.AsyncClient(timeout=httpx.Timeout(60, read=None)) as client,
            client.stream("GET", f"{base}/events{query}", headers=headers) as response,
        ):
            assert response.status_code == 200
            event, data = "message", ""
            async for line in response.aiter_lines():
                if line.startswith(":"):
                    opened.set()  # the server's first bytes: it listens from here on
                elif line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif line == "" and data:
                    if event == "app_emit":
                        heard.emits.append(json.loads(data))
                    else:
                        heard.other.append(event)
                    heard.changed.set()
                    event, data = "message", ""

    task = asyncio.create_task(read())
    async with asyncio.timeout(30):
        await opened.wait()
    try:
        yield heard
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def channels(heard: Heard) -> list[str]:
    return [e["channel"] for e in heard.emits]


async def enabled_and_ticked(base: str, key: str) -> tuple[httpx.AsyncClient, str]:
    """Enable the app through its approval, tick it; the pending repayment's approval id."""
    client = httpx.AsyncClient(base_url=base, headers={"authorization": f"Bearer {key}"})
    await client.post("/apps/asker/enable")
    [enabling] = (await client.get("/apps/asker")).json()["pending"]
    done = await client.post(f"/apps/asker/approvals/{enabling['approval_id']}/approve")
    assert done.status_code == 200, done.text
    await client.post("/apps/asker/enable")
    async with asyncio.timeout(30):
        while True:  # the first slot is ticked by whoever comes first: the scheduler or us
            await client.post("/apps/asker/tick")
            pending = (await client.get("/apps/asker")).json()["pending"]
            if pending:
                return client, pending[0]["approval_id"]


async def test_emits_and_an_approved_actions_channels_arrive_live(tmp_path: Path) -> None:
    hooks = Hooks()
    answers(hooks)
    store = SQLiteStore(tmp_path / "live.sqlite3")
    eng = engine(ASKER, book=Book(), hooks=hooks, clock=ManualClock(), store=store)
    async with (
        served(eng, store) as (base, alice, bob),
        listening(base, alice) as heard,
        listening(base, bob) as bobs,
    ):
        client, approval = await enabled_and_ticked(base, alice)
        await heard.until(lambda emits: "health" in [e["channel"] for e in emits])
        [health] = [e for e in heard.emits if e["channel"] == "health"]
        assert health["app_id"] == "asker"
        assert health["data"] == {"factor": "1.4"}
        assert "run_status" in heard.other  # the runs' own events share the stream

        decided = await client.post(f"/apps/asker/approvals/{approval}/approve")
        assert decided.status_code == 200, decided.text
        await heard.until(lambda emits: "agent:message" in [e["channel"] for e in emits])
        await client.aclose()
    assert channels(heard) == ["health", "action:resolved", "action:executed", "agent:message"]
    resolved, executed, message = (e["data"] for e in heard.emits[1:])
    assert resolved == {"requestId": approval, "approved": True}
    assert executed["requestId"] == approval
    assert executed["status"] == "executed"
    assert json.loads(executed["result"]) == {"repaid": "30"}
    assert message == {"message": "repaid: executed"}
    assert bobs.emits == []  # not bob's apps
    log = await eng.tables.read_log("asker", limit=200)
    logged = [e.detail["data"]["channel"] for e in log if e.kind == "emit"]
    assert set(logged) == {"health", "action:resolved", "action:executed", "agent:message"}
    for told_once in ("action:resolved", "action:executed", "agent:message"):
        assert logged.count(told_once) == 1


async def test_a_denied_action_is_told_on_action_resolved_only(tmp_path: Path) -> None:
    hooks = Hooks()
    answers(hooks)
    store = SQLiteStore(tmp_path / "live.sqlite3")
    eng = engine(ASKER, book=Book(), hooks=hooks, clock=ManualClock(), store=store)
    async with (
        served(eng, store) as (base, alice, _),
        listening(base, alice, "?type=app_emit") as heard,
    ):
        client, approval = await enabled_and_ticked(base, alice)
        denied = await client.post(f"/apps/asker/approvals/{approval}/deny")
        assert denied.status_code == 200, denied.text
        await heard.until(lambda emits: "action:resolved" in [e["channel"] for e in emits])
        async with asyncio.timeout(30):  # the tick that waited on it ends
            # polling the server's answer for a condition: no event tells a tick's end
            tick = (await client.get("/apps/asker")).json()["ticks"][0]
            while tick["status"] != "done":
                await asyncio.sleep(0.05)
                tick = (await client.get("/apps/asker")).json()["ticks"][0]
        await client.aclose()
    assert channels(heard) == ["health", "action:resolved"]
    assert heard.emits[1]["data"] == {"requestId": approval, "approved": False}
    assert heard.other == []  # ?type=app_emit: the apps' emits only


async def test_a_listener_hears_each_emit_once_and_nothing_after_it_stops() -> None:
    channels_ = AppChannels()
    heard: list[AppEmit] = []
    stop = channels_.listen(heard.append)
    emit = AppEmit("dca", "price", {"sui": "1.2"}, "2026-01-01T00:00:00+00:00")
    channels_.publish(emit)
    stop()
    channels_.publish(emit)
    assert heard == [emit]
    assert channels_.listener_count == 0
