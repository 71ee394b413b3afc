"""The market: a seeded price path for every asset, and constant-product pools to swap in.

Prices are a pure function of (seed, asset, time): smooth value noise over a few time scales
(a month down to five minutes), computed in ``Decimal`` from sha256, so the same clock gives
the same prices on every machine. Stablecoins are pegged at $1.

Each non-USDC asset trades against USDC in an x·y=k pool whose reserves are ledger accounts
(``@pool:SUI-USDC``). Pools do not follow the price path by themselves: before a swap, an
arbitrageur (``@market``) brings the pool back to the market price keeping k, as happens on a
real chain; then the swap pays the pool fee (it stays in the pool) and moves the price. A swap
between two non-USDC assets routes through USDC in two hops.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_DOWN, Decimal, localcontext

from .assets import ASSETS, Asset, get_asset
from .errors import WalletError
from .ledger import Batch, Draft

__all__ = [
    "DEFAULT_POOLS",
    "Hop",
    "Market",
    "PoolSpec",
    "PricePath",
    "SwapPlan",
]

POOL_BOOK = "reserve"
ARBITRAGE = "@market"
GENESIS = "@genesis"


def _micros(delta: timedelta) -> int:
    # exact integer arithmetic: no float on the way from the clock to a price
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class PricePath:
    """Deterministic prices: the same seed and time give the same price, everywhere."""

    OCTAVES: tuple[tuple[timedelta, Decimal], ...] = (
        (timedelta(days=30), Decimal("0.30")),
        (timedelta(days=7), Decimal("0.10")),
        (timedelta(days=1), Decimal("0.03")),
        (timedelta(hours=1), Decimal("0.01")),
        (timedelta(minutes=5), Decimal("0.003")),
    )

    def __init__(
        self, *, seed: int = 7, anchor: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    ) -> None:
        self.seed = seed
        self.anchor = anchor

    def price(self, asset: Asset, at: datetime) -> Decimal:
        """The USD price of ``asset`` at ``at``, to ten significant digits."""
        if asset.volatility == 0:
            return asset.base_price
        elapsed = _micros(at - self.anchor)
        offset = Decimal(0)
        for index, (period, amplitude) in enumerate(self.OCTAVES):
            span = _micros(period)
            bucket, rest = divmod(elapsed, span)
            frac = Decimal(rest) / Decimal(span)
            smooth = frac * frac * (3 - 2 * frac)
            a = self._noise(asset.symbol, index, bucket)
            b = self._noise(asset.symbol, index, bucket + 1)
            offset += amplitude * (a + (b - a) * smooth)
        with localcontext() as ctx:
            ctx.prec = 10
            return +(asset.base_price * (asset.volatility * offset).exp())

    def _noise(self, symbol: str, octave: int, bucket: int) -> Decimal:
        """A value in [-1, 1) fixed by (seed, symbol, octave, bucket)."""
        digest = hashlib.sha256(f"{self.seed}:{symbol}:{octave}:{bucket}".encode()).digest()
        return Decimal(int.from_bytes(digest[:8], "big")) / Decimal(2**63) - 1


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """A constant-product pool of ``base`` against ``quote``; each side worth ``depth_usd``."""

    base: str
    quote: str = "USDC"
    fee: Decimal = Decimal("0.0025")
    depth_usd: Decimal = Decimal("2000000")

    @property
    def name(self) -> str:
        return f"{self.base}-{self.quote}"

    @property
    def owner(self) -> str:
        return f"@pool:{self.name}"


DEFAULT_POOLS: tuple[PoolSpec, ...] = (
    PoolSpec("USDT", fee=Decimal("0.0001"), depth_usd=Decimal("5000000")),
    PoolSpec("SUI", fee=Decimal("0.0025"), depth_usd=Decimal("3000000")),
    PoolSpec("ETH", fee=Decimal("0.0025"), depth_usd=Decimal("5000000")),
    PoolSpec("BTC", fee=Decimal("0.0025"), depth_usd=Decimal("5000000")),
    PoolSpec("WAL", fee=Decimal("0.003"), depth_usd=Decimal("400000")),
    PoolSpec("DEEP", fee=Decimal("0.003"), depth_usd=Decimal("300000")),
    PoolSpec("NAVX", fee=Decimal("0.003"), depth_usd=Decimal("200000")),
)


@dataclass(frozen=True, slots=True)
class Hop:
    """One pool crossed by a swap, with the reserves it saw (after rebalancing)."""

    pool: PoolSpec
    asset_in: str
    asset_out: str
    amount_in: Decimal
    amount_out: Decimal
    fee: Decimal  # in asset_in, kept by the pool
    reserve_in: Decimal
    reserve_out: Decimal
    rebalance_in: Decimal  # what the arbitrageur moved into the pool before the swap
    rebalance_out: Decimal


@dataclass(frozen=True, slots=True)
class SwapPlan:
    """What a swap of ``amount_in`` would give now, and why."""

    asset_in: str
    asset_out: str
    amount_in: Decimal
    amount_out: Decimal
    hops: tuple[Hop, ...]
    fair_out: Decimal  # at market prices, with no fee and no price impact
    fee_usd: Decimal
    price_in: Decimal
    price_out: Decimal

    @property
    def price_impact(self) -> Decimal:
        """The share of value lost to the pools' depth (fees excluded), as a fraction."""
        after_fees = self.fair_out
        for hop in self.hops:
            after_fees *= 1 - hop.pool.fee
        if after_fees <= 0:
            return Decimal(0)
        impact = 1 - self.amount_out / after_fees
        return max(Decimal(0), impact).quantize(Decimal("0.000001"))

    @property
    def rate(self) -> Decimal:
        """How much ``asset_out`` one ``asset_in`` buys in this swap."""
        with localcontext() as ctx:
            ctx.prec = 8
            return +(self.amount_out / self.amount_in)

    @property
    def route(self) -> list[str]:
        return [hop.pool.name for hop in self.hops]


class Market:
    """Prices and pools. Pools' reserves live in the ledger; prices come from the path."""

    def __init__(self, path: PricePath, pools: Sequence[PoolSpec] = DEFAULT_POOLS) -> None:
        self.path = path
        self.pools: Mapping[str, PoolSpec] = {p.base: p for p in pools}
        for pool in pools:
            if pool.quote != "USDC" or pool.base not in ASSETS or not 0 <= pool.fee < 1:
                raise ValueError(f"pool {pool.name}: pools trade a known asset against USDC")

    # --- prices -----------------------------------------------------------------------------
    def price(self, symbol: str, at: datetime) -> Decimal:
        return self.path.price(get_asset(symbol), at)

    def prices(self, at: datetime) -> dict[str, Decimal]:
        return {symbol: self.path.price(asset, at) for symbol, asset in ASSETS.items()}

    def change_24h(self, symbol: str, at: datetime) -> Decimal:
        """The relative price change over the last 24 hours, as a fraction."""
        before = self.price(symbol, at - timedelta(days=1))
        with localcontext() as ctx:
            ctx.prec = 10
            return +(self.price(symbol, at) / before - 1)

    def usd_value(self, symbol: str, amount: Decimal, at: datetime) -> Decimal:
        return amount * self.price(symbol, at)

    # --- pools ------------------------------------------------------------------------------
    def genesis_pool(self, draft: Draft, pool: PoolSpec, at: datetime) -> None:
        """Fill a pool with ``depth_usd`` of each side at the market price."""
        base = get_asset(pool.base)
        base_amount = base.quantize(pool.depth_usd / self.price(pool.base, at))
        quote_amount = get_asset(pool.quote).quantize(pool.depth_usd)
        draft.move(pool.base, base_amount, (GENESIS, "supply"), (pool.owner, POOL_BOOK))
        draft.move(pool.quote, quote_amount, (GENESIS, "supply"), (pool.owner, POOL_BOOK))

    def route(self, asset_in: str, asset_out: str) -> list[tuple[PoolSpec, str, str]]:
        """The pools a swap crosses, each with the asset going in and the one coming out."""
        a, b = get_asset(asset_in).symbol, get_asset(asset_out).symbol
        if a == b:
            raise WalletError("same_asset", f"cannot swap {a} for itself")
        hops: list[tuple[PoolSpec, str, str]] = []
        for symbol in (a, b):
            if symbol != "USDC" and symbol not in self.pools:
                raise WalletError("unsupported_asset", f"there is no pool for {symbol}")
        if a != "USDC":
            hops.append((self.pools[a], a, "USDC"))
        if b != "USDC":
            hops.append((self.pools[b], "USDC", b))
        return hops

    def plan(
        self, view: Batch, asset_in: str, asset_out: str, amount_in: Decimal, at: datetime
    ) -> SwapPlan:
        """Price a swap now against the pools' reserves (rebalanced to the market first)."""
        hops: list[Hop] = []
        amount = amount_in
        for pool, a, b in self.route(asset_in, asset_out):
            reserve_in, reserve_out, move_in, move_out = self._rebalanced(view, pool, a, b, at)
            fee = get_asset(a).quantize(amount * pool.fee)
            net = amount - fee
            out = get_asset(b).quantize(reserve_out * net / (reserve_in + net), rounding=ROUND_DOWN)
            hops.append(
                Hop(pool, a, b, amount, out, fee, reserve_in, reserve_out, move_in, move_out)
            )
            amount = out
        price_in, price_out = self.price(asset_in, at), self.price(asset_out, at)
        fair = amount_in * price_in / price_out
        fee_usd = sum((h.fee * self.price(h.asset_in, at) for h in hops), Decimal(0))
        return SwapPlan(
            asset_in=get_asset(asset_in).symbol,
            asset_out=get_asset(asset_out).symbol,
            amount_in=amount_in,
            amount_out=amount,
            hops=tuple(hops),
            fair_out=get_asset(asset_out).quantize(fair),
            fee_usd=fee_usd,
            price_in=price_in,
            price_out=price_out,
        )

    def _rebalanced(
        self, view: Batch, pool: PoolSpec, a: str, b: str, at: datetime
    ) -> tuple[Decimal, Decimal, Decimal, Decimal]:
        """The pool's reserves of (a, b) once an arbitrageur has moved it to the market price.

        Keeping k = x·y, the reserves at price p (quote per base) are x = √(k/p), y = √(k·p).
        Returns (reserve a, reserve b, what moved in of a, what moved in of b).
        """
        base = view.balance(pool.owner, POOL_BOOK, pool.base)
        quote = view.balance(pool.owner, POOL_BOOK, pool.quote)
        if base <= 0 or quote <= 0:
            raise WalletError("insufficient_liquidity", f"the {pool.name} pool is empty")
        p = self.price(pool.base, at) / self.price(pool.quote, at)
        with localcontext() as ctx:
            ctx.prec = 40
            k = base * quote
            new_base = get_asset(pool.base).quantize((k / p).sqrt())
            new_quote = get_asset(pool.quote).quantize((k * p).sqrt())
        moved_base, moved_quote = new_base - base, new_quote - quote
        if a == pool.base:
            return new_base, new_quote, moved_base, moved_quote
        return new_quote, new_base, moved_quote, moved_base

    def post_rebalance(self, draft: Draft, plan: SwapPlan) -> None:
        """The arbitrageur's legs that bring the crossed pools to the market price."""
        for hop in plan.hops:
            for asset, moved in (
                (hop.asset_in, hop.rebalance_in),
                (hop.asset_out, hop.rebalance_out),
            ):
                draft.move(asset, moved, (ARBITRAGE, "trading"), (hop.pool.owner, POOL_BOOK))

    def post_swap(
        self, draft: Draft, plan: SwapPlan, source: tuple[str, str], dest: tuple[str, str]
    ) -> None:
        """The swap's legs: ``amount_in`` from ``source``, pool to pool, out to ``dest``."""
        origin = source
        for hop in plan.hops:
            fee = f"{hop.pool.fee * 100:g}% pool fee ({hop.fee} {hop.asset_in}) stays in the pool"
            draft.move(hop.asset_in, hop.amount_in, origin, (hop.pool.owner, POOL_BOOK), fee)
            origin = (hop.pool.owner, POOL_BOOK)
        last = plan.hops[-1]
        draft.move(last.asset_out, last.amount_out, origin, dest)
