"""Intents, approvals, follow-ups, callbacks and grants, on a manual clock."""

from __future__ import annotations

import asyncio
from typing import Any

from fiduciary import ManualClock

from .support import Book, Hooks, card, engine

TRADER = """---
id: trader
hooks: [tick, result, execute]
tier: standard
capabilities: [balance, buy, save, send]
permissions: [swap, save]
config:
  approve: {approve}
---
Trade.
"""


def trader(approve: bool = True) -> str:
    return TRADER.replace("{approve}", "true" if approve else "false")


def buy(usd: str, asset: str = "ETH", **extra: Any) -> dict[str, Any]:
    return {
        "summary": f"buy ${usd} of {asset}",
        "action": {"capability": "buy", "args": {"asset": asset, "usd": usd}},
        **extra,
    }


async def started(text: str, hooks: Hooks, book: Book, clock: ManualClock) -> Any:
    eng = engine(text, book=book, hooks=hooks, clock=clock)
    await eng.enable("trader")
    for approval in await eng.pending("trader"):  # the enabling approval
        await eng.approve(approval.approval_id, by="alice")
    await eng.enable("trader")
    return eng


async def test_batch_intents_wait_for_one_approval_listing_them_all() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    hooks.on("trader", "tick", lambda ctx: {"intents": [buy("5"), buy("6", "BTC")]})
    eng = await started(trader(), hooks, book, clock)
    [result] = await eng.step()
    assert result.outcome == "waiting"
    [approval] = await eng.pending("trader")
    shown = await card(eng, approval)
    assert approval.capability == "app_approve_intents"
    assert [i["summary"] for i in approval.args["intents"]] == ["buy $5 of ETH", "buy $6 of BTC"]
    assert "2 action(s): 1. buy $5 of ETH; 2. buy $6 of BTC" in shown.description
    assert book.calls == []
    await eng.approve(approval.approval_id, by="alice")
    result = (await eng.step())[0]  # the waiting tick, continued
    assert result.outcome == "ran"
    assert book.calls == [
        ("buy", {"asset": "ETH", "usd": "5"}),
        ("buy", {"asset": "BTC", "usd": "6"}),
    ]
    assert await eng.pending("trader") == []  # no second card for either


async def test_a_denied_batch_is_skipped_and_recorded() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    hooks.on("trader", "tick", lambda ctx: {"intents": [buy("5"), buy("6")]})
    eng = await started(trader(), hooks, book, clock)
    await eng.step()
    [approval] = await eng.pending("trader")
    await eng.deny(approval.approval_id, by="alice")
    result = (await eng.step())[0]
    assert result.outcome == "ran"
    assert book.calls == []
    kinds = [e.kind for e in await eng.tables.read_log("trader")]
    assert kinds.count("intent_denied") == 2


async def test_per_action_intents_get_one_approval_each_and_a_denied_one_is_skipped() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    intents = [buy("5", permissions=["swap"]), buy("7", "BTC", permissions=["swap"]), buy("1")]
    hooks.on("trader", "tick", lambda ctx: {"intents": intents})
    eng = await started(trader(approve=False), hooks, book, clock)
    await eng.step()
    # the batch intent ($1, auto by policy) ran; the two per-action ones each wait for a person
    assert book.calls == [("buy", {"asset": "ETH", "usd": "1"})]
    approvals = await eng.pending("trader")
    assert sorted(a.args["usd"] for a in approvals) == ["5", "7"]
    for approval in approvals:
        if approval.args["usd"] == "5":
            await eng.deny(approval.approval_id, by="alice")
        else:
            await eng.approve(approval.approval_id, by="alice")
    result = (await eng.step())[0]
    assert result.outcome == "ran"
    assert book.calls[1:] == [("buy", {"asset": "BTC", "usd": "7"})]
    kinds = [e.kind for e in await eng.tables.read_log("trader")]
    assert kinds.count("intent_denied") == 1
    assert kinds.count("intent_executed") == 2


async def test_permissions_that_do_not_match_the_capability_are_refused_at_once() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    wrong = buy("5", permissions=["save"])  # a save permission used for a swap
    hooks.on("trader", "tick", lambda ctx: {"intents": [wrong]})
    eng = await started(trader(approve=False), hooks, book, clock)
    [result] = await eng.step()
    assert result.outcome == "ran"
    assert await eng.pending("trader") == []
    [refused] = [e for e in await eng.tables.read_log("trader") if e.kind == "intent_refused"]
    assert "buy is swap, not ['save']" in refused.detail["why"]


async def test_an_intent_without_action_asks_the_execute_hook() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    hooks.on("trader", "tick", lambda ctx: {"intents": [{"summary": "buy a little"}]})
    hooks.on("trader", "execute", lambda ctx: {"action": buy("2")["action"]})
    eng = await started(trader(approve=False), hooks, book, clock)
    await eng.step()
    assert hooks.calls[("trader", "execute")] == 1
    assert book.calls == [("buy", {"asset": "ETH", "usd": "2"})]


async def test_a_pre_computed_action_skips_the_execute_hook() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    hooks.on("trader", "tick", lambda ctx: {"intents": [buy("2")]})
    eng = await started(trader(approve=False), hooks, book, clock)
    await eng.step()
    assert ("trader", "execute") not in hooks.calls
    assert book.calls == [("buy", {"asset": "ETH", "usd": "2"})]


async def test_follow_ups_go_three_levels_deep_and_the_fourth_is_dropped() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    hooks.on("trader", "tick", lambda ctx: {"intents": [buy("1")]})
    hooks.on("trader", "result", lambda ctx: {"intents": [buy(str(int(ctx["depth"]) + 1))]})
    eng = await started(trader(approve=False), hooks, book, clock)
    await eng.step()
    assert [c[1]["usd"] for c in book.calls] == ["1", "2", "3"]
    [dropped] = [e for e in await eng.tables.read_log("trader") if e.kind == "intent_dropped"]
    assert dropped.detail == {
        "depth": 4,
        "summary": "buy $4 of ETH",
        "slot": dropped.detail["slot"],
    }


async def test_at_most_three_callbacks_per_app_in_two_minutes() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    n = [0]

    def tick(ctx: dict[str, Any]) -> dict[str, Any]:
        n[0] += 1
        return {"intents": [buy("1", asset=f"A{n[0]}")], "state": {"n": n[0]}}

    hooks.on("trader", "tick", tick)
    hooks.on("trader", "result", lambda ctx: {})
    text = trader(approve=False).replace("tier: standard", "tier: active")
    eng = await started(text, hooks, book, clock)
    for _ in range(4):  # four ticks 30 s apart: 4 executions, 3 callbacks
        await eng.step()
        clock.advance(30)
    assert len(book.calls) == 4
    assert hooks.calls[("trader", "result")] == 3
    assert (await eng.record("trader")).counters["skipped_callbacks"] == 1
    clock.advance(120)  # two minutes quiet: the window resets
    await eng.step()
    assert hooks.calls[("trader", "result")] == 4


async def test_a_failed_execution_with_execute_fail_pause_pauses_the_app() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    book.fail.add("buy")
    hooks.on("trader", "tick", lambda ctx: {"intents": [buy("1")]})
    pause = "  approve: false\n  errors: {executeFail: pause}"
    text = trader(approve=False).replace("  approve: false", pause)
    eng = await started(text, hooks, book, clock)
    [result] = await eng.step()
    assert result.outcome == "error"
    assert (await eng.record("trader")).paused_until is not None


async def test_a_failed_execution_with_execute_fail_skip_goes_on() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    book.fail.add("buy")
    hooks.on("trader", "tick", lambda ctx: {"intents": [buy("1")]})
    eng = await started(trader(approve=False), hooks, book, clock)
    [result] = await eng.step()
    assert result.outcome == "error"
    assert (await eng.record("trader")).paused_until is None


async def test_an_approved_batch_does_not_skip_the_retyped_amount_of_a_large_call() -> None:
    clock, hooks, book = ManualClock(), Hooks(), Book()
    hooks.on("trader", "tick", lambda ctx: {"intents": [buy("5"), buy("400", "BTC")]})
    eng = await started(trader(), hooks, book, clock)
    await eng.step()
    [batch] = await eng.pending("trader")
    await eng.approve(batch.approval_id, by="alice")
    await eng.step()
    assert book.calls == [("buy", {"asset": "ETH", "usd": "5"})]
    [large] = await eng.pending("trader")  # $400 is explicit: its own card, amount re-typed
    assert large.tier == "explicit"
    await eng.approve(large.approval_id, by="alice", confirm_amount=large.amount_usd)
    await eng.step()
    assert book.calls[1] == ("buy", {"asset": "BTC", "usd": "400"})


async def test_two_engines_continuing_one_waiting_tick_record_it_once() -> None:
    from fiduciary import MemoryStore
    from fiduciary.apps import MemoryAppTables

    clock, hooks, book = ManualClock(), Hooks(), Book()
    store, tables = MemoryStore(), MemoryAppTables()
    hooks.on("trader", "tick", lambda ctx: {"intents": [buy("5")]})
    one = engine(trader(), book=book, hooks=hooks, clock=clock, store=store, tables=tables)
    two = engine(trader(), book=book, hooks=hooks, clock=clock, store=store, tables=tables)
    await one.enable("trader")
    for approval in await one.pending("trader"):
        await one.approve(approval.approval_id, by="alice")
    await one.enable("trader")
    await one.step()
    [batch] = await one.pending("trader")
    await one.approve(batch.approval_id, by="alice")
    await asyncio.gather(one.step(), two.step())
    assert book.calls == [("buy", {"asset": "ETH", "usd": "5"})]
    kinds = [e.kind for e in await tables.read_log("trader")]
    assert kinds.count("intent_executed") == 1
    assert kinds.count("tick_ran") == 1
