"""Payment links and invoices: payments a principal expects to receive, kept in the wallet's books.

A link asks for an amount of one asset; an invoice adds line items (their total is the amount)
and usually a due date. Each has a ``reference`` a payer quotes. It is marked paid when a
matching incoming payment arrives: on the paper wallet that is ``Receivables.pay`` (the simulated
payer, also ``python -m fiduciary.wallet.payer``), which posts the payment and marks the
reference paid in one SQLite transaction, so a reference is never paid twice and never paid
without the money arriving. Cancelling refuses once paid; paying refuses once cancelled.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

from ..receivables import LineItem, Receivable, make_reference, shown_status
from ..receivables import ReceivableKind as Kind
from ..receivables import ReceivableStatus as Status
from .assets import get_asset, money
from .errors import WalletError
from .ledger import Batch, Ledger, timestamp

__all__ = ["PAYER", "LineItem", "Receivable", "Receivables"]

PAYER = "@payer"  # the simulated payers' account: outside money arriving

_COLUMNS = (
    "reference, principal, kind, asset, amount, memo, due, items, status, created_at, "
    "paid_digest, paid_by, closed_at, idempotency_key"
)


def _time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _row(row: tuple[object, ...], at: datetime) -> Receivable:
    ref, _principal, kind, asset, amount, memo, due, items, status = row[:9]
    created, digest, by, closed = row[9:13]
    due_at = _time(due)  # type: ignore[arg-type]
    return Receivable(
        reference=str(ref),
        kind=kind,  # type: ignore[arg-type]
        asset=str(asset),
        amount=Decimal(str(amount)),
        memo=str(memo),
        due=due_at,
        line_items=[LineItem.model_validate(i) for i in json.loads(str(items))],
        status=shown_status(str(status), due_at, at),
        created_at=datetime.fromisoformat(str(created)),
        paid_digest=digest,  # type: ignore[arg-type]
        paid_by=by,  # type: ignore[arg-type]
        closed_at=_time(closed),  # type: ignore[arg-type]
    )


class Receivables:
    """The expected incoming payments of every principal of one wallet ledger."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def create(
        self,
        principal: str,
        kind: Kind,
        asset: str,
        *,
        amount: Decimal | None = None,
        memo: str = "",
        due: datetime | None = None,
        line_items: list[LineItem] | None = None,
        key: str,
        at: datetime,
    ) -> Receivable:
        """Record a link (``amount``) or an invoice (``line_items``; their total is the amount),
        once per key: a replay of the same call returns what the first one made."""
        if not key:
            raise ValueError("a write needs the idempotency key of the call that makes it")
        spec = get_asset(asset)
        items = list(line_items or [])
        if kind == "invoice":
            if not items:
                raise WalletError("invalid_invoice", "an invoice needs at least one line item")
            total = sum((i.total for i in items), Decimal(0))
            if amount is not None and money(amount) != total:
                raise WalletError(
                    "invalid_invoice", f"the line items add up to {total}, not {amount}"
                )
            amount = total
        elif items:
            raise WalletError("invalid_link", "a payment link has no line items")
        if amount is None or money(amount) <= 0:
            raise WalletError("invalid_amount", "the amount to receive must be above zero")
        value = money(amount)
        spec.units(value)  # refuses an amount finer than the asset's precision
        if due is not None and due <= at:
            raise WalletError("invalid_due_date", "the due date must be in the future")
        reference = make_reference(kind, key)
        with self.ledger.batch() as batch:
            prior = self._one(batch, reference)
            if prior is not None:
                if prior[1] != principal:
                    raise WalletError("idempotency_conflict", "the key was used by someone else")
                return _row(prior, at)
            batch.execute(
                f"INSERT INTO wallet_receivables ({_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, NULL, NULL, NULL, ?)",
                (
                    reference,
                    principal,
                    kind,
                    spec.symbol,
                    str(value),
                    memo,
                    None if due is None else timestamp(due),
                    json.dumps([i.model_dump(mode="json") for i in items]),
                    timestamp(at),
                    key,
                ),
            )
            row = self._one(batch, reference)
        assert row is not None
        return _row(row, at)

    def list(
        self, principal: str, kind: Kind, *, at: datetime, status: Status | None = None
    ) -> list[Receivable]:
        """The principal's links or invoices, newest first (``status`` narrows them)."""
        rows = self.ledger.read().query(
            f"SELECT {_COLUMNS} FROM wallet_receivables WHERE principal = ? AND kind = ? "
            "ORDER BY created_at DESC, reference",
            (principal, kind),
        )
        found = [_row(r, at) for r in rows]
        return [r for r in found if status is None or r.status == status]

    def get(self, reference: str, *, at: datetime) -> Receivable:
        row = self._one(self.ledger.read(), reference)
        if row is None:
            raise WalletError("not_found", f"there is no payment link or invoice {reference!r}")
        return _row(row, at)

    def cancel(self, principal: str, kind: Kind, reference: str, *, at: datetime) -> Receivable:
        """Cancel an open link or invoice (again: the same answer); refused once paid."""
        with self.ledger.batch() as batch:
            row = self._one(batch, reference)
            if row is None or row[1] != principal or row[2] != kind:
                raise WalletError("not_found", f"you have no {kind} {reference!r}")
            if row[8] == "paid":
                raise WalletError("already_paid", f"{reference} is paid; it cannot be cancelled")
            if row[8] == "open":
                batch.execute(
                    "UPDATE wallet_receivables SET status = 'cancelled', closed_at = ? "
                    "WHERE reference = ? AND status = 'open'",
                    (timestamp(at), reference),
                )
                row = self._one(batch, reference)
        assert row is not None
        return _row(row, at)

    def pay(
        self,
        reference: str,
        *,
        payer: str,
        asset: str | None = None,
        amount: Decimal | None = None,
        at: datetime,
    ) -> Receivable:
        """A payer pays ``reference``: the money reaches the principal's available balance and
        the reference is marked paid, together. A payment in another asset or amount than
        asked, or of a reference that is paid or cancelled, is refused and posts nothing."""
        with self.ledger.batch() as batch:
            row = self._one(batch, reference)
            if row is None:
                raise WalletError("not_found", f"there is no payment link or invoice {reference!r}")
            _, principal, kind, wanted_asset, wanted, memo = row[:6]
            status = row[8]
            if status != "open":
                if status == "paid":
                    raise WalletError("already_paid", f"{reference} is paid")
                raise WalletError("already_cancelled", f"{reference} is {status}")
            if asset is not None and get_asset(asset).symbol != wanted_asset:
                raise WalletError("asset_mismatch", f"{reference} asks for {wanted_asset}")
            due_amount = Decimal(str(wanted))
            if amount is not None and money(amount) != due_amount:
                raise WalletError("amount_mismatch", f"{reference} asks for {due_amount}")
            draft = batch.draft(
                key=f"receive:{reference}",
                request_digest=f"receive:{reference}",
                kind="receive",
                principal=str(principal),
                at=at,
            )
            draft.move(
                str(wanted_asset),
                due_amount,
                (PAYER, payer),
                (str(principal), "available"),
                f"{kind} {reference}",
            )
            tx = draft.seal(
                f"Received {due_amount} {wanted_asset} for {kind} {reference}"
                + (f" ({memo})" if memo else ""),
                {"reference": reference, "payer": payer},
            )
            batch.execute(
                "UPDATE wallet_receivables SET status = 'paid', paid_digest = ?, paid_by = ?, "
                "closed_at = ? WHERE reference = ?",
                (tx.digest, payer, timestamp(at), reference),
            )
            paid = self._one(batch, reference)
        assert paid is not None
        return _row(paid, at)

    @staticmethod
    def _one(view: Batch, reference: str) -> tuple[object, ...] | None:
        row = view.one(
            f"SELECT {_COLUMNS} FROM wallet_receivables WHERE reference = ?", (reference,)
        )
        return None if row is None else tuple(row)
