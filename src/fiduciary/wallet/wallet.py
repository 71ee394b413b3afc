"""``PaperWallet``: the ledger, the market and the lending pool behind one small API.

Writes are ``execute(principal, operation, key=...)``: the whole call is one SQLite transaction
that first books the interest and rewards accrued so far, then checks the request against the
balances inside that transaction and posts it, or raises ``WalletError`` and posts nothing. The
key is the idempotency key of the call (a capability passes ``ctx.idempotency_key``): the same
key with the same request returns the recorded receipt (``replayed=True``) and posts nothing;
with another request it is refused. ``preview`` runs the same code and rolls it back.

A principal's wallet opens on first use with the configured starting balances, at a
deterministic address (``0x`` + 40 hex of sha256 of the principal's id).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from types import TracebackType

from ..clock import Clock, SystemClock
from ..exceptions import ConfigurationError
from .addresses import address_of, normalize_address
from .assets import ASSETS, get_asset, money, usd
from .books import book, pct
from .config import WalletConfig
from .contacts import ContactBook
from .errors import WalletError
from .ledger import Batch, Ledger, Sign, Transaction, Verification, timestamp
from .lending import LENDING, Health, Lending, Positions
from .lending_reports import LendingReports
from .market import GENESIS, Market, PricePath
from .operations import KIND, Operation, fingerprint
from .views import (
    BalanceReport,
    Change,
    Contact,
    HealthReport,
    HistoryEntry,
    Holding,
    MarketRates,
    PriceView,
    Receipt,
    RewardsReport,
    SavingsReport,
    SwapQuote,
)

__all__ = ["PaperWallet", "Preview", "WalletConfig", "address_of", "normalize_address"]

FAUCET = "@faucet"


@dataclass(frozen=True, slots=True)
class Preview:
    """What an operation would do now: its receipt (not posted) and health before and after."""

    receipt: Receipt
    health_before: Health
    health_after: Health


def sign_rule(owner: str, book: str) -> Sign:
    """Which balances must never go negative (or positive: debt is owed)."""
    if not owner.startswith("@"):
        return "nonpos" if book == "debt" else "nonneg"
    if owner.startswith(("@pool:", "@addr:")):
        return "nonneg"
    if owner == LENDING:
        rules: dict[str, Sign] = {"reserve": "nonneg", "loans": "nonneg", "supplied": "nonpos"}
        return rules.get(book, "free")
    return "free"


class PaperWallet:
    """A simulated wallet with real bookkeeping, in an SQLite file (``:memory:`` for tests)."""

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        clock: Clock | None = None,
        config: WalletConfig | None = None,
    ) -> None:
        self.config = config or WalletConfig()
        self.clock: Clock = clock or SystemClock()
        self.ledger = Ledger(path, sign_rule=sign_rule)
        try:
            self.market = Market(
                PricePath(seed=self.config.seed, anchor=self.config.price_anchor),
                self.config.pools,
            )
            self.lending = Lending(
                self.market, self.config.markets, reward_asset=self.config.reward_asset
            )
            self.contact_book = ContactBook(self.ledger)
            self.lending_reports = LendingReports(self.market, self.lending, self.ledger)
            self._genesis(self.clock.now())
        except BaseException:
            self.ledger.close()
            raise

    @property
    def path(self) -> str:
        return self.ledger.path

    def close(self) -> None:
        self.ledger.close()

    def __enter__(self) -> PaperWallet:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _now(self, at: datetime | None) -> datetime:
        return self.clock.now() if at is None else at

    def _genesis(self, at: datetime) -> None:
        with self.ledger.batch() as batch:
            for pool in self.market.pools.values():
                key = f"genesis:pool:{pool.name}"
                if batch.find(key) is None:
                    draft = batch.draft(
                        key=key, request_digest=key, kind="genesis", principal=None, at=at
                    )
                    self.market.genesis_pool(draft, pool, at)
                    draft.seal(f"Genesis: the {pool.name} pool")
            for m in self.lending.markets.values():
                key = f"genesis:lending:{m.asset}"
                if batch.find(key) is None:
                    draft = batch.draft(
                        key=key, request_digest=key, kind="genesis", principal=None, at=at
                    )
                    draft.move(m.asset, m.liquidity, (GENESIS, "supply"), (LENDING, "reserve"))
                    draft.seal(f"Genesis: {m.asset} liquidity of the lending pool")

    # --- principals -------------------------------------------------------------------------
    def address_of(self, principal: str) -> str:
        return address_of(principal)

    def own_addresses(self, principal: str) -> frozenset[str]:
        linked = self.config.linked_addresses.get(principal, ())
        return frozenset({address_of(principal), *(a.lower() for a in linked)})

    def principal_at(self, address: str) -> str | None:
        row = self.ledger.read().one(
            "SELECT principal FROM wallet_principals WHERE address = ?", (address.lower(),)
        )
        return None if row is None else str(row[0])

    def open(self, principal: str, at: datetime | None = None) -> None:
        """Open the principal's wallet with the starting balances, once."""
        if not principal or principal.startswith("@"):
            # '@' names the wallet's own accounts (pools, the lending pool, the faucet)
            raise ConfigurationError(f"{principal!r} cannot be a wallet principal's id")
        known = self.ledger.read().one(
            "SELECT 1 FROM wallet_principals WHERE principal = ?", (principal,)
        )
        if known is not None:
            return
        when = self._now(at)
        key = f"open:{principal}"
        with self.ledger.batch() as batch:
            if batch.find(key) is not None:
                return
            batch.execute(
                "INSERT INTO wallet_principals (principal, address, opened_at) VALUES (?, ?, ?)",
                (principal, address_of(principal), timestamp(when)),
            )
            draft = batch.draft(
                key=key, request_digest=key, kind="open", principal=principal, at=when
            )
            for symbol, amount in self.config.starting_balances.items():
                draft.move(symbol, amount, (FAUCET, "grants"), (principal, "available"))
            for symbol, amount in self.config.starting_savings.items():
                self.lending.market_for(symbol)
                draft.move(symbol, amount, (FAUCET, "grants"), (LENDING, "reserve"))
                draft.move(symbol, amount, (LENDING, "supplied"), (principal, "savings"))
            self.lending.materialize(draft, principal, when)
            draft.seal("Opened the paper wallet", {"address": address_of(principal)})

    # --- writes -----------------------------------------------------------------------------
    def execute(
        self, principal: str, op: Operation, *, key: str, at: datetime | None = None
    ) -> Receipt:
        """Post one operation, atomically, once per key (see the module docstring)."""
        if not key:
            raise ValueError("a write needs the idempotency key of the call that makes it")
        when = self._now(at)
        self.open(principal, when)
        request = fingerprint(op)
        with self.ledger.batch() as batch:
            prior = batch.find(key)
            if prior is not None:
                if prior.request_digest != request or prior.principal != principal:
                    raise WalletError(
                        "idempotency_conflict",
                        "this call's key already posted a different request; nothing was done",
                    )
                return self._receipt(batch, prior, principal, replayed=True)
            tx = self._apply(batch, principal, op, key, request, when)
            return self._receipt(batch, tx, principal)

    def preview(self, principal: str, op: Operation, at: datetime | None = None) -> Preview:
        """What ``execute`` would do now, rolled back: raises the same ``WalletError``s."""
        when = self._now(at)
        self.open(principal, when)
        with self.ledger.batch(commit=False) as batch:
            before = self.lending.health(self.lending.positions(batch, principal, when), when)
            tx = self._apply(batch, principal, op, "preview", fingerprint(op), when)
            after = self.lending.health(self.lending.positions(batch, principal, when), when)
            return Preview(self._receipt(batch, tx, principal), before, after)

    def _apply(
        self, batch: Batch, principal: str, op: Operation, key: str, request: str, at: datetime
    ) -> Transaction:
        draft = batch.draft(
            key=key, request_digest=request, kind=KIND[type(op)], principal=principal, at=at
        )
        try:
            self.lending.materialize(draft, principal, at)
            label, meta = book(self, draft, principal, op, at)
            return draft.seal(label, meta)
        except BaseException:
            if draft in batch._open:
                draft.drop()
            raise

    # --- quotes -----------------------------------------------------------------------------
    def quote(
        self,
        principal: str,
        from_asset: str,
        to_asset: str,
        amount: Decimal,
        at: datetime | None = None,
    ) -> SwapQuote:
        """Price a swap now and keep the quote (it expires after ``quote_ttl_seconds``)."""
        when = self._now(at)
        self.open(principal, when)
        src = get_asset(from_asset)
        value = src.parse(amount)
        with self.ledger.batch() as batch:
            plan = self.market.plan(batch, src.symbol, to_asset, value, when)
            seed = f"{principal}|{plan.asset_in}|{plan.asset_out}|{value}|{timestamp(when)}"
            quote = SwapQuote(
                quote_id="q_" + hashlib.sha256(seed.encode()).hexdigest()[:16],
                from_asset=plan.asset_in,
                to_asset=plan.asset_out,
                amount_in=value,
                amount_out=plan.amount_out,
                rate=plan.rate,
                route=plan.route,
                fee_usd=usd(plan.fee_usd),
                price_impact_pct=pct(plan.price_impact),
                value_in_usd=usd(value * plan.price_in),
                value_out_usd=usd(plan.amount_out * plan.price_out),
                created_at=when,
                expires_at=when + timedelta(seconds=self.config.quote_ttl_seconds),
            )
            batch.execute(
                "INSERT OR IGNORE INTO wallet_quotes (quote_id, principal, asset_in, asset_out, "
                "amount_in, amount_out, body, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    quote.quote_id,
                    principal,
                    quote.from_asset,
                    quote.to_asset,
                    str(quote.amount_in),
                    str(quote.amount_out),
                    quote.model_dump_json(),
                    timestamp(when),
                    timestamp(quote.expires_at),
                ),
            )
        return quote

    def stored_quote(self, view: Batch, principal: str, quote_id: str) -> SwapQuote:
        """A quote this principal asked for (expired or not)."""
        row = view.one(
            "SELECT body FROM wallet_quotes WHERE quote_id = ? AND principal = ?",
            (quote_id, principal),
        )
        if row is None:
            raise WalletError("unknown_quote", f"there is no quote {quote_id!r}; ask for a quote")
        return SwapQuote.model_validate_json(row[0])

    def quote_of(self, principal: str, quote_id: str) -> SwapQuote:
        """A quote this principal asked for (expired or not); ``WalletError`` if none."""
        with self.ledger.batch(commit=False) as view:
            return self.stored_quote(view, principal, quote_id)

    # --- contacts ---------------------------------------------------------------------------
    def save_contact(
        self, principal: str, name: str, address: str, *, key: str, at: datetime | None = None
    ) -> Contact:
        """Save a name for an address (once per key; a name keeps its first address)."""
        return self.contact_book.save(principal, name, address, key=key, when=self._now(at))

    def contacts(self, principal: str) -> list[Contact]:
        return self.contact_book.of(principal)

    def contact(self, principal: str, name: str) -> Contact | None:
        return self.contact_book.named(principal, name)

    def contact_name(self, principal: str, address: str) -> str | None:
        return self.contact_book.name_at(principal, address)

    def has_paid(self, principal: str, address: str) -> bool:
        """Whether the principal ever sent anything to ``address``, by the wallet's own books
        (a posted send whose legs credit that address's account)."""
        target = address.strip().lower()
        receiver = self.principal_at(target) or f"@addr:{target}"
        row = self.ledger.read().one(
            "SELECT 1 FROM wallet_transactions t JOIN wallet_postings p ON p.tx_id = t.tx_id "
            "WHERE t.principal = ? AND t.kind = 'send' AND p.owner = ? AND p.units > 0 LIMIT 1",
            (principal, receiver),
        )
        return row is not None

    # --- reads ------------------------------------------------------------------------------
    def price(self, symbol: str, at: datetime | None = None) -> Decimal:
        return self.market.price(symbol, self._now(at))

    def usd_value(self, symbol: str, amount: Decimal, at: datetime | None = None) -> Decimal:
        """The USD value of an amount, to the cent (what the policy sees)."""
        return usd(self.market.usd_value(symbol, money(amount), self._now(at)))

    def positions(self, principal: str, at: datetime | None = None) -> Positions:
        when = self._now(at)
        self.open(principal, when)
        with self.ledger.batch(commit=False) as view:
            return self.lending.positions(view, principal, when)

    def balances(
        self,
        principal: str | None = None,
        *,
        address: str | None = None,
        at: datetime | None = None,
    ) -> BalanceReport:
        """The balances of the principal's wallet, or of any address (like a chain explorer)."""
        when = self._now(at)
        if principal is not None:
            self.open(principal, when)
        if principal is None and not address:
            raise ValueError("balances of whom? give a principal or an address")
        target = normalize_address(address) if address else address_of(principal or "")
        owner = self.principal_at(target)
        whose = "yours" if owner is not None and owner == principal else "another paper wallet"
        if owner is None:
            whose = "an external address"
        key = owner or f"@addr:{target}"
        with self.ledger.batch(commit=False) as view:
            books = view.balances(key)
            pos = self.lending.positions(view, key, when) if owner else None

        def holdings(amounts: Mapping[str, Decimal]) -> list[Holding]:
            return [
                Holding(asset=a, amount=v, usd=self.usd_value(a, v, when))
                for a, v in sorted(amounts.items())
                if v
            ]

        available = {a: v for (b, a), v in books.items() if b == "available"}
        savings = dict(pos.savings) if pos else {}
        debt = dict(pos.debt) if pos else {}
        rewards = {self.lending.reward_asset: pos.rewards} if pos and pos.rewards else {}
        report = [holdings(m) for m in (available, savings, debt)]
        reward_h = holdings(rewards)
        total = sum((h.usd for h in report[0] + report[1] + reward_h), Decimal(0))
        total -= sum((h.usd for h in report[2]), Decimal(0))
        return BalanceReport(
            address=target,
            whose=whose,
            available=report[0],
            savings=report[1],
            debt=report[2],
            rewards=reward_h,
            total_usd=usd(total),
            as_of=when,
        )

    def health(self, principal: str, at: datetime | None = None) -> HealthReport:
        when = self._now(at)
        return self.lending_reports.health(self.positions(principal, when), when)

    def rates(self, at: datetime | None = None) -> list[MarketRates]:
        return self.lending_reports.rates(self._now(at))

    def savings(self, principal: str, at: datetime | None = None) -> SavingsReport:
        when = self._now(at)
        return self.lending_reports.savings(principal, self.positions(principal, when), when)

    def prices(
        self, symbols: list[str] | None = None, at: datetime | None = None
    ) -> list[PriceView]:
        when = self._now(at)
        wanted = [get_asset(s).symbol for s in symbols] if symbols else list(ASSETS)
        return [
            PriceView(
                asset=s,
                usd=self.market.price(s, when),
                change_24h_pct=pct(self.market.change_24h(s, when)),
            )
            for s in dict.fromkeys(wanted)
        ]

    def rewards(self, principal: str, at: datetime | None = None) -> RewardsReport:
        when = self._now(at)
        return self.lending_reports.rewards(self.positions(principal, when), when)

    def history(
        self, principal: str, *, limit: int = 20, kind: str | None = None
    ) -> list[HistoryEntry]:
        """The principal's transactions, newest first (incoming transfers included)."""
        self.open(principal)
        view = self.ledger.read()
        txs = view.transactions(touching=principal, kinds=[kind] if kind else None, limit=limit)
        return [
            HistoryEntry(
                digest=tx.digest,
                at=tx.at,
                kind=tx.kind if tx.principal == principal else f"{tx.kind} (received)",
                label=tx.label,
                changes=_changes(tx, principal),
            )
            for tx in txs
        ]

    def transaction(self, principal: str, digest: str) -> Transaction:
        """A transaction that touches the principal, by digest or a unique prefix (6+)."""
        text = digest.strip()
        if len(text) < 6:
            raise WalletError("unknown_transaction", "give the digest (or at least 6 characters)")
        found = [
            tx
            for tx in self.ledger.read().by_digest(text)
            if tx.principal == principal or tx.legs_of(principal)
        ]
        if not found:
            raise WalletError("unknown_transaction", f"no transaction of yours has digest {text}")
        if len(found) > 1:
            raise WalletError("unknown_transaction", f"{text} matches several; give more of it")
        return found[0]

    def verify(self) -> Verification:
        return self.ledger.verify()

    def _receipt(
        self, view: Batch, tx: Transaction, principal: str, *, replayed: bool = False
    ) -> Receipt:
        touched = sorted({(g.book, g.asset) for g in tx.legs_of(principal)})
        return Receipt(
            digest=tx.digest,
            kind=tx.kind,
            label=tx.label,
            at=tx.at,
            changes=_changes(tx, principal),
            balances=[
                Change(book=b, asset=a, amount=view.balance(principal, b, a)) for b, a in touched
            ],
            details={k: v for k, v in tx.meta.items() if v is not None},
            replayed=replayed,
        )


def _changes(tx: Transaction, principal: str) -> list[Change]:
    net: dict[tuple[str, str], Decimal] = {}
    for leg in tx.legs_of(principal):
        net[(leg.book, leg.asset)] = net.get((leg.book, leg.asset), Decimal(0)) + leg.amount
    return [Change(book=b, asset=a, amount=v) for (b, a), v in sorted(net.items()) if v]
