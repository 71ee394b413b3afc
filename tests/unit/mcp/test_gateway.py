"""McpGateway in-process: an approval that expired is settled on the next identical call."""

from __future__ import annotations

import json
from datetime import timedelta

from fiduciary import Agent, ManualClock, Principal, capability
from fiduciary.mcp import McpGateway
from fiduciary.mcp.elicit import ApprovalAsker
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


async def test_a_pending_result_carries_the_guards_sentences_for_the_person() -> None:
    @capability(kind="execute", operation="send", flags={"irreversible"})
    async def wire(to: str) -> dict[str, str]:
        """Wire money: cannot be undone."""
        return {"to": to}

    agent = Agent(
        model=ScriptedModel([]),
        capabilities=[wire],
        store=MemoryStore(),
        authorize=allow_all,
        clock=ManualClock(),
    )
    gateway = McpGateway(agent)
    pending = await gateway.call(Principal("alice"), "wire", {"to": "bob"})
    assert pending.status == "pending_approval"
    person = (
        "wire cannot be undone, and no preview was shown first: check every detail below "
        "before you approve."
    )
    assert pending.details["notes"] == [
        {"guard": "irreversibility", "verdict": "hint", "message": person}
    ]
    question = ApprovalAsker(gateway)._question(pending)  # what the MCP client asks the person
    assert f"Note: {person}" in question.params.message
    for shown in (json.dumps(pending.details), pending.text, question.params.message):
        assert "state exactly what will happen" not in shown  # the model's sentence
