"""The wallet's post-execution guards and the send's balance refresh, through runs of the wallet
agent on the paper wallet: what the log records after a write, in which order, and what the
model reads next."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from uuid import UUID

from fiduciary import ManualClock
from fiduciary.agent import Agent
from fiduciary.events import (
    Event,
    PostGuardFired,
    RunCompleted,
    ToolCallEnd,
    ToolCallStart,
)
from fiduciary.models.base import ToolResultsMessage
from fiduciary.models.scripted import Call, Reply, Script, ScriptedModel, ToolCalls
from fiduciary.testing import MemoryStore, approve_all, collect
from fiduciary.wallet import PaperWallet, Send, build_wallet_agent, post_guards
from fiduciary.wallet.assets import get_asset

from .conftest import available

ME = "ann"
FRIEND = "0x" + "cd" * 20
ELSEWHERE = "0x" + "ef" * 20


async def say(agent: Agent, text: str, run_id: UUID | None = None) -> list[Event]:
    """One message of the person, every approval granted, until the run rests."""
    events = await collect(agent.run(text, principal=ME, run_id=run_id))
    events += await approve_all(agent, events[0].run_id, by=ME)
    assert isinstance(events[-1], RunCompleted), events[-1]
    return events


def send_script() -> ScriptedModel:
    return ScriptedModel(
        [
            Script(
                match="balance",
                steps=[
                    ToolCalls([Call("balance_check")]),
                    Reply("You have 1000 USDC available."),
                    ToolCalls(
                        [Call("send_transfer", {"to": FRIEND, "asset": "USDC", "amount": "20"})]
                    ),
                    Reply("Sent."),
                ],
            )
        ]
    )


async def test_a_send_refreshes_the_balance_and_a_moved_balance_is_told(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    wallet.open(ME)
    model = send_script()
    agent = build_wallet_agent(MemoryStore(), wallet, model=model)
    first = await say(agent, "What is my balance?")
    # meanwhile the person spends 100 USDC from another device
    wallet.execute(ME, Send(ELSEWHERE, "USDC", Decimal("100")), key="other-device", at=clock.now())
    seen = await say(agent, f"Send 20 USDC to {FRIEND}", first[0].run_id)
    assert available(wallet, ME, "USDC") == Decimal("880")

    send_end = next(e for e in seen if isinstance(e, ToolCallEnd) and e.name == "send_transfer")
    [note] = [e for e in seen if isinstance(e, PostGuardFired)]
    refresh_start = next(e for e in seen if isinstance(e, ToolCallStart) and e.refresh_of)
    refresh_end = next(
        e for e in seen if isinstance(e, ToolCallEnd) and e.tool_use_id == refresh_start.tool_use_id
    )
    # the call's end, then what its post guards found, then the reads it refreshes
    assert send_end.seq < note.seq < refresh_start.seq < refresh_end.seq
    assert (note.guard, note.verdict, note.tier) == ("balance_promise", "warn", "financial")
    assert note.tool_use_id == send_end.tool_use_id
    assert note.name == "send_transfer"
    assert "880" in note.for_person
    assert "980" in note.for_person
    assert (refresh_start.name, refresh_start.refresh_of) == ("balance_check", send_end.tool_use_id)
    assert not refresh_end.is_error
    assert '"880' in refresh_end.output

    # the model's next request carries both with the send's own result (one result, its call's)
    results = [m for m in model.requests[-1].messages if isinstance(m, ToolResultsMessage)]
    [sent] = [r for r in results[-1].results if r.tool_use_id == send_end.tool_use_id]
    assert len(results[-1].results) == 1
    assert "[balance_promise]" in sent.content
    assert "balance_check after this call (now)" in sent.content
    assert '"880' in sent.content


async def test_no_note_when_the_balance_is_what_was_shown(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    wallet.open(ME)
    agent = build_wallet_agent(MemoryStore(), wallet, model=send_script())
    first = await say(agent, "What is my balance?")
    seen = await say(agent, f"Send 20 USDC to {FRIEND}", first[0].run_id)
    assert not [e for e in seen if isinstance(e, PostGuardFired)]
    refreshed = [e for e in seen if isinstance(e, ToolCallStart) and e.refresh_of]
    assert [e.name for e in refreshed] == ["balance_check"]  # the refresh runs all the same


def swap_script(slippage: str) -> ScriptedModel:
    swap = {"from_asset": "USDC", "to_asset": "SUI", "amount": "100"}
    return ScriptedModel(
        [
            Script(
                match="quote",
                steps=[
                    ToolCalls([Call("balance_check"), Call("swap_quote", swap)]),
                    Reply("Here is the quote."),
                    ToolCalls([Call("swap_execute", {**swap, "max_slippage_pct": slippage})]),
                    Reply("Swapped."),
                ],
            )
        ]
    )


def a_rising_minute(wallet: PaperWallet, clock: ManualClock, rise: Decimal) -> None:
    """Set the clock to a moment after which SUI's price rises by more than ``rise`` within
    50 s (the price path is a pure function of time: the search is deterministic)."""
    sui, start = get_asset("SUI"), clock.now()
    for minute in range(2000):
        at = start + timedelta(minutes=minute)
        before = wallet.market.path.price(sui, at)
        after = wallet.market.path.price(sui, at + timedelta(seconds=50))
        if after > before * (1 + rise):
            clock.set(at)
            return
    raise AssertionError("no such minute in the price path")


async def test_a_swap_worse_than_its_quote_beyond_the_slippage_is_told(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    a_rising_minute(wallet, clock, Decimal("0.0015"))
    wallet.open(ME)
    agent = build_wallet_agent(MemoryStore(), wallet, model=swap_script("0.1"))
    first = await say(agent, "Get me a quote for 100 USDC of SUI")
    clock.advance(50)  # SUI rose meanwhile: the swap (without the quote's id) gets less
    seen = await say(agent, "Swap it", first[0].run_id)
    swap_end = next(e for e in seen if isinstance(e, ToolCallEnd) and e.name == "swap_execute")
    assert not swap_end.is_error
    notes = [e for e in seen if isinstance(e, PostGuardFired) and e.guard == "swap_price"]
    [note] = notes
    assert note.verdict == "warn"
    assert note.seq > swap_end.seq
    assert "0.1% slippage you accepted" in note.for_person


async def test_a_swap_within_the_slippage_is_not_told(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    a_rising_minute(wallet, clock, Decimal("0.0015"))
    wallet.open(ME)
    agent = build_wallet_agent(MemoryStore(), wallet, model=swap_script("3"))
    first = await say(agent, "Get me a quote for 100 USDC of SUI")
    clock.advance(50)
    seen = await say(agent, "Swap it", first[0].run_id)
    assert any(isinstance(e, ToolCallEnd) and e.name == "swap_execute" for e in seen)
    assert not [e for e in seen if isinstance(e, PostGuardFired) and e.guard == "swap_price"]


def test_the_post_guards_and_their_tiers(wallet: PaperWallet) -> None:
    tiers = {g.name: (g.tier, g.phase) for g in post_guards(wallet)}
    assert tiers == {
        "balance_promise": ("financial", "post"),
        "swap_price": ("financial", "post"),
    }
