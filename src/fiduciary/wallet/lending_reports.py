"""What the lending pool reports to a principal: health, rates, savings, rewards.

Every figure comes from the principal's positions (``Lending.positions``) and the price path at
one time, valued to the cent as the policy sees it.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from .assets import get_asset, money, usd
from .books import pct
from .ledger import Ledger
from .lending import Lending, Positions
from .market import Market
from .views import (
    HealthReport,
    Holding,
    MarketRates,
    RewardsReport,
    SavingsPosition,
    SavingsReport,
)

__all__ = ["LendingReports"]


class LendingReports:
    """The lending pool's reports, read from the ledger at a given time."""

    def __init__(self, market: Market, lending: Lending, ledger: Ledger) -> None:
        self.market = market
        self.lending = lending
        self.ledger = ledger

    def _usd(self, symbol: str, amount: Decimal, when: datetime) -> Decimal:
        return usd(self.market.usd_value(symbol, money(amount), when))

    def health(self, pos: Positions, when: datetime) -> HealthReport:
        h = self.lending.health(pos, when)
        return HealthReport(
            health_factor=h.health_factor,
            risk=h.risk,
            collateral_usd=usd(h.collateral_usd),
            debt_usd=usd(h.debt_usd),
            borrow_limit_usd=usd(h.borrow_limit_usd),
            available_to_borrow_usd=usd(h.available_to_borrow_usd),
            debt=[
                Holding(asset=a, amount=v, usd=self._usd(a, v, when))
                for a, v in sorted(pos.debt.items())
            ],
            as_of=when,
        )

    def rates(self, when: datetime) -> list[MarketRates]:
        out = []
        for m in self.lending.markets.values():
            reward_usd = m.reward_rate * self.market.price(self.lending.reward_asset, when)
            reward_apr = reward_usd / self.market.price(m.asset, when)
            out.append(
                MarketRates(
                    asset=m.asset,
                    supply_apy_pct=pct(m.supply_apy),
                    borrow_apy_pct=None if m.borrow_apy is None else pct(m.borrow_apy),
                    reward_apr_pct=pct(reward_apr),
                    ltv_pct=pct(m.ltv),
                    liquidation_threshold_pct=pct(m.liquidation_threshold),
                )
            )
        return out

    def savings(self, principal: str, pos: Positions, when: datetime) -> SavingsReport:
        view = self.ledger.read()
        rows: list[SavingsPosition] = []
        total = yearly = Decimal(0)
        for asset, amount in sorted(pos.savings.items()):
            m = self.lending.markets[asset]
            accrued = pos.accrual.interest.get(asset, Decimal(0))
            posted = view.total(principal, "savings", asset, memo="supply interest")
            value = self._usd(asset, amount, when)
            total += value
            yearly += value * m.supply_apy
            rows.append(
                SavingsPosition(
                    asset=asset,
                    amount=amount,
                    usd=value,
                    accrued_interest=accrued,
                    interest_earned=posted + accrued,
                    supply_apy_pct=pct(m.supply_apy),
                )
            )
        blended = pct(yearly / total) if total else Decimal("0.00")
        return SavingsReport(
            positions=rows,
            total_usd=usd(total),
            blended_apy_pct=blended,
            projected_yearly_usd=usd(yearly),
            as_of=when,
        )

    def rewards(self, pos: Positions, when: datetime) -> RewardsReport:
        symbol = self.lending.reward_asset
        per_day = sum(
            (v * self.lending.markets[a].reward_rate / 365 for a, v in pos.savings.items()),
            Decimal(0),
        )
        return RewardsReport(
            asset=symbol,
            claimable=pos.rewards,
            usd=self._usd(symbol, pos.rewards, when),
            accruing_per_day=get_asset(symbol).quantize(per_day),
            as_of=when,
        )
