"""Lending: a savings pool that pays interest, loans against savings, and reward emissions.

Savings (the ``savings`` book) earn the market's supply APY, compounded continuously over clock
time; debt (the ``debt`` book, negative: it is owed) grows at the borrow APY; savings also earn
rewards in one reward asset (``reward_rate`` of it per unit supplied per year). Accrual is
computed from the checkpoint of the last posting and posted the next time the principal writes
(``materialize``), so reads never write and every figure a read reports is what the next
posting will book.

Savings are the collateral. The health factor is Σ(collateral in USD × liquidation threshold)
/ debt in USD; a loan may take debt up to Σ(collateral × LTV).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_UP, Decimal, localcontext

from .assets import get_asset
from .errors import WalletError
from .ledger import Batch, Draft, timestamp
from .market import Market, _micros

__all__ = [
    "DEFAULT_MARKETS",
    "Accrual",
    "Health",
    "Lending",
    "LendingMarket",
    "Positions",
]

LENDING = "@lending"
YEAR_MICROS = 365 * 86_400 * 1_000_000


@dataclass(frozen=True, slots=True)
class LendingMarket:
    """One asset of the lending pool: its rates and how much it counts as collateral."""

    asset: str
    supply_apy: Decimal
    borrow_apy: Decimal | None  # None: this asset cannot be borrowed
    ltv: Decimal  # the most debt (USD) one USD of it as collateral allows
    liquidation_threshold: Decimal
    reward_rate: Decimal = Decimal(0)  # reward asset per unit supplied per year
    liquidity: Decimal = Decimal("5000000")  # what the pool holds at genesis

    @property
    def borrowable(self) -> bool:
        return self.borrow_apy is not None


DEFAULT_MARKETS: tuple[LendingMarket, ...] = (
    LendingMarket(
        "USDC", Decimal("0.048"), Decimal("0.072"), Decimal("0.80"), Decimal("0.85"),
        Decimal("0.0035"),
    ),
    LendingMarket(
        "USDT", Decimal("0.042"), Decimal("0.069"), Decimal("0.80"), Decimal("0.85"),
        Decimal("0.003"),
    ),
    LendingMarket(
        "SUI", Decimal("0.021"), None, Decimal("0.60"), Decimal("0.70"), Decimal("0.01"),
        Decimal("1000000"),
    ),
)  # fmt: skip


def growth(apy: Decimal, micros: int) -> Decimal:
    """The fraction a balance grows by in ``micros`` at ``apy`` (compounded continuously)."""
    if micros <= 0 or apy == 0:
        return Decimal(0)
    with localcontext() as ctx:
        ctx.prec = 34
        return (1 + apy) ** (Decimal(micros) / YEAR_MICROS) - 1


@dataclass(frozen=True, slots=True)
class Accrual:
    """Interest and rewards accrued since the last posting, not booked yet."""

    interest: Mapping[str, Decimal] = field(default_factory=dict)  # by asset, on savings
    debt_interest: Mapping[str, Decimal] = field(default_factory=dict)  # by asset, on debt
    rewards: Decimal = Decimal(0)  # in the reward asset


@dataclass(frozen=True, slots=True)
class Positions:
    """A principal's lending positions now, accrual included (debt as a positive amount)."""

    savings: Mapping[str, Decimal]
    debt: Mapping[str, Decimal]
    rewards: Decimal
    accrual: Accrual


@dataclass(frozen=True, slots=True)
class Health:
    collateral_usd: Decimal
    weighted_collateral_usd: Decimal  # × liquidation thresholds
    borrow_limit_usd: Decimal  # × LTVs
    debt_usd: Decimal
    health_factor: Decimal | None  # None: no debt

    @property
    def available_to_borrow_usd(self) -> Decimal:
        return max(Decimal(0), self.borrow_limit_usd - self.debt_usd)

    @property
    def risk(self) -> str:
        hf = self.health_factor
        if hf is None:
            return "no debt"
        if hf >= 2:
            return "safe"
        if hf >= Decimal("1.5"):
            return "watch"
        if hf >= 1:
            return "at risk"
        return "liquidatable"


class Lending:
    """The lending pool's rules, applied to ledger balances."""

    def __init__(
        self, market: Market, markets: Sequence[LendingMarket], *, reward_asset: str
    ) -> None:
        self.market = market
        self.markets: Mapping[str, LendingMarket] = {m.asset: m for m in markets}
        self.reward_asset = get_asset(reward_asset).symbol
        for m in markets:
            get_asset(m.asset)
            if not 0 < m.ltv <= m.liquidation_threshold <= 1:
                raise ValueError(f"{m.asset}: need 0 < ltv <= liquidation_threshold <= 1")

    def market_for(self, symbol: str, *, borrow: bool = False) -> LendingMarket:
        asset = get_asset(symbol, among=self.markets)
        found = self.markets[asset.symbol]
        if borrow and not found.borrowable:
            can = ", ".join(m.asset for m in self.markets.values() if m.borrowable)
            raise WalletError("unsupported_asset", f"{asset.symbol} cannot be borrowed; use {can}")
        return found

    # --- accrual ----------------------------------------------------------------------------
    def accrued(self, view: Batch, owner: str, at: datetime) -> Accrual:
        interest: dict[str, Decimal] = {}
        debt_interest: dict[str, Decimal] = {}
        reward_units = Decimal(0)
        for m in self.markets.values():
            asset = get_asset(m.asset)
            supplied = view.balance(owner, "savings", m.asset)
            since = _through(view, owner, m.asset, "supply")
            if supplied > 0 and since is not None:
                micros = _micros(at - since)
                interest[m.asset] = asset.quantize(supplied * growth(m.supply_apy, micros))
                reward_units += supplied * m.reward_rate * Decimal(max(micros, 0)) / YEAR_MICROS
            owed = -view.balance(owner, "debt", m.asset)
            since = _through(view, owner, m.asset, "borrow")
            if owed > 0 and since is not None and m.borrow_apy is not None:
                grown = owed * growth(m.borrow_apy, _micros(at - since))
                debt_interest[m.asset] = asset.quantize(grown, rounding=ROUND_UP)
        rewards = get_asset(self.reward_asset).quantize(reward_units)
        return Accrual(
            {a: v for a, v in interest.items() if v > 0},
            {a: v for a, v in debt_interest.items() if v > 0},
            rewards,
        )

    def materialize(self, draft: Draft, owner: str, at: datetime) -> Accrual:
        """Book what accrued up to ``at`` into ``draft`` and move the checkpoints to ``at``."""
        view = draft.batch
        accrual = self.accrued(view, owner, at)
        for asset, amount in accrual.interest.items():
            draft.move(asset, amount, (LENDING, "supplied"), (owner, "savings"), "supply interest")
        for asset, amount in accrual.debt_interest.items():
            draft.move(asset, amount, (owner, "debt"), (LENDING, "loans"), "borrow interest")
        if accrual.rewards > 0:
            draft.move(
                self.reward_asset,
                accrual.rewards,
                (LENDING, "emissions"),
                (owner, "rewards"),
                "rewards accrued",
            )
        for m in self.markets.values():
            for kind in ("supply", "borrow"):
                since = _through(view, owner, m.asset, kind)
                if since is None or since < at:
                    view.execute(
                        "INSERT INTO wallet_accruals (owner, asset, kind, through) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT (owner, asset, kind) "
                        "DO UPDATE SET through = excluded.through",
                        (owner, m.asset, kind, timestamp(at)),
                    )
        return accrual

    # --- positions and health ---------------------------------------------------------------
    def positions(self, view: Batch, owner: str, at: datetime) -> Positions:
        accrual = self.accrued(view, owner, at)
        savings: dict[str, Decimal] = {}
        debt: dict[str, Decimal] = {}
        for m in self.markets.values():
            s = view.balance(owner, "savings", m.asset) + accrual.interest.get(m.asset, 0)
            d = -view.balance(owner, "debt", m.asset) + accrual.debt_interest.get(m.asset, 0)
            if s:
                savings[m.asset] = s
            if d:
                debt[m.asset] = d
        rewards = view.balance(owner, "rewards", self.reward_asset) + accrual.rewards
        return Positions(savings, debt, rewards, accrual)

    def health(self, positions: Positions, at: datetime) -> Health:
        collateral = weighted = limit = debt = Decimal(0)
        for asset, amount in positions.savings.items():
            value = self.market.usd_value(asset, amount, at)
            m = self.markets[asset]
            collateral += value
            weighted += value * m.liquidation_threshold
            limit += value * m.ltv
        for asset, amount in positions.debt.items():
            debt += self.market.usd_value(asset, amount, at)
        factor = None
        if debt > 0:
            with localcontext() as ctx:
                ctx.prec = 50  # a tiny debt makes a huge factor: keep its four decimals
                factor = (weighted / debt).quantize(Decimal("0.0001"))
        return Health(collateral, weighted, limit, debt, factor)


def _through(view: Batch, owner: str, asset: str, kind: str) -> datetime | None:
    row = view.one(
        "SELECT through FROM wallet_accruals WHERE owner = ? AND asset = ? AND kind = ?",
        (owner, asset, kind),
    )
    return None if row is None else datetime.fromisoformat(row[0])
