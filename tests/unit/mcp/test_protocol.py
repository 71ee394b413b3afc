"""What the MCP conformance suite found, held by the SDK's own client and plain HTTP: resource
templates are listed, a plain-text result is shown as text, ``/mcp`` validates ``Origin``, and
a pending result links to the console at the address actually served (or the public URL)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from fiduciary.server.app import create_app
from fiduciary.server.auth import MemoryKeyStore
from fiduciary.stores.memory import MemoryStore

from .real_serve import offline_env, real_serve
from .served_agent import mcp_agent
from .serving import Served, result, served

__all__ = ["served"]  # the fixture: stdio and HTTP

pytestmark = pytest.mark.timeout(120)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "origin-test", "version": "1"},
    },
}


async def test_resource_templates_are_listed(served: Served) -> None:
    async with served.connect("alice") as client:
        listed = await client.list_resource_templates()
    assert sorted(t.uri_template for t in listed.resource_templates) == [
        "fiduciary://approvals/{approval_id}",
        "fiduciary://runs/{run_id}",
    ]


async def test_a_plain_text_result_is_shown_as_text(served: Served) -> None:
    async with served.connect("alice") as client:
        answer = await client.call_tool("greeting", {"name": "Ann"})
    assert not answer.is_error
    assert [c.text for c in answer.content if c.type == "text"] == ["hello, Ann"]
    assert result(answer)["result"] == "hello, Ann"


@asynccontextmanager
async def http_app(**options: Any) -> AsyncIterator[tuple[httpx2.AsyncClient, str]]:
    """The app serve runs, in-process, as if reached at 127.0.0.1:8123; alice's key."""
    keys = MemoryKeyStore()
    store = MemoryStore()
    app = create_app(mcp_agent(store), keys=keys, resume_on_start=False, **options)
    key, _ = await keys.create("alice", ["runs:read", "runs:write", "approvals:decide"])
    try:
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app),
            base_url="http://127.0.0.1:8123",
            headers={"authorization": f"Bearer {key}"},
        ) as http:
            yield http, key
    finally:
        await store.close()


def headers(key: str | None, origin: str | None, host: str = "127.0.0.1:8123") -> dict[str, str]:
    sent = {"accept": "application/json, text/event-stream", "host": host}
    sent["authorization"] = "" if key is None else f"Bearer {key}"
    if origin is not None:
        sent["origin"] = origin
    return sent


async def test_an_origin_not_allowed_is_refused_with_403_even_with_a_valid_key() -> None:
    async with http_app() as (http, key):
        for origin, host in (
            ("http://evil.example.com", "127.0.0.1:8123"),
            ("http://evil.example.com", "evil.example.com"),  # DNS rebinding: Host rebound too
            ("http://localhost:3000", "127.0.0.1:8123"),  # another local page
            ("null", "127.0.0.1:8123"),
        ):
            refused = await http.post("/mcp", json=INITIALIZE, headers=headers(key, origin, host))
            assert refused.status_code == 403, (origin, host)
            assert refused.json()["title"] == "forbidden_origin"
            anonymous = await http.post("/mcp", json=INITIALIZE, headers=headers(None, origin))
            assert anonymous.status_code == 403  # before the key is looked at
        for own in (None, "http://127.0.0.1:8123"):  # no browser; the server's own page
            allowed = await http.post("/mcp", json=INITIALIZE, headers=headers(key, own))
            assert allowed.status_code == 200, own
            assert allowed.json()["result"]["serverInfo"]["name"] == "fiduciary"


async def test_configured_origins_and_the_public_urls_are_allowed() -> None:
    options = {
        "public_url": "https://fid.example.com/base/",
        "allowed_origins": ["https://app.example.com", "http://localhost:*"],
    }
    async with http_app(**options) as (http, key):
        for origin in (
            "https://fid.example.com",
            "https://app.example.com",
            "http://localhost:3000",
        ):
            allowed = await http.post("/mcp", json=INITIALIZE, headers=headers(key, origin))
            assert allowed.status_code == 200, origin
        for origin in ("https://app.example.com:8443", "http://app.example.com"):
            refused = await http.post("/mcp", json=INITIALIZE, headers=headers(key, origin))
            assert refused.status_code == 403, origin


async def test_a_pending_result_links_to_the_address_the_request_reached() -> None:
    async with (
        http_app() as (http, _),
        Client(
            streamable_http_client("http://127.0.0.1:8123/mcp", http_client=http), cache=None
        ) as client,
    ):
        pending = result(await client.call_tool("send", {"to": "bob", "amount": 60}))
    assert pending["status"] == "pending_approval"
    assert pending["console_url"] == "http://127.0.0.1:8123/"
    assert pending["approve_with"]["http"].startswith("POST http://127.0.0.1:8123/approvals/")


async def test_a_public_url_is_where_pending_results_link() -> None:
    async with (
        http_app(public_url="https://fid.example.com/base") as (http, _),
        Client(
            streamable_http_client("http://127.0.0.1:8123/mcp", http_client=http), cache=None
        ) as client,
    ):
        pending = result(await client.call_tool("send", {"to": "bob", "amount": 60}))
    assert pending["console_url"] == "https://fid.example.com/base/"


async def test_serve_on_another_port_links_pending_results_to_that_port(tmp_path: Path) -> None:
    with real_serve(tmp_path) as serve:
        assert not serve.url.endswith(":8000/")
        async with (
            httpx2.AsyncClient(headers={"authorization": f"Bearer {serve.key}"}) as http,
            Client(
                streamable_http_client(serve.url + "mcp", http_client=http), cache=None
            ) as client,
        ):
            assert result(await client.call_tool("balance_check", {}))["status"] == "done"
            friend = "0x" + "f1" * 20
            answer = await client.call_tool(
                "send_transfer", {"to": friend, "asset": "USDC", "amount": "5"}
            )
    pending = result(answer)
    assert pending["status"] == "pending_approval", answer.content
    assert pending["console_url"] == serve.url
    (text,) = [c.text for c in answer.content if c.type == "text"]
    assert serve.url in text


def test_serve_refuses_an_origin_that_is_not_one_and_starts_nothing(tmp_path: Path) -> None:
    env = {**offline_env(), "FIDUCIARY_DB": str(tmp_path / "serve.sqlite3")}
    refused = subprocess.run(
        [sys.executable, "-m", "fiduciary", "serve", "--port", "0", "--allow-origin", "evil"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert refused.stderr == "error: 'evil' is not an http(s) origin (scheme://host[:port])\n"
    assert not (tmp_path / "serve.sqlite3").exists()
