"""Realistic records and events for store tests: one builder per kind, fixed times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

from fiduciary.events import (
    ActionResolved,
    Canvas,
    Compaction,
    ContextLayers,
    Event,
    GuardFired,
    GuardNote,
    PendingAction,
    PendingInput,
    PostGuardFired,
    RunCompleted,
    RunFailed,
    RunStarted,
    TextDelta,
    TextGuardFired,
    ThinkingDelta,
    ThinkingDone,
    TodoUpdate,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
    ToolProgress,
    TurnComplete,
    TurnRetracted,
    Usage,
    UserMessage,
)
from fiduciary.stores.base import (
    ApprovalRecord,
    ApprovalStatus,
    AuditRecord,
    LedgerEntry,
    RunRecord,
    RunStatus,
)

T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """``T0`` plus some seconds (microseconds included)."""
    return T0 + timedelta(seconds=seconds)


def make_run(
    *,
    run_id: UUID | None = None,
    principal: str = "alice",
    status: RunStatus = "running",
    created: float = 0.0,
    title: str = "Pay the March rent",
    scopes: tuple[str, ...] = ("payments:send", "accounts:read"),
) -> RunRecord:
    return RunRecord(
        run_id=run_id or uuid4(),
        principal=principal,
        status=status,
        created_at=at(created),
        updated_at=at(created),
        title=title,
        scopes=scopes,
    )


def deltas(run_id: UUID, first_seq: int, count: int, *, start: float = 1.0) -> list[Event]:
    """``count`` text deltas with seqs ``first_seq``, ``first_seq + 1`` ..."""
    return [
        TextDelta(run_id=run_id, seq=seq, at=at(start + seq / 1000), text=f"token {seq} ")
        for seq in range(first_seq, first_seq + count)
    ]


def started(run_id: UUID, *, principal: str = "alice") -> RunStarted:
    return RunStarted(
        run_id=run_id,
        seq=1,
        at=at(0.000001),
        principal=principal,
        capabilities=["balance", "send"],
        model="scripted",
        allowed_kinds=["read", "execute"],
    )


def make_approval(
    run_id: UUID,
    *,
    principal: str = "alice",
    status: ApprovalStatus = "pending",
    created: float = 5.0,
    amount_usd: Decimal | None = Decimal("1250.10"),
    tool_use_id: str = "toolu_01",
    executor: str = "server",
) -> ApprovalRecord:
    return ApprovalRecord(
        approval_id=uuid4(),
        run_id=run_id,
        tool_use_id=tool_use_id,
        principal=principal,
        capability="send",
        args={"to": "landlord", "amount": "1250.10", "memo": "March", "meta": {"n": [1, 2.5]}},
        args_digest="sha256:" + "ab" * 32,
        tier="confirm",
        amount_usd=amount_usd,
        modifiable_fields=("amount", "memo"),
        executor="client" if executor == "client" else "server",
        status=status,
        created_at=at(created),
        expires_at=at(created + 3600),
    )


def make_audit(
    run_id: UUID,
    *,
    principal: str = "alice",
    when: float = 10.0,
    tier: str | None = "auto",
    outcome: str = "ok",
    amount_usd: Decimal | None = Decimal("0.10"),
    tool_use_id: str = "toolu_02",
) -> AuditRecord:
    return AuditRecord(
        run_id=run_id,
        at=at(when),
        principal=principal,
        capability="send",
        kind="execute",
        tool_use_id=tool_use_id,
        outcome=outcome,
        tier=tier,
        amount_usd=amount_usd,
        input={"to": "bob", "amount": "0.10"},
        output='{"sent": "0.10"}',
        idempotency_key=f"{run_id}:{tool_use_id}",
        duration_ms=12.5,
    )


def make_ledger(
    run_id: UUID, *, key: str = "run:toolu_03", capability: str = "send"
) -> LedgerEntry:
    return LedgerEntry(
        key=key,
        run_id=run_id,
        tool_use_id="toolu_03",
        capability=capability,
        status="started",
        started_at=at(20),
    )


def every_event(run_id: UUID) -> list[Event]:
    """One event of every type in ``fiduciary.events``, realistic fields, seqs 1, 2, 3 ..."""
    approval_id = uuid4()
    payloads: list[dict[str, Any]] = [
        {
            "type": "run_started",
            "principal": "alice",
            "capabilities": ["balance", "send"],
            "model": "anthropic:claude-sonnet-4-5",
            "allowed_kinds": ["read", "execute"],
        },
        {"type": "user_message", "text": "Pay the rent — 1 250,10 € ✓\nthanks"},
        {"type": "thinking_delta", "text": "The user wants…", "block_index": 0},
        {"type": "thinking_done", "block_index": 0, "signature": "sig_Q2xhdWRl"},
        {"type": "text_delta", "text": "Let me check your balance. "},
        {
            "type": "tool_call_start",
            "tool_use_id": "toolu_01",
            "name": "send",
            "input": {"to": "landlord", "amount": 1250.1, "tags": ["rent", None], "ok": True},
            "args_digest": "sha256:" + "cd" * 32,
            "kind": "execute",
        },
        {
            "type": "guard_fired",
            "tool_use_id": "toolu_01",
            "guard": "large_amount",
            "tier": "financial",
            "phase": "pre",
            "verdict": "warn",
            "message": "More than 1 000 USD",
        },
        {
            "type": "pending_action",
            "approval_id": approval_id,
            "tool_use_id": "toolu_01",
            "name": "send",
            "input": {"to": "landlord", "amount": "1250.10"},
            "description": "Send 1,250.10 USD to landlord",
            "amount_usd": Decimal("1250.10"),
            "tier": "explicit",
            "acknowledge": "amount",
            "modifiable_fields": ["amount", "memo"],
            "guard_notes": [
                GuardNote(guard="large_amount", verdict="warn", message="More than 1 000 USD")
            ],
            "expires_at": at(3600),
            "args_digest": "sha256:" + "cd" * 32,
            "executor": "server",
        },
        {
            "type": "action_resolved",
            "approval_id": approval_id,
            "tool_use_id": "toolu_01",
            "decision": "approved",
            "by": "alice",
            "reason": "rent",
            "edits": {"memo": "March rent"},
            "args_digest": "sha256:" + "ef" * 32,
        },
        {
            "type": "tool_progress",
            "tool_use_id": "toolu_01",
            "name": "send",
            "message": "submitting",
            "pct": 0.5,
        },
        {
            "type": "tool_call_end",
            "tool_use_id": "toolu_01",
            "name": "send",
            "output": '{"sent": "1250.10"}',
            "is_error": False,
            "error_code": None,
            "recovery": "ledger",
            "truncated": True,
            "hints": ["balance is low"],
        },
        {
            "type": "tool_call_rejected",
            "tool_use_id": "toolu_02",
            "name": "delete_account",
            "reason": "not_allowed",
            "message": "delete_account is not one of this run's capabilities",
        },
        {
            "type": "compaction",
            "phase": "end",
            "summary": "Paid the rent.",
            "tokens_before": 120_000,
            "tokens_after": 8_000,
            "method": "summary",
            "kept_from": 40,
            "stubbed_before": 40,
        },
        {
            "type": "context_layers",
            "context": "<financial_context>\nAvailable: 12 USDC ($12.00)\n</financial_context>",
            "recalled": ["fact: paid Alice 3 times, 45 USDC in all", "advice: keep a buffer"],
        },
        {
            "type": "todo_update",
            "tool_use_id": "toolu_07",
            "todos": [
                {"text": "Read the balance", "status": "done"},
                {"text": "Pay the rent", "status": "in_progress"},
                {"text": "Tell Ann", "status": "pending"},
            ],
        },
        {
            "type": "usage",
            "model": "anthropic:claude-sonnet-4-5",
            "input_tokens": 1200,
            "output_tokens": 80,
            "cache_read_tokens": 1000,
            "cache_write_tokens": 200,
            "total_input_tokens": 5400,
            "total_output_tokens": 300,
        },
        {"type": "turn_complete", "stop_reason": "tool_use"},
        {"type": "turn_retracted", "from_seq": 5},
        {
            "type": "run_completed",
            "text": "Done: paid 1,250.10 USD.",
            "input_tokens": 5400,
            "output_tokens": 300,
            "tool_calls": 2,
        },
        {"type": "run_failed", "reason": "budget", "message": "over the token budget"},
        {
            "type": "post_guard_fired",
            "tool_use_id": "toolu_01",
            "name": "send",
            "guard": "balance_promise",
            "tier": "financial",
            "verdict": "warn",
            "message": "the balance after is 880, not 980",
            "for_person": "Your balance is now 880 € — not the 980 € shown.",
        },
        {
            "type": "text_guard_fired",
            "guard": "unbacked_amount",
            "tier": "financial",
            "phase": "output",
            "verdict": "warn",
            "message": "The answer states amounts no tool returned: 1250.",
            "for_person": "Check these figures: no tool of this run returned them.",
        },
        {
            "type": "canvas",
            "tool_use_id": "toolu_08",
            "title": "Rent paid, by month",
            "kind": "bar_chart",
            "html": "<!doctype html><html><body><svg><text>March</text></svg></body></html>",
        },
        {
            "type": "pending_input",
            "input_id": "in_01",
            "input_schema": {"type": "object", "required": ["iban"]},
            "prompt": "Which account should receive the refund?",
        },
    ]
    classes: dict[str, type[Any]] = {
        cls.model_fields["type"].default: cls
        for cls in (
            RunStarted,
            UserMessage,
            ThinkingDelta,
            ThinkingDone,
            TextDelta,
            ToolCallStart,
            GuardFired,
            PendingAction,
            ActionResolved,
            ToolProgress,
            ToolCallEnd,
            ToolCallRejected,
            Compaction,
            ContextLayers,
            TodoUpdate,
            Usage,
            TurnComplete,
            TurnRetracted,
            RunCompleted,
            RunFailed,
            PostGuardFired,
            TextGuardFired,
            Canvas,
            PendingInput,
        )
    }
    # A non-UTC offset and microseconds: the store must keep the instant and the precision.
    tz = timezone(timedelta(hours=-5, minutes=-30))
    events: list[Event] = []
    for seq, payload in enumerate(payloads, start=1):
        cls = classes[payload["type"]]
        when = at(seq + 0.123456).astimezone(tz)
        events.append(cls(run_id=run_id, seq=seq, at=when, **payload))
    return events
