"""Payment links and invoices paid on chain: the books, and how a Transfer is matched.

A plain ERC-20 ``transfer(to, amount)`` carries no memo, so the reference travels in the
amount: each link or invoice asks for its amount plus a **tag** of a few of the token's
smallest units (below one cent: 1 to 9,999 units of a 6-decimal token), unique among every
link ever made for the same token and wallet (``UNIQUE (chain_id, token, recipient, units)``).
A Transfer log of the token, to the wallet's address, of exactly that many units pays it.
Chosen over calldata after the ABI arguments because any payer can send an exact amount (an
exchange, a multisig, a smart wallet, a contract), whereas trailing calldata is lost when the
transfer is made by a contract and most wallets cannot add it; the cost is that the payer must
send the exact amount shown (``pay_exactly``), up to a cent more than asked.

Every incoming Transfer the watcher reads is recorded once (primary key: chain id, transaction
hash, log index) with what it did: ``paid`` (an open link marked paid, with the hash, block and
payer), ``late`` (to a cancelled link: reported, not swallowed), ``again`` (to a link already
paid), ``unmatched`` (no link asks that amount: another amount, or no reference). The record,
the link's change and the watcher's cursor are written in one transaction, so a replay of the
same log, or a watcher killed and started again, marks a link paid exactly once. One core
(``ChainReceivables``: the statements and every rule) over two dialects: ``SQLiteReceivables``
here, ``PostgresReceivables`` in ``payments_postgres``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import Field

from ..receivables import (
    LineItem,
    Receivable,
    ReceivableKind,
    ReceivableStatus,
    make_reference,
    shown_status,
)
from ._sqlite import immediate
from .errors import ChainError

__all__ = [
    "SCHEMA",
    "ChainReceivable",
    "ChainReceivables",
    "Incoming",
    "Outcome",
    "SQLiteReceivables",
    "Tx",
    "most_tags",
]

Outcome = Literal["paid", "late", "again", "unmatched"]

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS chain_receivables (
    reference TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    kind TEXT NOT NULL,             -- link | invoice
    chain_id {int} NOT NULL,
    token TEXT NOT NULL,            -- the token's address (checksummed)
    recipient TEXT NOT NULL,        -- the wallet's address (checksummed)
    asset TEXT NOT NULL,
    amount TEXT NOT NULL,           -- what was asked
    units TEXT NOT NULL,            -- what must arrive, in smallest units: asked + the tag
    memo TEXT NOT NULL,
    due TEXT,
    items TEXT NOT NULL,
    status TEXT NOT NULL,           -- open | paid | cancelled
    created_at TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    paid_tx TEXT,
    paid_by TEXT,
    paid_block {int},
    closed_at TEXT,
    UNIQUE (chain_id, token, recipient, units)
)""",
    """
CREATE TABLE IF NOT EXISTS chain_incoming (
    chain_id {int} NOT NULL,
    tx_hash TEXT NOT NULL,
    log_index {int} NOT NULL,
    token TEXT NOT NULL,
    recipient TEXT NOT NULL,
    sender TEXT NOT NULL,
    units TEXT NOT NULL,
    block {int} NOT NULL,
    outcome TEXT NOT NULL,          -- paid | late | again | unmatched
    reference TEXT,
    seen_at TEXT NOT NULL,
    PRIMARY KEY (chain_id, tx_hash, log_index)
)""",
    """
CREATE TABLE IF NOT EXISTS chain_watch_cursors (
    chain_id {int} NOT NULL,
    token TEXT NOT NULL,
    recipient TEXT NOT NULL,
    next_block {int} NOT NULL,    -- the first block not read yet
    PRIMARY KEY (chain_id, token, recipient)
)""",
)

_COLUMNS = (
    "reference, principal, kind, asset, amount, memo, due, items, status, created_at, "
    "chain_id, token, recipient, units, paid_tx, paid_by, paid_block, closed_at"
)
TAGS_AT_MOST = 9_999


def most_tags(decimals: int) -> int:
    """How many tags fit below one cent of a token of ``decimals`` (0: none)."""
    return 0 if decimals < 3 else min(10 ** (decimals - 2) - 1, TAGS_AT_MOST)


class ChainReceivable(Receivable):
    """A link or invoice on chain: pay ``pay_exactly`` of the token at ``token`` to ``pay_to``
    (the last digits are its reference)."""

    chain_id: int
    token: str
    pay_to: str
    pay_exactly: Decimal
    paid_block: int | None = None
    # the Transfers that matched it once it was paid or cancelled (reported, never counted)
    payments_after_close: list[str] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Incoming:
    """One Transfer of the token to the wallet, as the watcher recorded it."""

    tx_hash: str
    log_index: int
    block: int
    sender: str
    amount: Decimal
    outcome: Outcome
    reference: str | None


@dataclass(frozen=True, slots=True)
class TransferLog:
    """A Transfer log read from the chain (the token and recipient are the watcher's)."""

    tx_hash: str
    log_index: int
    block: int
    sender: str
    units: int


def _now_text(at: datetime) -> str:
    if at.tzinfo is None:
        raise ValueError("times must be timezone-aware")
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def _time(text: object) -> datetime | None:
    return None if text is None else datetime.fromisoformat(str(text))


class Tx(Protocol):
    """One open transaction of a dialect (statements with ``?`` marks), used from one thread."""

    def rows(self, sql: str, params: Sequence[Any]) -> list[Sequence[Any]]: ...

    def execute(self, sql: str, params: Sequence[Any]) -> None: ...


class ChainReceivables:
    """The links and invoices of one wallet on one chain, and the Transfers that paid them:
    the rules over a SQL dialect. A dialect gives ``_transaction`` (entered in a worker thread;
    no other writer of this wallet's books runs in it; committed on a normal exit):
    ``SQLiteReceivables`` here, ``PostgresReceivables`` in ``payments_postgres``."""

    def __init__(self, *, chain_id: int, token: str, recipient: str, decimals: int) -> None:
        self.chain_id, self.token, self.recipient = chain_id, token, recipient
        self.decimals = decimals

    def _transaction(self) -> AbstractContextManager[Tx]:
        raise NotImplementedError

    # -- links and invoices ----------------------------------------------------------------

    def create(
        self,
        principal: str,
        kind: ReceivableKind,
        *,
        asset: str,
        amount: Decimal | None,
        memo: str,
        due: datetime | None,
        line_items: Sequence[LineItem],
        key: str,
        at: datetime,
        from_block: int,
    ) -> ChainReceivable:
        """Record a link (``amount``) or an invoice (its ``line_items`` add up to the amount),
        with a tag of its own; once per ``key``. ``from_block``: where the watcher starts if
        it has not started yet (payments made before the link cannot pay it)."""
        value = self._asked(kind, amount, line_items)
        if due is not None and due <= at:
            raise ChainError("invalid_due_date", "the due date must be in the future")
        tags = most_tags(self.decimals)
        if tags == 0:
            raise ChainError(
                "precondition",
                f"the token has {self.decimals} decimals: too few to carry a reference",
            )
        base = int(value.scaleb(self.decimals))
        reference = make_reference(kind, key)
        with self._transaction() as con:
            prior = self._one(con, reference)
            if prior is not None:
                if prior[1] != principal:
                    raise ChainError("idempotency_conflict", "the key was used by someone else")
                return self._receivable(con, prior, at)
            taken = {
                int(u)
                for (u,) in con.rows(
                    "SELECT units FROM chain_receivables WHERE chain_id = ? AND token = ? "
                    "AND recipient = ?",
                    (self.chain_id, self.token, self.recipient),
                )
            }
            start = int(hashlib.sha256(reference.encode()).hexdigest(), 16) % tags
            tag = next(
                (t for i in range(tags) if base + (t := (start + i) % tags + 1) not in taken),
                None,
            )
            if tag is None:
                raise ChainError(
                    "conflict",
                    f"every reference for {value} {asset} is in use: ask a slightly other amount",
                )
            con.execute(
                f"INSERT INTO chain_receivables ({_COLUMNS}, idempotency_key) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, ?)",
                (
                    reference,
                    principal,
                    kind,
                    asset,
                    str(value),
                    memo,
                    None if due is None else _now_text(due),
                    json.dumps([i.model_dump(mode="json") for i in line_items]),
                    _now_text(at),
                    self.chain_id,
                    self.token,
                    self.recipient,
                    str(base + tag),
                    key,
                ),
            )
            con.execute(
                "INSERT INTO chain_watch_cursors VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (self.chain_id, self.token, self.recipient, from_block),
            )
            row = self._one(con, reference)
            assert row is not None
            return self._receivable(con, row, at)

    def _asked(
        self, kind: ReceivableKind, amount: Decimal | None, items: Sequence[LineItem]
    ) -> Decimal:
        if kind == "invoice":
            if not items:
                raise ChainError("invalid_invoice", "an invoice needs at least one line item")
            total = sum((i.total for i in items), Decimal(0))
            if amount is not None and amount != total:
                raise ChainError(
                    "invalid_invoice", f"the line items add up to {total}, not {amount}"
                )
            amount = total
        elif items:
            raise ChainError("invalid_link", "a payment link has no line items")
        if amount is None or amount <= 0:
            raise ChainError("invalid_amount", "the amount to receive must be above zero")
        # whole cents: the units below a cent carry the reference
        if amount != amount.quantize(Decimal("0.01")):
            raise ChainError(
                "invalid_amount", "ask for whole cents: the digits below carry the reference"
            )
        return amount.quantize(Decimal("0.01"))

    def of_principal(
        self, principal: str, kind: ReceivableKind, *, at: datetime, status: ReceivableStatus | None
    ) -> list[ChainReceivable]:
        """The principal's links or invoices on this wallet, newest first."""
        with self._transaction() as con:
            rows = con.rows(
                f"SELECT {_COLUMNS} FROM chain_receivables WHERE principal = ? AND kind = ? "
                "AND chain_id = ? AND recipient = ? ORDER BY created_at DESC, reference",
                (principal, kind, self.chain_id, self.recipient),
            )
            found = [self._receivable(con, tuple(r), at) for r in rows]
        return [r for r in found if status is None or r.status == status]

    def get(self, reference: str, *, at: datetime) -> ChainReceivable:
        with self._transaction() as con:
            row = self._one(con, reference)
            if row is None:
                raise ChainError("not_found", f"there is no payment link or invoice {reference!r}")
            return self._receivable(con, row, at)

    def cancel(
        self, principal: str, kind: ReceivableKind, reference: str, *, at: datetime
    ) -> ChainReceivable:
        """Cancel an open link or invoice (again: the same answer); refused once paid. A
        payment that arrives after is recorded as ``late``."""
        with self._transaction() as con:
            row = self._one(con, reference)
            if row is None or row[1] != principal or row[2] != kind:
                raise ChainError("not_found", f"you have no {kind} {reference!r}")
            if row[8] == "paid":
                raise ChainError("already_paid", f"{reference} is paid; it cannot be cancelled")
            con.execute(
                "UPDATE chain_receivables SET status = 'cancelled', closed_at = ? "
                "WHERE reference = ? AND status = 'open'",
                (_now_text(at), reference),
            )
            row = self._one(con, reference)
            assert row is not None
            return self._receivable(con, row, at)

    # -- the watcher's side ----------------------------------------------------------------

    def cursor(self) -> int | None:
        """The first block the watcher has not read (None: no link made yet)."""
        with self._transaction() as con:
            rows = con.rows(
                "SELECT next_block FROM chain_watch_cursors WHERE chain_id = ? AND token = ? "
                "AND recipient = ?",
                (self.chain_id, self.token, self.recipient),
            )
        return int(rows[0][0]) if rows else None

    def record(
        self, logs: Sequence[TransferLog], *, next_block: int, at: datetime
    ) -> list[Incoming]:
        """Record ``logs`` (read up to ``next_block`` - 1) and move the cursor, in one
        transaction. What each did; a log recorded before is skipped (not returned)."""
        new: list[Incoming] = []
        with self._transaction() as con:
            for log in logs:
                if con.rows(
                    "SELECT 1 FROM chain_incoming WHERE chain_id = ? AND tx_hash = ? "
                    "AND log_index = ?",
                    (self.chain_id, log.tx_hash, log.log_index),
                ):
                    continue  # a replay of a log already counted
                outcome, reference = self._apply(con, log, at)
                con.execute(
                    "INSERT INTO chain_incoming VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        self.chain_id,
                        log.tx_hash,
                        log.log_index,
                        self.token,
                        self.recipient,
                        log.sender,
                        str(log.units),
                        log.block,
                        outcome,
                        reference,
                        _now_text(at),
                    ),
                )
                new.append(
                    Incoming(
                        log.tx_hash,
                        log.log_index,
                        log.block,
                        log.sender,
                        Decimal(log.units).scaleb(-self.decimals),
                        outcome,
                        reference,
                    )
                )
            where = (self.chain_id, self.token, self.recipient)
            con.execute(
                "UPDATE chain_watch_cursors SET next_block = ? WHERE chain_id = ? AND token = ? "
                "AND recipient = ? AND next_block < ?",
                (next_block, *where, next_block),
            )
            con.execute(
                "INSERT INTO chain_watch_cursors VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (*where, next_block),
            )
        return new

    def _apply(self, con: Tx, log: TransferLog, at: datetime) -> tuple[Outcome, str | None]:
        rows = con.rows(
            "SELECT reference, status FROM chain_receivables WHERE chain_id = ? AND token = ? "
            "AND recipient = ? AND units = ?",
            (self.chain_id, self.token, self.recipient, str(log.units)),
        )
        if not rows:
            return "unmatched", None
        reference, status = str(rows[0][0]), str(rows[0][1])
        if status == "cancelled":
            return "late", reference
        if status == "paid":
            return "again", reference
        con.execute(
            "UPDATE chain_receivables SET status = 'paid', paid_tx = ?, paid_by = ?, "
            "paid_block = ?, closed_at = ? WHERE reference = ? AND status = 'open'",
            (log.tx_hash, log.sender, log.block, _now_text(at), reference),
        )
        return "paid", reference

    def incoming(self, *, outcome: Outcome | None = None) -> list[Incoming]:
        """Every Transfer the watcher recorded for this wallet, in chain order."""
        with self._transaction() as con:
            rows = con.rows(
                "SELECT tx_hash, log_index, block, sender, units, outcome, reference "
                "FROM chain_incoming WHERE chain_id = ? AND token = ? AND recipient = ? "
                "ORDER BY block, log_index",
                (self.chain_id, self.token, self.recipient),
            )
        found = [
            Incoming(str(h), int(i), int(b), str(s), Decimal(int(u)).scaleb(-self.decimals), o, r)
            for h, i, b, s, u, o, r in rows
        ]
        return [f for f in found if outcome is None or f.outcome == outcome]

    # -- rows ------------------------------------------------------------------------------

    @staticmethod
    def _one(con: Tx, reference: str) -> tuple[object, ...] | None:
        rows = con.rows(
            f"SELECT {_COLUMNS} FROM chain_receivables WHERE reference = ?", (reference,)
        )
        return tuple(rows[0]) if rows else None

    def _receivable(self, con: Tx, row: tuple[object, ...], at: datetime) -> ChainReceivable:
        ref, _principal, kind, asset, amount, memo, due, items, status, created = row[:10]
        chain_id, token, recipient, units, paid_tx, paid_by, paid_block, closed = row[10:18]
        due_at = _time(due)
        after_close = [
            str(h)
            for (h,) in con.rows(
                "SELECT tx_hash FROM chain_incoming WHERE reference = ? AND outcome != 'paid' "
                "ORDER BY block, log_index",
                (ref,),
            )
        ]
        return ChainReceivable(
            reference=str(ref),
            kind="invoice" if kind == "invoice" else "link",
            asset=str(asset),
            amount=Decimal(str(amount)),
            memo=str(memo),
            due=due_at,
            line_items=[LineItem.model_validate(i) for i in json.loads(str(items))],
            status=shown_status(str(status), due_at, at),
            created_at=datetime.fromisoformat(str(created)),
            paid_by=None if paid_by is None else str(paid_by),
            paid_digest=None if paid_tx is None else str(paid_tx),
            closed_at=_time(closed),
            chain_id=int(str(chain_id)),
            token=str(token),
            pay_to=str(recipient),
            pay_exactly=Decimal(int(str(units))).scaleb(-self.decimals),
            paid_block=None if paid_block is None else int(str(paid_block)),
            payments_after_close=after_close,
        )


class SQLiteReceivables(ChainReceivables):
    """The books in a SQLite file (the run store's, beside the intents)."""

    def __init__(
        self, path: str | Path, *, chain_id: int, token: str, recipient: str, decimals: int
    ) -> None:
        super().__init__(chain_id=chain_id, token=token, recipient=recipient, decimals=decimals)
        self.path = str(path)
        con = self._connect()
        try:
            for statement in SCHEMA:
                con.execute(statement.format(int="INTEGER"))
        finally:
            con.close()

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        con.execute("PRAGMA synchronous=FULL")
        return con

    @contextmanager
    def _transaction(self) -> Iterator[Tx]:
        with immediate(self._connect()) as con:
            yield _SQLiteTx(con)


class _SQLiteTx:
    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con

    def rows(self, sql: str, params: Sequence[Any]) -> list[Sequence[Any]]:
        return list(self.con.execute(sql, tuple(params)).fetchall())

    def execute(self, sql: str, params: Sequence[Any]) -> None:
        self.con.execute(sql, tuple(params))
