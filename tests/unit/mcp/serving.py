"""``fiduciary mcp`` served to the SDK's own client: over stdio (a real ``fiduciary mcp``
process) and over streamable HTTP (the app ``fiduciary serve`` mounts at /mcp, in-process).

``connect(principal, **client_options)`` opens an SDK ``Client`` (``mode=``,
``elicitation_callback=`` ...). Over HTTP, alice and bob hold keys with every default scope;
carol's key may run tools but not decide approvals.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from fiduciary import Agent, ApprovalError, ToolCallEnd, ToolCallStart
from fiduciary.server.app import create_app
from fiduciary.server.auth import MemoryKeyStore
from fiduciary.stores.sqlite import SQLiteStore

from .conftest import ROOT
from .served_agent import mcp_agent

Connect = Callable[..., AbstractAsyncContextManager[Client]]


@dataclass
class Served:
    """``fiduciary mcp`` for alice (and bob), the store it writes, and how a person approves."""

    agent: Agent  # on the same store, in this process: reads what the server wrote
    connect: Connect  # (principal, **client options)
    approve: Callable[[str, str, str], Any]  # (approval id, digest, by) -> awaitable
    effects_file: Path
    transport: str

    def effects(self) -> list[str]:
        f = self.effects_file
        return f.read_text().splitlines() if f.exists() else []


@pytest.fixture(params=["stdio", "http"])
async def served(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Served]:
    db, effects = tmp_path / "runs.sqlite3", tmp_path / "effects.log"
    monkeypatch.setenv("FID_MCP_EFFECTS", str(effects))
    store = SQLiteStore(db)
    agent = mcp_agent(store)
    try:
        if request.param == "stdio":
            yield stdio_served(agent, db, effects)
        else:
            yield await http_served(agent, effects)
    finally:
        await store.close()


def stdio_served(agent: Agent, db: Path, effects: Path, pid_file: Path | None = None) -> Served:
    @asynccontextmanager
    async def connect(principal: str, **options: Any) -> AsyncIterator[Client]:
        params = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "fiduciary",
                "mcp",
                "--agent",
                "tests.unit.mcp.served_agent:mcp_agent",
                "--principal",
                principal,
                "--db",
                str(db),
            ],
            env={
                "PYTHONPATH": str(ROOT),
                "FID_MCP_EFFECTS": str(effects),
                "FID_MCP_PID": str(pid_file or ""),
            },
            cwd=str(ROOT),
        )
        async with Client(params, cache=None, **options) as client:
            yield client

    async def approve(approval_id: str, digest: str, by: str) -> None:
        await agent.approve(UUID(approval_id), by=by, args_digest=digest)

    return Served(agent, connect, approve, effects, "stdio")


async def http_served(agent: Agent, effects: Path) -> Served:
    keys = MemoryKeyStore()
    app = create_app(agent, keys=keys, resume_on_start=False)
    every = ["runs:read", "runs:write", "approvals:decide"]
    issued = {p: (await keys.create(p, every))[0] for p in ("alice", "bob")}
    issued["carol"] = (await keys.create("carol", ["runs:read", "runs:write"]))[0]

    @asynccontextmanager
    async def connect(principal: str, **options: Any) -> AsyncIterator[Client]:
        http = httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app),
            headers={"authorization": f"Bearer {issued[principal]}"},
        )
        async with (
            http,
            Client(
                streamable_http_client("http://testserver/mcp", http_client=http),
                cache=None,
                **options,
            ) as client,
        ):
            yield client

    async def approve(approval_id: str, digest: str, by: str) -> None:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://testserver"
        ) as api:
            answer = await api.post(
                f"/approvals/{approval_id}/approve",
                json={"args_digest": digest},
                headers={"authorization": f"Bearer {issued[by]}"},
            )
            if answer.status_code != 200:  # refused as in-process: the problem's code
                problem = answer.json()
                raise ApprovalError(problem["code"], problem["detail"])

    return Served(agent, connect, approve, effects, "http")


def result(answer: CallToolResult) -> dict[str, Any]:
    assert isinstance(answer.structured_content, dict)
    return answer.structured_content


async def no_done_ledger_row(agent: Agent, run_id: str) -> bool:
    events = [e async for e in agent.events(UUID(run_id), follow=False)]
    assert not [e for e in events if isinstance(e, ToolCallEnd)]
    (start,) = [e for e in events if isinstance(e, ToolCallStart)]
    key = f"{run_id}:{start.tool_use_id}:{start.name}:v1:{start.args_digest}"
    entry = await agent.store.ledger_get(key)
    return entry is None or entry.status != "done"
