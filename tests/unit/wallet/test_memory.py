"""The wallet's financial context layer and its ledger facts as memory records."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

from fiduciary import ManualClock
from fiduciary.capabilities import Principal
from fiduciary.memory import InMemoryMemory
from fiduciary.wallet import PaperWallet
from fiduciary.wallet.memory import financial_context, ledger_facts, remember_ledger_facts
from fiduciary.wallet.operations import Send


def pay(wallet: PaperWallet, keys: Iterator[str], to: str, amount: str) -> None:
    wallet.execute("ann", Send(to=to, asset="USDC", amount=Decimal(amount)), key=next(keys))


def test_the_snapshot_shows_balances_in_usd_and_net_worth(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    text = financial_context(wallet, clock)(Principal("ann"))
    assert text.startswith("<financial_context>\nAs of ")
    assert text.endswith("</financial_context>")
    report = wallet.balances("ann")
    usdc = next(h for h in report.available if h.asset == "USDC")
    assert f"USDC (${usdc.usd:,.2f})" in text
    assert f"Net worth: ${report.total_usd:,.2f}" in text
    assert "Health factor" not in text  # no debt, no health factor


async def test_ledger_facts_count_payments_per_recipient_and_replace_old_ones(
    wallet: PaperWallet, keys: Iterator[str]
) -> None:
    alice = wallet.address_of("alice")
    wallet.save_contact("ann", "Alice", alice, key=next(keys))
    pay(wallet, keys, "Alice", "5")
    pay(wallet, keys, "Alice", "7.5")
    pay(wallet, keys, wallet.address_of("bob"), "1")
    facts = ledger_facts(wallet, "ann")
    assert facts[0].startswith("fact: paid Alice 2 times, 12.5 USDC in all; last on ")
    assert facts[1].startswith(f"fact: paid {wallet.address_of('bob')} once, 1 USDC in all")
    memory = InMemoryMemory()
    assert await remember_ledger_facts(wallet, "ann", memory) == 2
    pay(wallet, keys, "Alice", "1")
    assert await remember_ledger_facts(wallet, "ann", memory) == 2
    kept = [r.text for r in await memory.records(namespace="ann", kind="fact")]
    assert len(kept) == 2
    assert any(t.startswith("fact: paid Alice 3 times, 13.5 USDC") for t in kept)
    found = await memory.recall("how often did I pay Alice?", namespace="ann", top_k=1)
    assert found[0].text.startswith("fact: paid Alice 3 times")
