"""Lending: interest over clock time, loans against savings, health factor, rewards."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from fiduciary import ManualClock
from fiduciary.wallet import (
    Borrow,
    ClaimRewards,
    Deposit,
    HarvestRewards,
    PaperWallet,
    Repay,
    Withdraw,
)
from fiduciary.wallet.errors import WalletError

from .conftest import available, saved, tx_count

YEAR = timedelta(days=365)


def refused(wallet: PaperWallet, code: str, op: object, key: str = "refused") -> WalletError:
    wallet.open("ann")  # opening the account is a posting of its own
    before = tx_count(wallet)
    with pytest.raises(WalletError) as caught:
        wallet.execute("ann", op, key=key)  # type: ignore[arg-type]
    assert caught.value.code == code, caught.value.message
    assert tx_count(wallet) == before  # nothing posted
    return caught.value


def test_savings_earn_the_supply_apy_over_clock_time(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    wallet.open("ann")
    clock.advance(YEAR)
    assert saved(wallet, "ann", "USDC") == Decimal("1572.000000")  # 1500 × 1.048
    clock.advance(YEAR / 2)
    expected = Decimal("1500") * Decimal("1.048") ** Decimal("1.5")
    assert abs(saved(wallet, "ann", "USDC") - expected) <= Decimal("0.000001")


def test_reading_books_nothing_and_the_next_write_books_the_interest(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    wallet.open("ann")
    clock.advance(YEAR)
    before = tx_count(wallet)
    assert wallet.savings("ann").positions[0].accrued_interest == Decimal("72.000000")
    assert tx_count(wallet) == before
    wallet.execute("ann", Deposit("USDC", Decimal("1")), key="k1")
    view = wallet.ledger.read()
    assert view.total("ann", "savings", "USDC", memo="supply interest") == Decimal("72")
    report = wallet.savings("ann")
    assert report.positions[0].accrued_interest == 0
    assert report.positions[0].interest_earned == Decimal("72")
    assert report.positions[0].amount == Decimal("1573")


def test_debt_grows_at_the_borrow_apy(wallet: PaperWallet, clock: ManualClock) -> None:
    wallet.execute("ann", Borrow("USDC", Decimal("100")), key="k1")
    assert available(wallet, "ann", "USDC") == Decimal("1100")
    clock.advance(YEAR)
    assert wallet.positions("ann").debt["USDC"] == Decimal("107.200000")  # 7.2%
    health = wallet.health("ann")
    assert health.debt_usd == Decimal("107.20")


def test_health_factor_and_borrow_limit(wallet: PaperWallet) -> None:
    assert wallet.health("ann").health_factor is None
    assert wallet.health("ann").risk == "no debt"
    wallet.execute("ann", Borrow("USDC", Decimal("500")), key="k1")
    health = wallet.health("ann")
    assert health.health_factor == Decimal("2.5500")  # 1500 × 0.85 / 500
    assert health.borrow_limit_usd == Decimal("1200.00")  # 1500 × 0.80
    assert health.available_to_borrow_usd == Decimal("700.00")
    assert health.risk == "safe"


def test_borrowing_beyond_the_limit_is_refused(wallet: PaperWallet) -> None:
    error = refused(wallet, "borrow_limit", Borrow("USDC", Decimal("1200.01")))
    assert "at most 1,200.00 USDC" in error.message
    wallet.execute("ann", Borrow("USDC", Decimal("1200")), key="k1")
    refused(wallet, "borrow_limit", Borrow("USDT", Decimal("0.01")))


def test_assets_that_cannot_be_borrowed_or_saved_are_refused(wallet: PaperWallet) -> None:
    refused(wallet, "unsupported_asset", Borrow("SUI", Decimal("1")))
    refused(wallet, "unsupported_asset", Borrow("ETH", Decimal("1")))
    refused(wallet, "unsupported_asset", Deposit("BTC", Decimal("1")))
    refused(wallet, "unknown_asset", Borrow("DOGE", Decimal("1")))


def test_withdrawing_collateral_a_loan_needs_is_refused(wallet: PaperWallet) -> None:
    wallet.execute("ann", Borrow("USDC", Decimal("1000")), key="k1")
    # 1000 of debt needs 1250 of USDC savings at 80% LTV
    refused(wallet, "borrow_limit", Withdraw("USDC", Decimal("250.01")))
    wallet.execute("ann", Withdraw("USDC", Decimal("250")), key="k2")
    assert saved(wallet, "ann", "USDC") == Decimal("1250")


def test_repaying(wallet: PaperWallet) -> None:
    refused(wallet, "nothing_to_repay", Repay("USDC", None))
    wallet.execute("ann", Borrow("USDC", Decimal("100")), key="k1")
    error = refused(wallet, "wrong_asset", Repay("USDT", Decimal("10")))
    assert "your debt is in USDC" in error.message
    refused(wallet, "invalid_amount", Repay("USDC", Decimal("100.01")))
    wallet.execute("ann", Repay("USDC", Decimal("40")), key="k2")
    assert wallet.positions("ann").debt["USDC"] == Decimal("60")
    receipt = wallet.execute("ann", Repay("USDC", None), key="k3")
    assert receipt.details["debt_left"] == "0.000000"
    assert "USDC" not in wallet.positions("ann").debt
    assert available(wallet, "ann", "USDC") == Decimal("1000")


def test_repaying_needs_the_money(clock: ManualClock) -> None:
    from .conftest import small_config

    with PaperWallet(clock=clock, config=small_config()) as wallet:
        wallet.execute("ann", Borrow("USDC", Decimal("100")), key="k1")
        wallet.execute("ann", Deposit("USDC", Decimal("150")), key="k2")
        refused(wallet, "insufficient_funds", Repay("USDC", None))


def test_rewards_accrue_and_are_claimed(wallet: PaperWallet, clock: ManualClock) -> None:
    refused(wallet, "nothing_to_claim", ClaimRewards())
    clock.advance(YEAR)
    report = wallet.rewards("ann")
    assert report.asset == "SUI"
    assert report.claimable == Decimal("5.250000000")  # 1500 USDC × 0.0035 SUI a year
    assert report.accruing_per_day > 0
    receipt = wallet.execute("ann", ClaimRewards(), key="k1")
    assert receipt.label == "Claimed 5.25 SUI of rewards"
    assert available(wallet, "ann", "SUI") == Decimal("155.25")
    assert wallet.rewards("ann").claimable == 0


def test_harvest_is_claim_swap_and_save_in_one_transaction(
    wallet: PaperWallet, clock: ManualClock
) -> None:
    wallet.open("ann")
    clock.advance(YEAR)
    savings_before = saved(wallet, "ann", "USDC")
    sui_before = available(wallet, "ann", "SUI")
    receipt = wallet.execute("ann", HarvestRewards(), key="k1")
    gained = Decimal(receipt.details["saved_usdc"])
    assert gained > 0
    assert saved(wallet, "ann", "USDC") == savings_before + gained
    assert available(wallet, "ann", "SUI") == sui_before  # claimed and swapped away
    assert wallet.rewards("ann").claimable == 0
    tx = wallet.transaction("ann", receipt.digest)
    books = {(leg.book, leg.asset) for leg in tx.legs_of("ann")}
    assert {("rewards", "SUI"), ("available", "SUI"), ("savings", "USDC")} <= books
    refused(wallet, "nothing_to_claim", HarvestRewards(), key="k2")


def test_withdraw_all_and_nothing_saved(wallet: PaperWallet) -> None:
    refused(wallet, "insufficient_funds", Withdraw("USDT", None))
    refused(wallet, "insufficient_funds", Withdraw("USDC", Decimal("1500.000001")))
    receipt = wallet.execute("ann", Withdraw("USDC", None), key="k1")
    assert receipt.label == "Withdrew 1,500.00 USDC from savings"
    assert available(wallet, "ann", "USDC") == Decimal("2500")
    assert saved(wallet, "ann", "USDC") == 0
