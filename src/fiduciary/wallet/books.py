"""How each write is booked: the checks it must pass and the legs it posts.

``book`` is called by ``PaperWallet`` inside the write transaction, after the accrued interest
and rewards are booked into the same draft. Every check reads the balances of that transaction,
so what is checked is what is posted; a failed check raises ``WalletError`` and the caller rolls
everything back.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

from .addresses import address_of, normalize_address
from .assets import get_asset, money, usd
from .config import WalletConfig
from .errors import WalletError
from .ledger import Batch, Draft
from .lending import LENDING, Health, Lending
from .market import Market, SwapPlan
from .operations import (
    Borrow,
    ClaimRewards,
    Deposit,
    HarvestRewards,
    Operation,
    Repay,
    Send,
    Swap,
    Withdraw,
)
from .views import Contact, SwapQuote

__all__ = ["Books", "book", "pct"]


class Books(Protocol):
    """What booking reads of the wallet it books into (``PaperWallet`` is one)."""

    @property
    def config(self) -> WalletConfig: ...

    @property
    def market(self) -> Market: ...

    @property
    def lending(self) -> Lending: ...

    def principal_at(self, address: str) -> str | None: ...

    def stored_quote(self, view: Batch, principal: str, quote_id: str) -> SwapQuote: ...

    def contact(self, principal: str, name: str) -> Contact | None: ...

    def contact_name(self, principal: str, address: str) -> str | None: ...


_PCT = Decimal("0.01")


def pct(fraction: Decimal) -> Decimal:
    """A fraction as a percentage to two decimals (0.048 → 4.80)."""
    return (fraction * 100).quantize(_PCT)


def book(
    wallet: Books, draft: Draft, principal: str, op: Operation, at: datetime
) -> tuple[str, dict[str, Any]]:
    """Check ``op`` and add its legs to ``draft``; return the transaction's label and details."""
    match op:
        case Deposit():
            return _deposit(wallet, draft, principal, op.asset, op.amount)
        case Withdraw():
            return _withdraw(wallet, draft, principal, op, at)
        case Send():
            return _send(wallet, draft, principal, op)
        case Borrow():
            return _borrow(wallet, draft, principal, op, at)
        case Repay():
            return _repay(wallet, draft, principal, op)
        case ClaimRewards():
            return _claim(wallet, draft, principal)
        case HarvestRewards():
            return _harvest(wallet, draft, principal, op, at)
        case Swap():
            return _swap(wallet, draft, principal, op, at)


def _available(wallet: Books, draft: Draft, principal: str, symbol: str, amount: Decimal) -> None:
    have = draft.batch.balance(principal, "available", symbol)
    if amount > have:
        asset = get_asset(symbol)
        raise WalletError(
            "insufficient_funds",
            f"{asset.format(amount)} {symbol} needed, {asset.format(have)} {symbol} available",
        )


def _deposit(
    wallet: Books, draft: Draft, principal: str, symbol: str, amount: Decimal
) -> tuple[str, dict[str, Any]]:
    market = wallet.lending.market_for(symbol)
    asset = get_asset(market.asset)
    value = asset.parse(amount)
    _available(wallet, draft, principal, asset.symbol, value)
    draft.move(asset.symbol, value, (principal, "available"), (LENDING, "reserve"), "saved")
    draft.move(asset.symbol, value, (LENDING, "supplied"), (principal, "savings"), "saved")
    apy = pct(market.supply_apy)
    label = f"Saved {asset.format(value)} {asset.symbol} at {apy}% APY"
    return label, {"asset": asset.symbol, "amount": str(value), "supply_apy_pct": str(apy)}


def _withdraw(
    wallet: Books, draft: Draft, principal: str, op: Withdraw, at: datetime
) -> tuple[str, dict[str, Any]]:
    market = wallet.lending.market_for(op.asset)
    asset = get_asset(market.asset)
    saved = draft.batch.balance(principal, "savings", asset.symbol)
    if saved <= 0:
        raise WalletError("insufficient_funds", f"you have no {asset.symbol} in savings")
    value = saved if op.amount is None else asset.parse(op.amount)
    if value > saved:
        raise WalletError(
            "insufficient_funds",
            f"{asset.format(saved)} {asset.symbol} is in savings; "
            f"{asset.format(value)} cannot be withdrawn",
        )
    _liquidity(wallet, draft, asset.symbol, value)
    draft.move(asset.symbol, value, (principal, "savings"), (LENDING, "supplied"), "withdrawn")
    draft.move(asset.symbol, value, (LENDING, "reserve"), (principal, "available"), "withdrawn")
    health = wallet.lending.health(wallet.lending.positions(draft.batch, principal, at), at)
    if health.debt_usd > health.borrow_limit_usd:
        raise WalletError(
            "borrow_limit",
            f"withdrawing {asset.format(value)} {asset.symbol} would leave your debt "
            f"(${usd(health.debt_usd)}) above what your savings allow "
            f"(${usd(health.borrow_limit_usd)}); repay first or withdraw less",
        )
    label = f"Withdrew {asset.format(value)} {asset.symbol} from savings"
    return label, {"asset": asset.symbol, "amount": str(value), **_health_meta(health)}


def _liquidity(wallet: Books, draft: Draft, symbol: str, amount: Decimal) -> None:
    if draft.batch.balance(LENDING, "reserve", symbol) < amount:
        raise WalletError(
            "insufficient_liquidity", f"the lending pool lacks the {symbol} to pay this out"
        )


def _send(wallet: Books, draft: Draft, principal: str, op: Send) -> tuple[str, dict[str, Any]]:
    asset = get_asset(op.asset)
    value = asset.parse(op.amount)
    if len(op.memo) > 140:
        raise WalletError("invalid_amount", "a memo holds at most 140 characters")
    to, contact = _recipient(wallet, principal, op.to)
    if to == address_of(principal):
        raise WalletError("own_address", "that is this wallet's own address")
    _available(wallet, draft, principal, asset.symbol, value)
    receiver = wallet.principal_at(to) or f"@addr:{to}"
    memo = op.memo or "transfer"
    draft.move(asset.symbol, value, (principal, "available"), (receiver, "available"), memo)
    shown = f"{to[:6]}…{to[-4:]}" + (f" ({contact})" if contact else "")
    label = f"Sent {asset.format(value)} {asset.symbol} to {shown}"
    meta = {"to": to, "contact": contact, "memo": op.memo, "asset": asset.symbol}
    return label, {**meta, "amount": str(value)}


def _recipient(wallet: Books, principal: str, to: str) -> tuple[str, str | None]:
    """An address and the contact name it is saved under, from an address or a name."""
    text = to.strip()
    if text.lower().startswith("0x"):
        address = normalize_address(text)
        return address, wallet.contact_name(principal, address)
    found = wallet.contact(principal, text)
    if found is None:
        raise WalletError(
            "unknown_recipient",
            f"{text!r} is neither an address (0x and 40 hex digits) nor a saved contact",
        )
    return found.address, found.name


def _borrow(
    wallet: Books, draft: Draft, principal: str, op: Borrow, at: datetime
) -> tuple[str, dict[str, Any]]:
    market = wallet.lending.market_for(op.asset, borrow=True)
    asset = get_asset(market.asset)
    value = asset.parse(op.amount)
    health = wallet.lending.health(wallet.lending.positions(draft.batch, principal, at), at)
    wanted = wallet.market.usd_value(asset.symbol, value, at)
    room = health.available_to_borrow_usd
    if wanted > room:
        most = asset.quantize(room / wallet.market.price(asset.symbol, at))
        raise WalletError(
            "borrow_limit",
            f"you can borrow at most {asset.format(most)} {asset.symbol} (about ${usd(room)}) "
            "against your savings",
        )
    _liquidity(wallet, draft, asset.symbol, value)
    draft.move(asset.symbol, value, (LENDING, "reserve"), (principal, "available"), "borrowed")
    draft.move(asset.symbol, value, (principal, "debt"), (LENDING, "loans"), "borrowed")
    after = wallet.lending.health(wallet.lending.positions(draft.batch, principal, at), at)
    assert market.borrow_apy is not None
    apy = pct(market.borrow_apy)
    label = f"Borrowed {asset.format(value)} {asset.symbol} at {apy}% APY"
    meta = {"asset": asset.symbol, "amount": str(value), "borrow_apy_pct": str(apy)}
    return label, {**meta, **_health_meta(after)}


def _repay(wallet: Books, draft: Draft, principal: str, op: Repay) -> tuple[str, dict[str, Any]]:
    asset = get_asset(op.asset)
    owed = {
        m: -draft.batch.balance(principal, "debt", m)
        for m in wallet.lending.markets
        if draft.batch.balance(principal, "debt", m) < 0
    }
    if not owed:
        raise WalletError("nothing_to_repay", "you have no debt to repay")
    if asset.symbol not in owed:
        debts = ", ".join(owed)
        raise WalletError(
            "wrong_asset",
            f"your debt is in {debts}, not {asset.symbol}; repay it in the asset you "
            "borrowed (swap first if you need to)",
        )
    debt = owed[asset.symbol]
    value = debt if op.amount is None else asset.parse(op.amount)
    if value > debt:
        raise WalletError(
            "invalid_amount",
            f"you owe {asset.format(debt)} {asset.symbol}; repay at most that (or 'all')",
        )
    _available(wallet, draft, principal, asset.symbol, value)
    draft.move(asset.symbol, value, (principal, "available"), (LENDING, "reserve"), "repaid")
    draft.move(asset.symbol, value, (LENDING, "loans"), (principal, "debt"), "repaid")
    left = debt - value
    label = f"Repaid {asset.format(value)} {asset.symbol} of debt"
    meta = {"asset": asset.symbol, "amount": str(value), "debt_left": str(left)}
    return label, meta


def _claim_legs(wallet: Books, draft: Draft, principal: str) -> Decimal:
    symbol = wallet.lending.reward_asset
    amount = draft.batch.balance(principal, "rewards", symbol)
    if amount <= 0:
        raise WalletError("nothing_to_claim", "there are no rewards to claim yet")
    draft.move(symbol, amount, (principal, "rewards"), (principal, "available"), "claimed")
    return amount


def _claim(wallet: Books, draft: Draft, principal: str) -> tuple[str, dict[str, Any]]:
    amount = _claim_legs(wallet, draft, principal)
    asset = get_asset(wallet.lending.reward_asset)
    label = f"Claimed {asset.format(amount)} {asset.symbol} of rewards"
    return label, {"asset": asset.symbol, "amount": str(amount)}


def _harvest(
    wallet: Books, draft: Draft, principal: str, op: HarvestRewards, at: datetime
) -> tuple[str, dict[str, Any]]:
    """Claim, swap to USDC, save: one transaction, so it happens whole or not at all."""
    claimed = _claim_legs(wallet, draft, principal)
    reward = get_asset(wallet.lending.reward_asset)
    usdc = claimed
    plan: SwapPlan | None = None
    if reward.symbol != "USDC":
        plan = wallet.market.plan(draft.batch, reward.symbol, "USDC", claimed, at)
        _check_swap(wallet, plan, reference=_after_fees(plan), slippage=op.max_slippage)
        _post_swap(wallet, draft, principal, plan)
        usdc = plan.amount_out
    _deposit(wallet, draft, principal, "USDC", usdc)
    meta: dict[str, Any] = {"claimed": str(claimed), "asset": reward.symbol}
    meta["saved_usdc"] = str(usdc)
    if plan is not None:
        meta["route"] = plan.route
        meta["fee_usd"] = str(usd(plan.fee_usd))
    text = f"Harvested {reward.format(claimed)} {reward.symbol} of rewards into "
    return text + f"{get_asset('USDC').format(usdc)} USDC of savings", meta


def _swap(
    wallet: Books, draft: Draft, principal: str, op: Swap, at: datetime
) -> tuple[str, dict[str, Any]]:
    src, dst = get_asset(op.from_asset), get_asset(op.to_asset)
    value = src.parse(op.amount)
    quoted: SwapQuote | None = None
    if op.quote_id is not None:
        quoted = wallet.stored_quote(draft.batch, principal, op.quote_id)
        if at > quoted.expires_at:
            raise WalletError(
                "quote_expired",
                f"quote {op.quote_id} expired at {quoted.expires_at.isoformat()}; "
                "ask for a new quote",
            )
        if (quoted.from_asset, quoted.to_asset, quoted.amount_in) != (
            src.symbol,
            dst.symbol,
            value,
        ):
            raise WalletError(
                "quote_mismatch",
                f"quote {op.quote_id} is for {quoted.amount_in} {quoted.from_asset} → "
                f"{quoted.to_asset}, not this swap",
            )
    _available(wallet, draft, principal, src.symbol, value)
    plan = wallet.market.plan(draft.batch, src.symbol, dst.symbol, value, at)
    if plan.amount_out <= 0:
        raise WalletError("invalid_amount", f"{value} {src.symbol} is too small to swap")
    reference = quoted.amount_out if quoted is not None else _after_fees(plan)
    min_out = _check_swap(wallet, plan, reference=reference, slippage=op.max_slippage)
    _post_swap(wallet, draft, principal, plan)
    label = (
        f"Swapped {src.format(value)} {src.symbol} for {dst.format(plan.amount_out)} {dst.symbol}"
    )
    meta = {
        "from_asset": src.symbol,
        "to_asset": dst.symbol,
        "amount_in": str(value),
        "amount_out": str(plan.amount_out),
        "min_out": str(min_out),
        "rate": str(plan.rate),
        "route": plan.route,
        "fee_usd": str(usd(plan.fee_usd)),
        "price_impact_pct": str(pct(plan.price_impact)),
        "quote_id": op.quote_id,
    }
    return label, meta


def _check_swap(
    wallet: Books, plan: SwapPlan, *, reference: Decimal, slippage: Decimal | None
) -> Decimal:
    """Enforce the slippage and price-impact limits; return the minimum acceptable out."""
    limit = wallet.config.default_slippage if slippage is None else money(slippage)
    if limit < 0 or limit > wallet.config.max_slippage:
        raise WalletError(
            "slippage_limit",
            f"slippage may be set between 0% and {pct(wallet.config.max_slippage)}%",
        )
    if plan.price_impact > wallet.config.max_price_impact:
        raise WalletError(
            "price_impact",
            f"this swap would move the pool by {pct(plan.price_impact)}% (the limit is "
            f"{pct(wallet.config.max_price_impact)}%); swap a smaller amount",
        )
    out = get_asset(plan.asset_out)
    min_out = out.quantize(reference * (1 - limit))
    if plan.amount_out < min_out:
        raise WalletError(
            "slippage_exceeded",
            f"the swap would give {out.format(plan.amount_out)} {out.symbol}, less than the "
            f"{out.format(min_out)} {out.symbol} allowed by {pct(limit)}% slippage; "
            "nothing was swapped",
        )
    return min_out


def _post_swap(wallet: Books, draft: Draft, principal: str, plan: SwapPlan) -> None:
    # the arbitrageur's rebalancing is its own (system) transaction, sealed first
    rebalance = draft.batch.draft(
        key=f"{draft.key}/rebalance",
        request_digest=draft.request_digest,
        kind="rebalance",
        principal=None,
        at=draft.at,
    )
    wallet.market.post_rebalance(rebalance, plan)
    if rebalance.legs:
        rebalance.seal(f"Arbitrage moved {', '.join(plan.route)} to the market price")
    else:
        rebalance.drop()
    wallet.market.post_swap(draft, plan, (principal, "available"), (principal, "available"))


def _after_fees(plan: SwapPlan) -> Decimal:
    """What the swap would give at market price, after fees, with no price impact."""
    out = plan.fair_out
    for hop in plan.hops:
        out *= 1 - hop.pool.fee
    return get_asset(plan.asset_out).quantize(out)


def _health_meta(health: Health) -> dict[str, Any]:
    factor = health.health_factor
    return {"health_factor_after": None if factor is None else str(factor)}
