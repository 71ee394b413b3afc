"""The votes of dual control, on every store: once per approver and arguments, only while the
approval is pending, read back as written."""

from __future__ import annotations

import asyncio
from decimal import Decimal

from fiduciary.stores.base import ApprovalRecord, ApprovalVote, Store

from .builders import at, make_approval, make_run, started


async def pending_approval(store: Store) -> ApprovalRecord:
    run = make_run()
    await store.create_run(run, [started(run.run_id)])
    approval = make_approval(run.run_id)
    await store.commit(run.run_id, epoch=0, approvals=[approval])
    return approval


def vote(
    approval: ApprovalRecord, approver: str, digest: str = "d1", s: float = 40
) -> ApprovalVote:
    return ApprovalVote(
        approval_id=approval.approval_id,
        approver=approver,
        args_digest=digest,
        approved_args={"amount": "150.00", "to": "x"},
        tier="confirm",
        amount_usd=Decimal("150.00"),
        at=at(s),
    )


async def test_a_vote_counts_once_per_approver_and_arguments(store: Store) -> None:
    approval = await pending_approval(store)
    bob = vote(approval, "bob")
    assert await store.add_vote(bob) is True
    assert await store.add_vote(vote(approval, "bob", s=41)) is False  # the same person again
    edited = vote(approval, "bob", digest="d2", s=42)
    assert await store.add_vote(edited) is True  # other arguments: a new set
    carol = vote(approval, "carol", s=43)
    assert await store.add_vote(carol) is True
    assert await store.list_votes(approval.approval_id) == [bob, edited, carol]


async def test_no_vote_lands_on_a_decided_or_unknown_approval(store: Store) -> None:
    approval = await pending_approval(store)
    assert await store.decide_approval(approval.with_(status="expired", decided_at=at(50)))
    assert await store.add_vote(vote(approval, "bob")) is False
    assert await store.list_votes(approval.approval_id) == []
    other = make_approval(approval.run_id)  # never committed
    assert await store.add_vote(vote(other, "bob")) is False


async def test_two_approvers_at_once_both_land(store: Store) -> None:
    approval = await pending_approval(store)
    results = await asyncio.gather(
        store.add_vote(vote(approval, "bob")), store.add_vote(vote(approval, "carol"))
    )
    assert list(results) == [True, True]
    assert {v.approver for v in await store.list_votes(approval.approval_id)} == {"bob", "carol"}
