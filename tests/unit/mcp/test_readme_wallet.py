"""The README's Claude Desktop configuration, used as a person would: ``fiduciary mcp`` with the
wallet agent, started with the block's exact command and arguments (the command found in this
test's environment, the database in a temporary directory), driven by the MCP SDK's client.

A write over MCP is a run of its own, so its guards see the principal's recent MCP calls and
know the call is relayed (``fiduciary.mcp.recent``): a ``balance_check`` a moment ago satisfies
``balance_freshness``; an address the client gives is held for the person (``address_source``
and ``new_recipient``) instead of refused forever. A chat run sees only its own log, as before.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult

from fiduciary import Agent, ManualClock, Principal
from fiduciary.events import PendingAction, ToolCallRejected
from fiduciary.exceptions import ApprovalError
from fiduciary.mcp import McpGateway
from fiduciary.server.served import wallet_agent
from fiduciary.stores.memory import MemoryStore
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, collect
from fiduciary.wallet import PaperWallet, build_wallet_agent

from .conftest import ROOT

pytestmark = pytest.mark.timeout(180)

FRIEND = "0x" + "f1" * 20
SEND = {"to": FRIEND, "asset": "USDC", "amount": "5"}


def readme_server() -> dict[str, Any]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, re.S)]
    (config,) = [b["mcpServers"]["fiduciary"] for b in blocks if "mcpServers" in b]
    assert isinstance(config, dict)
    return config


@asynccontextmanager
async def readme_client(db: Path) -> AsyncIterator[Client]:
    """The README's block launched as a desktop client would (only the command's directory and
    the database path are this test's)."""
    config = readme_server()
    args = [str(a) for a in config["args"]]
    args[args.index("--db") + 1] = str(db)
    command = shutil.which(Path(config["command"]).name, path=str(Path(sys.executable).parent))
    assert command is not None
    params = StdioServerParameters(command=command, args=args, cwd=str(db.parent))
    async with Client(params, cache=None) as client:
        yield client


def status(answer: CallToolResult) -> str:
    assert answer.structured_content is not None, answer.content
    found = answer.structured_content["status"]
    assert isinstance(found, str)
    return found


def usdc(answer: CallToolResult) -> Decimal:
    assert answer.structured_content is not None
    report = answer.structured_content["result"]
    (held,) = [h for h in report["available"] if h["asset"] == "USDC"]
    return Decimal(held["amount"])


async def test_the_readme_configuration_reads_then_sends_once_after_approval(
    tmp_path: Path,
) -> None:
    db = tmp_path / "fiduciary.sqlite3"
    async with readme_client(db) as client:
        before = await client.call_tool("balance_check", {})
        assert status(before) == "done"
        pending = await client.call_tool("send_transfer", SEND)
        assert status(pending) == "pending_approval", pending.content
        assert pending.structured_content is not None
        details = pending.structured_content

        store = SQLiteStore(db)  # the person decides, on the same database
        try:
            agent = wallet_agent(store).agent
            run_id = UUID(pending.structured_content["run_id"])
            (card,) = [
                e async for e in agent.events(run_id, follow=False) if isinstance(e, PendingAction)
            ]
            held = {n.guard for n in card.guard_notes}
            assert {"address_source", "new_recipient"} <= held  # the person checks the address
            await agent.approve(
                UUID(details["approval_id"]), by="demo-user", args_digest=details["args_digest"]
            )
        finally:
            await store.close()

        sent = await client.call_tool("send_transfer", SEND)
        assert status(sent) == "done", sent.content
        again = await client.call_tool("send_transfer", SEND)
        assert status(again) == "done"  # the recorded outcome: executed once
        after = await client.call_tool("balance_check", {})
    assert usdc(before) - usdc(after) == Decimal(5)


async def test_a_chat_run_does_not_see_the_principals_mcp_reads(tmp_path: Path) -> None:
    db = tmp_path / "fiduciary.sqlite3"
    async with readme_client(db) as client:
        assert status(await client.call_tool("balance_check", {})) == "done"

    store = SQLiteStore(db)
    wallet = PaperWallet(str(db))
    try:
        for message, refused_by in (
            (f"send 5 USDC to {FRIEND}", "balance_freshness"),  # no balance read in this run
            ("send 5 USDC to my friend", "address_source"),  # an address from nowhere
        ):
            model = ScriptedModel(
                [Script(lambda _t: True, [ToolCalls([Call("send_transfer", SEND)]), Reply("ok")])]
            )
            agent = build_wallet_agent(store, wallet, model=model)
            events = await collect(agent.run(message, principal="demo-user"))
            (refused,) = [e for e in events if isinstance(e, ToolCallRejected)]
            assert refused.reason == "guard_blocked"
            assert f"Blocked by {refused_by}" in refused.message, refused.message
    finally:
        wallet.close()
        await store.close()


def wallet_over_mcp(clock: ManualClock) -> tuple[Agent, McpGateway, PaperWallet]:
    wallet = PaperWallet(":memory:", clock=clock)
    agent = build_wallet_agent(MemoryStore(), wallet, model=ScriptedModel([]), clock=clock)
    return agent, McpGateway(agent), wallet


async def test_an_mcp_read_counts_for_five_minutes_and_a_write_since_it_needs_another() -> None:
    clock = ManualClock()
    agent, gateway, wallet = wallet_over_mcp(clock)
    me = Principal("ann")
    try:
        assert (await gateway.call(me, "balance_check", {})).status == "done"
        clock.advance(timedelta(minutes=6))
        stale = await gateway.call(me, "save_deposit", {"asset": "USDC", "amount": "10"})
        assert stale.status == "refused"
        assert "balance_freshness" in stale.text

        assert (await gateway.call(me, "balance_check", {})).status == "done"
        clock.advance(timedelta(seconds=1))
        saved = await gateway.call(me, "save_deposit", {"asset": "USDC", "amount": "11"})
        assert saved.status == "done", saved.text
        clock.advance(timedelta(seconds=1))
        again = await gateway.call(me, "save_deposit", {"asset": "USDC", "amount": "12"})
        assert again.status == "refused"
        assert "save_deposit changed the balances after they were last read" in again.text

        other = Principal("bob")  # ann's reads are not bob's
        assert (
            await gateway.call(other, "save_deposit", {"asset": "USDC", "amount": "13"})
        ).status == "refused"
    finally:
        wallet.close()
        await agent.store.close()


async def test_an_edit_while_approving_an_mcp_write_is_refused_and_it_stays_pending() -> None:
    clock = ManualClock()
    agent, gateway, wallet = wallet_over_mcp(clock)
    me = Principal("ann")
    try:
        assert (await gateway.call(me, "balance_check", {})).status == "done"
        pending = await gateway.call(me, "send_transfer", SEND)
        assert pending.status == "pending_approval"
        approval_id = UUID(pending.details["approval_id"])
        with pytest.raises(ApprovalError) as refused:
            await agent.approve(approval_id, by="ann", edits={"amount": "4"})
        assert refused.value.code == "invalid_edit"
        (waiting,) = await agent.pending_approvals(principal="ann")
        assert waiting.approval_id == approval_id
        await agent.approve(approval_id, by="ann", args_digest=pending.details["args_digest"])
        assert (await gateway.call(me, "send_transfer", SEND)).status == "done"
    finally:
        wallet.close()
        await agent.store.close()
