"""Scoped temporary grants: created only by a person's approval, used within their limits."""

from __future__ import annotations

from typing import Any

from fiduciary import ManualClock

from .support import Book, Hooks, card, engine

SWEEPER = """---
id: sweeper
hooks: [tick]
tier: active
capabilities: [balance, save, send]
permissions: [save, send]
config: {approve: false}
---
Sweep idle USDC to savings.
"""


def save(usd: str) -> dict[str, Any]:
    return {"summary": f"save ${usd}", "action": {"capability": "save", "args": {"usd": usd}}}


def send(usd: str) -> dict[str, Any]:
    args = {"to": "bob", "usd": usd}
    return {"summary": f"send ${usd}", "action": {"capability": "send", "args": args}}


GRANT = {
    "summary": "sweep up to $100 for two minutes",
    "grant": {"operations": ["save"], "limits": {"save": "100"}, "ttl": 120},
}


class Plan:
    """What each tick proposes, in order (the state changes so no tick is skipped)."""

    def __init__(self, *ticks: list[dict[str, Any]]) -> None:
        self.ticks = list(ticks)
        self.n = 0

    def __call__(self, ctx: dict[str, Any]) -> dict[str, Any]:
        intents = self.ticks[self.n] if self.n < len(self.ticks) else []
        self.n += 1
        return {"intents": intents, "state": {"n": self.n}}


async def granted(plan: Plan, book: Book, clock: ManualClock) -> Any:
    hooks = Hooks()
    hooks.on("sweeper", "tick", plan)
    eng = engine(SWEEPER, book=book, hooks=hooks, clock=clock)
    await eng.enable("sweeper")
    for approval in await eng.pending("sweeper"):
        await eng.approve(approval.approval_id, by="alice")
    await eng.enable("sweeper")
    await eng.step()  # tick 1 asks for the grant
    [approval] = await eng.pending("sweeper")
    assert approval.capability == "app_grant"
    shown = await card(eng, approval)
    assert shown.description == (
        "Let app sweeper run save without asking, save up to $100, for 120 s: "
        "sweep up to $100 for two minutes"
    )
    await eng.approve(approval.approval_id, by="alice")
    await eng.step()
    clock.advance(30)
    return eng


async def test_calls_within_a_grant_run_without_another_card_and_each_use_is_recorded() -> None:
    clock, book = ManualClock(), Book()
    eng = await granted(Plan([GRANT], [save("60")], [save("30"), save("40")]), book, clock)
    await eng.step()
    clock.advance(30)
    await eng.step()
    saved = [c[1]["usd"] for c in book.calls]
    assert saved == ["60", "30"]
    uses = [e.detail for e in await eng.tables.read_log("sweeper") if e.kind == "grant_used"]
    # $30 is below the policy's $50 auto tier: it needs no grant and uses none
    assert [u["amount_usd"] for u in uses] == ["60"]
    # a grant never lifts the daily autonomous limit ($100): the $40 waits for a person
    [approval] = await eng.pending("sweeper")
    assert approval.args == {"usd": "40"}
    assert "daily autonomous limit" in (await card(eng, approval)).guard_notes[0].message


async def test_a_call_beyond_the_grant_limit_goes_back_to_a_person() -> None:
    clock, book = ManualClock(), Book()
    eng = await granted(Plan([GRANT], [save("60")], [save("60")]), book, clock)
    await eng.step()
    clock.advance(30)
    await eng.step()
    assert book.calls == [("save", {"usd": "60"})]
    [approval] = await eng.pending("sweeper")
    assert approval.args == {"usd": "60"}


async def test_an_expired_grant_lets_nothing_through() -> None:
    clock, book = ManualClock(), Book()
    eng = await granted(Plan([GRANT], [save("60")]), book, clock)
    clock.advance(120)
    await eng.step()
    assert book.calls == []
    [approval] = await eng.pending("sweeper")
    assert approval.capability == "save"


async def test_a_grant_for_one_operation_does_not_cover_another() -> None:
    clock, book = ManualClock(), Book()
    eng = await granted(Plan([GRANT], [send("60")]), book, clock)
    await eng.step()
    assert book.calls == []
    [approval] = await eng.pending("sweeper")
    assert approval.capability == "send"


async def test_a_denied_grant_grants_nothing() -> None:
    clock, book, hooks = ManualClock(), Book(), Hooks()
    hooks.on("sweeper", "tick", Plan([GRANT], [save("60")]))
    eng = engine(SWEEPER, book=book, hooks=hooks, clock=clock)
    await eng.enable("sweeper")
    for approval in await eng.pending("sweeper"):
        await eng.approve(approval.approval_id, by="alice")
    await eng.enable("sweeper")
    await eng.step()
    [approval] = await eng.pending("sweeper")
    await eng.deny(approval.approval_id, by="alice")
    await eng.step()
    clock.advance(30)
    await eng.step()
    assert await eng.tables.grants("sweeper") == []
    [approval] = await eng.pending("sweeper")
    assert approval.capability == "save"


async def test_a_grant_outside_the_apps_permissions_is_refused_before_any_card() -> None:
    clock, book, hooks = ManualClock(), Book(), Hooks()
    bad = {"summary": "swap", "grant": {"operations": ["swap"], "limits": {"swap": "5"}}}
    hooks.on("sweeper", "tick", Plan([bad]))
    eng = engine(SWEEPER, book=book, hooks=hooks, clock=clock)
    await eng.enable("sweeper")
    for approval in await eng.pending("sweeper"):
        await eng.approve(approval.approval_id, by="alice")
    await eng.enable("sweeper")
    await eng.step()
    assert await eng.pending("sweeper") == []
    [refused] = [e for e in await eng.tables.read_log("sweeper") if e.kind == "intent_refused"]
    assert refused.detail["why"] == "the app has no permission for swap"
