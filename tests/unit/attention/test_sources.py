"""The shipped sources: fiduciary's own events, inbound webhooks, the paper wallet."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import uuid4

import httpx
from starlette.applications import Starlette

from fiduciary import ManualClock
from fiduciary.attention.actions import RouteAction
from fiduciary.attention.record import AttentionRecord
from fiduciary.attention.sources import FiduciaryEvents, Webhooks, webhook_route
from fiduciary.attention.testing import RuleJudge
from fiduciary.attention.watch import Attention
from fiduciary.events import RunFailed, RunStarted, ToolCallEnd, UserMessage
from fiduciary.signing import InboundChannel, sign
from fiduciary.stores.base import ApprovalRecord, RunRecord, Store
from fiduciary.wallet.addresses import address_of
from fiduciary.wallet.operations import Borrow, Send
from fiduciary.wallet.wallet import PaperWallet
from fiduciary.wallet.watch import WalletWatch


async def a_run(store: Store, clock: ManualClock, *tail: type) -> RunRecord:
    rid = uuid4()
    now = clock.now()
    run = RunRecord(
        run_id=rid, principal="alice", status="failed", created_at=now, updated_at=now, epoch=1
    )
    events: list[Any] = [
        RunStarted(
            run_id=rid,
            seq=1,
            at=now,
            principal="alice",
            capabilities=[],
            model="m",
            allowed_kinds=[],
        ),
        UserMessage(run_id=rid, seq=2, at=now, text="go"),
    ]
    for kind in tail:
        seq = len(events) + 1
        if kind is RunFailed:
            events.append(RunFailed(run_id=rid, seq=seq, at=now, reason="budget", message="$"))
        else:
            events.append(
                ToolCallEnd(
                    run_id=rid,
                    seq=seq,
                    at=now,
                    tool_use_id="t1",
                    name="send",
                    output="unknown",
                    recovery="unknown",
                )
            )
    await store.create_run(run, events)
    return run


async def test_fiduciary_events_budget_failures_unknown_outcomes_and_expired_approvals(
    store: Store, clock: ManualClock
) -> None:
    budget = await a_run(store, clock, RunFailed)
    unknown = await a_run(store, clock, ToolCallEnd)
    await a_run(store, clock)  # nothing to see
    now = clock.now()
    approval = ApprovalRecord(
        approval_id=uuid4(),
        run_id=unknown.run_id,
        tool_use_id="t2",
        principal="alice",
        capability="send",
        args={},
        args_digest="d",
        tier="confirm",
        amount_usd=Decimal("40"),
        modifiable_fields=(),
        executor="server",
        status="pending",
        created_at=now,
        expires_at=now + timedelta(minutes=10),
    )
    await store.commit(unknown.run_id, epoch=1, approvals=[approval])
    source = FiduciaryEvents(store, clock=clock, once=True)
    (batch,) = [b async for b in source.batches(None)]
    assert sorted(e.type for e in batch.events) == ["run_failed_budget", "unknown_outcome"]
    assert {e.data["run_id"] for e in batch.events} == {str(budget.run_id), str(unknown.run_id)}
    assert batch.cursor == now.isoformat()
    clock.advance(timedelta(minutes=11))  # the approval expires unanswered
    (later,) = [b async for b in source.batches(batch.cursor)]
    assert [e.type for e in later.events if e.type == "approval_expired"] == ["approval_expired"]
    expired = next(e for e in later.events if e.type == "approval_expired")
    assert expired.data["amount_usd"] == "40"
    assert expired.id == f"approval_expired:{approval.approval_id}"


async def test_fiduciary_events_through_the_record_are_taken_once(
    store: Store, clock: ManualClock
) -> None:
    await a_run(store, clock, RunFailed)
    record = AttentionRecord()
    judge = RuleJudge(lambda _: "drop")
    attention = Attention(
        judge=judge, record=record, routes={"drop": RouteAction(do="drop")}, clock=clock
    )
    for _ in range(3):  # each scan looks back over the overlap: the ring drops repeats
        async for batch in FiduciaryEvents(store, clock=clock, once=True).batches(
            await record.cursor("fiduciary")
        ):
            await attention.accept("fiduciary", batch)
    assert judge.calls == 1


async def test_a_webhook_delivery_returns_once_taken(clock: ManualClock) -> None:
    record = AttentionRecord()
    hooks = Webhooks(clock=clock)
    judge = RuleJudge(lambda _: "drop")
    attention = Attention(
        judge=judge,
        record=record,
        routes={"drop": RouteAction(do="drop")},
        sources=[hooks],
        clock=clock,
    )
    task = asyncio.create_task(attention.run())
    channel = InboundChannel(name="bank", secret="s" * 20, principal="alice")
    app = Starlette(routes=[webhook_route(hooks, [channel], clock=clock)])
    body = json.dumps({"type": "payment_received", "amount": "12.50"}).encode()
    ts = int(clock.now().timestamp())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        bad = await client.post("/attention/hooks/bank", content=body)
        assert bad.status_code == 401
        response = await client.post(
            "/attention/hooks/bank",
            content=body,
            headers={
                "x-fiduciary-timestamp": str(ts),
                "x-fiduciary-signature": sign(channel.secret, ts, body),
                "x-fiduciary-delivery": "d-1",
            },
        )
    assert response.status_code == 202
    assert await record.cursor("webhooks") == "bank:d-1"  # taken before the answer
    async with attention.decided:
        await attention.decided.wait_for(lambda: judge.calls == 1)
    task.cancel()
    (decision,) = await record.decisions()
    assert decision.event_type == "payment_received"
    assert decision.principal == "alice"


async def test_the_wallet_watch_sees_payments_prices_and_health(clock: ManualClock) -> None:
    wallet = PaperWallet(clock=clock)
    wallet.open("alice")
    wallet.open("bob")
    watch = WalletWatch(
        wallet,
        ["alice"],
        clock=clock,
        once=True,
        price_move_pct=Decimal(0),
        health_below=Decimal("1.5"),
    )
    start = clock.now().isoformat()
    clock.advance(60)
    wallet.execute("bob", Send(address_of("alice"), "USDC", Decimal("25")), key="p1")
    wallet.execute("alice", Borrow("USDC", Decimal("900")), key="b1")  # HF 1.4167
    (batch,) = [b async for b in watch.batches(start)]
    kinds = {e.type for e in batch.events}
    assert kinds == {"price_move", "payment_received", "health_factor_low"}
    (payment,) = [e for e in batch.events if e.type == "payment_received"]
    assert payment.principal == "alice"
    assert payment.data["changes"] == [{"asset": "USDC", "amount": "25.000000"}]
    wallet.close()
