"""What the wallet reports: one pydantic model per figure a person (or a model) may check.

Amounts are ``Decimal`` (JSON strings on the wire); USD figures are to the cent; rates and
shares are percentages (``4.8`` means 4.8%). The capabilities return these models as they are.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, Field

__all__ = [
    "ActivityReport",
    "BalanceReport",
    "Change",
    "Contact",
    "HealthReport",
    "HistoryEntry",
    "Holding",
    "LegView",
    "MarketRates",
    "PortfolioReport",
    "PriceView",
    "Receipt",
    "RewardsReport",
    "SavingsPosition",
    "SavingsReport",
    "SpendingReport",
    "SwapQuote",
    "TxExplanation",
    "YieldReport",
]


class Holding(BaseModel):
    asset: str
    amount: Decimal
    usd: Decimal


class BalanceReport(BaseModel):
    address: str
    whose: str  # "yours", "another paper-wallet account", "an external address"
    available: list[Holding]
    savings: list[Holding]
    debt: list[Holding]
    rewards: list[Holding]
    total_usd: Decimal = Field(description="available + savings + rewards - debt, in USD")
    as_of: datetime


class Change(BaseModel):
    book: str
    asset: str
    amount: Decimal


class Receipt(BaseModel):
    """A posted transaction, as the person's own books saw it."""

    digest: str
    kind: str
    label: str
    at: datetime
    changes: list[Change]
    balances: list[Change] = Field(description="the touched books after the transaction")
    details: dict[str, Any]
    replayed: bool = False


class SavingsPosition(BaseModel):
    asset: str
    amount: Decimal
    usd: Decimal
    accrued_interest: Decimal = Field(description="earned since the last posting, included")
    interest_earned: Decimal = Field(description="all interest earned, posted and accrued")
    supply_apy_pct: Decimal


class SavingsReport(BaseModel):
    positions: list[SavingsPosition]
    total_usd: Decimal
    blended_apy_pct: Decimal
    projected_yearly_usd: Decimal
    as_of: datetime


class HealthReport(BaseModel):
    health_factor: Decimal | None = Field(description="null when there is no debt")
    risk: str
    collateral_usd: Decimal
    debt_usd: Decimal
    borrow_limit_usd: Decimal
    available_to_borrow_usd: Decimal
    debt: list[Holding]
    as_of: datetime


class MarketRates(BaseModel):
    asset: str
    supply_apy_pct: Decimal
    borrow_apy_pct: Decimal | None
    reward_apr_pct: Decimal = Field(description="rewards' value per year over what is supplied")
    ltv_pct: Decimal
    liquidation_threshold_pct: Decimal


class PriceView(BaseModel):
    asset: str
    usd: Decimal
    change_24h_pct: Decimal


class SwapQuote(BaseModel):
    quote_id: str
    from_asset: str
    to_asset: str
    amount_in: Decimal
    amount_out: Decimal
    rate: Decimal = Field(description="to_asset received per from_asset")
    route: list[str]
    fee_usd: Decimal
    price_impact_pct: Decimal
    value_in_usd: Decimal
    value_out_usd: Decimal
    created_at: datetime
    expires_at: datetime


class HistoryEntry(BaseModel):
    digest: str
    at: datetime
    kind: str
    label: str
    changes: list[Change]


class LegView(BaseModel):
    account: str
    asset: str
    amount: Decimal
    memo: str


class TxExplanation(BaseModel):
    digest: str
    previous_digest: str
    verified: bool = Field(description="the digest recomputed from the body matches")
    at: datetime
    kind: str
    label: str
    summary: list[str]
    legs: list[LegView]
    details: dict[str, Any]


class Contact(BaseModel):
    name: str
    address: str
    saved_at: datetime


class RewardsReport(BaseModel):
    asset: str
    claimable: Decimal
    usd: Decimal
    accruing_per_day: Decimal
    as_of: datetime


class PortfolioReport(BaseModel):
    net_worth_usd: Decimal
    holdings: list[Holding] = Field(description="net of debt, per asset")
    allocation_pct: dict[str, Decimal]
    stablecoin_share_pct: Decimal
    largest_asset: str | None
    insights: list[str]
    as_of: datetime


class SpendingReport(BaseModel):
    days: int
    total_out_usd: Decimal
    by_category_usd: dict[str, Decimal]
    top_recipients: list[dict[str, Any]]
    transactions: int


class YieldReport(BaseModel):
    days: int
    interest_earned_usd: Decimal
    rewards_earned_usd: Decimal
    savings_usd: Decimal
    blended_apy_pct: Decimal
    projected_30d_usd: Decimal
    projected_1y_usd: Decimal
    daily_savings_usd: list[Decimal] = Field(description="savings at the end of each day")


class ActivityReport(BaseModel):
    days: int
    transactions: int
    by_kind: dict[str, int]
    volume_usd_by_kind: dict[str, Decimal]
    first: datetime | None
    last: datetime | None
