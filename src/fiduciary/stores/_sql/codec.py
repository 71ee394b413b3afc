"""Private: records into rows and back, the same for every SQL dialect but for its codecs.

Both SQL stores keep the same records in the same columns in the same order; what differs is
how a value is written in a column: a ``Codec`` value gives a dialect's ids, times, money and
arrays (SQLite: UUID text, ISO-8601 UTC text, decimal text, JSON text; PostgreSQL: uuid,
timestamptz, numeric, text[] read back). Structured values (approval args, ledger results,
audit inputs) are JSON text in both: values JSON has no type for (Decimal, UUID, datetime,
models) are stored as pydantic's JSON form and read back as that form. A naive datetime is
refused with ``StoreError`` (the store keeps timezone-aware UTC times).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from pydantic_core import PydanticSerializationError, to_jsonable_python

from ...events import Event, encode_event
from ...exceptions import StoreError
from ..base import ApprovalRecord, ApprovalVote, AuditRecord, LedgerEntry, RunRecord

__all__ = [
    "APPROVAL_FIELDS",
    "Codec",
    "EventRow",
    "Params",
    "json_text",
    "json_text_or_none",
    "naive_time_error",
    "unjson",
]

Params = tuple[Any, ...]
EventRow = tuple[Any, int, str, Any, str]  # run_id, seq, type, at, payload

# the columns of an approval row, in order (the named parameters of decide_approval)
APPROVAL_FIELDS = (
    "approval_id",
    "run_id",
    "tool_use_id",
    "principal",
    "capability",
    "args",
    "args_digest",
    "tier",
    "amount_usd",
    "modifiable_fields",
    "executor",
    "status",
    "created_at",
    "expires_at",
    "decided_by",
    "decided_at",
    "reason",
    "approved_args",
    "approved_digest",
    "client_result",
)


def json_text(value: Any) -> str:
    try:
        return _JSON_TEXT.encode(value)
    except (TypeError, ValueError, PydanticSerializationError) as exc:
        raise StoreError(f"value cannot be stored as JSON: {exc}") from exc


def json_text_or_none(value: Any) -> str | None:
    return None if value is None else json_text(value)


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value)


# what json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_jsonable) builds
# at each call (a few a commit), built once
_JSON_TEXT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_jsonable)


def unjson(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def naive_time_error(value: datetime) -> StoreError:
    return StoreError(f"naive datetime {value!r}: the store keeps timezone-aware UTC times")


@dataclass(frozen=True, slots=True)
class Codec:
    """A dialect's column codecs (the functions below, called directly: they are values, not
    methods) and the row mapping built on them."""

    uuid: Callable[[UUID], Any]
    uuid_in: Callable[[Any], UUID]
    time: Callable[[datetime], Any]
    """A time as the column keeps it (a naive one: ``naive_time_error``)."""
    time_in: Callable[[Any], datetime]
    money: Callable[[Decimal | None], Any]
    money_in: Callable[[Any], Decimal | None]
    texts_in: Callable[[Any], tuple[str, ...]]
    """An array column read back (written as JSON text, see ``run_row``)."""

    # --- derived ---------------------------------------------------------------------------
    def time_or_none(self, value: datetime | None) -> Any:
        return None if value is None else self.time(value)

    def time_in_or_none(self, value: Any) -> datetime | None:
        return None if value is None else self.time_in(value)

    # --- rows ------------------------------------------------------------------------------
    def run_row(self, run: RunRecord, last_seq: int) -> Params:
        return (
            self.uuid(run.run_id),
            run.principal,
            run.status,
            self.time(run.created_at),
            self.time(run.updated_at),
            last_seq,
            run.epoch,
            run.lease_owner,
            self.time_or_none(run.lease_until),
            run.title,
            json_text(list(run.scopes)),
        )

    def run_from_row(self, row: Sequence[Any]) -> RunRecord:
        return RunRecord(
            run_id=self.uuid_in(row[0]),
            principal=row[1],
            status=row[2],
            created_at=self.time_in(row[3]),
            updated_at=self.time_in(row[4]),
            last_seq=row[5],
            epoch=row[6],
            lease_owner=row[7],
            lease_until=self.time_in_or_none(row[8]),
            title=row[9],
            scopes=self.texts_in(row[10]),
        )

    def event_rows(self, run_id: UUID, events: Sequence[Event]) -> tuple[list[EventRow], bool]:
        """The rows of ``events``, and whether they are all of run ``run_id`` with consecutive
        seqs (checked in Python, before the database is touched)."""
        key = self.uuid(run_id)
        rows: list[EventRow] = []
        consecutive = True
        expected = events[0].seq if events else 0
        last_at: datetime | None = None
        at_value: Any = None
        for e in events:
            # (``is`` first: the loop's events share its run_id object; UUID's == is Python)
            if e.seq != expected or (e.run_id is not run_id and e.run_id != run_id):
                consecutive = False
            expected += 1
            at = e.at
            if at is not last_at:  # the events of one emit share their time: encode it once
                at_value = self.time(at)
                last_at = at
            rows.append((key, e.seq, e.type, at_value, encode_event(e)))  # shared with SSE
        return rows, consecutive

    def approval_row(self, a: ApprovalRecord) -> Params:
        return (
            self.uuid(a.approval_id),
            self.uuid(a.run_id),
            a.tool_use_id,
            a.principal,
            a.capability,
            json_text(a.args),
            a.args_digest,
            a.tier,
            self.money(a.amount_usd),
            json_text(list(a.modifiable_fields)),
            a.executor,
            a.status,
            self.time(a.created_at),
            self.time(a.expires_at),
            a.decided_by,
            self.time_or_none(a.decided_at),
            a.reason,
            json_text_or_none(a.approved_args),
            a.approved_digest,
            json_text_or_none(a.client_result),
        )

    def approval_from_row(self, row: Sequence[Any]) -> ApprovalRecord:
        return ApprovalRecord(
            approval_id=self.uuid_in(row[0]),
            run_id=self.uuid_in(row[1]),
            tool_use_id=row[2],
            principal=row[3],
            capability=row[4],
            args=json.loads(row[5]),
            args_digest=row[6],
            tier=row[7],
            amount_usd=self.money_in(row[8]),
            modifiable_fields=self.texts_in(row[9]),
            executor=row[10],
            status=row[11],
            created_at=self.time_in(row[12]),
            expires_at=self.time_in(row[13]),
            decided_by=row[14],
            decided_at=self.time_in_or_none(row[15]),
            reason=row[16],
            approved_args=unjson(row[17]),
            approved_digest=row[18],
            client_result=unjson(row[19]),
        )

    def vote_params(self, v: ApprovalVote) -> dict[str, Any]:
        return {
            "approval_id": self.uuid(v.approval_id),
            "approver": v.approver,
            "args_digest": v.args_digest,
            "approved_args": json_text(v.approved_args),
            "tier": v.tier,
            "amount_usd": self.money(v.amount_usd),
            "at": self.time(v.at),
        }

    def vote_from_row(self, row: Sequence[Any]) -> ApprovalVote:
        return ApprovalVote(
            approval_id=self.uuid_in(row[0]),
            approver=row[1],
            args_digest=row[2],
            approved_args=json.loads(row[3]),
            tier=row[4],
            amount_usd=self.money_in(row[5]),
            at=self.time_in(row[6]),
        )

    def ledger_row(self, e: LedgerEntry) -> Params:
        return (
            e.key,
            self.uuid(e.run_id),
            e.tool_use_id,
            e.capability,
            e.status,
            self.time(e.started_at),
            self.time_or_none(e.finished_at),
            json_text_or_none(e.result),
            e.error,
        )

    def ledger_from_row(self, row: Sequence[Any]) -> LedgerEntry:
        return LedgerEntry(
            key=row[0],
            run_id=self.uuid_in(row[1]),
            tool_use_id=row[2],
            capability=row[3],
            status=row[4],
            started_at=self.time_in(row[5]),
            finished_at=self.time_in_or_none(row[6]),
            result=unjson(row[7]),
            error=row[8],
        )

    def audit_row(self, a: AuditRecord) -> Params:
        return (
            self.uuid(a.run_id),
            self.time(a.at),
            a.principal,
            a.capability,
            a.kind,
            a.tool_use_id,
            a.outcome,
            a.tier,
            self.money(a.amount_usd),
            json_text(a.input),
            a.output,
            a.idempotency_key,
            a.duration_ms,
        )

    def audit_from_row(self, row: Sequence[Any]) -> AuditRecord:
        return AuditRecord(
            run_id=self.uuid_in(row[0]),
            at=self.time_in(row[1]),
            principal=row[2],
            capability=row[3],
            kind=row[4],
            tool_use_id=row[5],
            outcome=row[6],
            tier=row[7],
            amount_usd=self.money_in(row[8]),
            input=json.loads(row[9]),
            output=row[10],
            idempotency_key=row[11],
            duration_ms=row[12],
        )
