"""Absurd numbers are refused at validation with a clear error, never a crash of ``approve``."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from fiduciary import (
    Agent,
    ApprovalError,
    CallContext,
    ManualClock,
    PendingAction,
    RunCompleted,
    ToolCallRejected,
    capability,
)
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ToolCalls, collect

from .conftest import Effects, make_agent, toy_capabilities

ALICE = "alice"


def betting_agent(effects: Effects, store: Store, clock: ManualClock, *calls: Call) -> Agent:
    def leveraged(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(args.amount) * Decimal("1e9")  # a sane argument, an absurd price

    @capability(kind="execute", operation="send", amount_usd=leveraged)
    async def bet(amount: Decimal) -> dict[str, str]:
        """Bet with leverage."""
        effects.payments.append({"bet": amount})
        return {"ok": "yes"}

    script = Script("pay", [*(ToolCalls([c]) for c in calls), Reply("reported")])
    return make_agent(effects, store, clock, script, capabilities=[*toy_capabilities(effects), bet])


@pytest.mark.parametrize(
    "call",
    [
        Call("send", {"to": "bob", "amount": "1e999"}),
        Call("send", {"to": "bob", "amount": "-1e30"}),
        Call("send", {"to": "bob", "amount": "1e-999"}),
        Call("bet", {"amount": "10000000"}),  # priced at $10^16
    ],
    ids=["huge", "huge-negative", "tiny", "priced-beyond-range"],
)
async def test_a_model_amount_beyond_any_sane_range_is_an_error_for_the_model(
    effects: Effects, store: Store, clock: ManualClock, call: Call
) -> None:
    agent = betting_agent(effects, store, clock, call)
    events = await collect(agent.run("pay bob", principal=ALICE))
    (rejected,) = [e for e in events if isinstance(e, ToolCallRejected)]
    assert rejected.reason == "invalid_input"
    assert "out of range" in rejected.message or "beyond" in rejected.message
    assert not [e for e in events if isinstance(e, PendingAction)]
    assert isinstance(events[-1], RunCompleted)
    assert effects.payments == []


async def test_an_absurd_typed_amount_or_edit_is_an_approval_error(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = betting_agent(effects, store, clock, Call("send", {"to": "bob", "amount": "700"}))
    events = await collect(agent.run("pay bob", principal=ALICE))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    assert pending.tier == "explicit"
    for typed in ("1e30", "1e999", "-1e30", "NaN", "Infinity", "1e-999"):
        with pytest.raises(ApprovalError) as err:
            await agent.approve(pending.approval_id, by=ALICE, confirm_amount=typed)
        assert err.value.code == "acknowledgement_required", typed
    with pytest.raises(ApprovalError) as err:
        await agent.approve(
            pending.approval_id, by=ALICE, edits={"amount": "1e999"}, confirm_amount="700"
        )
    assert err.value.code == "invalid_edit"
    await agent.approve(pending.approval_id, by=ALICE, confirm_amount="700")
    await collect(agent.resume(pending.run_id))
    assert effects.payments == [{"to": "bob", "amount": Decimal("700"), "memo": ""}]
