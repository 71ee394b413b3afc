"""Dual control over the Python API: N distinct approvers of a group, the proposer never one."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from fiduciary import Agent, ApprovalError, ManualClock, PendingAction, Policy
from fiduciary.dual_control import DualControl, progress
from fiduciary.events import ActionResolved, ToolCallEnd
from fiduciary.exceptions import ConfigurationError
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ToolCalls, collect

from .conftest import Effects, make_agent

pytestmark = pytest.mark.timeout(30)

FINANCE = DualControl(
    "finance", frozenset({"alice", "bob", "carol"}), required=2, at_or_above_usd=Decimal(100)
)


def dual_agent(effects: Effects, store: Store, clock: ManualClock) -> Agent:
    return make_agent(
        effects,
        store,
        clock,
        Script("send 150", [ToolCalls([Call("send", {"to": "x", "amount": "150"})]), Reply("ok")]),
        Script("send 50", [ToolCalls([Call("send", {"to": "x", "amount": "50"})]), Reply("ok")]),
        policy=Policy(dual_control=[FINANCE]),
    )


async def proposed(
    effects: Effects,
    store: Store,
    clock: ManualClock,
    message: str = "send 150",
    *,
    voted_by: str | None = None,
) -> tuple[Agent, PendingAction]:
    """A dual-control agent whose run, alice's ``message``, waits for approval; with a first
    vote by ``voted_by`` when given (one of the two the rule needs at 150)."""
    agent = dual_agent(effects, store, clock)
    pending = await pending_of(agent, message)
    if voted_by is not None:
        await agent.approve(pending.approval_id, by=voted_by)
    return agent, pending


async def pending_of(agent: Agent, message: str, principal: str = "alice") -> PendingAction:
    events = await collect(agent.run(message, principal=principal))
    return next(e for e in events if isinstance(e, PendingAction))


async def test_the_proposer_cannot_approve_its_own_action_even_as_admin(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    from fiduciary import Principal

    agent, pending = await proposed(effects, store, clock)
    for who in ("alice", Principal("alice", frozenset({"admin"}))):
        with pytest.raises(ApprovalError) as caught:
            await agent.approve(pending.approval_id, by=who)
        assert caught.value.code == "separation_of_duties"
        assert caught.value.message == (
            "the proposer of an action cannot approve it: it needs 2 approvers of finance"
        )
    with pytest.raises(ApprovalError) as outsider:
        await agent.approve(pending.approval_id, by="mallory")
    assert outsider.value.code == "separation_of_duties"
    assert outsider.value.message == "only members of finance can approve this action"
    record = await store.get_approval(pending.approval_id)
    assert record is not None
    assert record.status == "pending"
    assert await store.list_votes(pending.approval_id) == []


async def test_two_of_three_approve_and_the_action_runs_once(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent, pending = await proposed(effects, store, clock)
    first = await agent.approve(pending.approval_id, by="bob")
    assert first.status == "pending"
    # one person counts once, however many times (devices, channels) they approve
    with pytest.raises(ApprovalError) as again:
        await agent.approve(pending.approval_id, by="bob")
    assert again.value.code == "already_voted"
    # a resume before the N-th approval runs nothing
    await collect(agent.resume(pending.run_id))
    assert effects.payments == []
    clock.advance(timedelta(minutes=3))
    second = await agent.approve(pending.approval_id, by="carol")
    assert second.status == "approved"
    assert second.decided_by == "bob, carol"
    events = await collect(agent.resume(pending.run_id))
    resolved = [(e.decision, e.by) for e in events if isinstance(e, ActionResolved)]
    assert resolved == [("approved", "bob, carol")]
    assert len(effects.payments) == 1
    assert [e for e in events if isinstance(e, ToolCallEnd) and not e.is_error]
    with pytest.raises(ApprovalError) as late:
        await agent.approve(pending.approval_id, by="alice")
    assert late.value.code == "separation_of_duties"  # the proposer, even after the decision


async def test_a_deny_after_one_approval_denies(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent, pending = await proposed(effects, store, clock, voted_by="bob")
    denied = await agent.deny(pending.approval_id, by="carol", reason="not budgeted")
    assert denied.status == "denied"
    with pytest.raises(ApprovalError) as after:
        await agent.approve(pending.approval_id, by="carol")
    assert after.value.code == "already_decided"
    await collect(agent.resume(pending.run_id))
    assert effects.payments == []


async def test_an_edit_starts_a_new_approval_set(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent, pending = await proposed(effects, store, clock, voted_by="bob")
    edited = await agent.approve(pending.approval_id, by="carol", edits={"amount": "120"})
    assert edited.status == "pending"  # carol's vote is for other arguments than bob's
    votes = await store.list_votes(pending.approval_id)
    shown = progress(FINANCE, votes)
    assert shown.approvers == ("carol",)
    assert [v.approver for v in shown.superseded] == ["bob"]
    assert shown.text() == (
        f"1 of 2 approved (carol, {votes[-1].at:%H:%M}); an edit started a new approval set"
    )
    done = await agent.approve(pending.approval_id, by="bob", edits={"amount": "120"})
    assert done.status == "approved"
    assert done.approved_args is not None
    assert done.approved_args["amount"] == "120"
    await collect(agent.resume(pending.run_id))
    assert [p["amount"] for p in effects.payments] == [Decimal("120")]


async def test_expiry_applies_to_the_whole_set(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent, pending = await proposed(effects, store, clock, voted_by="bob")
    clock.advance(timedelta(hours=1))
    with pytest.raises(ApprovalError) as late:
        await agent.approve(pending.approval_id, by="carol")
    assert late.value.code == "expired"
    await collect(agent.resume(pending.run_id))
    assert effects.payments == []


async def test_below_the_threshold_the_proposer_approves_alone(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent, pending = await proposed(effects, store, clock, "send 50")
    decided = await agent.approve(pending.approval_id, by="alice")
    assert decided.status == "approved"
    await collect(agent.resume(pending.run_id))
    assert len(effects.payments) == 1


def test_a_rule_must_be_possible() -> None:
    with pytest.raises(ConfigurationError, match="between 1 and the 2 members"):
        DualControl("ops", frozenset({"a", "b"}), required=3)
    with pytest.raises(ConfigurationError, match="collection of names"):
        DualControl("ops", "alice", required=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="at_or_above_usd"):
        DualControl("ops", frozenset({"a", "b"}), at_or_above_usd=100.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="DualControl rules"):
        Policy(dual_control=["finance"])  # type: ignore[list-item]


async def test_the_last_approval_and_the_expiry_at_once_give_one_outcome(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    import asyncio

    agent, pending = await proposed(effects, store, clock, voted_by="bob")
    record = await store.get_approval(pending.approval_id)
    assert record is not None
    expired = record.with_(status="expired", decided_at=clock.now())
    # the sweep marking it expired and carol's approval, in the same instant
    outcomes = await asyncio.gather(
        store.decide_approval(expired),
        agent.approve(pending.approval_id, by="carol"),
        return_exceptions=True,
    )
    final = await store.get_approval(pending.approval_id)
    assert final is not None
    if final.status == "expired":
        assert outcomes[0] is True
        assert isinstance(outcomes[1], ApprovalError)
    else:
        assert final.status == "approved"
        assert outcomes[0] is False
    await collect(agent.resume(pending.run_id))
    assert len(effects.payments) == (1 if final.status == "approved" else 0)


async def test_each_of_the_n_approvals_is_signed_when_the_policy_says_so(
    effects: Effects, store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    from fiduciary.passkeys import PasskeyRegistry, Passkeys, verify_run
    from fiduciary.signed_approvals import SignatureRule, binding, challenge

    from .softauthn import SoftAuthenticator

    registry = PasskeyRegistry(tmp_path / "passkeys.sqlite3")
    passkeys = Passkeys(registry, rp_id="localhost", origins=["http://localhost"], clock=clock)
    devices = {}
    for who in ("bob", "carol"):
        devices[who] = SoftAuthenticator("localhost", "http://localhost")
        options = passkeys.registration_options(who)
        passkeys.register(who, devices[who].create(options), name=f"{who}'s phone")
    agent = make_agent(
        effects,
        store,
        clock,
        Script("send 150", [ToolCalls([Call("send", {"to": "x", "amount": "150"})]), Reply("ok")]),
        policy=Policy(
            dual_control=[FINANCE], signatures=SignatureRule(at_or_above_usd=Decimal(100))
        ),
    ).with_options(signatures=passkeys)
    pending = await pending_of(agent, "send 150")
    record = await store.get_approval(pending.approval_id)
    assert record is not None
    signed = binding(
        record, args_digest=record.args_digest, tier=record.tier, amount_usd=record.amount_usd
    )
    with pytest.raises(ApprovalError) as unsigned:
        await agent.approve(pending.approval_id, by="bob")
    assert unsigned.value.code == "signature_required"
    for who in ("bob", "carol"):
        await agent.approve(
            pending.approval_id, by=who, assertion=devices[who].get(challenge(signed))
        )
    await collect(agent.resume(pending.run_id))
    assert len(effects.payments) == 1
    verdicts = verify_run(registry, pending.run_id)
    assert [(v.approver, v.valid) for v in verdicts] == [("bob", True), ("carol", True)]
    registry.close()


async def test_a_member_cannot_report_a_client_executed_result(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    from fiduciary import capability

    @capability(
        kind="execute", executor="client", operation="send", amount_usd=lambda a, c: a.amount
    )
    async def sign_and_send(to: str, amount: Decimal) -> dict[str, str]:
        """The person's device signs and sends this transfer."""
        raise AssertionError("client-executed")

    agent = make_agent(
        effects,
        store,
        clock,
        Script(
            "sign 150",
            [ToolCalls([Call("sign_and_send", {"to": "x", "amount": "150"})]), Reply("ok")],
        ),
        capabilities=[sign_and_send],
        policy=Policy(dual_control=[FINANCE]),
    )
    pending = await pending_of(agent, "sign 150")
    with pytest.raises(ApprovalError) as caught:
        await agent.submit_result(pending.approval_id, {"tx": "0x1"}, by="bob")
    assert caught.value.code == "forbidden"
    record = await store.get_approval(pending.approval_id)
    assert record is not None
    assert record.status == "pending"
