"""``WalletConfig``: how the paper wallet behaves (its seed, grants, markets, pools, limits).

Its own module so that the booking (``books.py``) and the wallet (``wallet.py``) both read it
without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from .assets import get_asset, money
from .lending import DEFAULT_MARKETS, LendingMarket
from .market import DEFAULT_POOLS, PoolSpec

__all__ = ["WalletConfig"]


@dataclass(frozen=True)
class WalletConfig:
    """How the paper wallet behaves. Amounts are Decimals (a float is refused)."""

    seed: int = 7
    price_anchor: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    starting_balances: Mapping[str, Decimal] = field(
        default_factory=lambda: {
            "USDC": Decimal("1000"),
            "SUI": Decimal("150"),
            "ETH": Decimal("0.5"),
        }
    )
    starting_savings: Mapping[str, Decimal] = field(
        default_factory=lambda: {"USDC": Decimal("1500")}
    )
    markets: tuple[LendingMarket, ...] = DEFAULT_MARKETS
    pools: tuple[PoolSpec, ...] = DEFAULT_POOLS
    reward_asset: str = "SUI"
    quote_ttl_seconds: int = 60
    default_slippage: Decimal = Decimal("0.01")  # a fraction
    max_slippage: Decimal = Decimal("0.05")  # the most a swap may accept
    max_price_impact: Decimal = Decimal("0.05")  # a swap moving its pools more is refused
    linked_addresses: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for grants in (self.starting_balances, self.starting_savings):
            for symbol, amount in grants.items():
                get_asset(symbol).units(money(amount, what=f"starting {symbol}"))
        for value in (self.default_slippage, self.max_slippage, self.max_price_impact):
            money(value, what="limit")
