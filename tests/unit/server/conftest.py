"""The server under test: a real agent (the demo's billing plus toy transfers), API keys for
several principals, and an httpx client that talks to the app in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

import httpx
import pytest
from starlette.applications import Starlette

from fiduciary import Agent, ManualClock, capability
from fiduciary.demo import Billing, demo_script
from fiduciary.events import Event, decode_event, parse_sse
from fiduciary.server import MemoryKeyStore, RateLimit, Server, create_app
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ToolCalls
from tests.agent_support import make_agent

from ..conftest import Effects, toy_capabilities
from .asgi import StreamingASGITransport

LONG_TEXT = "".join(f"Sentence number {i} of a long answer. " for i in range(40))


@capability(
    kind="execute",
    executor="client",
    operation="send",
    amount_usd=lambda args, ctx: Decimal(args.amount),
)
async def sign_and_send(to: str, amount: str) -> dict[str, str]:
    """The person's device signs and sends this transfer; the server never runs it."""
    raise AssertionError("client-executed")


def scripts() -> list[Script]:
    return [
        demo_script(),
        Script(
            "send 60", [ToolCalls([Call("send", {"to": "bob", "amount": "60"})]), Reply("Sent.")]
        ),
        Script(
            "send 500", [ToolCalls([Call("send", {"to": "bob", "amount": "500"})]), Reply("Sent.")]
        ),
        Script(
            "sign",
            [ToolCalls([Call("sign_and_send", {"to": "bob", "amount": "3"})]), Reply("Signed.")],
        ),
        Script(
            "tip five", [ToolCalls([Call("send", {"to": "bob", "amount": "5"})]), Reply("Sent.")]
        ),
        Script("hello", [Reply(LONG_TEXT, chunk_chars=16)]),
        Script("two parts", [Reply("ok"), Reply(LONG_TEXT, chunk_chars=8)]),
    ]


def billing_agent(store: Store, clock: ManualClock, effects: Effects, billing: Billing) -> Agent:
    return make_agent(
        effects,
        store,
        clock,
        *scripts(),
        capabilities=[*billing.capabilities(), *toy_capabilities(effects), sign_and_send],
    )


@dataclass
class Keys:
    alice: str
    bob: str
    alice_reader: str
    alice_writer: str
    admin: str
    store: MemoryKeyStore


@pytest.fixture
def billing() -> Billing:
    return Billing()


@pytest.fixture
def agent(store: Store, clock: ManualClock, effects: Effects, billing: Billing) -> Agent:
    return billing_agent(store, clock, effects, billing)


@pytest.fixture
async def keys(clock: ManualClock) -> Keys:
    ks = MemoryKeyStore(clock=clock)
    alice, _ = await ks.create("alice", ["runs:write", "runs:read", "approvals:decide"])
    bob, _ = await ks.create("bob", ["runs:write", "runs:read", "approvals:decide"])
    reader, _ = await ks.create("alice", ["runs:read"])
    writer, _ = await ks.create("alice", ["runs:write", "runs:read"])
    admin, _ = await ks.create("ops", ["admin"])
    return Keys(alice, bob, reader, writer, admin, ks)


AppFactory = Callable[..., Starlette]


@pytest.fixture
async def make_app(agent: Agent, keys: Keys) -> AsyncIterator[AppFactory]:
    made: list[Server] = []

    def make(**options: Any) -> Starlette:
        options.setdefault("rate_limit", RateLimit(1000, 60))
        options.setdefault("heartbeat_seconds", 30.0)
        options.setdefault("poll_seconds", 0.05)
        app = create_app(options.pop("agent", agent), keys=keys.store, **options)
        made.append(app.state.server)
        return app

    yield make
    for server in made:
        await server.close()


@pytest.fixture
def app(make_app: AppFactory) -> Starlette:
    return make_app()


@pytest.fixture
def server(app: Starlette) -> Server:
    s = app.state.server
    assert isinstance(s, Server)
    return s


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(app) as c:
        yield c


def client_for(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://test")


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def start_run(client: httpx.AsyncClient, key: str, message: str) -> UUID:
    response = await client.post("/runs", json={"message": message}, headers=bearer(key))
    assert response.status_code == 202, response.text
    return UUID(response.json()["run_id"])


async def settle(server: Server) -> None:
    """Until no run is driven in the background."""
    await server.drives.wait_idle()


async def all_events(client: httpx.AsyncClient, key: str, run_id: UUID) -> list[Event]:
    response = await client.get(f"/runs/{run_id}/events?follow=false", headers=bearer(key))
    assert response.status_code == 200, response.text
    return [decode_event(m.data) for m in parse_sse(response.text) if m.id is not None]


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body["status"] == status
    assert body["type"] == f"urn:fiduciary:problem:{code}"
    assert "Traceback" not in response.text
    return body
