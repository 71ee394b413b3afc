"""What goes through the gates (``fiduciary.gates``): the run's ``CallScope``, a ``ParsedCall``,
the ``Attempt`` carrying both from admission to execution, and the verdicts (``Refused``,
``Pending``, ``Outcome``), each with the event that records it and its audit row.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, TypeAlias
from uuid import UUID

from pydantic import BaseModel

from ..capabilities import CallContext, Capability, Kind, Principal
from ..events import (
    GuardFiredDraft,
    GuardNote,
    Origin,
    PendingActionDraft,
    RejectReason,
    ToolCallEndDraft,
    ToolCallRejectedDraft,
    ToolProgressDraft,
)
from ..guards import RunHistory
from ..stores.base import ApprovalRecord, AuditRecord, LedgerEntry, LedgerFinish

__all__ = [
    "Attempt",
    "AwaitingRun",
    "CallScope",
    "Outcome",
    "ParsedCall",
    "Pending",
    "Refused",
    "Verdict",
    "error_content",
]

_NO_EFFECT = frozenset({Kind.READ.value, Kind.PREVIEW.value})


async def _nothing(*_: Any) -> None:
    return None


def _in_person() -> Origin | None:
    return None


@dataclass(frozen=True, slots=True)
class CallScope:
    """What one run gives the pipeline: who, which capabilities, what happened so far, the
    lease epoch its ledger rows are fenced by, and where the guards' and handlers' reports
    (``guard_fired``, ``tool_progress``, redacted already) go.
    ``before_effect`` is awaited before a call that is not ``concurrent`` starts its effect
    (the loop makes its log durable and checks the principal's lock there).

    A run that keeps its own log may also take the ledger's writes into its commits:
    ``begin`` replaces ``before_effect`` then ``Store.ledger_begin`` for such a call (the loop
    commits its log and the ledger row in one durable transaction), and ``finish`` takes a
    row's ``Store.ledger_finish`` into the log's next commit. ``origin``: the outside event
    the run's latest message came from (None: its principal in person), read at each call.
    ``deps``: what the application gave the run (``ctx.deps``; never recorded)."""

    run_id: UUID
    principal: Principal
    allowed: frozenset[str]
    allowed_kinds: frozenset[Kind]
    history: RunHistory
    epoch: int = 0
    report: Callable[[GuardFiredDraft | ToolProgressDraft], Awaitable[None]] = _nothing
    before_effect: Callable[[], Awaitable[None]] = _nothing
    begin: Callable[[LedgerEntry], Awaitable[LedgerEntry | None]] | None = None
    finish: Callable[[LedgerFinish], None] | None = None
    origin: Callable[[], Origin | None] = _in_person
    deps: Any = None  # the run's dependencies, handed to each handler as ``ctx.deps``


@dataclass(slots=True)
class ParsedCall:
    """A tool call as the model produced it, parsed once."""

    tool_use_id: str
    name: str
    raw: dict[str, Any] | None  # None: the arguments were not a JSON object
    cap: Capability | None
    args: BaseModel | None = None
    error: str | None = None
    digest: str = ""
    _json: dict[str, Any] | None = None
    _shown: dict[str, Any] | None = None

    @property
    def args_json(self) -> dict[str, Any]:
        """The validated arguments as JSON (the raw ones when they did not validate); made
        once: the digest, the guards, the event, the approval and the audit row share it."""
        if self._json is None:
            self._json = self.args.model_dump(mode="json") if self.args is not None else None
        return self._json if self._json is not None else (self.raw or {})


@dataclass(slots=True)
class Attempt:
    """One call on its way through the gates, admit → execute.

    ``tier``, ``amount_usd`` and ``notes`` are what admission found (or, for an approved call,
    what the approval recorded); ``recovery`` marks a call re-run after a crash;
    ``concurrent``: a read running beside the others of its turn — it never waits for a
    person, and starts without ``before_effect``."""

    scope: CallScope
    call: ParsedCall
    tier: str | None = None
    amount_usd: Decimal | None = None
    notes: tuple[GuardNote, ...] = ()
    recovery: Literal["replayed"] | None = None
    concurrent: bool = False
    _ctx: CallContext | None = None

    @property
    def cap(self) -> Capability:
        assert self.call.cap is not None  # admitted calls only
        return self.call.cap

    @property
    def args(self) -> BaseModel:
        assert self.call.args is not None  # admitted calls only
        return self.call.args


class AwaitingRun(Exception):  # noqa: N818 (control flow, not an error)
    """Raised by a handler whose result is another run's end (a ``delegate`` call whose child
    has not ended): the call stays open, its run waits ``awaiting_child`` holding nothing, and
    the call runs again when that run has ended (``fiduciary.delegation``)."""

    def __init__(self, run_id: UUID) -> None:
        super().__init__(f"waiting for run {run_id}")
        self.run_id = run_id


@dataclass(frozen=True, slots=True)
class Refused:
    """The call does not run: its ``tool_call_rejected`` and (a known capability's) audit row."""

    call: ParsedCall
    reason: RejectReason
    message: str
    audit: AuditRecord | None = None

    @property
    def draft(self) -> ToolCallRejectedDraft:
        return ToolCallRejectedDraft(
            tool_use_id=self.call.tool_use_id,
            name=self.call.name,
            reason=self.reason,
            message=self.message,
        )


@dataclass(frozen=True, slots=True)
class Pending:
    """The call waits for a person (or for the client that executes it): the approval row, the
    ``pending_action`` the person is shown, and the audit row."""

    record: ApprovalRecord
    draft: PendingActionDraft
    audit: AuditRecord


@dataclass(slots=True)
class Outcome:
    """The result of one executed call: its ``tool_call_end`` and its audit row."""

    call: ParsedCall
    content: str
    is_error: bool = False
    error_code: str | None = None
    recovery: Literal["replayed", "ledger", "unknown"] | None = None
    truncated: bool = False
    hints: list[str] = field(default_factory=list)
    audit: AuditRecord | None = None
    # (the validated output,) of a call whose handler ran and succeeded here: what the
    # post-execution guards judge; None for an error or a result the ledger recorded
    ran: tuple[Any] | None = None
    # the run whose end will be this call's result (``AwaitingRun``): no result yet, nothing
    # is recorded, and the call's run waits for that one
    awaiting: UUID | None = None

    @property
    def draft(self) -> ToolCallEndDraft:
        # a write's tier and amount are its audit row's: the log says what the audit says
        audit = self.audit
        write = audit is not None and audit.kind not in _NO_EFFECT
        return ToolCallEndDraft(
            tool_use_id=self.call.tool_use_id,
            name=self.call.name,
            output=self.content,
            is_error=self.is_error,
            error_code=self.error_code,
            recovery=self.recovery,
            truncated=self.truncated,
            hints=self.hints,
            tier=audit.tier if write and audit is not None else None,
            amount_usd=audit.amount_usd if write and audit is not None else None,
        )


Verdict: TypeAlias = Refused | Pending | Outcome


def error_content(code: str, message: str) -> str:
    return json.dumps({"error": code, "message": message}, ensure_ascii=False)
