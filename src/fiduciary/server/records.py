"""The handlers of ``/audit`` and ``/ledger``: what was decided and what was executed, read back.

Both are principal-scoped: a key reads its own principal's rows; an admin key reads everyone's
(and may filter by ``principal``). Rows are stored redacted already; they are redacted once more
on the way out with the agent's redactor, so a secret the agent has learnt since never shows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator
from starlette.responses import Response

from ..redaction import Redactor
from ..stores.base import AuditRecord, LedgerRow, LedgerStatus, RecordQuery
from .auth import ApiKey
from .pipeline import Call, json_response
from .problems import ProblemError
from .state import Server

__all__ = [
    "AuditList",
    "AuditOut",
    "LedgerList",
    "LedgerOut",
    "RecordsQuery",
    "list_audit",
    "list_ledger",
]


class RecordsQuery(BaseModel):
    """The filters of ``GET /audit`` and ``GET /ledger``; each one given narrows the rows."""

    model_config = ConfigDict(extra="forbid")

    run_id: UUID | None = Field(default=None, description="Only this run's rows.")
    principal: str | None = Field(
        default=None,
        max_length=200,
        pattern=r"^[^\x00]*$",
        description="Only this principal's rows (another principal's: admin keys only).",
    )
    capability: str | None = Field(
        default=None,
        max_length=200,
        pattern=r"^[^\x00]*$",
        description="Only the calls of this capability.",
    )
    since: AwareDatetime | None = Field(
        default=None,
        description="Rows at or after this time (ISO 8601 with a zone, e.g. 2026-03-01T00:00Z).",
    )
    until: AwareDatetime | None = Field(
        default=None, description="Rows before this time (ISO 8601 with a zone)."
    )
    limit: int = Field(default=100, ge=1, le=1000, description="At most this many, newest first.")

    @field_validator("since", "until", mode="before")
    @classmethod
    def _plus_sign(cls, value: Any) -> Any:
        """``+01:00`` unencoded in a query string arrives as `` 01:00``: read it as meant."""
        if isinstance(value, str) and len(value) > 6 and value[-6] == " ":
            return f"{value[:-6]}+{value[-5:]}"
        return value

    @field_validator("since", "until")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        """In UTC, as stored (a time whose UTC is outside years 1-9999 is refused, not a 500)."""
        if value is None:
            return None
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValueError("the time is out of range in UTC") from None

    def scoped(self, key: ApiKey) -> RecordQuery:
        """The store's query for ``key``: its own principal's rows unless it is an admin."""
        principal = self.principal
        if not key.is_admin:
            if principal is not None and principal != key.principal:
                raise ProblemError(
                    "insufficient_scope", "only an admin key reads another principal's rows"
                )
            principal = key.principal
        return RecordQuery(
            run_id=self.run_id,
            principal=principal,
            capability=self.capability,
            since=self.since,
            until=self.until,
            limit=self.limit,
        )


class AuditOut(BaseModel):
    """One gate decision or outcome: ``outcome`` is ok, error, pending, ledger (answered from
    the ledger, not run again), unknown (may have acted), or rejected:<reason>."""

    run_id: UUID
    at: datetime
    principal: str
    capability: str
    kind: str
    tool_use_id: str
    outcome: str
    tier: str | None
    amount_usd: Decimal | None
    input: dict[str, Any]
    output: str | None
    idempotency_key: str | None
    duration_ms: float | None

    @classmethod
    def of(cls, record: AuditRecord, redactor: Redactor) -> AuditOut:
        return cls(
            run_id=record.run_id,
            at=record.at,
            principal=record.principal,
            capability=record.capability,
            kind=record.kind,
            tool_use_id=record.tool_use_id,
            outcome=record.outcome,
            tier=record.tier,
            amount_usd=record.amount_usd,
            input=redactor.redact(record.input),
            output=None if record.output is None else redactor.redact_text(record.output),
            idempotency_key=record.idempotency_key,
            duration_ms=record.duration_ms,
        )


class AuditList(BaseModel):
    audit: list[AuditOut]


class LedgerOut(BaseModel):
    """One write the idempotency ledger recorded: started (its outcome may be unknown), done
    (with its recorded result) or failed."""

    key: str
    run_id: UUID
    principal: str
    tool_use_id: str
    capability: str
    status: LedgerStatus
    started_at: datetime
    finished_at: datetime | None
    result: Any
    error: str | None

    @classmethod
    def of(cls, row: LedgerRow, redactor: Redactor) -> LedgerOut:
        entry = row.entry
        return cls(
            key=entry.key,
            run_id=entry.run_id,
            principal=row.principal,
            tool_use_id=entry.tool_use_id,
            capability=entry.capability,
            status=entry.status,
            started_at=entry.started_at,
            finished_at=entry.finished_at,
            result=redactor.redact(entry.result),
            error=None if entry.error is None else redactor.redact_text(entry.error),
        )


class LedgerList(BaseModel):
    ledger: list[LedgerOut]


async def list_audit(server: Server, call: Call) -> Response:
    query = call.query_as(RecordsQuery).scoped(call.caller)
    redactor = server.agent.redactor
    rows = await server.agent.store.find_audit(query)
    return json_response(AuditList(audit=[AuditOut.of(r, redactor) for r in rows]))


async def list_ledger(server: Server, call: Call) -> Response:
    query = call.query_as(RecordsQuery).scoped(call.caller)
    redactor = server.agent.redactor
    rows = await server.agent.store.find_ledger(query)
    return json_response(LedgerList(ledger=[LedgerOut.of(r, redactor) for r in rows]))
