"""The sample apps on the paper wallet, with the scripted model."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from fiduciary import ManualClock, MemoryStore
from fiduciary.testing import allow_all
from fiduciary.wallet.apps import sample_engine
from fiduciary.wallet.operations import Borrow
from fiduciary.wallet.wallet import PaperWallet

WHO = "alice"


def world() -> tuple[ManualClock, PaperWallet, Any]:
    clock = ManualClock()
    wallet = PaperWallet(clock=clock)
    wallet.open(WHO)
    eng = sample_engine(
        wallet, store=MemoryStore(), principal=WHO, clock=clock, authorize=allow_all
    )
    return clock, wallet, eng


def available(wallet: PaperWallet, asset: str) -> Decimal:
    report = wallet.balances(WHO)
    return next((h.amount for h in report.available if h.asset == asset), Decimal(0))


async def enabled(eng: Any, app: str) -> None:
    await eng.enable(app)
    for approval in await eng.pending(app):
        assert approval.capability == "app_enable"
        await eng.approve(approval.approval_id, by=WHO)
    assert (await eng.enable(app)).enabled


async def test_dca_buys_each_period_after_one_approval_per_batch() -> None:
    _, wallet, eng = world()
    await enabled(eng, "dca")  # no permissions: enabled at once
    sui = available(wallet, "SUI")
    result = await eng.tick("dca")
    assert result.outcome == "waiting"
    [approval] = await eng.pending("dca")
    assert approval.capability == "app_approve_intents"
    assert approval.args["intents"][0]["summary"] == "buy 10 USDC of SUI"
    await eng.approve(approval.approval_id, by=WHO)
    await eng.resume_ticks()
    assert available(wallet, "USDC") == Decimal("990")
    assert available(wallet, "SUI") > sui
    assert (await eng.record("dca")).state == {"purchases": 1}


async def test_the_sweeper_asks_for_a_grant_then_sweeps_within_it() -> None:
    clock, wallet, eng = world()
    await enabled(eng, "sweeper")
    await eng.tick("sweeper")
    [approval] = await eng.pending("sweeper")
    assert approval.capability == "app_grant"
    assert approval.args["limits_usd"] == {"save": "300"}
    await eng.approve(approval.approval_id, by=WHO)
    await eng.resume_ticks()
    clock.advance(60)
    result = await eng.tick("sweeper")
    assert result.outcome == "ran"
    assert await eng.pending("sweeper") == []  # within the grant: no card
    assert available(wallet, "USDC") == Decimal("920")
    uses = [e for e in await eng.tables.read_log("sweeper") if e.kind == "grant_used"]
    assert [u.detail["amount_usd"] for u in uses] == ["80.00"]


async def test_the_guardian_proposes_a_repay_a_person_approves() -> None:
    _, wallet, eng = world()
    wallet.execute(WHO, Borrow("USDC", Decimal("800")), key="borrow-1")
    await enabled(eng, "guardian")
    result = await eng.tick("guardian")
    assert result.outcome == "waiting"
    [approval] = await eng.pending("guardian")
    assert approval.capability == "repay_debt"
    assert approval.args == {"asset": "USDC", "amount": "50"}
    before = available(wallet, "USDC")
    await eng.approve(approval.approval_id, by=WHO)
    await eng.resume_ticks()
    assert available(wallet, "USDC") == before - 50
