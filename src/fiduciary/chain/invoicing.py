"""The chain wallet's payment links and invoices, under the paper wallet's capability names:
``list_payment_links`` and ``list_invoices`` (reads), ``create_payment_link``,
``create_invoice``, ``cancel_payment_link`` and ``cancel_invoice`` (writes a person confirms),
declared in ``fiduciary.invoicing``.

They move no money. A link or invoice asks for the stablecoin only, in whole cents, and
answers with ``pay_to`` (the wallet's address) and ``pay_exactly`` (the amount plus its tag
below a cent: the reference, see ``payments``); the watcher (``fiduciary chain watch``) marks
it paid when a Transfer of exactly that reaches the wallet.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from ..capabilities import Capability
from ..exceptions import ConfigurationError
from ..invoicing import InvoicingTerms, invoicing_capabilities
from ..receivables import LineItem, ReceivableKind, ReceivableStatus
from .errors import ChainError
from .payments import ChainReceivable, ChainReceivables, SQLiteReceivables
from .wallet import ChainWallet

__all__ = ["open_receivables", "payment_capabilities"]

Asset = Annotated[str, Field(description="The asset to receive: the USD stablecoin (USDC).")]
Amount = Annotated[
    Decimal, Field(gt=0, description='The amount to receive, in whole cents (e.g. "12.50").')
]

_DOCS = {
    "list_payment_links": """
        The person's payment links, newest first: reference, amount, the exact amount to
        pay and where, status (open, paid, cancelled, overdue), and once paid the payer and
        the transaction; transfers that arrived after it was paid or cancelled are listed.""",
    "list_invoices": """
        The person's invoices, newest first, with their line items, total, the exact amount
        to pay and where, due date and status (open, paid, cancelled, overdue).""",
    "create_payment_link": """
        Create a link asking a payer for an amount of the stablecoin. Give the payer
        pay_to and pay_exactly: the digits below the cent are its reference, so the payer must
        send exactly that amount. It is marked paid when that transfer is on chain.""",
    "create_invoice": """
        Create an invoice: line items (description, quantity, unit_price), their total as
        the amount due, a memo and a due date (30 days unless stated). The payer sends
        pay_exactly to pay_to.""",
    "cancel_payment_link": """
        Cancel an open payment link; a payment that still arrives is reported, not counted
        as paying it. Refused once paid.""",
    "cancel_invoice": """
        Cancel an open invoice; a payment that still arrives is reported. Refused once
        paid.""",
}


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


class _ChainBooks:
    """``ChainReceivables`` as ``fiduciary.invoicing`` reads and writes them: priced in the
    stablecoin only, each call in a worker thread (the store blocks)."""

    def __init__(self, wallet: ChainWallet, books: ChainReceivables) -> None:
        self.wallet = wallet
        self.books = books
        self.symbol = wallet.config.token_symbol

    def usd(self, asset: str, amount: Decimal) -> Decimal | None:
        return self.wallet.usd_value(self.symbol, amount)  # a link asks for the stablecoin only

    def existing_usd(self, reference: str, at: datetime) -> Decimal | None:
        try:
            found = self.books.get(reference, at=at)
        except ChainError:
            return None
        return self.usd(self.symbol, found.amount)

    async def of_principal(
        self, principal: str, kind: ReceivableKind, *, at: datetime, status: ReceivableStatus | None
    ) -> list[ChainReceivable]:
        return await asyncio.to_thread(
            self.books.of_principal, principal, kind, at=at, status=status
        )

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
    ) -> ChainReceivable:
        if asset.upper() != self.symbol.upper():
            raise ChainError(
                "unknown_asset", f"links and invoices on chain ask for {self.symbol} only"
            )
        # payments are read from the next block on: none before the link exists can pay it
        from_block = await self.wallet.w3.eth.block_number + 1
        return await asyncio.to_thread(
            self.books.create,
            principal,
            kind,
            asset=self.symbol,
            amount=amount,
            memo=memo,
            due=due,
            line_items=list(line_items or []),
            key=key,
            at=at,
            from_block=from_block,
        )

    async def cancel(
        self, principal: str, kind: ReceivableKind, reference: str, *, at: datetime
    ) -> ChainReceivable:
        return await asyncio.to_thread(self.books.cancel, principal, kind, reference, at=at)


def payment_capabilities(wallet: ChainWallet, books: ChainReceivables) -> list[Capability]:
    """The six link and invoice capabilities over ``books`` (``wallet``'s account)."""
    terms = InvoicingTerms(
        asset=Asset,
        amount=Amount,
        record=ChainReceivable,
        docs=_DOCS,
        where=f" on chain {wallet.config.chain_id}",
    )
    return invoicing_capabilities(_ChainBooks(wallet, books), terms)
