"""Private: what the SQL stores share about rows — column lists, JSON, seq and error checks.

The SQLite and PostgreSQL stores store the same records in the same columns; only their SQL
and their drivers differ. The in-memory store checks seqs the same way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from pydantic_core import PydanticSerializationError, to_jsonable_python

from ..events import Event
from ..exceptions import ConflictError, FiduciaryError, StoreError

_RUN_COLUMNS = (
    "run_id, principal, status, created_at, updated_at, last_seq, epoch, lease_owner, "
    "lease_until, title, scopes"
)
_APPROVAL_COLUMNS = (
    "approval_id, run_id, tool_use_id, principal, capability, args, args_digest, tier, "
    "amount_usd, modifiable_fields, executor, status, created_at, expires_at, decided_by, "
    "decided_at, reason, approved_args, approved_digest, client_result"
)
_LEDGER_COLUMNS = (
    "key, run_id, tool_use_id, capability, status, started_at, finished_at, result, error"
)
_AUDIT_COLUMNS = (
    "run_id, at, principal, capability, kind, tool_use_id, outcome, tier, amount_usd, input, "
    "output, idempotency_key, duration_ms"
)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_jsonable)
    except (TypeError, ValueError, PydanticSerializationError) as exc:
        raise StoreError(f"value cannot be stored as JSON: {exc}") from exc


def _json_or_none(value: Any) -> str | None:
    return None if value is None else _json(value)


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value)


def _unjson(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _seq_error(run_id: UUID, last_seq: int, events: Sequence[Event]) -> ConflictError | None:
    """Why ``events`` cannot follow ``last_seq`` in run ``run_id`` (None: they can)."""
    expected = last_seq + 1
    for event in events:
        if event.run_id != run_id:
            return ConflictError(f"event for run {event.run_id} appended to run {run_id}")
        if event.seq != expected:
            return ConflictError(f"run {run_id}: expected seq {expected}, got {event.seq}")
        expected += 1
    return None


def _copy_error(exc: FiduciaryError) -> FiduciaryError:
    """A fresh exception of the same kind, so that no two callers raise one object."""
    try:
        copy = type(exc)(*exc.args)
    except TypeError:
        return exc
    copy.__cause__ = exc.__cause__
    return copy
