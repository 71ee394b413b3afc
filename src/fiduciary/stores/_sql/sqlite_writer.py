"""Private: the SQLite dialect's codecs, statements, errors and group-commit writes.

``SQLiteStore`` (``_sql/sqlite.py``) queues each write as an ``_Op`` and writes a batch of them
in one transaction (``run_together``; ``run_isolated`` with one SAVEPOINT each when a request
failed after it wrote). See ``SQLiteStore``'s docstring (``fiduciary.stores.sqlite``) for the
rules; this module is the code that keeps them.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Generic, LiteralString, TypeVar
from uuid import UUID

from ...exceptions import ConflictError, FiduciaryError, StoreError
from .._rules import commit_refusal, seq_error
from ..base import Broadcaster, LedgerEntry
from .codec import Codec, EventRow, Params, naive_time_error
from .core import Append, Dialect
from .queries import SharedQueries, load

__all__ = ["DIALECT", "QUERIES", "Outcome", "dt", "ts"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SQLiteQueries(SharedQueries):
    """The statements of ``sqlite.sql``: the shared ones and the writer's own."""

    runs_expired: LiteralString
    insert_run: LiteralString
    insert_event: LiteralString
    insert_approval: LiteralString
    insert_audit: LiteralString
    advance_run: LiteralString
    advance_run_with_status: LiteralString
    set_status: LiteralString
    check_epoch: LiteralString
    run_state: LiteralString
    run_epoch: LiteralString
    run_exists: LiteralString
    insert_ledger: LiteralString
    has_reservation: LiteralString
    insert_reservation: LiteralString


QUERIES = load(SQLiteQueries, Path(__file__).with_name("sqlite.sql"))


# --- codecs -------------------------------------------------------------------------------


def ts(value: datetime) -> str:
    """A time as SQLite keeps it: ISO-8601 UTC text with microseconds (ordered as text =
    ordered in time)."""
    if value.tzinfo is UTC:  # the common case (the clocks give UTC): no conversion
        return value.isoformat(timespec="microseconds")
    if value.tzinfo is None or value.utcoffset() is None:
        raise naive_time_error(value)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def dt(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _money(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _money_in(value: Any) -> Decimal | None:
    return None if value is None else Decimal(value)


def _texts_in(value: Any) -> tuple[str, ...]:
    return tuple(json.loads(value))


# UUID text, ISO-8601 UTC text, decimal TEXT (read back with Decimal(), never a float), arrays
# as JSON text
CODEC = Codec(
    uuid=str,
    uuid_in=UUID,
    time=ts,
    time_in=datetime.fromisoformat,
    money=_money,
    money_in=_money_in,
    texts_in=_texts_in,
)


DIALECT = Dialect(QUERIES, CODEC, lambda name: f":{name}", -1)


# --- errors -------------------------------------------------------------------------------


def _unique_violation(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.IntegrityError) and (
        "UNIQUE" in str(exc) or "PRIMARY KEY" in str(exc)
    )


def translate(exc: sqlite3.Error, doing: str = "") -> StoreError:
    """A ``sqlite3`` error as fiduciary's: a uniqueness violation is a ``ConflictError``."""
    where = f" ({doing})" if doing else ""
    error: StoreError
    if _unique_violation(exc):
        error = ConflictError(f"{exc}{where}")
    else:
        error = StoreError(f"sqlite: {exc}{where}")
    error.__cause__ = exc
    return error


def as_store_error(exc: Exception) -> FiduciaryError:
    if isinstance(exc, FiduciaryError):
        return exc
    if isinstance(exc, sqlite3.Error):
        return translate(exc)
    error = StoreError(f"{type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def rollback_quietly(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


# --- the requests of a batch ------------------------------------------------------------


class Refused(Exception):  # noqa: N818 (internal: it never leaves the store)
    """A request refused before it wrote anything: it fails alone, the transaction goes on."""

    def __init__(self, error: FiduciaryError) -> None:
        super().__init__(error)
        self.error = error


class Rows:
    """The event and audit rows of a batch's commits, inserted with one ``executemany`` each
    (no request of a batch reads them back, so they can wait for the end of the batch)."""

    __slots__ = ("audit", "events")

    def __init__(self) -> None:
        self.events: list[EventRow] = []
        self.audit: list[Params] = []

    def write(self, conn: sqlite3.Connection) -> None:
        events, audit = self.events, self.audit
        self.events, self.audit = [], []
        if events:
            conn.executemany(QUERIES.insert_event, events)
        if audit:
            conn.executemany(QUERIES.insert_audit, audit)

    def clear(self) -> None:
        self.events, self.audit = [], []


class Op(Generic[T]):
    """One queued write, its rows encoded before the flush; ``apply`` runs it in the batch's
    transaction and raises ``Refused`` if it refuses before writing anything."""

    __slots__ = ("future",)
    full_sync = False  # the batch holding it is committed with synchronous=FULL
    always = False  # written even if its caller was cancelled before the flush

    def __init__(self) -> None:
        self.future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def apply(self, conn: sqlite3.Connection, rows: Rows) -> T:
        raise NotImplementedError

    def committed(self, broadcaster: Broadcaster) -> None:
        """Called after the COMMIT that holds this write (before its caller wakes)."""


class Call(Op[T]):
    """A write of a few statements (lease, ledger, decision) given as a function."""

    __slots__ = ("always", "fn", "full_sync")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        full_sync: bool = False,
        always: bool = False,
    ) -> None:
        super().__init__()
        self.fn = fn
        self.full_sync = full_sync
        self.always = always

    def apply(self, conn: sqlite3.Connection, rows: Rows) -> T:
        return self.fn(conn)


class Commit(Op["LedgerEntry | None"]):
    """A ``commit``: the guarded update of the run row, approvals, then events and audit; and
    the ledger row it begins, if any (then the batch is committed with synchronous=FULL)."""

    __slots__ = ("append", "full_sync", "key")

    def __init__(self, append: Append) -> None:
        super().__init__()
        self.append = append
        rows = append.event_rows
        self.key = rows[0][0] if rows else str(append.run_id)  # encoded once, with the rows
        self.full_sync = append.ledger_row is not None

    def apply(self, conn: sqlite3.Connection, rows: Rows) -> LedgerEntry | None:
        # First the run row: one guarded UPDATE checks epoch and seqs and advances last_seq;
        # when it matches no row, nothing was written and _refusal says why.
        a = self.append
        event_rows = a.event_rows
        if event_rows:
            first, last = event_rows[0], event_rows[-1]
            if not a.consecutive:
                raise self._refusal(conn)
            if a.status is None:
                cursor = conn.execute(
                    QUERIES.advance_run, (last[1], last[3], self.key, a.epoch, first[1] - 1)
                )
            else:
                cursor = conn.execute(
                    QUERIES.advance_run_with_status,
                    (last[1], last[3], a.status, self.key, a.epoch, first[1] - 1),
                )
            if cursor.rowcount != 1:
                raise self._refusal(conn)
        elif a.status is not None:
            if conn.execute(QUERIES.set_status, (self.key, a.epoch, a.status)).rowcount != 1:
                raise self._refusal(conn)
        elif conn.execute(QUERIES.check_epoch, (self.key, a.epoch)).fetchone() is None:
            raise self._refusal(conn)
        if a.release:  # the drive's last commit: its lease goes in the same transaction
            conn.execute(QUERIES.release, {"run_id": self.key, "epoch": a.epoch})
        for params in a.approvals:
            try:
                conn.execute(QUERIES.insert_approval, params)
            except sqlite3.IntegrityError as exc:
                if _unique_violation(exc):
                    raise ConflictError(f"approval {params[0]} already exists") from exc
                raise
        rows.events += event_rows
        rows.audit += a.audit
        if a.ledger_row is None:
            return None
        # the epoch was checked by the run row's update above, in this transaction
        if conn.execute(QUERIES.insert_ledger, a.ledger_row).rowcount == 1:
            return None
        existing = conn.execute(QUERIES.get_ledger, {"key": a.ledger_row[0]}).fetchone()
        return CODEC.ledger_from_row(existing)

    def _refusal(self, conn: sqlite3.Connection) -> Refused:
        """Why the run row refused this commit (read in the same transaction)."""
        a = self.append
        row = conn.execute(QUERIES.run_state, (self.key,)).fetchone()
        state = None if row is None else (int(row[0]), int(row[1]))
        return Refused(
            commit_refusal(a.run_id, a.epoch, state, a.events)
            or StoreError(f"run {a.run_id}: the commit was refused")
        )

    def committed(self, broadcaster: Broadcaster) -> None:
        broadcaster.publish(self.append.run_id, self.append.events)


class Create(Op[None]):
    """A ``create_run``: the run row, then its first events."""

    __slots__ = ("append", "valid")

    def __init__(self, append: Append) -> None:
        super().__init__()
        self.append = append
        events = append.events
        self.valid = append.consecutive and (not events or events[0].seq == 1)

    def apply(self, conn: sqlite3.Connection, rows: Rows) -> None:
        a = self.append
        assert a.create is not None
        if not self.valid:
            if conn.execute(QUERIES.run_exists, (a.create[0],)).fetchone():
                raise Refused(ConflictError(f"run {a.run_id} already exists"))
            raise Refused(
                seq_error(a.run_id, 0, a.events)
                or ConflictError(f"run {a.run_id}: the first event must have seq 1")
            )
        try:
            conn.execute(QUERIES.insert_run, a.create)
        except sqlite3.IntegrityError as exc:  # the statement is undone, the transaction goes on
            error = ConflictError(f"run {a.run_id} already exists")
            error.__cause__ = exc
            raise Refused(error) from None
        rows.events += a.event_rows

    def committed(self, broadcaster: Broadcaster) -> None:
        broadcaster.publish(self.append.run_id, self.append.events)


Outcome = tuple[bool, Any]  # (True, the result) or (False, the error)


def run_together(conn: sqlite3.Connection, live: list[Op[Any]]) -> list[Outcome] | None:
    """The batch in one transaction, no savepoints: the common case, where every request
    either succeeds or is refused before writing anything. None (rolled back) if a request
    failed after it wrote: the batch must then be redone with ``run_isolated``."""
    rows = Rows()
    outcomes: list[Outcome] = []
    conn.execute("BEGIN IMMEDIATE")
    for op in live:
        try:
            outcomes.append((True, op.apply(conn, rows)))
        except Refused as refusal:
            if not conn.in_transaction:  # sqlite rolled the transaction back
                return None
            outcomes.append((False, refusal.error))
        except Exception:
            rollback_quietly(conn)
            return None
    try:
        rows.write(conn)
    except Exception:
        rollback_quietly(conn)
        return None
    conn.execute("COMMIT")
    return outcomes


def run_isolated(conn: sqlite3.Connection, live: list[Op[Any]]) -> list[Outcome]:
    """The batch in one transaction, each request inside its own SAVEPOINT so that a failing
    one is rolled back and fails alone while its batch-mates commit."""
    rows = Rows()
    outcomes: list[Outcome] = []
    conn.execute("BEGIN IMMEDIATE")
    for op in live:
        conn.execute("SAVEPOINT fiduciary_op")
        try:
            value = op.apply(conn, rows)
            rows.write(conn)
        except Exception as exc:
            rows.clear()
            conn.execute("ROLLBACK TO fiduciary_op")
            conn.execute("RELEASE fiduciary_op")
            error = exc.error if isinstance(exc, Refused) else as_store_error(exc)
            outcomes.append((False, error))
        else:
            conn.execute("RELEASE fiduciary_op")
            outcomes.append((True, value))
    conn.execute("COMMIT")
    return outcomes
