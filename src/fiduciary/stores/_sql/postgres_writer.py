"""Private: the PostgreSQL dialect's codecs, statements, errors and batch writes.

Imported only by the PostgreSQL modules, after ``fiduciary.stores.postgres`` checked that
psycopg is installed. ``plan`` checks a batch of commits against the locked runs rows with the
shared rules (``_rules``), ``write_plan`` writes the accepted ones with one statement per kind
of row. See ``fiduciary.stores._sql.postgres`` for the rules they keep.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, LiteralString
from uuid import UUID

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.string import TextLoader

from ...exceptions import ConflictError, FiduciaryError, StoreError
from .._rules import commit_refusal, seq_error
from .codec import Codec, Params, naive_time_error
from .core import Append, Dialect
from .queries import SharedQueries, load

__all__ = [
    "CANCEL_CHANNEL",
    "DIALECT",
    "EVENTS_CHANNEL",
    "QUERIES",
    "RUNNABLE_CHANNEL",
    "Conn",
    "SynchronousCommit",
]

EVENTS_CHANNEL = "fiduciary_events"  # the channels named in postgres.sql and its migrations
RUNNABLE_CHANNEL = "fiduciary_runnable"
CANCEL_CHANNEL = "fiduciary_cancel"
NOTIFY_LIMIT = 7000  # bytes per notification payload (PostgreSQL's limit is 8000)

SynchronousCommit = Literal["on", "off"]
Conn = psycopg.AsyncConnection[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class PostgresQueries(SharedQueries):
    """The statements of ``postgres.sql``: the shared ones and the dialect's own."""

    lock_runs: LiteralString
    approvals_taken: LiteralString
    insert_runs: LiteralString
    insert_events: LiteralString
    insert_approvals: LiteralString
    insert_audit: LiteralString
    update_runs: LiteralString
    notify_events: LiteralString
    claim: LiteralString
    mark_runnable: LiteralString
    ledger_begin: LiteralString
    spend_lock: LiteralString
    has_reservation: LiteralString
    insert_reservation: LiteralString
    request_cancel: LiteralString
    read_cancel: LiteralString
    read_ranges: LiteralString


QUERIES = load(PostgresQueries, Path(__file__).with_name("postgres.sql"))


# --- codecs -------------------------------------------------------------------------------


def utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise naive_time_error(value)
    return value


def _same(value: Any) -> Any:
    return value


def _texts_in(value: Any) -> tuple[str, ...]:
    return tuple(value)


# psycopg adapts uuid, timestamptz and numeric itself; arrays come back as lists
CODEC = Codec(
    uuid=_same,
    uuid_in=_same,
    time=utc,
    time_in=_same,
    money=_same,
    money_in=_same,
    texts_in=_texts_in,
)


DIALECT = Dialect(QUERIES, CODEC, lambda name: f"%({name})s", None)


def configure_types(conn: Conn) -> None:
    # json comes back as text: events are decoded by pydantic, other values by json.loads,
    # exactly as the SQLite store does
    conn.adapters.register_loader("json", TextLoader)


# --- errors -------------------------------------------------------------------------------


def translate(exc: psycopg.Error, doing: str = "") -> StoreError:
    """A psycopg error as fiduciary's: a uniqueness violation is a ``ConflictError``."""
    where = f" ({doing})" if doing else ""
    error: StoreError
    if isinstance(exc, pg_errors.UniqueViolation):
        error = ConflictError(f"{exc}{where}".strip())
    else:
        error = StoreError(f"postgres: {type(exc).__name__}: {exc}{where}".strip())
    error.__cause__ = exc
    return error


def as_store_error(exc: BaseException) -> FiduciaryError:
    if isinstance(exc, FiduciaryError):
        return exc
    if isinstance(exc, psycopg.Error):
        return translate(exc)
    error = StoreError(f"{type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


# --- a batch of commits -------------------------------------------------------------------


@dataclass(slots=True)
class Request:
    """One queued ``commit`` or ``create_run``."""

    append: Append
    future: asyncio.Future[None]


@dataclass(slots=True)
class Plan:
    """The rows of the accepted requests of one batch, and the refusals."""

    refused: dict[int, FiduciaryError] = field(default_factory=dict)  # id(request) → error
    creates: list[Params] = field(default_factory=list)
    events: list[Params] = field(default_factory=list)
    approvals: list[Params] = field(default_factory=list)
    audit: list[Params] = field(default_factory=list)
    runs: dict[UUID, tuple[int, str | None, datetime | None]] = field(default_factory=dict)
    ranges: dict[UUID, tuple[int, int]] = field(default_factory=dict)


def plan(batch: list[Request], state: dict[UUID, tuple[int, int]], used: set[UUID]) -> Plan:
    """Check each request in order against the locked rows (and the requests before it)."""
    result = Plan()
    for request in batch:
        a = request.append
        error = _check(a, state, used)
        if error is not None:
            result.refused[id(request)] = error
            continue
        if a.create is not None:
            epoch, last = int(a.create[6]), 0
            result.creates.append(a.create)
        else:
            epoch, last = state[a.run_id]
        new_last = last + len(a.events)
        state[a.run_id] = (epoch, new_last)
        used.update(row[0] for row in a.approvals)
        result.events.extend(a.event_rows)
        result.approvals.extend(a.approvals)
        result.audit.extend(a.audit)
        if a.events:
            first = result.ranges.get(a.run_id, (last + 1, 0))[0]
            result.ranges[a.run_id] = (first, new_last)
        if a.create is None and (a.events or a.status is not None):
            _, status, updated = result.runs.get(a.run_id, (0, None, None))
            result.runs[a.run_id] = (
                new_last,
                a.status if a.status is not None else status,
                a.events[-1].at if a.events else updated,
            )
    return result


def _check(a: Append, state: dict[UUID, tuple[int, int]], used: set[UUID]) -> FiduciaryError | None:
    if a.create is not None:
        if a.run_id in state:
            return ConflictError(f"run {a.run_id} already exists")
        return seq_error(a.run_id, 0, a.events)
    refusal = commit_refusal(a.run_id, a.epoch, state.get(a.run_id), a.events)
    if refusal is not None:
        return refusal
    ids = [row[0] for row in a.approvals]
    for approval_id in ids:
        if approval_id in used:
            return ConflictError(f"approval {approval_id} already exists")
    if len(set(ids)) != len(ids):
        return ConflictError("the same approval twice in one commit")
    return None


def columns(rows: Sequence[Params], width: int) -> list[list[Any]]:
    """Rows → one list per column (the arrays an ``unnest`` statement takes)."""
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows, strict=True)]


async def write_plan(conn: Conn, plan: Plan, notifications: list[str]) -> None:
    """The accepted rows of a batch, one statement per kind of row, then its notifications."""
    if plan.creates:
        await conn.execute(QUERIES.insert_runs, columns(plan.creates, 11), binary=True)
    if plan.events:
        await conn.execute(QUERIES.insert_events, columns(plan.events, 5), binary=True)
    if plan.approvals:
        await conn.execute(QUERIES.insert_approvals, columns(plan.approvals, 20), binary=True)
    if plan.audit:
        await conn.execute(QUERIES.insert_audit, columns(plan.audit, 13), binary=True)
    runs = plan.runs
    if runs:
        ids = list(runs)
        await conn.execute(
            QUERIES.update_runs,
            (ids, [runs[i][0] for i in ids], [runs[i][1] for i in ids], [runs[i][2] for i in ids]),
            binary=True,
        )
    if notifications:
        await conn.execute(QUERIES.notify_events, (notifications,), binary=True)


def notifications(instance: str, ranges: dict[UUID, tuple[int, int]]) -> list[str]:
    """The payloads naming, per run, the seqs a batch committed (folded under the limit)."""
    payloads: list[str] = []
    parts: list[str] = []
    size = len(instance)
    for run_id, (first, last) in ranges.items():
        part = f"{run_id}:{first}:{last}"
        if parts and size + len(part) + 1 > NOTIFY_LIMIT:
            payloads.append(" ".join([instance, *parts]))
            parts, size = [], len(instance)
        parts.append(part)
        size += len(part) + 1
    if parts:
        payloads.append(" ".join([instance, *parts]))
    return payloads


# --- the daily autonomous spend -----------------------------------------------------------


def spend_lock_key(principal: str) -> int:
    """The transaction-level advisory-lock key of a principal's spend (a signed bigint), not
    the key of its principal lock: a section holding that one reserves under this one."""
    digest = hashlib.sha256(b"fiduciary:spend:" + principal.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
