"""A swap whose quote went stale is made anew from its card: a fresh quote, a new approval;
the old approval ends superseded and can never be approved."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from fiduciary import Agent, ManualClock, Policy
from fiduciary.clock import Clock
from fiduciary.events import ActionResolved, PendingAction, ToolCallEnd
from fiduciary.exceptions import ApprovalError
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, collect
from fiduciary.wallet import PaperWallet, build_wallet_agent

from .conftest import available

pytestmark = pytest.mark.timeout(30)


def _swap(results: Any) -> dict[str, Any]:
    quote = results.get("swap_quote") or {}
    return {
        "from_asset": "USDC",
        "to_asset": "SUI",
        "amount": "500",
        "max_slippage_pct": "1",
        "quote_id": quote.get("quote_id"),
    }


def swap_script() -> Script:
    return Script(
        "swap",
        [
            ToolCalls(
                [
                    Call("balance_check"),
                    Call("swap_quote", {"from_asset": "USDC", "to_asset": "SUI", "amount": "500"}),
                ]
            ),
            ToolCalls([Call("swap_execute", _swap)]),
            Reply("Swapped."),
        ],
    )


def swap_agent(store: Store, wallet: PaperWallet, clock: Clock | None = None) -> Agent:
    return build_wallet_agent(
        store,
        wallet,
        model=ScriptedModel([swap_script()]),
        policy=Policy(preset="conservative", daily_autonomous_limit_usd=None),
        clock=clock,
    )


async def test_a_stale_swap_is_made_anew_and_the_old_approval_cannot_run(
    store: Store, wallet: PaperWallet, clock: ManualClock
) -> None:
    agent = swap_agent(store, wallet, clock)
    events = await collect(agent.run("swap 500 USDC for SUI", principal="ann"))
    run_id = events[0].run_id
    (first,) = [e for e in events if isinstance(e, PendingAction)]
    assert first.quoted_at == clock.now()  # quoted this instant
    old_quote = first.input["quote_id"]

    clock.advance(timedelta(seconds=90))  # the quote (60 s) is stale; the approval is not
    superseded = await agent.regenerate(first.approval_id, by="ann")
    assert superseded.status == "superseded"
    events = await collect(agent.resume(run_id))
    (resolved,) = [e for e in events if isinstance(e, ActionResolved)]
    assert (resolved.approval_id, resolved.decision) == (first.approval_id, "superseded")
    (second,) = [e for e in events if isinstance(e, PendingAction)]
    assert second.regenerated_from == first.approval_id
    assert second.tool_use_id == first.tool_use_id
    assert second.input["quote_id"] != old_quote
    assert second.args_digest != first.args_digest
    assert second.quoted_at == clock.now()
    assert (await store.get_run(run_id)).status == "awaiting_approval"  # type: ignore[union-attr]
    live = await store.list_approvals(run_id=run_id, status="pending")
    assert [a.approval_id for a in live] == [second.approval_id]

    # the old one can never be approved, digest-bound or not
    for digest in (first.args_digest, None):
        with pytest.raises(ApprovalError) as refused:
            await agent.approve(first.approval_id, by="ann", args_digest=digest)
        assert refused.value.code == "already_decided"
    # a digest of the old arguments does not approve the new one
    with pytest.raises(ApprovalError) as mismatch:
        await agent.approve(second.approval_id, by="ann", args_digest=first.args_digest)
    assert mismatch.value.code == "digest_mismatch"

    sui_before = available(wallet, "ann", "SUI")
    assert second.tier == first.tier  # never below the tier first shown
    await agent.approve(
        second.approval_id,
        by="ann",
        args_digest=second.args_digest,
        confirm_amount=second.amount_usd if second.tier == "explicit" else None,
    )
    events = await collect(agent.resume(run_id))
    (end,) = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "swap_execute"]
    assert not end.is_error, end.output
    assert available(wallet, "ann", "SUI") > sui_before
    audit = await store.audit_records(run_id)
    assert "superseded" in [row.outcome for row in audit]


async def test_only_a_capability_that_declares_regenerate_can(
    store: Store, wallet: PaperWallet, clock: ManualClock
) -> None:
    agent = build_wallet_agent(
        store,
        wallet,
        model=ScriptedModel(
            [
                Script(
                    "save",
                    [
                        ToolCalls([Call("balance_check")]),
                        ToolCalls([Call("save_deposit", {"asset": "USDC", "amount": "900"})]),
                        Reply("Saved."),
                    ],
                )
            ]
        ),
        policy=Policy(preset="conservative", daily_autonomous_limit_usd=None),
        clock=clock,
    )
    events = await collect(agent.run("save 900", principal="ann"))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    assert pending.quoted_at is None
    assert "quoted_at" not in pending.model_dump_json()
    with pytest.raises(ApprovalError) as refused:
        await agent.regenerate(pending.approval_id, by="ann")
    assert refused.value.code == "not_regenerable"
    record = await store.get_approval(pending.approval_id)
    assert record is not None
    assert record.status == "pending"
    with pytest.raises(ApprovalError) as other:
        await agent.regenerate(pending.approval_id, by="bob")
    assert other.value.code == "forbidden"
    assert Decimal(pending.input["amount"]) == Decimal("900")
