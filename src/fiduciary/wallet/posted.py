"""What the ledger's postings hold, apart from what accrued since: ``PaperWallet.balances``
counts the interest and rewards accrued since the last posting in (the next write books exactly
that), so a figure shown from it is not one of the ledger's. The terminal's tables and the web
console's balances show the posted figures, and the accrual apart."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal

from .assets import get_asset, usd
from .lending import Accrual
from .views import BalanceReport, Holding
from .wallet import PaperWallet

__all__ = ["accrued_line", "posted_balances"]


def posted_balances(
    wallet: PaperWallet, principal: str, at: datetime | None = None
) -> tuple[BalanceReport, Accrual]:
    """The balances as the ledger's postings hold them, and apart from them what accrued since
    the last posting (``balances`` counts it in: interest in savings and debt, rewards); the
    USD values and the total are of the posted amounts."""
    when = at or wallet.clock.now()
    report = wallet.balances(principal, at=when)
    accrual = wallet.positions(principal, at=when).accrual

    def less(holdings: list[Holding], accrued: Mapping[str, Decimal]) -> list[Holding]:
        kept = []
        for h in holdings:
            amount = h.amount - accrued.get(h.asset, Decimal(0))
            if amount:
                kept.append(
                    Holding(
                        asset=h.asset, amount=amount, usd=wallet.usd_value(h.asset, amount, when)
                    )
                )
        return kept

    savings = less(report.savings, accrual.interest)
    debt = less(report.debt, accrual.debt_interest)
    rewards = less(report.rewards, {wallet.lending.reward_asset: accrual.rewards})
    total = sum((h.usd for h in [*report.available, *savings, *rewards]), Decimal(0))
    total -= sum((h.usd for h in debt), Decimal(0))
    posted = report.model_copy(
        update={"savings": savings, "debt": debt, "rewards": rewards, "total_usd": usd(total)}
    )
    return posted, accrual


def accrued_line(wallet: PaperWallet, accrual: Accrual) -> str | None:
    """What accrued and is not posted yet, in words (None: nothing)."""
    parts = [
        *(
            f"{get_asset(a).format(v)} {a} of interest on savings"
            for a, v in accrual.interest.items()
        ),
        *(
            f"{get_asset(a).format(v)} {a} of interest on debt"
            for a, v in accrual.debt_interest.items()
        ),
    ]
    if accrual.rewards:
        symbol = wallet.lending.reward_asset
        parts.append(f"{get_asset(symbol).format(accrual.rewards)} {symbol} of rewards")
    if not parts:
        return None
    return (
        "Accrued since the last posting, not in the ledger yet (posted by the next write): "
        + ", ".join(parts)
        + "."
    )
