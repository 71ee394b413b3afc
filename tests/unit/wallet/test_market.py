"""The market: a deterministic price path, constant-product pools, quotes and routes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from fiduciary import ManualClock
from fiduciary.wallet import PaperWallet, Swap, WalletConfig
from fiduciary.wallet.assets import ASSETS, get_asset
from fiduciary.wallet.errors import WalletError
from fiduciary.wallet.market import POOL_BOOK, PricePath

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def test_the_price_path_is_a_function_of_seed_and_time() -> None:
    a, b, other = PricePath(seed=7), PricePath(seed=7), PricePath(seed=8)
    sui = get_asset("SUI")
    assert a.price(sui, T0) == b.price(sui, T0)
    assert a.price(sui, T0) != other.price(sui, T0)
    assert a.price(sui, T0) != a.price(sui, T0 + timedelta(hours=6))


def test_stablecoins_are_pegged() -> None:
    path = PricePath()
    for when in (T0, T0 + timedelta(days=200)):
        assert path.price(get_asset("USDC"), when) == Decimal(1)
        assert path.price(get_asset("USDT"), when) == Decimal(1)


def test_prices_move_smoothly_and_stay_plausible() -> None:
    path = PricePath()
    for asset in ASSETS.values():
        one = path.price(asset, T0)
        assert abs(path.price(asset, T0 + timedelta(seconds=1)) / one - 1) < Decimal("0.001")
        for month in range(12):
            price = path.price(asset, T0 + timedelta(days=30 * month))
            assert asset.base_price / 5 < price < asset.base_price * 5


def test_change_24h_is_the_price_ratio(wallet: PaperWallet) -> None:
    now = wallet.clock.now()
    [view] = wallet.prices(["sui"], now)
    expected = (wallet.price("SUI", now) / wallet.price("SUI", now - timedelta(days=1)) - 1) * 100
    assert view.change_24h_pct == expected.quantize(Decimal("0.01"))


def test_a_swap_follows_the_constant_product_rule(wallet: PaperWallet) -> None:
    quote = wallet.quote("ann", "USDC", "SUI", Decimal("100"))
    with wallet.ledger.batch(commit=False) as view:
        plan = wallet.market.plan(view, "USDC", "SUI", Decimal("100"), wallet.clock.now())
    [hop] = plan.hops
    net = Decimal("100") - hop.fee
    assert hop.fee == Decimal("0.25")  # 0.25% of 100 USDC
    expected = get_asset("SUI").quantize(hop.reserve_out * net / (hop.reserve_in + net))
    assert plan.amount_out == expected == quote.amount_out
    assert quote.route == ["SUI-USDC"]
    assert quote.fee_usd == Decimal("0.25")


def test_bigger_swaps_get_worse_rates_and_more_price_impact(wallet: PaperWallet) -> None:
    small = wallet.quote("ann", "USDC", "WAL", Decimal("100"))
    big = wallet.quote("ann", "USDC", "WAL", Decimal("20000"))
    assert big.rate < small.rate
    assert big.price_impact_pct > small.price_impact_pct >= 0
    assert big.price_impact_pct > Decimal("4")  # a $400k pool moved by $20k


def test_routes_go_through_usdc(wallet: PaperWallet) -> None:
    assert wallet.quote("ann", "ETH", "BTC", Decimal("0.1")).route == ["ETH-USDC", "BTC-USDC"]
    assert wallet.quote("ann", "SUI", "USDC", Decimal("1")).route == ["SUI-USDC"]
    with pytest.raises(WalletError) as same:
        wallet.quote("ann", "SUI", "sui", Decimal("1"))
    assert same.value.code == "same_asset"
    with pytest.raises(WalletError) as unknown:
        wallet.quote("ann", "SUI", "DOGE", Decimal("1"))
    assert unknown.value.code == "unknown_asset"


def test_a_quote_expires_after_its_ttl(wallet: PaperWallet, clock: ManualClock) -> None:
    quote = wallet.quote("ann", "USDC", "SUI", Decimal("10"))
    assert quote.expires_at - quote.created_at == timedelta(seconds=60)
    assert quote.quote_id.startswith("q_")


def test_arbitrage_brings_a_pool_back_to_the_market_price(clock: ManualClock) -> None:
    config = WalletConfig(starting_balances={"USDC": Decimal("50000")})
    with PaperWallet(clock=clock, config=config) as wallet:
        wallet.execute("ann", Swap("USDC", "SUI", Decimal("40000"), Decimal("0.05")), key="k1")
        clock.advance(timedelta(hours=5))
        receipt = wallet.execute("ann", Swap("USDC", "SUI", Decimal("1"), None), key="k2")
        with wallet.ledger.batch(commit=False) as view:
            sui = view.balance("@pool:SUI-USDC", POOL_BOOK, "SUI")
            usdc = view.balance("@pool:SUI-USDC", POOL_BOOK, "USDC")
        market = wallet.price("SUI")
        # after the rebalance and a $1 swap, the pool prices SUI at the market price
        assert abs(usdc / sui / market - 1) < Decimal("0.0001")
        kinds = [tx.kind for tx in wallet.ledger.read().transactions(newest_first=False)]
        assert kinds[-2:] == ["rebalance", "swap"]
        assert receipt.kind == "swap"
        assert wallet.verify().ok
