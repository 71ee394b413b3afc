"""The configurations in docs/mcp.md, used as written with the SDK's own client: the Claude
Desktop / Cursor block launches ``fiduciary mcp`` (only the database path swapped for a
temporary one), the HTTP block reaches ``/mcp`` of the app ``fiduciary serve`` runs (only the key
swapped), and the external servers' TOML and JSON read as the server reads them."""

from __future__ import annotations

import json
import re
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from fiduciary.mcp.config import parse_config
from fiduciary.server.app import create_app
from fiduciary.server.auth import MemoryKeyStore
from fiduciary.stores.memory import MemoryStore

from .conftest import ROOT
from .served_agent import mcp_agent

pytestmark = pytest.mark.timeout(120)

TEXT = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")


def _servers() -> dict[str, Any]:
    """Every mcpServers entry of the page's JSON blocks, by name."""
    found: dict[str, Any] = {}
    for block in re.findall(r"```json\n(.*?)```", TEXT, re.S):
        found.update(json.loads(block).get("mcpServers", {}))
    return found


async def test_the_documented_client_configuration_serves_the_wallet(tmp_path: Path) -> None:
    config = _servers()["fiduciary"]
    args = [str(a) for a in config["args"]]
    args[args.index("--db") + 1] = str(tmp_path / "fiduciary.sqlite3")
    # the documented absolute path is the reader's venv: the same program in this venv
    command = shutil.which(Path(config["command"]).name, path=str(Path(sys.executable).parent))
    assert command is not None
    params = StdioServerParameters(command=command, args=args, cwd=str(tmp_path))
    async with Client(params, cache=None) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        answer = await client.call_tool("rates_info", {})
    assert {"balance_check", "send_transfer", "swap_execute"} <= names
    assert not answer.is_error
    assert answer.structured_content is not None
    assert answer.structured_content["status"] == "done"


async def test_the_documented_http_configuration_reaches_serves_mcp_endpoint() -> None:
    config = _servers()["fiduciary-http"]
    url = httpx2.URL(config["url"])
    assert (url.host, url.port) == ("127.0.0.1", 8000)  # serve's defaults
    keys = MemoryKeyStore()
    store = MemoryStore()
    app = create_app(mcp_agent(store), keys=keys, resume_on_start=False)
    key, _ = await keys.create("demo-user", ["runs:read", "runs:write", "approvals:decide"])
    headers = {
        k: v.replace("fid_...", key) for k, v in config["headers"].items()
    }  # the placeholder, swapped for a real key
    try:
        async with (
            httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), headers=headers) as http,
            Client(
                streamable_http_client(f"http://testserver{url.path}", http_client=http),
                cache=None,
            ) as client,
        ):
            names = {t.name for t in (await client.list_tools()).tools}
            answer = await client.call_tool("balance", {"account": "main"})
    finally:
        await store.close()
    assert "balance" in names
    assert answer.structured_content is not None
    assert answer.structured_content["status"] == "done"


def test_the_documented_external_servers_read_as_configured() -> None:
    (toml,) = [b for b in re.findall(r"```toml\n(.*?)```", TEXT, re.S) if "[[mcp]]" in b]
    tables = parse_config(tomllib.loads(toml))
    assert [(c.name, c.prefix, c.command or c.url) for c in tables] == [
        ("bank", "bank_", "python"),
        ("notes", "notes_", "http://127.0.0.1:9000/mcp"),
    ]
    assert tables[0].operations["transfer"].amount == "amount"
    servers = _servers()
    documented = {"mcpServers": {n: servers[n] for n in ("bank", "notes")}}
    assert [(c.name, c.prefix) for c in parse_config(documented)] == [
        ("bank", "bank_"),
        ("notes", ""),
    ]
