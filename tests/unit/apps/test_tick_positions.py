"""A tick's context carries ``positions`` (the seed's shape: sources, positions, state, config,
permissions, budget): what the engine's ``positions`` source reads, ``[]`` without one; a change
of positions alone is a new context (the model is asked again)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from fiduciary import ManualClock, MemoryStore
from fiduciary.events import UserMessage
from fiduciary.testing import allow_all
from fiduciary.wallet.apps import sample_engine
from fiduciary.wallet.operations import Borrow, Deposit
from fiduciary.wallet.wallet import PaperWallet

from .support import Book, Hooks, engine

WATCH = """---
id: watch
hooks: [tick]
tier: active
capabilities: [balance]
sources: [price]
---
Watch the price and what is held.
"""

SEED_KEYS = {"sources", "positions", "state", "config", "permissions", "budget"}


def seen(hooks: Hooks, contexts: list[dict[str, Any]]) -> None:
    def answer(ctx: dict[str, Any]) -> dict[str, Any]:
        contexts.append(ctx)
        return {"reply": "ok"}

    hooks.on("watch", "tick", answer)


async def price() -> str:
    return "100"


async def test_the_tick_context_has_the_seeds_keys_and_the_positions_read() -> None:
    clock, hooks = ManualClock(), Hooks()
    contexts: list[dict[str, Any]] = []
    held = [[{"kind": "savings", "asset": "USDC", "amount": "250.00"}]]

    async def positions() -> Any:
        return held[0]

    seen(hooks, contexts)
    eng = engine(
        WATCH,
        book=Book(),
        hooks=hooks,
        clock=clock,
        sources={"price": price},
        positions=positions,
    )
    await eng.enable("watch")
    assert [r.outcome for r in await eng.step()] == ["ran"]
    assert set(contexts[0]) == SEED_KEYS
    assert contexts[0]["positions"] == held[0]
    assert contexts[0]["sources"] == {"price": "100"}

    clock.advance(30)  # same sources, same positions: no model call
    assert [r.outcome for r in await eng.step()] == ["unchanged"]
    held[0] = [*held[0], {"kind": "debt", "asset": "USDC", "amount": "40.00"}]
    clock.advance(30)  # only the positions changed: a new context
    assert [r.outcome for r in await eng.step()] == ["ran"]
    assert contexts[1]["positions"][1] == {"kind": "debt", "asset": "USDC", "amount": "40.00"}


async def test_without_a_positions_source_the_positions_are_empty() -> None:
    clock, hooks = ManualClock(), Hooks()
    contexts: list[dict[str, Any]] = []
    seen(hooks, contexts)
    eng = engine(WATCH, book=Book(), hooks=hooks, clock=clock, sources={"price": price})
    await eng.enable("watch")
    await eng.step()
    assert set(contexts[0]) == SEED_KEYS
    assert contexts[0]["positions"] == []


async def test_a_failing_positions_source_follows_the_apps_source_policy() -> None:
    clock, hooks = ManualClock(), Hooks()
    contexts: list[dict[str, Any]] = []

    async def broken() -> Any:
        raise RuntimeError("the lending market is unreachable")

    seen(hooks, contexts)
    eng = engine(
        WATCH, book=Book(), hooks=hooks, clock=clock, sources={"price": price}, positions=broken
    )
    await eng.enable("watch")
    [result] = await eng.step()
    assert result.outcome == "error"
    assert contexts == []  # no model call on a context that could not be read
    log = await eng.tables.read_log("watch", limit=20)
    assert any(e.kind == "source_failed" and e.detail["source"] == "positions" for e in log)


async def test_the_sample_apps_see_the_wallets_savings_and_debt() -> None:
    clock = ManualClock()
    wallet = PaperWallet(clock=clock)
    wallet.open("alice")
    wallet.execute("alice", Deposit(asset="USDC", amount=Decimal("100")), key="deposit-1")
    wallet.execute("alice", Borrow(asset="USDC", amount=Decimal("20")), key="borrow-1")
    eng = sample_engine(
        wallet, store=MemoryStore(), principal="alice", clock=clock, authorize=allow_all
    )
    read = await eng.scheduler.positions()  # type: ignore[misc]
    kinds = {(p["kind"], p["asset"]): Decimal(p["amount"]) for p in read}
    assert kinds[("savings", "USDC")] >= Decimal("100")
    assert kinds[("debt", "USDC")] >= Decimal("20")
    await eng.enable("guardian")
    for approval in await eng.pending("guardian"):
        await eng.approve(approval.approval_id, by="alice")
    await eng.enable("guardian")
    result = await eng.tick("guardian")
    assert result.run_id is not None
    [first] = [e for e in await eng.store.read_events(result.run_id) if e.type == "user_message"]
    assert isinstance(first, UserMessage)
    assert '"positions":[{"amount":"' in first.text
    assert '"kind":"debt"' in first.text
