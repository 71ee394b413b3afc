"""Payment links and invoices as a principal sees them, whatever keeps their books.

A link asks for an amount of one asset; an invoice adds line items (their total is the
amount) and usually a due date. Each has a ``reference``. Both the paper wallet
(``wallet.receivables``: paid by its simulated payer) and the chain (``chain.payments``: paid
by a token Transfer the watcher reads) keep them; what they share is here: the record, its line
items, how a reference is made, and the capability arguments' types. A row moves open → paid
or open → cancelled, never back; ``overdue`` is an open one past its due date.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, Field

__all__ = [
    "DueDays",
    "LineItem",
    "Memo",
    "Receivable",
    "ReceivableKind",
    "ReceivableStatus",
    "Reference",
    "StatusFilter",
    "make_reference",
    "shown_status",
]

ReceivableKind = Literal["link", "invoice"]
ReceivableStatus = Literal["open", "paid", "cancelled", "overdue"]


class LineItem(BaseModel):
    """One line of an invoice: what, how many, at what price each (in the invoice's asset)."""

    description: str = Field(min_length=1, max_length=140)
    quantity: Decimal = Field(default=Decimal(1), gt=0)
    unit_price: Decimal = Field(gt=0)

    @property
    def total(self) -> Decimal:
        return self.quantity * self.unit_price


class Receivable(BaseModel):
    """A payment link or an invoice as the principal sees it."""

    reference: str
    kind: ReceivableKind
    asset: str
    amount: Decimal
    memo: str
    due: datetime | None
    line_items: list[LineItem]
    status: ReceivableStatus  # overdue: open and past its due date
    created_at: datetime
    paid_by: str | None = None  # the payer's address
    paid_digest: str | None = None  # the transaction that paid it
    closed_at: datetime | None = None  # when it was paid or cancelled


def make_reference(kind: ReceivableKind, key: str) -> str:
    """The reference of the link or invoice made by the call of idempotency key ``key``."""
    prefix = "inv" if kind == "invoice" else "pl"
    return f"{prefix}_{hashlib.sha256(f'receivable/{key}'.encode()).hexdigest()[:16]}"


def shown_status(stored: str, due: datetime | None, at: datetime) -> ReceivableStatus:
    """The status a reader sees at ``at``: an open one past its due date is overdue."""
    if stored == "open" and due is not None and at > due:
        return "overdue"
    if stored not in ("open", "paid", "cancelled"):
        raise ValueError(f"not a receivable status: {stored!r}")
    return stored  # type: ignore[return-value]  # narrowed by the check above


Memo = Annotated[
    str, Field(max_length=140, description="What the payment is for, as the payer will see it.")
]
DueDays = Annotated[
    int | None, Field(ge=1, le=365, description="Days from now until it is due; omit for none.")
]
StatusFilter = Annotated[
    ReceivableStatus | None,
    Field(description="Only this status; omit for all."),
]
Reference = Annotated[
    str, Field(min_length=3, max_length=40, description="The reference, e.g. inv_… or pl_….")
]
