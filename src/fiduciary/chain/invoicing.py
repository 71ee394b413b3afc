"""The chain wallet's payment links and invoices, under the paper wallet's capability names:
``list_payment_links`` and ``list_invoices`` (reads), ``create_payment_link``,
``create_invoice``, ``cancel_payment_link`` and ``cancel_invoice`` (writes a person confirms).

They move no money. A link or invoice asks for the stablecoin only, in whole cents, and
answers with ``pay_to`` (the wallet's address) and ``pay_exactly`` (the amount plus its tag
below a cent: the reference, see ``payments``); the watcher (``fiduciary chain watch``) marks
it paid when a Transfer of exactly that reaches the wallet.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from ..capabilities import CallContext, Capability, capability
from ..exceptions import ConfigurationError
from ..receivables import DueDays, LineItem, Memo, ReceivableKind, Reference, StatusFilter
from .errors import ChainError
from .payments import ChainReceivable, ChainReceivables, SQLiteReceivables
from .wallet import ChainWallet

__all__ = ["open_receivables", "payment_capabilities"]

Asset = Annotated[str, Field(description="The asset to receive: the USD stablecoin (USDC).")]
Amount = Annotated[
    Decimal, Field(gt=0, description='The amount to receive, in whole cents (e.g. "12.50").')
]


def open_receivables(
    wallet: ChainWallet, path: str | Path | None = None, *, postgres: str | None = None
) -> ChainReceivables:
    """The links and invoices of ``wallet``'s account, kept in the SQLite file at ``path``
    or in the PostgreSQL database of the DSN ``postgres`` (extra postgres)."""
    cfg = wallet.config
    mine: dict[str, Any] = {
        "chain_id": cfg.chain_id,
        "token": wallet.token.address,
        "recipient": wallet.address,
        "decimals": cfg.token_decimals,
    }
    if (path is None) == (postgres is None):
        raise ConfigurationError("give the receivables a SQLite path or a PostgreSQL DSN")
    if postgres is not None:
        from .payments_postgres import PostgresReceivables

        return PostgresReceivables(postgres, **mine)
    assert path is not None
    return SQLiteReceivables(path, **mine)


def payment_capabilities(wallet: ChainWallet, books: ChainReceivables) -> list[Capability]:
    """The six link and invoice capabilities over ``books`` (``wallet``'s account)."""
    symbol = wallet.config.token_symbol

    def usd(amount: Decimal) -> Decimal | None:
        return wallet.usd_value(symbol, amount)

    def items_total(a: Any) -> Decimal:
        return sum((LineItem.model_validate(i).total for i in a.line_items), Decimal(0))

    async def create(
        ctx: CallContext,
        kind: ReceivableKind,
        asset: str,
        due_in_days: int | None,
        memo: str,
        *,
        amount: Decimal | None = None,
        line_items: list[LineItem] | None = None,
    ) -> ChainReceivable:
        if asset.upper() != symbol.upper():
            raise ChainError("unknown_asset", f"links and invoices on chain ask for {symbol} only")
        now = ctx.clock.now()
        # payments are read from the next block on: none before the link exists can pay it
        from_block = await wallet.w3.eth.block_number + 1
        return await asyncio.to_thread(
            books.create,
            ctx.principal.actor_id,
            kind,
            asset=symbol,
            amount=amount,
            memo=memo,
            due=None if due_in_days is None else now + timedelta(days=due_in_days),
            line_items=list(line_items or []),
            key=ctx.idempotency_key,
            at=now,
            from_block=from_block,
        )

    @capability(
        kind="execute",
        risk="low",
        tier="confirm",
        amount_usd=lambda a, ctx: usd(a.amount),
        flags={"mutating"},
        describe=lambda a: (
            f"Create a payment link asking for {a.amount} {a.asset.upper()} on chain "
            f"{wallet.config.chain_id}"
            + (f" for {a.memo!r}" if a.memo else "")
            + (f", due in {a.due_in_days} days" if a.due_in_days else "")
        ),
    )
    async def create_payment_link(
        ctx: CallContext, asset: Asset, amount: Amount, memo: Memo = "", due_in_days: DueDays = None
    ) -> ChainReceivable:
        """Create a link asking a payer for an amount of the stablecoin. Give the payer
        pay_to and pay_exactly: the digits below the cent are its reference, so the payer must
        send exactly that amount. It is marked paid when that transfer is on chain."""
        return await create(ctx, "link", asset, due_in_days, memo, amount=amount)

    @capability(
        kind="execute",
        risk="low",
        tier="confirm",
        amount_usd=lambda a, ctx: usd(items_total(a)),
        flags={"mutating"},
        describe=lambda a: (
            f"Create an invoice for {items_total(a)} {a.asset.upper()} "
            f"({len(a.line_items)} line item{'s' if len(a.line_items) != 1 else ''}) on chain "
            f"{wallet.config.chain_id}"
            + (f" for {a.memo!r}" if a.memo else "")
            + (f", due in {a.due_in_days} days" if a.due_in_days else "")
        ),
    )
    async def create_invoice(
        ctx: CallContext,
        asset: Asset,
        line_items: Annotated[list[LineItem], Field(min_length=1, max_length=50)],
        memo: Memo = "",
        due_in_days: DueDays = 30,
    ) -> ChainReceivable:
        """Create an invoice: line items (description, quantity, unit_price), their total as
        the amount due, a memo and a due date (30 days unless stated). The payer sends
        pay_exactly to pay_to."""
        return await create(ctx, "invoice", asset, due_in_days, memo, line_items=line_items)

    reads, cancels = _reads(books), _cancels(wallet, books)
    return [*reads, create_payment_link, cancels[0], create_invoice, cancels[1]]


def _reads(books: ChainReceivables) -> list[Capability]:
    @capability(kind="read")
    async def list_payment_links(
        ctx: CallContext, status: StatusFilter = None
    ) -> list[ChainReceivable]:
        """The person's payment links, newest first: reference, amount, the exact amount to
        pay and where, status (open, paid, cancelled, overdue), and once paid the payer and
        the transaction; transfers that arrived after it was paid or cancelled are listed."""
        return await asyncio.to_thread(
            books.of_principal, ctx.principal.actor_id, "link", at=ctx.clock.now(), status=status
        )

    @capability(kind="read")
    async def list_invoices(ctx: CallContext, status: StatusFilter = None) -> list[ChainReceivable]:
        """The person's invoices, newest first, with their line items, total, the exact amount
        to pay and where, due date and status (open, paid, cancelled, overdue)."""
        return await asyncio.to_thread(
            books.of_principal, ctx.principal.actor_id, "invoice", at=ctx.clock.now(), status=status
        )

    return [list_payment_links, list_invoices]


def _cancels(wallet: ChainWallet, books: ChainReceivables) -> list[Capability]:
    symbol = wallet.config.token_symbol

    def existing(a: Any, ctx: CallContext) -> Decimal | None:
        try:
            found = books.get(a.reference, at=ctx.clock.now())
        except ChainError:
            return None
        return wallet.usd_value(symbol, found.amount)

    @capability(
        kind="execute",
        risk="low",
        tier="confirm",
        amount_usd=existing,
        flags={"mutating"},
        describe=lambda a: f"Cancel the payment link {a.reference}",
    )
    async def cancel_payment_link(ctx: CallContext, reference: Reference) -> ChainReceivable:
        """Cancel an open payment link; a payment that still arrives is reported, not counted
        as paying it. Refused once paid."""
        return await asyncio.to_thread(
            books.cancel, ctx.principal.actor_id, "link", reference, at=ctx.clock.now()
        )

    @capability(
        kind="execute",
        risk="low",
        tier="confirm",
        amount_usd=existing,
        flags={"mutating"},
        describe=lambda a: f"Cancel the invoice {a.reference}",
    )
    async def cancel_invoice(ctx: CallContext, reference: Reference) -> ChainReceivable:
        """Cancel an open invoice; a payment that still arrives is reported. Refused once
        paid."""
        return await asyncio.to_thread(
            books.cancel, ctx.principal.actor_id, "invoice", reference, at=ctx.clock.now()
        )

    return [cancel_payment_link, cancel_invoice]
