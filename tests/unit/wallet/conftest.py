"""Fixtures of the wallet tests: a wallet in memory on a manual clock, and fresh keys."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from decimal import Decimal

import pytest

from fiduciary import ManualClock
from fiduciary.wallet import PaperWallet, WalletConfig


@pytest.fixture
def wallet(clock: ManualClock) -> Iterator[PaperWallet]:
    with PaperWallet(clock=clock) as opened:
        yield opened


@pytest.fixture
def keys() -> Iterator[str]:
    """Distinct idempotency keys: next(keys)."""
    return (f"key-{n}" for n in itertools.count(1))


def small_config(**changes: object) -> WalletConfig:
    """A wallet whose principals start with little, so limits are easy to reach."""
    base: dict[str, object] = {
        "starting_balances": {"USDC": Decimal("100"), "SUI": Decimal("10")},
        "starting_savings": {"USDC": Decimal("200")},
    }
    base.update(changes)
    return WalletConfig(**base)  # type: ignore[arg-type]


def available(wallet: PaperWallet, who: str, asset: str) -> Decimal:
    report = wallet.balances(who)
    return next((h.amount for h in report.available if h.asset == asset), Decimal(0))


def saved(wallet: PaperWallet, who: str, asset: str) -> Decimal:
    return wallet.positions(who).savings.get(asset, Decimal(0))


def tx_count(wallet: PaperWallet) -> int:
    return wallet.verify().transactions
