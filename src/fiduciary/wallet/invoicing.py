"""Capabilities for payments the person expects to receive: payment links and invoices.

``payment_capabilities(wallet)`` declares six: ``list_payment_links`` and ``list_invoices`` are
reads; ``create_payment_link``, ``create_invoice``, ``cancel_payment_link`` and
``cancel_invoice`` are writes a person confirms (the card names the amount, the asset and the
reference). They move no money: the money arrives when a payer pays the reference
(``Receivables.pay``; ``python -m fiduciary.wallet.payer`` on the paper wallet).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any

from pydantic import Field

from ..capabilities import CallContext, Capability, capability
from ..receivables import DueDays, LineItem, Memo, Receivable, Reference, StatusFilter
from ..receivables import ReceivableKind as Kind
from .capabilities import Amount, AssetName
from .receivables import Receivables
from .wallet import PaperWallet

__all__ = ["PAYMENT_READS", "PAYMENT_WRITES", "payment_capabilities"]

PAYMENT_READS = ("list_payment_links", "list_invoices")
PAYMENT_WRITES = ("create_payment_link", "cancel_payment_link", "create_invoice", "cancel_invoice")


def _who(ctx: CallContext) -> str:
    return ctx.principal.actor_id


def _create(
    books: Receivables,
    ctx: CallContext,
    kind: Kind,
    asset: str,
    due_in_days: int | None,
    memo: str,
    *,
    amount: Decimal | None = None,
    line_items: list[LineItem] | None = None,
) -> Receivable:
    """The link or invoice ``ctx``'s call makes, due ``due_in_days`` from now (None: no due
    date), once per idempotency key."""
    now = ctx.clock.now()
    due = None if due_in_days is None else now + timedelta(days=due_in_days)
    return books.create(
        _who(ctx),
        kind,
        asset,
        amount=amount,
        memo=memo,
        due=due,
        line_items=line_items,
        key=ctx.idempotency_key,
        at=now,
    )


def payment_capabilities(wallet: PaperWallet) -> list[Capability]:
    """The payment link and invoice capabilities, bound to ``wallet``'s books."""
    books = Receivables(wallet.ledger)

    def usd(asset: str, amount: Decimal) -> Decimal | None:
        try:
            return wallet.usd_value(asset.upper(), amount)
        except Exception:  # an unknown asset: the policy asks a person, the handler refuses
            return None

    def items_total(a: Any) -> Decimal:
        return sum((LineItem.model_validate(i).total for i in a.line_items), Decimal(0))

    def existing(a: Any, ctx: CallContext) -> Decimal | None:
        try:
            found = books.get(a.reference, at=ctx.clock.now())
        except Exception:
            return None
        return usd(found.asset, found.amount)

    @capability(kind="read")
    async def list_payment_links(ctx: CallContext, status: StatusFilter = None) -> list[Receivable]:
        """The person's payment links, newest first: reference, amount, asset, memo, due date,
        status (open, paid, cancelled, overdue) and, once paid, who paid and the transaction."""
        return books.list(_who(ctx), "link", at=ctx.clock.now(), status=status)

    @capability(kind="read")
    async def list_invoices(ctx: CallContext, status: StatusFilter = None) -> list[Receivable]:
        """The person's invoices, newest first, with their line items, total, due date and
        status (open, paid, cancelled, overdue)."""
        return books.list(_who(ctx), "invoice", at=ctx.clock.now(), status=status)

    @capability(
        kind="execute",
        risk="low",
        tier="confirm",
        amount_usd=lambda a, ctx: usd(a.asset, a.amount),
        flags={"mutating"},
        describe=lambda a: (
            f"Create a payment link asking for {a.amount} {a.asset.upper()}"
            + (f" for {a.memo!r}" if a.memo else "")
            + (f", due in {a.due_in_days} days" if a.due_in_days else "")
        ),
    )
    async def create_payment_link(
        ctx: CallContext,
        asset: AssetName,
        amount: Amount,
        memo: Memo = "",
        due_in_days: DueDays = None,
    ) -> Receivable:
        """Create a link asking a payer for an amount of an asset; it is marked paid when the
        payment quoting its reference arrives. Give the reference to the payer."""
        return _create(books, ctx, "link", asset, due_in_days, memo, amount=amount)

    @capability(
        kind="execute",
        risk="low",
        tier="confirm",
        amount_usd=lambda a, ctx: usd(a.asset, items_total(a)),
        flags={"mutating"},
        describe=lambda a: (
            f"Create an invoice for {items_total(a)} {a.asset.upper()} "
            f"({len(a.line_items)} line item{'s' if len(a.line_items) != 1 else ''})"
            + (f" for {a.memo!r}" if a.memo else "")
            + (f", due in {a.due_in_days} days" if a.due_in_days else "")
        ),
    )
    async def create_invoice(
        ctx: CallContext,
        asset: AssetName,
        line_items: Annotated[list[LineItem], Field(min_length=1, max_length=50)],
        memo: Memo = "",
        due_in_days: DueDays = 30,
    ) -> Receivable:
        """Create an invoice: line items (description, quantity, unit_price in the asset), their
        total as the amount due, a memo and a due date (30 days unless stated)."""
        return _create(books, ctx, "invoice", asset, due_in_days, memo, line_items=line_items)

    @capability(
        kind="execute",
        risk="low",
        tier="confirm",
        amount_usd=existing,
        flags={"mutating"},
        describe=lambda a: f"Cancel the payment link {a.reference}",
    )
    async def cancel_payment_link(ctx: CallContext, reference: Reference) -> Receivable:
        """Cancel an open payment link so it can no longer be paid. Refused once paid."""
        return books.cancel(_who(ctx), "link", reference, at=ctx.clock.now())

    @capability(
        kind="execute",
        risk="low",
        tier="confirm",
        amount_usd=existing,
        flags={"mutating"},
        describe=lambda a: f"Cancel the invoice {a.reference}",
    )
    async def cancel_invoice(ctx: CallContext, reference: Reference) -> Receivable:
        """Cancel an open invoice so it can no longer be paid. Refused once paid."""
        return books.cancel(_who(ctx), "invoice", reference, at=ctx.clock.now())

    return [
        list_payment_links,
        list_invoices,
        create_payment_link,
        cancel_payment_link,
        create_invoice,
        cancel_invoice,
    ]
