"""The ledger: double-entry bookkeeping in SQLite, append-only, one transaction per posting.

An account is an ``(owner, book)`` pair: ``("alice", "available")``, ``("@lending", "reserve")``.
A transaction is a list of legs (account, asset, signed amount) that sum to zero per asset; it
carries the idempotency key of the call that made it (unique: a replayed call finds its
transaction and posts nothing) and a digest chained to the previous transaction's. Balances
are never stored: they are the sums of the postings.

Writes happen in a ``Batch`` (one SQLite ``BEGIN IMMEDIATE`` … ``COMMIT``): everything a call
posts, and the side rows it writes (accrual checkpoints, contacts), commit together or not at
all. A batch opened with ``commit=False`` is a preview: it sees its own drafts and is rolled
back. The connection is the stdlib's ``sqlite3``, used under a lock, so sync and async callers
may share a ledger; its errors become ``StoreError``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from ..capabilities import canonical_json
from ..exceptions import StoreError
from .assets import ASSETS, get_asset, money
from .errors import LedgerError, WalletError

__all__ = [
    "Batch",
    "Draft",
    "Ledger",
    "Leg",
    "SignRule",
    "Transaction",
    "Verification",
    "base58",
    "recompute_digest",
    "timestamp",
]

Sign = Literal["nonneg", "nonpos", "free"]
SignRule = Callable[[str, str], Sign]
_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def base58(data: bytes) -> str:
    """Bitcoin-style base58 (the form chain digests are usually shown in)."""
    number = int.from_bytes(data, "big")
    out = ""
    while number:
        number, rest = divmod(number, 58)
        out = _B58[rest] + out
    pad = len(data) - len(data.lstrip(b"\0"))
    return "1" * pad + out


def timestamp(at: datetime) -> str:
    if at.tzinfo is None or at.utcoffset() is None:
        raise LedgerError("the ledger needs timezone-aware times")
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


@dataclass(frozen=True, slots=True)
class Leg:
    """One posting: ``amount`` (signed) of ``asset`` to the account ``(owner, book)``."""

    owner: str
    book: str
    asset: str
    amount: Decimal
    memo: str = ""


@dataclass(frozen=True, slots=True)
class Transaction:
    """A committed transaction with its legs."""

    tx_id: int
    digest: str
    prev_digest: str
    key: str
    request_digest: str
    kind: str
    principal: str | None
    label: str
    at: datetime
    meta: dict[str, Any]
    legs: tuple[Leg, ...]

    def legs_of(self, owner: str) -> list[Leg]:
        return [leg for leg in self.legs if leg.owner == owner]

    def change(self, owner: str, book: str, asset: str) -> Decimal:
        legs = self.legs
        return sum(
            (g.amount for g in legs if (g.owner, g.book, g.asset) == (owner, book, asset)),
            Decimal(0),
        )


@dataclass(frozen=True, slots=True)
class Verification:
    """What ``Ledger.verify`` found: counts, and every broken invariant (empty when sound)."""

    transactions: int
    postings: int
    problems: tuple[str, ...]
    head: str

    @property
    def ok(self) -> bool:
        return not self.problems


def recompute_digest(tx: Transaction) -> str:
    """The digest a transaction's body hashes to (equal to ``tx.digest`` unless tampered with)."""
    return _digest(
        tx.prev_digest, tx.key, tx.kind, tx.principal, tx.label, timestamp(tx.at), tx.meta, tx.legs
    )


def _digest(
    prev: str,
    key: str,
    kind: str,
    principal: str | None,
    label: str,
    at: str,
    meta: dict[str, Any],
    legs: Sequence[Leg],
) -> str:
    body = {
        "prev": prev,
        "key": key,
        "kind": kind,
        "principal": principal,
        "label": label,
        "at": at,
        "meta": meta,
        "legs": [[g.owner, g.book, g.asset, str(g.amount), g.memo] for g in legs],
    }
    return base58(hashlib.sha256(canonical_json(body).encode()).digest())


class Ledger:
    """Postings in an SQLite file (``":memory:"`` for a throwaway one)."""

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        sign_rule: SignRule,
        synchronous: Literal["NORMAL", "FULL"] = "FULL",
        busy_timeout_ms: int = 5000,
    ) -> None:
        self.path = str(path)
        self.sign_rule = sign_rule
        self._lock = threading.RLock()
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the wallet ledger at {self.path}: {exc}") from exc
        self._conn = conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
            # money survives a power cut: every ledger commit is synced
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
            schema = resources.files(__package__).joinpath("schema.sql").read_text("utf-8")
            conn.execute("BEGIN IMMEDIATE")
            for statement in _statements(schema):
                conn.execute(statement)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot set up the wallet ledger at {self.path}: {exc}") from exc
        self._closed = False

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    @contextmanager
    def batch(self, *, commit: bool = True) -> Iterator[Batch]:
        """One SQLite transaction: committed at the end, or rolled back (a preview, an error)."""
        with self._lock:
            if self._closed:
                raise StoreError("the wallet ledger is closed")
            conn = self._conn
            try:
                # a preview writes drafts too: it takes the write lock first, waiting for it,
                # as a deferred transaction upgraded after another connection wrote (the
                # memory's, the store's) would fail at once with "database is locked"
                conn.execute("BEGIN IMMEDIATE")
                batch = Batch(self, conn)
                try:
                    yield batch
                    batch.check_open_drafts()
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT" if commit else "ROLLBACK")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StoreError(f"the wallet ledger failed: {exc}") from exc

    def read(self) -> Batch:
        """A read-only view (for callers that only read; each query sees committed data)."""
        return Batch(self, self._conn)

    def verify(self) -> Verification:
        """Recompute everything: digests and their chain, balance per asset, units, signs."""
        problems: list[str] = []
        with self.batch(commit=False) as view:
            txs = view.transactions(newest_first=False)
            prev = ""
            postings = 0
            for tx in txs:
                postings += len(tx.legs)
                if tx.prev_digest != prev:
                    problems.append(f"tx {tx.tx_id}: chain broken (prev {tx.prev_digest})")
                if recompute_digest(tx) != tx.digest:
                    problems.append(f"tx {tx.tx_id}: digest {tx.digest} does not match its body")
                totals: dict[str, Decimal] = {}
                for leg in tx.legs:
                    totals[leg.asset] = totals.get(leg.asset, Decimal(0)) + leg.amount
                for asset, total in totals.items():
                    if total != 0:
                        problems.append(f"tx {tx.tx_id}: {asset} legs sum to {total}, not 0")
                prev = tx.digest
            for owner, book, asset, units, amount_text in view.conn.execute(
                "SELECT owner, book, asset, units, amount FROM wallet_postings"
            ):
                if ASSETS[asset].units(Decimal(amount_text)) != units:
                    problems.append(f"posting {owner}/{book} {asset}: units and amount differ")
            for owner, book, asset, _ in view.accounts():
                bal = view.balance(owner, book, asset)
                rule = self.sign_rule(owner, book)
                if (rule == "nonneg" and bal < 0) or (rule == "nonpos" and bal > 0):
                    problems.append(f"{owner}/{book} holds {bal} {asset}, breaking its sign rule")
        return Verification(len(txs), postings, tuple(problems), prev)


def _statements(script: str) -> list[str]:
    """Split the schema into statements (a trigger body holds a ';' inside BEGIN … END)."""
    out: list[str] = []
    current: list[str] = []
    for line in script.splitlines():
        stripped = line.split("--", 1)[0].rstrip()
        if not stripped:
            continue
        current.append(stripped)
        text = "\n".join(current)
        if stripped.endswith(";") and (
            "BEGIN" not in text.upper().split() or text.upper().endswith("END;")
        ):
            out.append(text)
            current = []
    if current:
        out.append("\n".join(current))
    return out


@dataclass(eq=False)
class Batch:
    """A view of the ledger inside one SQLite transaction; drafts post through it."""

    ledger: Ledger
    conn: sqlite3.Connection
    _open: list[Draft] = field(default_factory=list)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """Run one statement on the ledger's connection, under its lock.

        Inside ``Ledger.batch`` the lock is held for the whole transaction; a view from
        ``Ledger.read()`` takes it per statement, so a reader on another thread never sees a
        writer's uncommitted rows on the shared connection.
        """
        with self.ledger._lock:
            return self.conn.execute(sql, params)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Every row of a query, fetched under the lock."""
        with self.ledger._lock:
            return self.conn.execute(sql, params).fetchall()

    def one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first row of a query, or None."""
        rows = self.query(sql, params)
        return rows[0] if rows else None

    # --- reads ------------------------------------------------------------------------------
    def balance(self, owner: str, book: str, asset: str) -> Decimal:
        """The sum of the account's postings, plus the legs of drafts not sealed yet."""
        (units,) = self.one(
            "SELECT COALESCE(SUM(units), 0) FROM wallet_postings "
            "WHERE owner = ? AND book = ? AND asset = ?",
            (owner, book, asset),
        )
        total = ASSETS[asset].from_units(int(units))
        for draft in self._open:
            total += draft.pending(owner, book, asset)
        return total

    def balances(self, owner: str) -> dict[tuple[str, str], Decimal]:
        """Every non-zero ``(book, asset)`` balance of an owner."""
        rows = self.query(
            "SELECT book, asset, SUM(units) FROM wallet_postings WHERE owner = ? "
            "GROUP BY book, asset",
            (owner,),
        )
        out = {(book, asset): ASSETS[asset].from_units(int(u)) for book, asset, u in rows}
        for draft in self._open:
            for leg in draft.legs:
                if leg.owner == owner:
                    key = (leg.book, leg.asset)
                    out[key] = out.get(key, Decimal(0)) + leg.amount
        return {k: v for k, v in out.items() if v != 0}

    def total(
        self,
        owner: str,
        book: str,
        asset: str,
        *,
        memo: str | None = None,
        since: datetime | None = None,
    ) -> Decimal:
        """The sum of the account's committed postings, optionally of one memo or since a time."""
        sql = (
            "SELECT COALESCE(SUM(p.units), 0) FROM wallet_postings p JOIN wallet_transactions t "
            "ON t.tx_id = p.tx_id WHERE p.owner = ? AND p.book = ? AND p.asset = ?"
        )
        params: list[Any] = [owner, book, asset]
        if memo is not None:
            sql += " AND p.memo = ?"
            params.append(memo)
        if since is not None:
            sql += " AND t.at >= ?"
            params.append(timestamp(since))
        (units,) = self.one(sql, params)
        return ASSETS[asset].from_units(int(units))

    def accounts(self) -> list[tuple[str, str, str, int]]:
        """Every account that has postings: (owner, book, asset, number of postings)."""
        return [
            (o, b, a, int(n))
            for o, b, a, n in self.query(
                "SELECT owner, book, asset, COUNT(*) FROM wallet_postings "
                "GROUP BY owner, book, asset ORDER BY owner, book, asset"
            )
        ]

    def find(self, key: str) -> Transaction | None:
        row = self.one("SELECT * FROM wallet_transactions WHERE idempotency_key = ?", (key,))
        return None if row is None else self._load([row])[0]

    def by_digest(self, prefix: str) -> list[Transaction]:
        if not prefix:
            return []
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self.query(
            "SELECT * FROM wallet_transactions WHERE digest LIKE ? ESCAPE '\\' "
            "ORDER BY tx_id LIMIT 5",
            (escaped + "%",),
        )
        # LIKE is case-insensitive; base58 is not
        return [tx for tx in self._load(rows) if tx.digest.startswith(prefix)]

    def transactions(
        self,
        *,
        principal: str | None = None,
        touching: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        kinds: Sequence[str] | None = None,
        limit: int | None = None,
        newest_first: bool = True,
    ) -> list[Transaction]:
        where: list[str] = []
        params: list[Any] = []
        if principal is not None:
            where.append("principal = ?")
            params.append(principal)
        if touching is not None:
            where.append("tx_id IN (SELECT tx_id FROM wallet_postings WHERE owner = ?)")
            params.append(touching)
        if since is not None:
            where.append("at >= ?")
            params.append(timestamp(since))
        if until is not None:
            where.append("at <= ?")
            params.append(timestamp(until))
        if kinds:
            where.append(f"kind IN ({', '.join('?' * len(kinds))})")
            params.extend(kinds)
        sql = "SELECT * FROM wallet_transactions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY tx_id {'DESC' if newest_first else 'ASC'}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return self._load(self.query(sql, params))

    def postings(
        self, owner: str, book: str, asset: str, *, until: datetime | None = None
    ) -> list[tuple[datetime, Decimal]]:
        """The account's postings in order, with their transaction's time."""
        sql = (
            "SELECT t.at, p.amount FROM wallet_postings p JOIN wallet_transactions t "
            "ON t.tx_id = p.tx_id WHERE p.owner = ? AND p.book = ? AND p.asset = ?"
        )
        params: list[Any] = [owner, book, asset]
        if until is not None:
            sql += " AND t.at <= ?"
            params.append(timestamp(until))
        rows = self.query(sql + " ORDER BY p.tx_id, p.leg", params)
        return [(_time(at), Decimal(amount)) for at, amount in rows]

    def head(self) -> str:
        row = self.one("SELECT digest FROM wallet_transactions ORDER BY tx_id DESC LIMIT 1")
        return "" if row is None else str(row[0])

    def _load(self, rows: Sequence[Any]) -> list[Transaction]:
        if not rows:
            return []
        ids = [r[0] for r in rows]
        legs: dict[int, list[Leg]] = {i: [] for i in ids}
        placeholders = ", ".join("?" * len(ids))
        for tx_id, owner, book, asset, amount, memo in self.query(
            "SELECT tx_id, owner, book, asset, amount, memo FROM wallet_postings "
            f"WHERE tx_id IN ({placeholders}) ORDER BY tx_id, leg",
            ids,
        ):
            legs[tx_id].append(Leg(owner, book, asset, Decimal(amount), memo))
        return [
            Transaction(
                tx_id=r[0],
                digest=r[1],
                prev_digest=r[2],
                key=r[3],
                request_digest=r[4],
                kind=r[5],
                principal=r[6],
                label=r[7],
                at=_time(r[8]),
                meta=json.loads(r[9]),
                legs=tuple(legs[r[0]]),
            )
            for r in rows
        ]

    # --- writes -----------------------------------------------------------------------------
    def draft(
        self, *, key: str, request_digest: str, kind: str, principal: str | None, at: datetime
    ) -> Draft:
        """Start a transaction; its legs count in this batch's balances until it is sealed."""
        if self.find(key) is not None:
            raise WalletError("idempotency_conflict", f"the key {key!r} has already posted")
        draft = Draft(self, key, request_digest, kind, principal, at)
        self._open.append(draft)
        return draft

    def check_open_drafts(self) -> None:
        if self._open:
            raise LedgerError(
                f"{len(self._open)} draft transaction(s) were neither sealed nor dropped"
            )

    def _close(self, draft: Draft) -> None:
        self._open.remove(draft)


@dataclass(eq=False)
class Draft:
    """A transaction being built. ``seal`` checks the invariants and writes it."""

    batch: Batch
    key: str
    request_digest: str
    kind: str
    principal: str | None
    at: datetime
    legs: list[Leg] = field(default_factory=list)

    def pending(self, owner: str, book: str, asset: str) -> Decimal:
        return sum(
            (g.amount for g in self.legs if (g.owner, g.book, g.asset) == (owner, book, asset)),
            Decimal(0),
        )

    def post(self, owner: str, book: str, asset: str, amount: Decimal, memo: str = "") -> None:
        """Add one leg. The amount must be money (never a float) at the asset's precision."""
        value = money(amount)
        spec = get_asset(asset)
        spec.units(value)  # refuses an amount finer than the asset's precision
        if value != 0:
            self.legs.append(Leg(owner, book, spec.symbol, value.quantize(spec.quantum), memo))

    def move(
        self,
        asset: str,
        amount: Decimal,
        source: tuple[str, str],
        dest: tuple[str, str],
        memo: str = "",
    ) -> None:
        """Two legs: ``amount`` leaves ``source`` and reaches ``dest``."""
        self.post(source[0], source[1], asset, -money(amount), memo)
        self.post(dest[0], dest[1], asset, money(amount), memo)

    def drop(self) -> None:
        """Abandon the draft (nothing of it is written)."""
        self.batch._close(self)

    def seal(self, label: str, meta: dict[str, Any] | None = None) -> Transaction:
        """Check the invariants, then write the transaction and its legs (in the batch)."""
        batch = self.batch
        totals: dict[str, int] = {}
        for leg in self.legs:
            totals[leg.asset] = totals.get(leg.asset, 0) + ASSETS[leg.asset].units(leg.amount)
        unbalanced = {a: t for a, t in totals.items() if t != 0}
        if unbalanced:
            raise LedgerError(f"{self.kind}: legs do not balance: {unbalanced} (in units)")
        touched = {(g.owner, g.book, g.asset) for g in self.legs}
        for owner, book, asset in sorted(touched):
            rule = batch.ledger.sign_rule(owner, book)
            if rule == "free":
                continue
            after = batch.balance(owner, book, asset)
            if (rule == "nonneg" and after < 0) or (rule == "nonpos" and after > 0):
                raise LedgerError(f"{self.kind} would leave {owner}/{book} at {after} {asset}")
        body = json.loads(canonical_json(meta or {}))
        at = timestamp(self.at)
        prev = batch.head()
        digest = _digest(prev, self.key, self.kind, self.principal, label, at, body, self.legs)
        cursor = batch.execute(
            "INSERT INTO wallet_transactions (digest, prev_digest, idempotency_key, "
            "request_digest, kind, principal, label, at, meta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                digest,
                prev,
                self.key,
                self.request_digest,
                self.kind,
                self.principal,
                label,
                at,
                canonical_json(body),
            ),
        )
        tx_id = int(cursor.lastrowid or 0)
        batch.conn.executemany(
            "INSERT INTO wallet_postings (tx_id, leg, idempotency_key, owner, book, asset, "
            "units, amount, memo) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    tx_id,
                    n,
                    self.key,
                    g.owner,
                    g.book,
                    g.asset,
                    ASSETS[g.asset].units(g.amount),
                    str(g.amount),
                    g.memo,
                )
                for n, g in enumerate(self.legs, start=1)
            ],
        )
        batch._close(self)
        sealed = batch.find(self.key)
        assert sealed is not None
        return sealed
