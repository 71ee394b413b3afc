"""Private: what ``PostgresStore`` says to PostgreSQL — the migration runner, the SQL of every
statement, the encoding of records into rows and back, and the translation of psycopg errors.

Imported only by ``fiduciary.stores.postgres``, after it checked that psycopg is installed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, LiteralString

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.string import TextLoader

from ..events import Event
from ..exceptions import ConflictError, FiduciaryError, StoreError
from ._rows import (
    _APPROVAL_COLUMNS,
    _AUDIT_COLUMNS,
    _LEDGER_COLUMNS,
    _RUN_COLUMNS,
    _json,
    _json_or_none,
    _unjson,
)
from .base import ApprovalRecord, AuditRecord, LedgerEntry, RunRecord
from .sqlite import Migration, load_migrations

SQL_DIR = Path(__file__).with_name("sql") / "postgres"
SCHEMA_PATH = SQL_DIR / "schema.sql"
MIGRATIONS_DIR = SQL_DIR / "migrations"

EVENTS_CHANNEL = "fiduciary_events"
RUNNABLE_CHANNEL = "fiduciary_runnable"
CANCEL_CHANNEL = "fiduciary_cancel"
# record a cancel request (sent again: its time is refreshed), forget those older than an hour,
# and notify its id; all times are the database's, so requesters' clocks cannot disagree
_REQUEST_CANCEL = f"""
WITH old AS (
    DELETE FROM cancel_requests WHERE requested_at < now() - interval '1 hour'
), added AS (
    INSERT INTO cancel_requests
        (request_id, run_id, by_principal, scopes, reason, requested_at)
    VALUES (%(request_id)s, %(run_id)s, %(by)s, %(scopes)s, %(reason)s, now())
    ON CONFLICT (request_id) DO UPDATE SET requested_at = now()
)
SELECT pg_notify('{CANCEL_CHANNEL}', %(request_id)s::text)
"""
# a request is honoured for two minutes after it was last sent (its sender resends every
# second while it waits): an id seen on the channel cannot be replayed later
_READ_CANCEL = (
    "SELECT run_id, by_principal, scopes, reason FROM cancel_requests "
    "WHERE request_id = %s AND requested_at > now() - interval '2 minutes'"
)

# Created by the migration runner before the first migration; identical to its definition in
# schema.sql (the schema test compares the catalogs). Never change it: it is migration zero.
_BOOTSTRAP_SQL = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL
)"""
# pg_advisory_xact_lock key of the migration runner ("fiduciar" in ASCII).
_MIGRATION_LOCK = 0x6669647563696172
_NOTIFY_LIMIT = 7000  # bytes per notification payload (PostgreSQL's limit is 8000)

SynchronousCommit = Literal["on", "off"]
Params = tuple[Any, ...]
_Conn = psycopg.AsyncConnection[tuple[Any, ...]]


# --- migrations ---------------------------------------------------------------------------


async def apply_migrations(conn: _Conn, migrations: Sequence[Migration] | None = None) -> list[int]:
    """Apply the migrations ``schema_migrations`` does not list, in order; return their versions.

    ``conn`` must be in autocommit mode. Safe when several processes open a fresh database at
    once: the check is repeated under a transaction-level advisory lock.
    """
    if migrations is None:
        migrations = load_migrations(MIGRATIONS_DIR)
    known = {m.version for m in migrations}

    async def applied_versions() -> set[int] | None:
        cur = await conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL")
        row = await cur.fetchone()
        if row is None or not row[0]:
            return None
        cur = await conn.execute("SELECT version FROM schema_migrations")
        return {int(v) for (v,) in await cur.fetchall()}

    try:
        if await applied_versions() == known:
            return []  # up to date: no lock taken
        done: list[int] = []
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            await conn.execute(_BOOTSTRAP_SQL)
            applied = await applied_versions() or set()
            newer = applied - known
            if newer:
                raise StoreError(
                    f"the database has schema version {max(newer)}, newer than this fiduciary "
                    f"knows ({max(known, default=0)}): upgrade fiduciary"
                )
            for migration in migrations:
                if migration.version in applied:
                    continue
                # no parameters: the simple query protocol runs the whole script
                await conn.execute(_literal(migration.sql))
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, datetime.now(UTC)),
                )
                done.append(migration.version)
    except psycopg.Error as exc:
        raise _translate(exc, "migrating the database") from exc
    return done


def _literal(text: str) -> LiteralString:
    """A SQL script read from the package's own files (never user input)."""
    return text


# --- encoding -----------------------------------------------------------------------------


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise StoreError(f"naive datetime {value!r}: the store keeps timezone-aware UTC times")
    return value


def _utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else _utc(value)


# One statement per kind of row for a whole batch: arrays in, rows out, in array order.
_INSERT_RUNS = (
    f"INSERT INTO runs ({_RUN_COLUMNS}) "
    "SELECT run_id, principal, status, created_at, updated_at, last_seq, epoch, lease_owner, "
    "lease_until, title, ARRAY(SELECT json_array_elements_text(scopes::json)) "
    "FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::timestamptz[], "
    "%b::timestamptz[], %b::bigint[], %b::bigint[], %b::text[], %b::timestamptz[], %b::text[], "
    "%b::text[]) AS r(run_id, principal, status, created_at, updated_at, last_seq, epoch, "
    "lease_owner, lease_until, title, scopes)"
)
_INSERT_EVENTS = (
    "INSERT INTO events (run_id, seq, type, at, payload) "
    "SELECT run_id, seq, type, at, payload::json FROM unnest(%b::uuid[], %b::bigint[], "
    "%b::text[], %b::timestamptz[], %b::text[]) AS e(run_id, seq, type, at, payload)"
)
_INSERT_APPROVALS = (
    f"INSERT INTO approvals ({_APPROVAL_COLUMNS}) "
    "SELECT approval_id, run_id, tool_use_id, principal, capability, args::json, args_digest, "
    "tier, amount_usd, ARRAY(SELECT json_array_elements_text(modifiable_fields::json)), "
    "executor, status, created_at, expires_at, "
    "decided_by, decided_at, reason, approved_args::json, approved_digest, client_result::json "
    "FROM unnest(%b::uuid[], %b::uuid[], %b::text[], %b::text[], %b::text[], %b::text[], "
    "%b::text[], %b::text[], %b::numeric[], %b::text[], %b::text[], %b::text[], "
    "%b::timestamptz[], %b::timestamptz[], %b::text[], %b::timestamptz[], %b::text[], "
    "%b::text[], %b::text[], %b::text[]) AS a(approval_id, run_id, tool_use_id, principal, "
    "capability, args, args_digest, tier, amount_usd, modifiable_fields, executor, status, "
    "created_at, expires_at, decided_by, decided_at, reason, approved_args, approved_digest, "
    "client_result)"
)
_INSERT_AUDIT = (
    f"INSERT INTO audit ({_AUDIT_COLUMNS}) "
    "SELECT run_id, at, principal, capability, kind, tool_use_id, outcome, tier, amount_usd, "
    "input::json, output, idempotency_key, duration_ms FROM unnest(%b::uuid[], "
    "%b::timestamptz[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], "
    "%b::numeric[], %b::text[], %b::text[], %b::text[], %b::float8[]) WITH ORDINALITY "
    "AS a(run_id, at, principal, capability, kind, tool_use_id, outcome, tier, amount_usd, "
    "input, output, idempotency_key, duration_ms, ord) ORDER BY ord"
)
# A status other than suspended (running again, or ended) clears the wake marker: the drive
# that took the decision up is past it. The claim leaves the marker, so a drive that dies
# before this commit leaves the run claimable once its lease lapses.
_UPDATE_RUNS = (
    "UPDATE runs SET last_seq = v.last_seq, status = COALESCE(v.status, runs.status), "
    "updated_at = COALESCE(v.updated_at, runs.updated_at), "
    "wake_at = CASE WHEN v.status IS NULL "
    "OR v.status IN ('awaiting_approval', 'awaiting_client_result') THEN runs.wake_at END "
    "FROM unnest(%b::uuid[], %b::bigint[], %b::text[], %b::timestamptz[]) "
    "AS v(run_id, last_seq, status, updated_at) WHERE runs.run_id = v.run_id"
)
_NOTIFY = f"SELECT pg_notify('{EVENTS_CHANNEL}', p) FROM unnest(%b::text[]) AS p"
# Runs that can make progress: running (new, or left by a dead process), suspended with a
# decision no drive has taken up yet (wake_at), suspended with an expired approval.
_RUNNABLE = """
    SELECT run_id FROM runs
    WHERE (status = 'running' OR wake_at IS NOT NULL)
      AND (lease_until IS NULL OR lease_until <= %(now)s)
    UNION
    SELECT run_id FROM approvals WHERE status = 'pending' AND expires_at <= %(now)s
"""
_RUNS_TO_RESUME = f"""
SELECT {", ".join("r." + c.strip() for c in _RUN_COLUMNS.split(","))}
FROM runs r WHERE r.run_id IN ({_RUNNABLE})
  AND r.status IN ('running', 'awaiting_approval', 'awaiting_client_result')
  AND (r.lease_until IS NULL OR r.lease_until <= %(now)s)
ORDER BY r.created_at, r.run_id
LIMIT %(limit)s
"""
_CLAIM = f"""
WITH candidates AS ({_RUNNABLE}), picked AS (
    SELECT r.run_id FROM runs r JOIN candidates c ON c.run_id = r.run_id
    WHERE r.status IN ('running', 'awaiting_approval', 'awaiting_client_result')
      AND (r.lease_until IS NULL OR r.lease_until <= %(now)s)
      AND NOT r.run_id = ANY(%(exclude)s::uuid[])
    ORDER BY r.created_at, r.run_id
    LIMIT %(limit)s
    FOR NO KEY UPDATE OF r SKIP LOCKED
)
UPDATE runs SET lease_owner = %(owner)s, lease_until = %(until)s, epoch = runs.epoch + 1
FROM picked WHERE runs.run_id = picked.run_id
RETURNING {", ".join("runs." + c.strip() for c in _RUN_COLUMNS.split(","))}
"""
# ledger_begin, fenced in one statement (one transaction): the runs row is locked FOR SHARE, so
# an acquire or a claim (which bump the epoch) waits for it or skips the run, and the row is
# inserted only if the locked epoch is the caller's. Returns the run's epoch (NULL: no such run)
# and whether the row was inserted (False with the caller's epoch: the key exists).
_LEDGER_BEGIN = f"""
WITH fence AS (
    SELECT epoch FROM runs WHERE run_id = %(run_id)s FOR SHARE
), inserted AS (
    INSERT INTO ledger ({_LEDGER_COLUMNS})
    SELECT %(key)s::text, %(run_id)s::uuid, %(tool_use_id)s::text, %(capability)s::text,
        %(status)s::text, %(started_at)s::timestamptz, %(finished_at)s::timestamptz,
        %(result)s::json, %(error)s::text
    FROM fence WHERE fence.epoch = %(epoch)s
    ON CONFLICT (key) DO NOTHING
    RETURNING 1
)
SELECT (SELECT epoch FROM fence), EXISTS (SELECT 1 FROM inserted)
"""
_READ_RANGES = (
    "SELECT e.run_id, e.payload FROM unnest(%b::uuid[], %b::bigint[], %b::bigint[]) "
    "AS w(run_id, first_seq, last_seq) JOIN events e ON e.run_id = w.run_id "
    "AND e.seq BETWEEN w.first_seq AND w.last_seq ORDER BY e.run_id, e.seq"
)


def _run_from_row(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        run_id=row[0],
        principal=row[1],
        status=row[2],
        created_at=row[3],
        updated_at=row[4],
        last_seq=row[5],
        epoch=row[6],
        lease_owner=row[7],
        lease_until=row[8],
        title=row[9],
        scopes=tuple(row[10]),
    )


def _approval_params(a: ApprovalRecord) -> Params:
    return (
        a.approval_id,
        a.run_id,
        a.tool_use_id,
        a.principal,
        a.capability,
        _json(a.args),
        a.args_digest,
        a.tier,
        a.amount_usd,
        _json(list(a.modifiable_fields)),
        a.executor,
        a.status,
        _utc(a.created_at),
        _utc(a.expires_at),
        a.decided_by,
        _utc_or_none(a.decided_at),
        a.reason,
        _json_or_none(a.approved_args),
        a.approved_digest,
        _json_or_none(a.client_result),
    )


def _approval_from_row(row: Sequence[Any]) -> ApprovalRecord:
    return ApprovalRecord(
        approval_id=row[0],
        run_id=row[1],
        tool_use_id=row[2],
        principal=row[3],
        capability=row[4],
        args=json.loads(row[5]),
        args_digest=row[6],
        tier=row[7],
        amount_usd=row[8],
        modifiable_fields=tuple(row[9]),
        executor=row[10],
        status=row[11],
        created_at=row[12],
        expires_at=row[13],
        decided_by=row[14],
        decided_at=row[15],
        reason=row[16],
        approved_args=_unjson(row[17]),
        approved_digest=row[18],
        client_result=_unjson(row[19]),
    )


def _ledger_from_row(row: Sequence[Any]) -> LedgerEntry:
    return LedgerEntry(
        key=row[0],
        run_id=row[1],
        tool_use_id=row[2],
        capability=row[3],
        status=row[4],
        started_at=row[5],
        finished_at=row[6],
        result=_unjson(row[7]),
        error=row[8],
    )


def _audit_params(a: AuditRecord) -> Params:
    return (
        a.run_id,
        _utc(a.at),
        a.principal,
        a.capability,
        a.kind,
        a.tool_use_id,
        a.outcome,
        a.tier,
        a.amount_usd,
        _json(a.input),
        a.output,
        a.idempotency_key,
        a.duration_ms,
    )


def _audit_from_row(row: Sequence[Any]) -> AuditRecord:
    return AuditRecord(
        run_id=row[0],
        at=row[1],
        principal=row[2],
        capability=row[3],
        kind=row[4],
        tool_use_id=row[5],
        outcome=row[6],
        tier=row[7],
        amount_usd=row[8],
        input=json.loads(row[9]),
        output=row[10],
        idempotency_key=row[11],
        duration_ms=row[12],
    )


def _columns(rows: Sequence[Params], width: int) -> list[list[Any]]:
    """Rows → one list per column (the arrays an ``unnest`` statement takes)."""
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows, strict=True)]


# --- errors -------------------------------------------------------------------------------


def _translate(exc: psycopg.Error, doing: str = "") -> StoreError:
    where = f" ({doing})" if doing else ""
    if isinstance(exc, pg_errors.UniqueViolation):
        error: StoreError = ConflictError(f"{exc}{where}".strip())
    else:
        error = StoreError(f"postgres: {type(exc).__name__}: {exc}{where}".strip())
    error.__cause__ = exc
    return error


def _as_store_error(exc: BaseException) -> FiduciaryError:
    if isinstance(exc, FiduciaryError):
        return exc
    if isinstance(exc, psycopg.Error):
        return _translate(exc)
    error = StoreError(f"{type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _event_rows(events: Sequence[Event]) -> list[Params]:
    return [(e.run_id, e.seq, e.type, _utc(e.at), e.model_dump_json()) for e in events]


def _configure_types(conn: _Conn) -> None:
    # json comes back as text: events are decoded by pydantic, other values by json.loads,
    # exactly as the SQLite store does
    conn.adapters.register_loader("json", TextLoader)


# --- the daily autonomous spend ------------------------------------------------------------
# audit rows that count, then reservations whose call has no such row yet
_AUTONOMOUS_SPEND = """
SELECT COALESCE(sum(amount_usd), 0) FROM (
    SELECT amount_usd FROM audit
    WHERE principal = %(principal)s AND at >= %(since)s AND tier = 'auto'
        AND outcome IN ('ok', 'unknown') AND amount_usd IS NOT NULL
    UNION ALL
    SELECT r.amount_usd FROM spend_reservations AS r
    WHERE r.principal = %(principal)s AND r.at >= %(since)s AND NOT EXISTS (
        SELECT 1 FROM audit AS a
        WHERE a.idempotency_key = r.key AND a.principal = r.principal AND a.tier = 'auto'
            AND a.outcome IN ('ok', 'unknown') AND a.amount_usd IS NOT NULL)
) AS spent
"""


def spend_lock_key(principal: str) -> int:
    """The transaction-level advisory-lock key of a principal's spend (a signed bigint), not
    the key of its principal lock: a section holding that one reserves under this one."""
    digest = hashlib.sha256(b"fiduciary:spend:" + principal.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def reserve_spend(
    conn: _Conn,
    *,
    principal: str,
    amount_usd: Decimal,
    limit: Decimal,
    since: datetime,
    key: str,
    at: datetime,
) -> bool:
    """``PostgresStore.reserve_autonomous`` on a connection: one transaction, the principal's
    reservations serialised by an advisory lock; each statement after it reads a new snapshot
    (READ COMMITTED), so it sees every reservation committed before the lock was granted."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (spend_lock_key(principal),))
        cur = await conn.execute("SELECT 1 FROM spend_reservations WHERE key = %s", (key,))
        if await cur.fetchone() is not None:
            return True
        cur = await conn.execute(_AUTONOMOUS_SPEND, {"principal": principal, "since": since})
        row = await cur.fetchone()
        spent: Decimal = row[0] if row is not None else Decimal(0)
        if spent + amount_usd > limit:
            return False
        await conn.execute(
            "INSERT INTO spend_reservations (key, principal, amount_usd, at) "
            "VALUES (%s, %s, %s, %s)",
            (key, principal, amount_usd, at),
        )
        return True
