"""Reports computed from the ledger: portfolio, spending, yield, activity, one transaction.

Every figure is derived from postings and the price path (a past transaction is valued at the
price of its own time), so a person can recompute any of them from the ledger tables.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from .assets import STABLECOINS, get_asset, usd
from .ledger import Leg, Transaction, recompute_digest
from .lending import growth
from .market import _micros
from .views import (
    ActivityReport,
    Holding,
    LegView,
    PortfolioReport,
    SpendingReport,
    TxExplanation,
    YieldReport,
)
from .wallet import PaperWallet

__all__ = ["activity", "explain", "portfolio", "spending", "yield_summary"]

_ACCRUALS = frozenset({"supply interest", "borrow interest", "rewards accrued"})
_PCT = Decimal("0.01")


def _share(part: Decimal, whole: Decimal) -> Decimal:
    return (part / whole * 100).quantize(_PCT) if whole else Decimal("0.00")


def portfolio(wallet: PaperWallet, principal: str, at: datetime) -> PortfolioReport:
    """What the principal owns, net of debt, and what stands out about it."""
    report = wallet.balances(principal, at=at)
    gross: dict[str, Decimal] = {}
    for h in report.available + report.savings + report.rewards:
        gross[h.asset] = gross.get(h.asset, Decimal(0)) + h.amount
    net = dict(gross)
    for h in report.debt:
        net[h.asset] = net.get(h.asset, Decimal(0)) - h.amount
    holdings = [
        Holding(asset=a, amount=v, usd=wallet.usd_value(a, v, at)) for a, v in sorted(net.items())
    ]
    gross_usd = {a: wallet.usd_value(a, v, at) for a, v in gross.items()}
    total = sum(gross_usd.values(), Decimal(0))
    allocation = {a: _share(v, total) for a, v in sorted(gross_usd.items(), key=lambda kv: -kv[1])}
    stable = sum((v for a, v in gross_usd.items() if a in STABLECOINS), Decimal(0))
    largest = next(iter(allocation), None)
    insights: list[str] = []
    if largest is not None and allocation[largest] > 50:
        insights.append(
            f"{largest} is {allocation[largest]}% of your holdings: a fall in its price "
            "would weigh on everything you own."
        )
    idle = sum((h.usd for h in report.available if h.asset in STABLECOINS), Decimal(0))
    best = max(wallet.rates(at), key=lambda r: r.supply_apy_pct)
    if idle >= 100:
        insights.append(
            f"${idle:,.2f} of stablecoins sit in your available balance earning nothing; "
            f"savings pay up to {best.supply_apy_pct}% APY ({best.asset})."
        )
    health = wallet.health(principal, at)
    if health.health_factor is not None:
        insights.append(
            f"Your health factor is {health.health_factor} ({health.risk}); "
            f"you owe ${health.debt_usd:,.2f}."
        )
    if report.rewards and report.rewards[0].usd >= 1:
        r = report.rewards[0]
        insights.append(f"{r.amount} {r.asset} of rewards (${r.usd}) can be claimed or harvested.")
    return PortfolioReport(
        net_worth_usd=report.total_usd,
        holdings=holdings,
        allocation_pct=allocation,
        stablecoin_share_pct=_share(stable, total),
        largest_asset=largest,
        insights=insights,
        as_of=at,
    )


def _value(wallet: PaperWallet, leg: Leg, at: datetime) -> Decimal:
    return abs(leg.amount) * wallet.market.price(leg.asset, at)


def _add(totals: dict[str, Decimal], key: str, value: Decimal) -> None:
    totals[key] = totals.get(key, Decimal(0)) + value


def spending(wallet: PaperWallet, principal: str, days: int, at: datetime) -> SpendingReport:
    """Money that left the principal in the last ``days``: transfers, fees, interest."""
    since = at - timedelta(days=days)
    txs = wallet.ledger.read().transactions(principal=principal, since=since, until=at)
    by_category: dict[str, Decimal] = {}
    recipients: dict[str, Decimal] = {}
    counted = 0
    for tx in txs:
        before = sum(by_category.values(), Decimal(0))
        for leg in tx.legs_of(principal):
            if leg.memo == "borrow interest":
                _add(by_category, "interest paid", _value(wallet, leg, tx.at))
        if tx.kind == "send":
            value = sum(
                (
                    _value(wallet, g, tx.at)
                    for g in tx.legs_of(principal)
                    if g.memo not in _ACCRUALS
                ),
                Decimal(0),
            )
            _add(by_category, "transfers", value)
            who = tx.meta.get("contact") or tx.meta.get("to", "?")
            recipients[who] = recipients.get(who, Decimal(0)) + value
        elif tx.kind in ("swap", "harvest") and "fee_usd" in tx.meta:
            _add(by_category, "swap fees", Decimal(tx.meta["fee_usd"]))
        if sum(by_category.values(), Decimal(0)) > before:
            counted += 1
    top = sorted(recipients.items(), key=lambda kv: -kv[1])[:5]
    return SpendingReport(
        days=days,
        total_out_usd=usd(sum(by_category.values(), Decimal(0))),
        by_category_usd={k: usd(v) for k, v in sorted(by_category.items())},
        top_recipients=[{"to": who, "usd": str(usd(v))} for who, v in top],
        transactions=counted,
    )


def yield_summary(wallet: PaperWallet, principal: str, days: int, at: datetime) -> YieldReport:
    """Interest and rewards earned over ``days``, and what the savings should earn next."""
    since = at - timedelta(days=days)
    pos = wallet.positions(principal, at)
    view = wallet.ledger.read()
    interest = rewards = savings_usd = yearly = month = Decimal(0)
    for asset, amount in pos.savings.items():
        m = wallet.lending.markets[asset]
        earned = view.total(principal, "savings", asset, memo="supply interest", since=since)
        earned += pos.accrual.interest.get(asset, Decimal(0))
        interest += earned * wallet.market.price(asset, at)
        value = amount * wallet.market.price(asset, at)
        savings_usd += value
        yearly += value * m.supply_apy
        month += value * growth(m.supply_apy, _micros(timedelta(days=30)))
    reward = wallet.lending.reward_asset
    booked = view.total(principal, "rewards", reward, memo="rewards accrued", since=since)
    rewards = (booked + pos.accrual.rewards) * wallet.market.price(reward, at)
    daily: list[Decimal] = []
    points = min(days, 30)
    for back in range(points - 1, -1, -1):
        moment = at - timedelta(days=back)
        total = Decimal(0)
        for asset in wallet.lending.markets:
            total += _savings_at(wallet, principal, asset, moment)
        daily.append(usd(total))
    return YieldReport(
        days=days,
        interest_earned_usd=usd(interest),
        rewards_earned_usd=usd(rewards),
        savings_usd=usd(savings_usd),
        blended_apy_pct=_share(yearly, savings_usd),
        projected_30d_usd=usd(month),
        projected_1y_usd=usd(yearly),
        daily_savings_usd=daily,
    )


def _savings_at(wallet: PaperWallet, principal: str, asset: str, moment: datetime) -> Decimal:
    """The USD value of savings at a past moment: postings so far, grown since the last one."""
    postings = wallet.ledger.read().postings(principal, "savings", asset, until=moment)
    if not postings:
        return Decimal(0)
    amount = sum((a for _, a in postings), Decimal(0))
    last = postings[-1][0]
    apy = wallet.lending.markets[asset].supply_apy
    grown = amount * (1 + growth(apy, _micros(moment - last)))
    return grown * wallet.market.price(asset, moment)


def activity(wallet: PaperWallet, principal: str, days: int, at: datetime) -> ActivityReport:
    """How many transactions of each kind, and their volume, over ``days``."""
    since = at - timedelta(days=days)
    txs = wallet.ledger.read().transactions(
        touching=principal, since=since, until=at, newest_first=False
    )
    kinds: Counter[str] = Counter()
    volume: dict[str, Decimal] = {}
    for tx in txs:
        kind = tx.kind if tx.principal == principal else "received"
        kinds[kind] += 1
        moved = sum(
            (
                _value(wallet, g, tx.at)
                for g in tx.legs_of(principal)
                if g.memo not in _ACCRUALS and (g.amount < 0 or kind == "received")
            ),
            Decimal(0),
        )
        volume[kind] = volume.get(kind, Decimal(0)) + moved
    return ActivityReport(
        days=days,
        transactions=len(txs),
        by_kind=dict(sorted(kinds.items())),
        volume_usd_by_kind={k: usd(v) for k, v in sorted(volume.items())},
        first=txs[0].at if txs else None,
        last=txs[-1].at if txs else None,
    )


def explain(wallet: PaperWallet, principal: str, digest: str) -> TxExplanation:
    """One transaction in words, with its legs and whether its digest checks out."""
    tx = wallet.transaction(principal, digest)
    summary = [tx.label + ".", f"Posted {tx.at.isoformat(timespec='seconds')}."]
    for leg in tx.legs_of(principal):
        if leg.memo in _ACCRUALS:
            continue
        asset = get_asset(leg.asset)
        sign = "+" if leg.amount > 0 else "-"
        summary.append(f"Your {leg.book} {asset.symbol}: {sign}{asset.format(abs(leg.amount))}.")
    summary.extend(_details(tx))
    accrued = [g for g in tx.legs_of(principal) if g.memo in _ACCRUALS]
    for leg in accrued:
        asset = get_asset(leg.asset)
        summary.append(
            f"Also booked: {asset.format(abs(leg.amount))} {asset.symbol} of {leg.memo} "
            "accrued since your previous transaction."
        )
    return TxExplanation(
        digest=tx.digest,
        previous_digest=tx.prev_digest,
        verified=recompute_digest(tx) == tx.digest,
        at=tx.at,
        kind=tx.kind,
        label=tx.label,
        summary=summary,
        legs=[
            LegView(
                account=_account(wallet, principal, g), asset=g.asset, amount=g.amount, memo=g.memo
            )
            for g in tx.legs
        ],
        details=tx.meta,
    )


def _details(tx: Transaction) -> list[str]:
    meta: dict[str, Any] = tx.meta
    lines: list[str] = []
    if tx.kind == "send":
        who = f" ({meta['contact']})" if meta.get("contact") else ""
        lines.append(f"Recipient: {meta.get('to')}{who}.")
        if meta.get("memo"):
            lines.append(f"Memo: {meta['memo']}.")
    if "rate" in meta:
        lines.append(f"Rate: 1 {meta['from_asset']} = {meta['rate']} {meta['to_asset']}.")
    if "fee_usd" in meta:
        route = " → ".join(meta.get("route", []))
        lines.append(f"Pool fees: ${meta['fee_usd']} (route {route}), kept by the pools.")
    if "price_impact_pct" in meta:
        lines.append(f"Price impact: {meta['price_impact_pct']}%.")
    if meta.get("health_factor_after"):
        lines.append(f"Health factor after: {meta['health_factor_after']}.")
    return lines


def _account(wallet: PaperWallet, principal: str, leg: Leg) -> str:
    if leg.owner == principal:
        return f"you/{leg.book}"
    if leg.owner.startswith("@addr:"):
        return leg.owner[len("@addr:") :]
    if leg.owner.startswith("@"):
        return f"{leg.owner[1:]}/{leg.book}"
    # another principal: shown by address, as a chain would
    return f"{wallet.address_of(leg.owner)}/{leg.book}"
