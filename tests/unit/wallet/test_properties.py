"""Properties of the ledger under any sequence of operations (hypothesis).

- every transaction balances per asset, and the digest chain holds;
- no balance goes negative where it must not (available, savings, rewards, pools, the
  lending pool's cash) and debt is never positive;
- a refused operation posts nothing;
- replaying any call with its idempotency key changes nothing, however much later.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fiduciary import ManualClock
from fiduciary.wallet import (
    Borrow,
    ClaimRewards,
    Deposit,
    HarvestRewards,
    Operation,
    PaperWallet,
    Repay,
    Send,
    Swap,
    WalletError,
    Withdraw,
)
from fiduciary.wallet.addresses import address_of
from fiduciary.wallet.ledger import Batch

from .conftest import available

PRINCIPALS = ("ann", "bob")
ASSETS = ("USDC", "USDT", "SUI", "ETH", "DOGE")
RECIPIENTS = (address_of("bob"), address_of("ann"), "0x" + "ab" * 20, "Carol", "0xbad")

amounts = st.decimals(
    min_value=Decimal("0.000001"),
    max_value=Decimal("3000"),
    places=6,
    allow_nan=False,
    allow_infinity=False,
)
assets = st.sampled_from(ASSETS)
slippages = st.none() | st.sampled_from([Decimal("0.01"), Decimal("0.05"), Decimal("0.2")])


@dataclass(frozen=True)
class Wait:
    seconds: int


operations: st.SearchStrategy[Operation | Wait] = st.one_of(
    st.builds(Deposit, assets, amounts),
    st.builds(Withdraw, assets, st.none() | amounts),
    st.builds(Send, st.sampled_from(RECIPIENTS), assets, amounts),
    st.builds(Borrow, assets, amounts),
    st.builds(Repay, assets, st.none() | amounts),
    # the common case, often enough to follow a loan: USDC borrowed and repaid
    st.builds(Borrow, st.just("USDC"), amounts),
    st.builds(Repay, st.just("USDC"), st.none() | amounts),
    st.just(ClaimRewards()),
    st.builds(HarvestRewards, slippages),
    st.builds(Swap, assets, assets, amounts, slippages),
    st.builds(Wait, st.integers(min_value=0, max_value=120 * 86_400)),
)
steps = st.lists(st.tuples(st.sampled_from(PRINCIPALS), operations), min_size=1, max_size=18)


def snapshot(wallet: PaperWallet) -> dict[tuple[str, str, str], Decimal]:
    with wallet.ledger.batch(commit=False) as view:
        return {(o, b, a): view.balance(o, b, a) for o, b, a, _ in view.accounts()}


def check_signs(balances: dict[tuple[str, str, str], Decimal]) -> None:
    for (owner, book, asset), amount in balances.items():
        if owner in PRINCIPALS:
            assert (amount <= 0) if book == "debt" else (amount >= 0), (owner, book, asset)
        if owner.startswith("@pool:") or (owner, book) == ("@lending", "reserve"):
            assert amount >= 0, (owner, book, asset)


def balanced_per_asset(view: Batch) -> bool:
    totals: dict[str, Decimal] = {}
    for owner, book, asset, _ in view.accounts():
        totals[asset] = totals.get(asset, Decimal(0)) + view.balance(owner, book, asset)
    return all(total == 0 for total in totals.values())


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps)
def test_any_sequence_keeps_the_books(sequence: list[tuple[str, Operation | Wait]]) -> None:
    clock = ManualClock()
    with PaperWallet(clock=clock) as wallet:
        wallet.save_contact("ann", "Carol", "0x" + "cd" * 20, key="contact")
        for who in PRINCIPALS:
            wallet.open(who)
        done: list[tuple[str, Operation, str]] = []
        for n, (who, op) in enumerate(sequence):
            if isinstance(op, Wait):
                clock.advance(timedelta(seconds=op.seconds))
                continue
            before = snapshot(wallet)
            key = f"call-{n}"
            try:
                receipt = wallet.execute(who, op, key=key)
            except WalletError as exc:
                event(f"refused: {exc.code}")
                assert snapshot(wallet) == before  # a refusal posts nothing
                continue
            event(f"posted: {receipt.kind}")
            assert not receipt.replayed
            done.append((who, op, key))
            after = snapshot(wallet)
            check_signs(after)
            # the very next replay, and every earlier one, change nothing
            for old_who, old_op, old_key in done:
                assert wallet.execute(old_who, old_op, key=old_key).replayed
            assert snapshot(wallet) == after
        report = wallet.verify()
        assert report.ok, report.problems
        with wallet.ledger.batch(commit=False) as view:
            assert balanced_per_asset(view)
        clock.advance(timedelta(days=400))
        final = snapshot(wallet)
        for who, op, key in done:
            assert wallet.execute(who, op, key=key).replayed
        assert snapshot(wallet) == final


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(amounts, st.integers(0, 30 * 86_400)), min_size=1, max_size=8))
def test_savings_never_lose_and_interest_is_booked_exactly(
    deposits: list[tuple[Decimal, int]],
) -> None:
    clock = ManualClock()
    with PaperWallet(clock=clock) as wallet:
        wallet.open("ann")
        for n, (amount, wait) in enumerate(deposits):
            clock.advance(timedelta(seconds=wait))
            before = wallet.positions("ann").savings["USDC"]  # accrual included
            if amount > available(wallet, "ann", "USDC"):
                with pytest.raises(WalletError, match="available"):
                    wallet.execute("ann", Deposit("USDC", amount), key=f"k{n}")
                continue
            wallet.execute("ann", Deposit("USDC", amount), key=f"k{n}")
            # what a read showed before the write is what the write booked, to the unit
            assert wallet.positions("ann").savings["USDC"] == before + amount
        assert wallet.verify().ok
