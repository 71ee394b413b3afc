"""The MCP approval resource under dual control: after an approver's edit it shows the edited
arguments the set votes on, their digest and amount, and says it was edited."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from fiduciary import ManualClock, PendingAction, Policy
from fiduciary.capabilities import args_digest
from fiduciary.dual_control import DualControl
from fiduciary.mcp.bridge import McpGateway
from fiduciary.mcp.server import _resource
from fiduciary.stores.memory import MemoryStore
from fiduciary.testing import Call, Reply, Script, ToolCalls, collect

from ..conftest import Effects, make_agent

pytestmark = pytest.mark.timeout(30)


async def test_the_approval_resource_shows_the_edited_set() -> None:
    effects, store, clock = Effects(), MemoryStore(), ManualClock()
    agent = make_agent(
        effects,
        store,
        clock,
        Script("send 150", [ToolCalls([Call("send", {"to": "x", "amount": "150"})]), Reply("ok")]),
        policy=Policy(
            dual_control=[DualControl("finance", frozenset({"bob", "carol"}), required=2)]
        ),
    )
    events = await collect(agent.run("send 150", principal="alice"))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    uri = f"fiduciary://approvals/{pending.approval_id}"
    before = json.loads(await _resource(McpGateway(agent), "alice", uri))
    assert before["edited"] is False
    assert before["args_digest"] == pending.args_digest
    await agent.approve(pending.approval_id, by="carol", edits={"amount": "120"})
    shown = json.loads(await _resource(McpGateway(agent), "alice", uri))
    assert shown["status"] == "pending"
    assert shown["edited"] is True
    assert shown["args"]["amount"] == "120"
    assert shown["args_digest"] == args_digest(shown["args"]) != pending.args_digest
    assert shown["proposed_args_digest"] == pending.args_digest
    assert Decimal(shown["amount_usd"]) == Decimal(120)
