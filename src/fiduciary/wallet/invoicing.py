"""Capabilities for payments the person expects to receive: payment links and invoices.

``payment_capabilities(wallet)`` declares six (``fiduciary.invoicing``): ``list_payment_links``
and ``list_invoices`` are reads; ``create_payment_link``, ``create_invoice``,
``cancel_payment_link`` and ``cancel_invoice`` are writes a person confirms (the card names the
amount, the asset and the reference). They move no money: the money arrives when a payer pays
the reference (``Receivables.pay``; ``python -m fiduciary.wallet.payer`` on the paper wallet).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from ..capabilities import Capability
from ..invoicing import PAYMENT_READS, PAYMENT_WRITES, InvoicingTerms, invoicing_capabilities
from ..receivables import LineItem, Receivable, ReceivableKind, ReceivableStatus
from .capabilities import Amount, AssetName
from .receivables import Receivables
from .wallet import PaperWallet

__all__ = ["PAYMENT_READS", "PAYMENT_WRITES", "payment_capabilities"]

_DOCS = {
    "list_payment_links": """
        The person's payment links, newest first: reference, amount, asset, memo, due date,
        status (open, paid, cancelled, overdue) and, once paid, who paid and the transaction.""",
    "list_invoices": """
        The person's invoices, newest first, with their line items, total, due date and
        status (open, paid, cancelled, overdue).""",
    "create_payment_link": """
        Create a link asking a payer for an amount of an asset; it is marked paid when the
        payment quoting its reference arrives. Give the reference to the payer.""",
    "create_invoice": """
        Create an invoice: line items (description, quantity, unit_price in the asset), their
        total as the amount due, a memo and a due date (30 days unless stated).""",
    "cancel_payment_link": """
        Cancel an open payment link so it can no longer be paid. Refused once paid.""",
    "cancel_invoice": "Cancel an open invoice so it can no longer be paid. Refused once paid.",
}


class _PaperBooks:
    """The paper wallet's ledger as ``fiduciary.invoicing`` reads and writes it."""

    def __init__(self, wallet: PaperWallet) -> None:
        self.wallet = wallet
        self.books = Receivables(wallet.ledger)

    def usd(self, asset: str, amount: Decimal) -> Decimal | None:
        try:
            return self.wallet.usd_value(asset.upper(), amount)
        except Exception:  # an unknown asset: the policy asks a person, the handler refuses
            return None

    def existing_usd(self, reference: str, at: datetime) -> Decimal | None:
        try:
            found = self.books.get(reference, at=at)
        except Exception:
            return None
        return self.usd(found.asset, found.amount)

    async def of_principal(
        self, principal: str, kind: ReceivableKind, *, at: datetime, status: ReceivableStatus | None
    ) -> list[Receivable]:
        return self.books.list(principal, kind, at=at, status=status)

    async def create(
        self,
        principal: str,
        kind: ReceivableKind,
        asset: str,
        *,
        amount: Decimal | None,
        memo: str,
        due: datetime | None,
        line_items: list[LineItem] | None,
        key: str,
        at: datetime,
    ) -> Receivable:
        return self.books.create(
            principal,
            kind,
            asset,
            amount=amount,
            memo=memo,
            due=due,
            line_items=line_items,
            key=key,
            at=at,
        )

    async def cancel(
        self, principal: str, kind: ReceivableKind, reference: str, *, at: datetime
    ) -> Receivable:
        return self.books.cancel(principal, kind, reference, at=at)


def payment_capabilities(wallet: PaperWallet) -> list[Capability]:
    """The payment link and invoice capabilities, bound to ``wallet``'s books."""
    terms = InvoicingTerms(asset=AssetName, amount=Amount, record=Receivable, docs=_DOCS)
    return invoicing_capabilities(_PaperBooks(wallet), terms)
