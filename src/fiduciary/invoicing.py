"""The six payment link and invoice capabilities, declared once for whatever keeps the books.

``invoicing_capabilities(books, terms)``: ``list_payment_links`` and ``list_invoices`` are
reads; ``create_payment_link``, ``create_invoice``, ``cancel_payment_link`` and
``cancel_invoice`` are writes a person confirms (the card names the amount, the asset and the
reference). They move no money. A domain supplies ``books`` (a ``ReceivableBooks``: how it
keeps, prices and refuses them) and ``terms`` (what its arguments accept, what it answers and
how its capabilities describe themselves): the paper wallet's are paid by its payer, the
chain's by a Transfer of an exact amount.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Protocol, TypeVar

from pydantic import Field

from .capabilities import CallContext, Capability, capability
from .receivables import (
    DueDays,
    LineItem,
    Memo,
    Receivable,
    ReceivableKind,
    ReceivableStatus,
    Reference,
    StatusFilter,
)

__all__ = [
    "PAYMENT_READS",
    "PAYMENT_WRITES",
    "InvoicingTerms",
    "ReceivableBooks",
    "invoicing_capabilities",
]

PAYMENT_READS = ("list_payment_links", "list_invoices")
PAYMENT_WRITES = ("create_payment_link", "cancel_payment_link", "create_invoice", "cancel_invoice")

_F = TypeVar("_F", bound=Callable[..., Any])


class ReceivableBooks(Protocol):
    """A domain's links and invoices, as the six capabilities use them."""

    def usd(self, asset: str, amount: Decimal) -> Decimal | None:
        """``amount`` of ``asset`` in USD; None when unknown (the policy then asks a person)."""
        ...

    def existing_usd(self, reference: str, at: datetime) -> Decimal | None:
        """The USD value of the link or invoice ``reference``; None when there is none."""
        ...

    async def of_principal(
        self, principal: str, kind: ReceivableKind, *, at: datetime, status: ReceivableStatus | None
    ) -> Sequence[Receivable]: ...

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
        """The link or invoice of the call of idempotency key ``key`` (made once)."""
        ...

    async def cancel(
        self, principal: str, kind: ReceivableKind, reference: str, *, at: datetime
    ) -> Receivable: ...


@dataclass(frozen=True)
class InvoicingTerms:
    """What differs between domains in the capabilities' declarations."""

    asset: Any  # the ``asset`` argument's type (Annotated, with its description)
    amount: Any  # a link's ``amount`` argument's type
    record: type[Receivable]  # what the capabilities answer
    docs: Mapping[str, str]  # each capability's description, by its name
    where: str = ""  # said on a create card after the asset, e.g. " on chain 8453"


def _typed(hints: Mapping[str, Any]) -> Callable[[_F], _F]:
    """Give a handler the domain's types (their descriptions reach the model's schema)."""

    def give(fn: _F) -> _F:
        fn.__annotations__ = {**fn.__annotations__, **hints}
        return fn

    return give


def _items_total(a: Any) -> Decimal:
    return sum((LineItem.model_validate(i).total for i in a.line_items), Decimal(0))


def _memo_and_due(a: Any) -> str:
    return (f" for {a.memo!r}" if a.memo else "") + (
        f", due in {a.due_in_days} days" if a.due_in_days else ""
    )


def invoicing_capabilities(books: ReceivableBooks, terms: InvoicingTerms) -> list[Capability]:
    """The six link and invoice capabilities over ``books``, in ``terms``."""
    reads = _reads(books, terms)
    creates = _creates(books, terms)
    cancels = _cancels(books, terms)
    return [*reads, creates[0], cancels[0], creates[1], cancels[1]]


def _reads(books: ReceivableBooks, terms: InvoicingTerms) -> list[Capability]:
    many = {"return": list.__class_getitem__(terms.record)}

    @capability(kind="read", description=inspect.cleandoc(terms.docs["list_payment_links"]))
    @_typed(many)
    async def list_payment_links(
        ctx: CallContext, status: StatusFilter = None
    ) -> Sequence[Receivable]:
        return await books.of_principal(
            ctx.principal.actor_id, "link", at=ctx.clock.now(), status=status
        )

    @capability(kind="read", description=inspect.cleandoc(terms.docs["list_invoices"]))
    @_typed(many)
    async def list_invoices(ctx: CallContext, status: StatusFilter = None) -> Sequence[Receivable]:
        return await books.of_principal(
            ctx.principal.actor_id, "invoice", at=ctx.clock.now(), status=status
        )

    return [list_payment_links, list_invoices]


def _creates(books: ReceivableBooks, terms: InvoicingTerms) -> list[Capability]:
    async def create(
        ctx: CallContext,
        kind: ReceivableKind,
        asset: str,
        due_in_days: int | None,
        memo: str,
        *,
        amount: Decimal | None = None,
        line_items: list[LineItem] | None = None,
    ) -> Receivable:
        now = ctx.clock.now()
        return await books.create(
            ctx.principal.actor_id,
            kind,
            asset,
            amount=amount,
            memo=memo,
            due=None if due_in_days is None else now + timedelta(days=due_in_days),
            line_items=line_items,
            key=ctx.idempotency_key,
            at=now,
        )

    @capability(
        kind="execute",
        risk="low",
        tier="confirm",
        amount_usd=lambda a, ctx: books.usd(a.asset, a.amount),
        flags={"mutating"},
        describe=lambda a: (
            f"Create a payment link asking for {a.amount} {a.asset.upper()}{terms.where}"
            + _memo_and_due(a)
        ),
        description=inspect.cleandoc(terms.docs["create_payment_link"]),
    )
    @_typed({"asset": terms.asset, "amount": terms.amount, "return": terms.record})
    async def create_payment_link(
        ctx: CallContext, asset: str, amount: Decimal, memo: Memo = "", due_in_days: DueDays = None
    ) -> Receivable:
        return await create(ctx, "link", asset, due_in_days, memo, amount=amount)

    @capability(
        kind="execute",
        risk="low",
        tier="confirm",
        amount_usd=lambda a, ctx: books.usd(a.asset, _items_total(a)),
        flags={"mutating"},
        describe=lambda a: (
            f"Create an invoice for {_items_total(a)} {a.asset.upper()} "
            f"({len(a.line_items)} line item{'s' if len(a.line_items) != 1 else ''}){terms.where}"
            + _memo_and_due(a)
        ),
        description=inspect.cleandoc(terms.docs["create_invoice"]),
    )
    @_typed({"asset": terms.asset, "return": terms.record})
    async def create_invoice(
        ctx: CallContext,
        asset: str,
        line_items: Annotated[list[LineItem], Field(min_length=1, max_length=50)],
        memo: Memo = "",
        due_in_days: DueDays = 30,
    ) -> Receivable:
        return await create(ctx, "invoice", asset, due_in_days, memo, line_items=line_items)

    return [create_payment_link, create_invoice]


def _cancels(books: ReceivableBooks, terms: InvoicingTerms) -> list[Capability]:
    def existing(a: Any, ctx: CallContext) -> Decimal | None:
        return books.existing_usd(a.reference, ctx.clock.now())

    @capability(
        kind="execute",
        risk="low",
        tier="confirm",
        amount_usd=existing,
        flags={"mutating"},
        describe=lambda a: f"Cancel the payment link {a.reference}",
        description=inspect.cleandoc(terms.docs["cancel_payment_link"]),
    )
    @_typed({"return": terms.record})
    async def cancel_payment_link(ctx: CallContext, reference: Reference) -> Receivable:
        return await books.cancel(ctx.principal.actor_id, "link", reference, at=ctx.clock.now())

    @capability(
        kind="execute",
        risk="low",
        tier="confirm",
        amount_usd=existing,
        flags={"mutating"},
        describe=lambda a: f"Cancel the invoice {a.reference}",
        description=inspect.cleandoc(terms.docs["cancel_invoice"]),
    )
    @_typed({"return": terms.record})
    async def cancel_invoice(ctx: CallContext, reference: Reference) -> Receivable:
        return await books.cancel(ctx.principal.actor_id, "invoice", reference, at=ctx.clock.now())

    return [cancel_payment_link, cancel_invoice]
