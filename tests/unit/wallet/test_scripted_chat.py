"""The wallet's offline model does what the typed message asks, and nothing else."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from fiduciary.events import Event, RunCompleted, TextDelta, ToolCallStart
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.wallet import PaperWallet, build_wallet_agent
from fiduciary.wallet.demo import DEMO_CONVERSATION, LANDLORD
from fiduciary.wallet.scripted import CAN_DO

from ..cli.support import fiduciary

WHO = "ana"


async def say(db: Path, *messages: str) -> list[list[Event]]:
    """Each message in one run; every approval granted."""
    store = SQLiteStore(db)
    said: list[list[Event]] = []
    try:
        with PaperWallet(db) as wallet:
            agent = build_wallet_agent(store, wallet)
            run_id = None
            for message in messages:
                events = [e async for e in agent.run(message, principal=WHO, run_id=run_id)]
                run_id = events[0].run_id
                for pending in await agent.pending_approvals(run_id=run_id):
                    await agent.approve(pending.approval_id, by=WHO)
                    events += [e async for e in agent.resume(run_id)]
                said.append(events)
    finally:
        await store.close()
    return said


def calls(events: list[Event]) -> list[str]:
    return [e.name for e in events if isinstance(e, ToolCallStart)]


def text(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def test_a_balance_question_only_reads(tmp_path: Path) -> None:
    (events,) = await say(tmp_path / "w.sqlite3", "What's my balance?")
    assert calls(events) == ["balance_check"]
    assert "Available:" in text(events)
    assert isinstance(events[-1], RunCompleted)


async def test_what_is_asked_is_done_and_only_that(tmp_path: Path) -> None:
    db = tmp_path / "w.sqlite3"
    balance, save, rates, send, swap, other = await say(
        db,
        "How much do I have?",
        "Put 12.5 USDC into savings please",
        "What do savings pay?",
        f"send 5 USDC to {LANDLORD}",
        "swap 3 USDC for SUI, at most 2% slippage",
        "Tell me a joke",
    )
    assert calls(balance) == ["balance_check"]
    assert calls(save) == ["balance_check", "save_deposit"]
    assert "Saved 12.50 USDC" in text(save)
    assert calls(rates) == ["rates_info"]
    assert calls(send) == ["balance_check", "send_transfer", "balance_check"]  # its refresh
    assert calls(swap) == ["balance_check", "swap_quote", "swap_execute"]
    assert text(other) == CAN_DO  # says what it can do; no call
    with PaperWallet(db) as wallet, PaperWallet(tmp_path / "new.sqlite3") as untouched:
        now = {h.asset: h.amount for h in wallet.balances(WHO).savings}
        then = {h.asset: h.amount for h in untouched.balances(WHO).savings}
    assert now["USDC"] - then["USDC"] == Decimal("12.5")  # the one save asked for


async def test_a_send_without_an_address_is_not_guessed(tmp_path: Path) -> None:
    (events,) = await say(tmp_path / "w.sqlite3", "send 30 USDC to Dave")
    assert calls(events) == []
    assert "paste the address" in text(events)


async def test_the_demo_conversation_still_plays_its_script(tmp_path: Path) -> None:
    said = await say(tmp_path / "w.sqlite3", *DEMO_CONVERSATION)
    assert calls(said[0]) == ["balance_check", "rates_info", "save_deposit"]
    assert calls(said[2]) == ["send_transfer"]  # Dave, from "memory": refused by the guard
    # off the script, the same words are taken as asked
    (off,) = await say(tmp_path / "x.sqlite3", DEMO_CONVERSATION[2])
    assert calls(off) == []


@pytest.mark.timeout(120)
def test_chat_offline_answers_a_balance_question_without_saving(tmp_path: Path) -> None:
    db = tmp_path / "chat.sqlite3"
    result = fiduciary("chat", "--db", db, input="What's my balance?\n/balances\n")
    assert result.returncode == 0, result.stderr
    flat = " ".join(result.stdout.split())
    assert "Available:" in flat
    assert "save_deposit" not in flat
    assert "Saved" not in flat
