"""The demo's conversation, played in-process on a manual clock: what the person sees, and
final balances that follow from the ledger's own arithmetic."""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest

from fiduciary import ManualClock
from fiduciary.agent import Agent
from fiduciary.events import (
    Event,
    PendingAction,
    RunCompleted,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
)
from fiduciary.exceptions import ConfigurationError
from fiduciary.testing import MemoryStore, approve_all, collect
from fiduciary.wallet import PaperWallet, build_wallet_agent
from fiduciary.wallet.demo import (
    DAVE_GUESS,
    DEMO_CONVERSATION,
    DEMO_PRINCIPAL,
    LANDLORD,
    default_model_name,
    load_model,
)
from fiduciary.wallet.ledger import Draft

from .conftest import available, saved

ME = DEMO_PRINCIPAL


async def play(agent: Agent, *, approve: bool) -> list[Event]:
    """Say each message in one run; approve (or deny) what waits, like --yes (or 'n')."""
    seen: list[Event] = []
    run_id: UUID | None = None
    for message in DEMO_CONVERSATION:
        events = await collect(agent.run(message, principal=ME, run_id=run_id))
        run_id = events[0].run_id
        seen += events
        if approve:
            seen += await approve_all(agent, run_id, by=ME)
        else:
            for record in await agent.pending_approvals(run_id=run_id):
                await agent.deny(record.approval_id, by=ME, reason="not now")
                seen += await collect(agent.resume(run_id))
        assert isinstance(seen[-1], RunCompleted), seen[-1]
    return seen


def swap_out(wallet: PaperWallet) -> Decimal:
    [swap] = wallet.ledger.read().transactions(principal=ME, kinds=["swap"])
    return swap.change(ME, "available", "SUI")


def interest(wallet: PaperWallet) -> Decimal:
    return wallet.ledger.read().total(ME, "savings", "USDC", memo="supply interest")


async def test_the_demo_conversation(wallet: PaperWallet, clock: ManualClock) -> None:
    wallet.open(ME)
    agent = build_wallet_agent(MemoryStore(), wallet)
    seen = await play(agent, approve=True)

    # 1: balance and rates read in parallel (both start before either ends), a save on its own
    starts = [i for i, e in enumerate(seen) if isinstance(e, ToolCallStart)]
    ends = [i for i, e in enumerate(seen) if isinstance(e, ToolCallEnd)]
    assert starts[1] < ends[0]
    names = [e.name for e in seen if isinstance(e, ToolCallStart)]
    assert names[:3] == ["balance_check", "rates_info", "save_deposit"]
    # 2: the send waited for a person, with the guards' notes on its card
    [card] = [e for e in seen if isinstance(e, PendingAction)]
    assert (card.name, card.amount_usd, card.tier) == ("send_transfer", Decimal("75.00"), "confirm")
    assert card.input["to"] == LANDLORD
    notes = {n.guard for n in card.guard_notes}
    assert notes == {"large_transfer", "irreversibility", "new_recipient"}
    # 3: the send to an address the person never gave was refused by address_source
    [refused] = [e for e in seen if isinstance(e, ToolCallRejected)]
    assert (refused.name, refused.reason) == ("send_transfer", "guard_blocked")
    assert "address_source" in refused.message
    assert DAVE_GUESS in refused.message
    # 4: the swap came after its quote and used its id
    quote = next(e for e in seen if isinstance(e, ToolCallEnd) and e.name == "swap_quote")
    swap = next(e for e in seen if isinstance(e, ToolCallStart) and e.name == "swap_execute")
    assert swap.input["quote_id"] in quote.output
    texts = [e.text for e in seen if isinstance(e, RunCompleted)]
    assert "Saved 20.00 USDC" in texts[0]
    assert "Sent 75.00 USDC to 0x7a3b…b3c4" in texts[1]
    assert "I did not send anything to Dave" in texts[2]
    assert "Swapped 15.00 USDC for" in texts[3]

    # the final balances are the starting ones plus what the ledger says happened
    assert available(wallet, ME, "USDC") == Decimal("1000") - 20 - 75 - 15
    assert saved(wallet, ME, "USDC") == Decimal("1500") + 20 + interest(wallet)
    assert available(wallet, ME, "SUI") == Decimal("150") + swap_out(wallet)
    assert swap_out(wallet) > 0
    assert available(wallet, ME, "ETH") == Decimal("0.5")
    assert wallet.balances(address=LANDLORD).available[0].amount == Decimal("75")
    assert wallet.balances(address=DAVE_GUESS).available == []
    assert wallet.verify().ok


async def test_declining_the_send_sends_nothing(wallet: PaperWallet) -> None:
    agent = build_wallet_agent(MemoryStore(), wallet)
    seen = await play(agent, approve=False)
    texts = [e.text for e in seen if isinstance(e, RunCompleted)]
    assert texts[1] == "You declined the transfer, so nothing was sent."
    assert available(wallet, ME, "USDC") == Decimal("1000") - 20 - 15
    assert wallet.balances(address=LANDLORD).available == []


async def test_no_float_reaches_the_ledger_in_the_whole_demo(
    wallet: PaperWallet, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[type] = []
    post = Draft.post

    def spy(self: Draft, owner: str, book: str, asset: str, amount: Any, memo: str = "") -> None:
        seen.append(type(amount))
        post(self, owner, book, asset, amount, memo)

    monkeypatch.setattr(Draft, "post", spy)
    await play(build_wallet_agent(MemoryStore(), wallet), approve=True)
    assert len(seen) > 20
    assert set(seen) == {Decimal}


def test_model_names(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_model_name({}) == "scripted"
    assert default_model_name({"OPENAI_API_KEY": "k"}) == "openai:gpt-5.1"
    assert default_model_name({"GOOGLE_API_KEY": "k"}) == "gemini:gemini-2.5-flash"
    assert default_model_name({"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}).startswith(
        "anthropic:"
    )
    assert default_model_name({"FIDUCIARY_MODEL": "openai:x", "ANTHROPIC_API_KEY": "k"}) == (
        "openai:x"
    )
    assert load_model("scripted").name == "scripted"
    # without fiduciary's provider models, a real model is refused with a clear message
    monkeypatch.setitem(__import__("sys").modules, "fiduciary.models.registry", None)
    with pytest.raises(ConfigurationError, match="only the scripted model is available"):
        load_model("anthropic:claude-sonnet-4-5")
