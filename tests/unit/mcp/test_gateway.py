"""McpGateway in-process: an approval that expired is settled on the next identical call."""

from __future__ import annotations

from datetime import timedelta

from fiduciary import Agent, ManualClock, Principal
from fiduciary.mcp import McpGateway
from fiduciary.stores.memory import MemoryStore
from fiduciary.testing import ScriptedModel, allow_all

from .served_agent import balance, send


async def test_an_expired_approval_is_refused_then_the_call_may_wait_again() -> None:
    clock = ManualClock()
    agent = Agent(
        model=ScriptedModel([]),
        capabilities=[balance, send],
        store=MemoryStore(),
        authorize=allow_all,
        clock=clock,
    )
    gateway = McpGateway(agent)
    alice = Principal("alice")
    first = await gateway.call(alice, "send", {"to": "bob", "amount": 60})
    assert first.status == "pending_approval"
    clock.advance(timedelta(minutes=16))
    expired = await gateway.call(alice, "send", {"to": "bob", "amount": 60})
    assert expired.status == "refused"
    assert expired.details["reason"] == "expired"
    again = await gateway.call(alice, "send", {"to": "bob", "amount": 60})
    assert again.status == "pending_approval"
    assert again.details["approval_id"] != first.details["approval_id"]


async def test_an_unknown_tool_is_refused() -> None:
    agent = Agent(model=ScriptedModel([]), capabilities=[balance], store=MemoryStore())
    outcome = await McpGateway(agent).call(Principal("alice"), "send", {"to": "bob"})
    assert outcome.status == "refused"
    assert outcome.is_error
