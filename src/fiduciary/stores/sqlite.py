"""The SQLite store: the embedded default, one file, the full ``Store`` contract.

Opening
    ``SQLiteStore(path)`` is cheap; the file is opened (created if missing) on first use, or
    eagerly with ``await SQLiteStore.open(path)``. Opening sets WAL mode and foreign keys and
    applies the migrations of ``sql/migrations`` (``NNNN_name.sql``) that ``schema_migrations``
    does not list yet, in order, each in one transaction with its ``schema_migrations`` row.
    A file whose schema is newer than this code is refused with ``StoreError``.

Group commit
    Every write (``create_run``, ``commit``, ``acquire``, ``renew``, ``release``,
    ``decide_approval``, ``ledger_begin``, ``ledger_finish``, ``ledger_retry``) queues a request
    and waits; its rows are encoded once, before it is queued. The first request of an
    event-loop iteration schedules a flush with ``loop.call_soon``; the flush writes every request
    queued by then (at most ``batch_size``; the rest go in the next flush) in ONE transaction, in
    the order they were queued, and a caller's future resolves only after the COMMIT of its
    transaction, with what its call returns (``acquire``'s new record, ``ledger_begin``'s
    existing row, ``decide_approval``'s bool ...). Listeners (``subscribe``) receive a commit's
    events only after that COMMIT, in seq order. ``transactions`` counts the write transactions
    committed, so group commit can be observed. A caller cancelled before the flush has its
    write skipped, except ``release``, ``renew``, ``ledger_finish`` and ``decide_approval``,
    which are written anyway (their effect must not depend on the caller still waiting).

    One failing request fails alone while its batch-mates commit. A batch is first written
    without savepoints: a commit checks its seqs in Python, then advances the run with one
    guarded ``UPDATE runs ... WHERE run_id = ? AND epoch = ? AND last_seq = ?``; when that
    matches no row, nothing was written and the run row says why (``StaleEpochError``,
    ``ConflictError``, ``StoreError``): the request is refused and the transaction goes on.
    ``ledger_begin`` is fenced the same way: it reads the run's epoch in the batch's transaction,
    just before its insert, and is refused (``StaleEpochError``, nothing written) if the epoch
    is no longer the caller's. The events and audit rows of the batch's commits are inserted at
    its end, one ``executemany`` each (no request of a batch reads them). Only if a request
    fails after it wrote (an approval that exists, an unexpected ``sqlite3`` error) is the whole
    transaction rolled back and the batch written again with each request inside its own
    SAVEPOINT, so that the failing one is rolled back alone.

    The SQL runs on the event-loop thread, with no hop to a worker thread: a small WAL
    transaction with ``synchronous=NORMAL`` takes tens of microseconds, less than a thread hop.
    The price is that a write waiting for another process's lock (``busy_timeout_ms``) holds the
    loop; writers from other processes are expected to be rare and short (a person deciding an
    approval from the CLI while a worker idles). Reads never wait in WAL mode.

Durability: ``synchronous="NORMAL"`` (the default, deliberately) vs ``"FULL"``
    In WAL mode with NORMAL, a commit is written to the WAL file but not fsynced. A process
    crash or ``kill -9`` loses nothing that was committed (the OS holds the writes); an OS crash
    or power loss may lose the last transactions, but never corrupts the database. With FULL
    the WAL is fsynced at every commit, so a commit also survives power loss, at the cost of
    one fsync per transaction. NORMAL is the default because a run appends many small events
    (streamed tokens) and fiduciary's recovery is built for losing a suffix of the log: a lost
    partial turn is retracted and asked again.

    What must not be lost is the record that a non-replayable side effect is about to happen,
    so a batch that holds a ``ledger_begin`` (or a ``ledger_retry``) is always committed with
    FULL (``synchronous`` cannot change inside a transaction: it is set before the batch's BEGIN
    and restored after its COMMIT), and ``ledger_begin`` returns only after that fsync. The
    fsync of the WAL also makes durable everything committed before it and the rest of its
    batch (the WAL is one file, appended in order). Hence, even with NORMAL, a side effect is
    never started while its ledger row or the events that led to it could still vanish in a
    power loss; the ``ledger_begin``s of one event-loop iteration share one fsync.

Encoding
    Times are ISO-8601 UTC text with microseconds (ordered as text = ordered in time; a naive
    datetime is refused with ``StoreError``); decimals are TEXT read back with ``Decimal()``,
    never floats; events are stored as ``event.model_dump_json()`` and read back with
    ``decode_event``. Other structured values (approval args, ledger results, ...) are JSON:
    values JSON has no type for (Decimal, UUID, datetime, models) are stored as pydantic's JSON
    form and read back as that form (a Decimal becomes a string).

Errors
    Every ``sqlite3`` error is translated at the boundary: a uniqueness violation becomes
    ``ConflictError``, anything else ``StoreError`` (with the ``sqlite3`` error as its cause).

Several processes may open the same file. Each process's listeners see the events committed
by that process only; another process's commits are visible to ``read_events`` and the other
reads at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar
from uuid import UUID

from ..events import Event, decode_event
from ..exceptions import ConflictError, FiduciaryError, StaleEpochError, StoreError
from ._rows import (
    _APPROVAL_COLUMNS,
    _AUDIT_COLUMNS,
    _LEDGER_COLUMNS,
    _RUN_COLUMNS,
    _copy_error,
    _json,
    _json_or_none,
    _seq_error,
    _unjson,
)
from .base import (
    ApprovalRecord,
    ApprovalStatus,
    AuditRecord,
    Broadcaster,
    BroadcastSubscription,
    LedgerEntry,
    LedgerStatus,
    RunRecord,
    RunStatus,
)

if TYPE_CHECKING:
    from .base import Store

__all__ = [
    "MIGRATIONS_DIR",
    "SCHEMA_PATH",
    "Migration",
    "SQLiteStore",
    "apply_migrations",
    "load_migrations",
    "split_statements",
]

SQL_DIR = Path(__file__).with_name("sql")
SCHEMA_PATH = SQL_DIR / "schema.sql"
MIGRATIONS_DIR = SQL_DIR / "migrations"

# Created by the migration runner before the first migration; identical to its definition in
# schema.sql (the schema test compares them). Never change it: it is migration zero.
_BOOTSTRAP_SQL = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TEXT NOT NULL
)"""

_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

Synchronous = Literal["NORMAL", "FULL"]


# --- migrations ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migrations of ``directory`` (``NNNN_name.sql``), in order, numbered 1, 2, 3 ..."""
    migrations: list[Migration] = []
    try:
        paths = sorted(directory.iterdir())
    except OSError as exc:
        raise StoreError(f"cannot read the migrations in {directory}: {exc}") from exc
    for path in paths:
        if path.suffix != ".sql":
            continue
        match = _MIGRATION_NAME.match(path.name)
        if match is None:
            raise StoreError(f"migration file {path.name!r} is not named NNNN_name.sql")
        migrations.append(
            Migration(int(match.group(1)), match.group(2), path.read_text(encoding="utf-8"))
        )
    for expected, migration in enumerate(migrations, start=1):
        if migration.version != expected:
            raise StoreError(
                f"migrations must be numbered 1, 2, 3 ... without gaps: "
                f"found {migration.version:04d} where {expected:04d} was expected"
            )
    return migrations


def split_statements(script: str) -> list[str]:
    """Split a SQL script into statements (one ends where a line completes it)."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    leftover = "\n".join(
        line for line in buffer.splitlines() if not line.strip().startswith("--")
    ).strip()
    if leftover:
        raise StoreError(f"incomplete SQL statement at the end of a script: {leftover[:80]!r}")
    return statements


def apply_migrations(
    conn: sqlite3.Connection, migrations: Sequence[Migration] | None = None
) -> list[int]:
    """Apply the migrations ``schema_migrations`` does not list, in order; return their versions.

    ``conn`` must be in autocommit mode (``isolation_level=None``). Safe when several processes
    open a fresh file at once: the check is repeated under the write lock.
    """
    if migrations is None:
        migrations = load_migrations()
    known = {m.version for m in migrations}

    def applied_versions() -> set[int] | None:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
        ).fetchone()
        if exists is None:
            return None
        return {int(v) for (v,) in conn.execute("SELECT version FROM schema_migrations")}

    try:
        applied = applied_versions()
        if applied == known:
            return []  # up to date: no write lock taken
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(_BOOTSTRAP_SQL)
            applied = applied_versions() or set()
            newer = applied - known
            if newer:
                raise StoreError(
                    f"the database has schema version {max(newer)}, newer than this fiduciary "
                    f"knows ({max(known, default=0)}): upgrade fiduciary"
                )
            done: list[int] = []
            for migration in migrations:
                if migration.version in applied:
                    continue
                for statement in split_statements(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, _ts(datetime.now(UTC))),
                )
                done.append(migration.version)
            conn.execute("COMMIT")
        except BaseException:
            _rollback_quietly(conn)
            raise
    except sqlite3.Error as exc:
        raise _translate(exc, "migrating the database") from exc
    return done


# --- encoding -----------------------------------------------------------------------------


def _ts(value: datetime) -> str:
    if value.tzinfo is UTC:  # the common case (the clocks give UTC): no conversion
        return value.isoformat(timespec="microseconds")
    if value.tzinfo is None or value.utcoffset() is None:
        raise StoreError(f"naive datetime {value!r}: the store keeps timezone-aware UTC times")
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _ts_or_none(value: datetime | None) -> str | None:
    return None if value is None else _ts(value)


def _dt(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _dt_or_none(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _dec_or_none(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _parse_dec(text: str | None) -> Decimal | None:
    return None if text is None else Decimal(text)


# --- rows ---------------------------------------------------------------------------------

_INSERT_RUN = f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_EVENT = "INSERT INTO events (run_id, seq, type, at, payload) VALUES (?, ?, ?, ?, ?)"
_INSERT_APPROVAL = (
    f"INSERT INTO approvals ({_APPROVAL_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# A decision replaces the whole record (as the memory store does), if the status is as expected.
# The day's autonomous spend: audit rows that count, then reservations whose call has no such
# row yet (params: principal, since, twice).
_AUTONOMOUS_SPEND = (
    "SELECT amount_usd FROM audit WHERE principal = ? AND at >= ? AND tier = 'auto' "
    "AND outcome IN ('ok', 'unknown') AND amount_usd IS NOT NULL "
    "UNION ALL SELECT r.amount_usd FROM spend_reservations AS r "
    "WHERE r.principal = ? AND r.at >= ? AND NOT EXISTS (SELECT 1 FROM audit AS a "
    "WHERE a.idempotency_key = r.key AND a.principal = r.principal AND a.tier = 'auto' "
    "AND a.outcome IN ('ok', 'unknown') AND a.amount_usd IS NOT NULL)"
)


def _sum(rows: list[Any]) -> Decimal:
    total = Decimal(0)
    for (amount,) in rows:
        total += Decimal(amount)
    return total


_DECIDE_APPROVAL = (
    "UPDATE approvals SET "
    + ", ".join(f"{column.strip()} = ?" for column in _APPROVAL_COLUMNS.split(",")[1:])
    + " WHERE approval_id = ? AND status = ?"
)
_INSERT_AUDIT = (
    f"INSERT INTO audit ({_AUDIT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

EventRow = tuple[str, int, str, str, str]
Params = tuple[Any, ...]


def _run_params(run: RunRecord, last_seq: int) -> Params:
    return (
        str(run.run_id),
        run.principal,
        run.status,
        _ts(run.created_at),
        _ts(run.updated_at),
        last_seq,
        run.epoch,
        run.lease_owner,
        _ts_or_none(run.lease_until),
        run.title,
        _json(list(run.scopes)),
    )


def _run_from_row(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        run_id=UUID(row[0]),
        principal=row[1],
        status=row[2],
        created_at=_dt(row[3]),
        updated_at=_dt(row[4]),
        last_seq=row[5],
        epoch=row[6],
        lease_owner=row[7],
        lease_until=_dt_or_none(row[8]),
        title=row[9],
        scopes=tuple(json.loads(row[10])),
    )


def _approval_params(a: ApprovalRecord) -> Params:
    return (
        str(a.approval_id),
        str(a.run_id),
        a.tool_use_id,
        a.principal,
        a.capability,
        _json(a.args),
        a.args_digest,
        a.tier,
        _dec_or_none(a.amount_usd),
        _json(list(a.modifiable_fields)),
        a.executor,
        a.status,
        _ts(a.created_at),
        _ts(a.expires_at),
        a.decided_by,
        _ts_or_none(a.decided_at),
        a.reason,
        _json_or_none(a.approved_args),
        a.approved_digest,
        _json_or_none(a.client_result),
    )


def _approval_from_row(row: Sequence[Any]) -> ApprovalRecord:
    return ApprovalRecord(
        approval_id=UUID(row[0]),
        run_id=UUID(row[1]),
        tool_use_id=row[2],
        principal=row[3],
        capability=row[4],
        args=json.loads(row[5]),
        args_digest=row[6],
        tier=row[7],
        amount_usd=_parse_dec(row[8]),
        modifiable_fields=tuple(json.loads(row[9])),
        executor=row[10],
        status=row[11],
        created_at=_dt(row[12]),
        expires_at=_dt(row[13]),
        decided_by=row[14],
        decided_at=_dt_or_none(row[15]),
        reason=row[16],
        approved_args=_unjson(row[17]),
        approved_digest=row[18],
        client_result=_unjson(row[19]),
    )


def _ledger_from_row(row: Sequence[Any]) -> LedgerEntry:
    return LedgerEntry(
        key=row[0],
        run_id=UUID(row[1]),
        tool_use_id=row[2],
        capability=row[3],
        status=row[4],
        started_at=_dt(row[5]),
        finished_at=_dt_or_none(row[6]),
        result=_unjson(row[7]),
        error=row[8],
    )


def _audit_params(a: AuditRecord) -> Params:
    return (
        str(a.run_id),
        _ts(a.at),
        a.principal,
        a.capability,
        a.kind,
        a.tool_use_id,
        a.outcome,
        a.tier,
        _dec_or_none(a.amount_usd),
        _json(a.input),
        a.output,
        a.idempotency_key,
        a.duration_ms,
    )


def _audit_from_row(row: Sequence[Any]) -> AuditRecord:
    return AuditRecord(
        run_id=UUID(row[0]),
        at=_dt(row[1]),
        principal=row[2],
        capability=row[3],
        kind=row[4],
        tool_use_id=row[5],
        outcome=row[6],
        tier=row[7],
        amount_usd=_parse_dec(row[8]),
        input=json.loads(row[9]),
        output=row[10],
        idempotency_key=row[11],
        duration_ms=row[12],
    )


def _event_rows(run_id: UUID, key: str, events: Sequence[Event]) -> tuple[list[EventRow], bool]:
    """The rows of ``events`` (``key`` is ``str(run_id)``), and whether they are all of run
    ``run_id`` with consecutive seqs (checked here, in Python, before the database is touched)."""
    rows: list[EventRow] = []
    consecutive = True
    expected = events[0].seq if events else 0
    last_at: datetime | None = None
    at_text = ""
    for e in events:
        if e.seq != expected or e.run_id != run_id:
            consecutive = False
        expected += 1
        at = e.at
        if at is not last_at:  # the events of one emit share their time: encode it once
            at_text = _ts(at)
            last_at = at
        rows.append((key, e.seq, e.type, at_text, e.model_dump_json()))
    return rows, consecutive


# --- errors -------------------------------------------------------------------------------


def _translate(exc: sqlite3.Error, doing: str = "") -> StoreError:
    where = f" ({doing})" if doing else ""
    if isinstance(exc, sqlite3.IntegrityError) and (
        "UNIQUE" in str(exc) or "PRIMARY KEY" in str(exc)
    ):
        error: StoreError = ConflictError(f"{exc}{where}")
    else:
        error = StoreError(f"sqlite: {exc}{where}")
    error.__cause__ = exc
    return error


def _as_store_error(exc: Exception) -> FiduciaryError:
    if isinstance(exc, FiduciaryError):
        return exc
    if isinstance(exc, sqlite3.Error):
        return _translate(exc)
    error = StoreError(f"{type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _rollback_quietly(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


# --- the store ----------------------------------------------------------------------------

T = TypeVar("T")

# Without a status change, status is not assigned: its index (runs_by_status) stays untouched.
_ADVANCE_RUN = (
    "UPDATE runs SET last_seq = ?, updated_at = ? WHERE run_id = ? AND epoch = ? AND last_seq = ?"
)
# A status other than suspended (running again, or ended) clears the wake marker: the drive
# that took the decision up is past it (migrations/0003_wake_marker.sql).
_WAKE_KEPT = (
    "wake_at = CASE WHEN ?3 IN ('awaiting_approval', 'awaiting_client_result') THEN wake_at END"
)
_ADVANCE_RUN_WITH_STATUS = (
    f"UPDATE runs SET last_seq = ?1, updated_at = ?2, status = ?3, {_WAKE_KEPT} "
    "WHERE run_id = ?4 AND epoch = ?5 AND last_seq = ?6"
)
_SET_STATUS = f"UPDATE runs SET status = ?3, {_WAKE_KEPT} WHERE run_id = ?1 AND epoch = ?2"
# Runs that can make progress and that nobody leases: running (new, or left by a dead process),
# or suspended with a decision not taken up yet (the wake marker) — the runs_runnable index —
# and suspended with an expired approval (approvals_by_status).
_RUNS_TO_RESUME = f"""
SELECT {_RUN_COLUMNS} FROM runs INDEXED BY runs_runnable
WHERE (status = 'running' OR wake_at IS NOT NULL)
  AND status IN ('running', 'awaiting_approval', 'awaiting_client_result')
  AND (lease_until IS NULL OR lease_until <= ?1)
ORDER BY created_at, run_id LIMIT ?2
"""
_RUNS_EXPIRED = f"""
SELECT {", ".join("r." + c.strip() for c in _RUN_COLUMNS.split(","))} FROM runs r
WHERE r.run_id IN (SELECT run_id FROM approvals WHERE status = 'pending' AND expires_at <= ?1)
  AND r.status IN ('awaiting_approval', 'awaiting_client_result')
  AND (r.lease_until IS NULL OR r.lease_until <= ?1)
LIMIT ?2
"""
_CHECK_EPOCH = "SELECT 1 FROM runs WHERE run_id = ? AND epoch = ?"
_INSERT_LEDGER = (
    f"INSERT INTO ledger ({_LEDGER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (key) DO NOTHING"
)


class _Refused(Exception):  # noqa: N818 (internal: it never leaves the store)
    """A request refused before it wrote anything: it fails alone, the transaction goes on."""

    def __init__(self, error: FiduciaryError) -> None:
        super().__init__(error)
        self.error = error


class _Rows:
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
            conn.executemany(_INSERT_EVENT, events)
        if audit:
            conn.executemany(_INSERT_AUDIT, audit)

    def clear(self) -> None:
        self.events, self.audit = [], []


class _Op(Generic[T]):
    """One queued write, its rows encoded before the flush; ``apply`` runs it in the batch's
    transaction and raises ``_Refused`` if it refuses before writing anything."""

    __slots__ = ("future",)
    full_sync = False  # the batch holding it is committed with synchronous=FULL
    always = False  # written even if its caller was cancelled before the flush

    def __init__(self) -> None:
        self.future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def apply(self, conn: sqlite3.Connection, rows: _Rows) -> T:
        raise NotImplementedError

    def committed(self, broadcaster: Broadcaster) -> None:
        """Called after the COMMIT that holds this write (before its caller wakes)."""


class _Call(_Op[T]):
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

    def apply(self, conn: sqlite3.Connection, rows: _Rows) -> T:
        return self.fn(conn)


class _Commit(_Op[None]):
    """A ``commit``: the guarded update of the run row, approvals, then events and audit."""

    __slots__ = (
        "approval_rows",
        "audit_rows",
        "consecutive",
        "epoch",
        "event_rows",
        "events",
        "key",
        "run_id",
        "status",
    )

    def __init__(
        self,
        run_id: UUID,
        epoch: int,
        events: tuple[Event, ...],
        status: RunStatus | None,
        approval_rows: list[Params],
        audit_rows: list[Params],
    ) -> None:
        super().__init__()
        self.run_id = run_id
        self.key = str(run_id)
        self.epoch = epoch
        self.events = events
        self.event_rows, self.consecutive = _event_rows(run_id, self.key, events)
        self.status = status
        self.approval_rows = approval_rows
        self.audit_rows = audit_rows

    def apply(self, conn: sqlite3.Connection, rows: _Rows) -> None:
        # First the run row: one guarded UPDATE checks epoch and seqs and advances last_seq;
        # when it matches no row, nothing was written and _refusal says why.
        event_rows = self.event_rows
        if event_rows:
            first, last = event_rows[0], event_rows[-1]
            if not self.consecutive:
                raise self._refusal(conn)
            if self.status is None:
                cursor = conn.execute(
                    _ADVANCE_RUN, (last[1], last[3], self.key, self.epoch, first[1] - 1)
                )
            else:
                cursor = conn.execute(
                    _ADVANCE_RUN_WITH_STATUS,
                    (last[1], last[3], self.status, self.key, self.epoch, first[1] - 1),
                )
            if cursor.rowcount != 1:
                raise self._refusal(conn)
        elif self.status is not None:
            if conn.execute(_SET_STATUS, (self.key, self.epoch, self.status)).rowcount != 1:
                raise self._refusal(conn)
        elif conn.execute(_CHECK_EPOCH, (self.key, self.epoch)).fetchone() is None:
            raise self._refusal(conn)
        for params in self.approval_rows:
            try:
                conn.execute(_INSERT_APPROVAL, params)
            except sqlite3.IntegrityError as exc:
                if "UNIQUE" in str(exc) or "PRIMARY KEY" in str(exc):
                    raise ConflictError(f"approval {params[0]} already exists") from exc
                raise
        rows.events += event_rows
        rows.audit += self.audit_rows

    def _refusal(self, conn: sqlite3.Connection) -> _Refused:
        """Why the run row refused this commit (read in the same transaction)."""
        row = conn.execute(
            "SELECT epoch, last_seq FROM runs WHERE run_id = ?", (self.key,)
        ).fetchone()
        error: FiduciaryError
        if row is None:
            error = StoreError(f"run {self.run_id} does not exist")
        elif int(row[0]) != self.epoch:
            error = StaleEpochError(
                f"run {self.run_id}: epoch {self.epoch} is stale (now {row[0]})"
            )
        else:
            error = _seq_error(self.run_id, int(row[1]), self.events) or StoreError(
                f"run {self.run_id}: the commit was refused"
            )
        return _Refused(error)

    def committed(self, broadcaster: Broadcaster) -> None:
        broadcaster.publish(self.run_id, self.events)


class _Create(_Op[None]):
    """A ``create_run``: the run row, then its first events."""

    __slots__ = ("event_rows", "events", "key", "params", "run_id", "valid")

    def __init__(self, run: RunRecord, events: tuple[Event, ...]) -> None:
        super().__init__()
        self.run_id = run.run_id
        self.key = str(run.run_id)
        self.params = _run_params(run, last_seq=len(events))
        self.events = events
        self.event_rows, consecutive = _event_rows(run.run_id, self.key, events)
        self.valid = consecutive and (not events or events[0].seq == 1)

    def apply(self, conn: sqlite3.Connection, rows: _Rows) -> None:
        if not self.valid:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (self.key,)).fetchone():
                raise _Refused(ConflictError(f"run {self.run_id} already exists"))
            raise _Refused(
                _seq_error(self.run_id, 0, self.events)
                or ConflictError(f"run {self.run_id}: the first event must have seq 1")
            )
        try:
            conn.execute(_INSERT_RUN, self.params)
        except sqlite3.IntegrityError as exc:  # the statement is undone, the transaction goes on
            error = ConflictError(f"run {self.run_id} already exists")
            error.__cause__ = exc
            raise _Refused(error) from None
        rows.events += self.event_rows

    def committed(self, broadcaster: Broadcaster) -> None:
        broadcaster.publish(self.run_id, self.events)


Outcome = tuple[bool, Any]  # (True, the result) or (False, the error)


class SQLiteStore:
    """The ``Store`` contract on one SQLite file (see the module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout_ms: int = 5000,
        batch_size: int = 256,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if busy_timeout_ms < 0:
            raise ValueError("busy_timeout_ms must not be negative")
        self.path = os.fspath(path)
        self.synchronous: Synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self.batch_size = batch_size
        self.transactions = 0
        """Write transactions committed by this store (a batch of writes counts once)."""
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._pending: list[_Op[Any]] = []
        self._flush_handle: asyncio.Handle | None = None
        self._broadcaster = Broadcaster()

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout_ms: int = 5000,
        batch_size: int = 256,
    ) -> SQLiteStore:
        """Open the file now (create it, migrate it) rather than on first use."""
        store = cls(
            path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms, batch_size=batch_size
        )
        store._connection()
        return store

    # --- connection -----------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError("the store is closed")
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise _translate(exc, f"opening {self.path}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal" and self.path != ":memory:":
                raise StoreError(f"{self.path}: cannot use WAL mode (journal_mode is {mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
            apply_migrations(conn)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise _translate(exc, f"opening {self.path}") from exc
            raise
        return conn

    def _read(self, sql: str, params: Params = ()) -> list[Any]:
        conn = self._connection()
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise _translate(exc) from exc

    # --- group commit ---------------------------------------------------------------------
    async def _submit(self, op: _Op[T]) -> T:
        """Queue ``op`` for the next flush and wait until its transaction committed."""
        self._pending.append(op)
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)
        return await op.future

    def _flush(self) -> None:
        self._flush_handle = None
        batch = self._pending[: self.batch_size]
        del self._pending[: self.batch_size]
        if self._pending:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)
        if batch:
            self._write_batch(batch)

    def _write_batch(self, batch: list[_Op[Any]]) -> None:
        # a cancelled caller's write is skipped (unless it is one that took effect at once
        # before group commit: release, renew, ledger_finish, decide_approval)
        live = [op for op in batch if op.always or not op.future.done()]
        if not live:
            return
        conn = self._conn
        if conn is None:  # closed underneath (cannot happen: requests open the connection)
            self._fail_all(live, StoreError("the store is closed"))
            return
        # synchronous cannot change inside a transaction: decide for the whole batch now
        full_sync = self.synchronous != "FULL" and any(op.full_sync for op in live)
        try:
            if full_sync:
                conn.execute("PRAGMA synchronous = FULL")
            try:
                outcomes = self._run_together(conn, live)
                if outcomes is None:  # a request failed after writing: isolate each one
                    outcomes = self._run_isolated(conn, live)
            except BaseException:
                _rollback_quietly(conn)
                raise
            finally:
                if full_sync:  # outside the transaction now (committed or rolled back)
                    with suppress(sqlite3.Error):  # if it stays FULL, it is only slower
                        conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        except sqlite3.Error as exc:
            self._fail_all(live, _translate(exc, "group commit"))
            return
        except BaseException as exc:
            self._fail_all(live, StoreError(f"group commit interrupted: {exc!r}"))
            raise
        self.transactions += 1
        broadcaster = self._broadcaster
        for op, (ok, value) in zip(live, outcomes, strict=True):
            future = op.future
            if ok:
                op.committed(broadcaster)
                if not future.done():
                    future.set_result(value)
            elif not future.done():
                future.set_exception(value)

    @staticmethod
    def _run_together(conn: sqlite3.Connection, live: list[_Op[Any]]) -> list[Outcome] | None:
        """The batch in one transaction, no savepoints: the common case, where every request
        either succeeds or is refused before writing anything. None (rolled back) if a request
        failed after it wrote: the batch must then be redone with ``_run_isolated``."""
        rows = _Rows()
        outcomes: list[Outcome] = []
        conn.execute("BEGIN IMMEDIATE")
        for op in live:
            try:
                outcomes.append((True, op.apply(conn, rows)))
            except _Refused as refusal:
                if not conn.in_transaction:  # sqlite rolled the transaction back
                    return None
                outcomes.append((False, refusal.error))
            except Exception:
                _rollback_quietly(conn)
                return None
        try:
            rows.write(conn)
        except Exception:
            _rollback_quietly(conn)
            return None
        conn.execute("COMMIT")
        return outcomes

    @staticmethod
    def _run_isolated(conn: sqlite3.Connection, live: list[_Op[Any]]) -> list[Outcome]:
        """The batch in one transaction, each request inside its own SAVEPOINT so that a
        failing one is rolled back and fails alone while its batch-mates commit."""
        rows = _Rows()
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
                error = exc.error if isinstance(exc, _Refused) else _as_store_error(exc)
                outcomes.append((False, error))
            else:
                conn.execute("RELEASE fiduciary_op")
                outcomes.append((True, value))
        conn.execute("COMMIT")
        return outcomes

    @staticmethod
    def _fail_all(ops: list[_Op[Any]], error: FiduciaryError) -> None:
        for op in ops:
            if not op.future.done():
                op.future.set_exception(_copy_error(error))

    # --- runs ----------------------------------------------------------------------------
    async def create_run(self, run: RunRecord, events: Sequence[Event] = ()) -> None:
        self._connection()
        await self._submit(_Create(run, tuple(events)))

    async def get_run(self, run_id: UUID) -> RunRecord | None:
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (str(run_id),))
        return _run_from_row(rows[0]) if rows else None

    async def list_runs(
        self,
        *,
        principal: str | None = None,
        status: RunStatus | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        where: list[str] = []
        params: list[Any] = []
        if principal is not None:
            where.append("principal = ?")
            params.append(principal)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = self._read(
            f"SELECT {_RUN_COLUMNS} FROM runs {clause}"
            "ORDER BY created_at DESC, run_id DESC LIMIT ?",
            (*params, limit),
        )
        return [_run_from_row(row) for row in rows]

    async def commit(
        self,
        run_id: UUID,
        *,
        epoch: int,
        events: Sequence[Event] = (),
        status: RunStatus | None = None,
        approvals: Sequence[ApprovalRecord] = (),
        audit: Sequence[AuditRecord] = (),
    ) -> None:
        self._connection()
        await self._submit(
            _Commit(
                run_id,
                epoch,
                tuple(events),
                status,
                [_approval_params(a) for a in approvals] if approvals else [],
                [_audit_params(a) for a in audit] if audit else [],
            )
        )

    async def read_events(
        self, run_id: UUID, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        rows = self._read(
            "SELECT payload FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (str(run_id), after_seq, -1 if limit is None else limit),
        )
        try:
            return [decode_event(payload) for (payload,) in rows]
        except ValueError as exc:  # pydantic.ValidationError is a ValueError
            raise StoreError(f"run {run_id}: a stored event cannot be decoded: {exc}") from exc

    async def acquire(
        self, run_id: UUID, *, owner: str, now: datetime, ttl_seconds: float
    ) -> RunRecord | None:
        self._connection()
        key = str(run_id)
        now_text = _ts(now)
        until = _ts(now + timedelta(seconds=ttl_seconds))

        def apply(conn: sqlite3.Connection) -> RunRecord | None:
            cursor = conn.execute(
                "UPDATE runs SET lease_owner = ?, lease_until = ?, epoch = epoch + 1 "
                "WHERE run_id = ? AND (lease_owner IS NULL OR lease_until IS NULL "
                "OR lease_until <= ? OR lease_owner = ?)",
                (owner, until, key, now_text, owner),
            )
            if cursor.rowcount != 1:
                return None
            row = conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (key,)
            ).fetchone()
            return _run_from_row(row)

        return await self._submit(_Call(apply))

    async def renew(self, run_id: UUID, *, epoch: int, now: datetime, ttl_seconds: float) -> bool:
        self._connection()
        params = (_ts(now + timedelta(seconds=ttl_seconds)), str(run_id), epoch)

        def apply(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE runs SET lease_until = ? "
                "WHERE run_id = ? AND epoch = ? AND lease_owner IS NOT NULL",
                params,
            )
            return cursor.rowcount == 1

        return await self._submit(_Call(apply, always=True))

    async def release(self, run_id: UUID, *, epoch: int) -> None:
        self._connection()
        params = (str(run_id), epoch)

        def apply(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE runs SET lease_owner = NULL, lease_until = NULL "
                "WHERE run_id = ? AND epoch = ?",
                params,
            )

        await self._submit(_Call(apply, always=True))

    async def runs_to_resume(self, *, now: datetime, limit: int = 100) -> list[RunRecord]:
        params = (_ts(now), limit)
        rows = self._read(_RUNS_TO_RESUME, params) + self._read(_RUNS_EXPIRED, params)
        runs = {run.run_id: run for run in map(_run_from_row, rows)}
        return sorted(runs.values(), key=lambda r: (r.created_at, str(r.run_id)))[:limit]

    # --- approvals ------------------------------------------------------------------------
    async def get_approval(self, approval_id: UUID) -> ApprovalRecord | None:
        rows = self._read(
            f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE approval_id = ?",
            (str(approval_id),),
        )
        return _approval_from_row(rows[0]) if rows else None

    async def list_approvals(
        self,
        *,
        principal: str | None = None,
        run_id: UUID | None = None,
        status: ApprovalStatus | None = None,
    ) -> list[ApprovalRecord]:
        where: list[str] = []
        params: list[Any] = []
        if principal is not None:
            where.append("principal = ?")
            params.append(principal)
        if run_id is not None:
            where.append("run_id = ?")
            params.append(str(run_id))
        if status is not None:
            where.append("status = ?")
            params.append(status)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = self._read(
            f"SELECT {_APPROVAL_COLUMNS} FROM approvals {clause}ORDER BY created_at, approval_id",
            tuple(params),
        )
        return [_approval_from_row(row) for row in rows]

    async def decide_approval(
        self, approval: ApprovalRecord, *, expected_status: ApprovalStatus = "pending"
    ) -> bool:
        self._connection()
        params = _approval_params(approval)
        update = (*params[1:], params[0], expected_status)

        def apply(conn: sqlite3.Connection) -> bool:
            return conn.execute(_DECIDE_APPROVAL, update).rowcount == 1

        return await self._submit(_Call(apply, always=True))

    # --- ledger ---------------------------------------------------------------------------
    async def ledger_begin(self, entry: LedgerEntry, *, epoch: int) -> LedgerEntry | None:
        self._connection()
        key = entry.key
        run_key = str(entry.run_id)
        params = (
            key,
            run_key,
            entry.tool_use_id,
            entry.capability,
            entry.status,
            _ts(entry.started_at),
            _ts_or_none(entry.finished_at),
            _json_or_none(entry.result),
            entry.error,
        )

        def apply(conn: sqlite3.Connection) -> LedgerEntry | None:
            # fenced as a commit is, in the same transaction as the insert: a holder whose run
            # was taken over (a new epoch, maybe earlier in this very batch) starts nothing
            row = conn.execute("SELECT epoch FROM runs WHERE run_id = ?", (run_key,)).fetchone()
            if row is None:
                raise _Refused(StoreError(f"run {entry.run_id} does not exist"))
            if int(row[0]) != epoch:
                raise _Refused(
                    StaleEpochError(f"run {entry.run_id}: epoch {epoch} is stale (now {row[0]})")
                )
            if conn.execute(_INSERT_LEDGER, params).rowcount == 1:
                return None
            row = conn.execute(
                f"SELECT {_LEDGER_COLUMNS} FROM ledger WHERE key = ?", (key,)
            ).fetchone()
            return _ledger_from_row(row)

        # full_sync: the row is on disk before the caller starts the side effect
        return await self._submit(_Call(apply, full_sync=True))

    async def ledger_finish(
        self,
        key: str,
        *,
        status: LedgerStatus,
        at: datetime,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        self._connection()
        params = (status, _ts(at), _json_or_none(result), error, key)

        def apply(conn: sqlite3.Connection) -> None:
            cursor = conn.execute(
                "UPDATE ledger SET status = ?, finished_at = ?, result = ?, error = ? "
                "WHERE key = ?",
                params,
            )
            if cursor.rowcount != 1:
                raise _Refused(StoreError(f"no ledger entry {key!r}"))

        await self._submit(_Call(apply, always=True))

    async def ledger_retry(self, key: str, *, at: datetime) -> bool:
        self._connection()
        params = (_ts(at), key)

        def apply(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE ledger SET status = 'started', started_at = ?, finished_at = NULL, "
                "result = NULL, error = NULL WHERE key = ? AND status = 'failed'",
                params,
            )
            return cursor.rowcount == 1

        # full_sync: a new attempt's row is on disk before the caller starts it
        return await self._submit(_Call(apply, full_sync=True))

    async def ledger_get(self, key: str) -> LedgerEntry | None:
        rows = self._read(f"SELECT {_LEDGER_COLUMNS} FROM ledger WHERE key = ?", (key,))
        return _ledger_from_row(rows[0]) if rows else None

    # --- audit and spend ------------------------------------------------------------------
    async def audit_records(self, run_id: UUID) -> list[AuditRecord]:
        rows = self._read(
            f"SELECT {_AUDIT_COLUMNS} FROM audit WHERE run_id = ? ORDER BY id", (str(run_id),)
        )
        return [_audit_from_row(row) for row in rows]

    async def autonomous_spend(self, principal: str, *, since: datetime) -> Decimal:
        return _sum(self._read(_AUTONOMOUS_SPEND, (principal, _ts(since)) * 2))

    async def reserve_autonomous(
        self,
        principal: str,
        amount_usd: Decimal,
        *,
        limit: Decimal,
        since: datetime,
        key: str,
        at: datetime,
    ) -> bool:
        self._connection()
        spend_params = (principal, _ts(since)) * 2
        insert = (key, principal, str(amount_usd), _ts(at))

        def apply(conn: sqlite3.Connection) -> bool:
            # inside the batch's BEGIN IMMEDIATE: no other connection writes between the sum
            # and the insert, and earlier requests of this batch are visible
            if conn.execute("SELECT 1 FROM spend_reservations WHERE key = ?", (key,)).fetchone():
                return True
            if _sum(conn.execute(_AUTONOMOUS_SPEND, spend_params).fetchall()) + amount_usd > limit:
                return False
            conn.execute(
                "INSERT INTO spend_reservations (key, principal, amount_usd, at) "
                "VALUES (?, ?, ?, ?)",
                insert,
            )
            return True

        # as durable as the audit rows it stands for (a ledger row's full sync, written next for
        # a write that goes through the ledger, makes it durable too: one WAL, in order)
        return await self._submit(_Call(apply))

    async def release_autonomous(self, key: str) -> None:
        self._connection()

        def apply(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM spend_reservations WHERE key = ?", (key,))

        await self._submit(_Call(apply, always=True))

    # --- live events ----------------------------------------------------------------------
    def subscribe(self, run_id: UUID, *, buffer: int = 1024) -> BroadcastSubscription:
        if self._closed:
            raise StoreError("the store is closed")
        return self._broadcaster.subscribe(run_id, buffer)

    async def close(self) -> None:
        """Write the queued writes, end the subscriptions and close the file. Idempotent."""
        if self._closed:
            return
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        while self._pending:
            batch = self._pending[: self.batch_size]
            del self._pending[: self.batch_size]
            self._write_batch(batch)
        self._closed = True
        self._broadcaster.close_all()
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error as exc:
                raise _translate(exc, "closing") from exc


if TYPE_CHECKING:

    def _conforms(store: SQLiteStore) -> Store:
        return store
