"""Private: run events mapped onto the global stream's three kinds of events.

One committed run event gives at most one bus event, named after the event's position in the
global order, so a reader resumes after any bus event without a gap or a repeat:

| run event | bus event |
| --- | --- |
| ``run_started`` | ``run_status`` running |
| ``pending_action`` | ``run_status`` awaiting_approval (or _client_result), with the call |
| ``run_completed`` | ``run_status`` completed |
| ``run_failed`` | ``run_status`` failed, or cancelled (reason ``aborted``) |
| ``text_delta`` | ``text`` |
| ``tool_call_start`` | ``tool_call`` started |
| ``tool_call_end`` | ``tool_call`` succeeded, or failed (``is_error``) |
| ``tool_call_rejected`` | ``tool_call`` denied, with the reason (the gates', or a person's) |
| ``action_resolved`` approved / client_result | ``tool_call`` approved / reported |

Nothing else is mapped (a denial or an expiry is told by the ``tool_call_rejected`` that follows
its ``action_resolved``). A bus event carries names, ids, kinds, tiers and amounts; never a
call's arguments or result.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal, get_args
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ..events import (
    ActionResolved,
    PendingAction,
    RunCompleted,
    RunFailed,
    RunStarted,
    TextDelta,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
)
from ..questions import waiting_status
from ..stores.base import GlobalEvent, RunStatus

__all__ = [
    "BUS_ADAPTER",
    "BUS_TYPES",
    "BusEvent",
    "BusType",
    "RunStatusChanged",
    "TextAppended",
    "ToolCallPhase",
    "bus_event",
    "run_event_types",
]

BusType = Literal["run_status", "text", "tool_call"]
BUS_TYPES: tuple[BusType, ...] = get_args(BusType)
Phase = Literal["started", "succeeded", "failed", "denied", "approved", "reported"]

_RUN_TYPES: dict[BusType, tuple[str, ...]] = {
    "run_status": ("run_started", "pending_action", "run_completed", "run_failed"),
    "text": ("text_delta",),
    "tool_call": ("tool_call_start", "tool_call_end", "tool_call_rejected", "action_resolved"),
}


class _Bus(BaseModel):
    model_config = ConfigDict(frozen=True)

    position: int = Field(description="Where it is in the global order: resume after it.")
    run_id: UUID
    seq: int = Field(description="The run event's seq.")
    at: datetime
    principal: str


class RunStatusChanged(_Bus):
    """A run started, waits for a person (or a client), completed, failed or was cancelled."""

    type: Literal["run_status"] = "run_status"
    status: RunStatus
    reason: str | None = None
    """Why it failed: budget, max_turns, error (a cancellation is ``aborted``)."""
    approval_id: UUID | None = None
    tool_use_id: str | None = None
    name: str | None = None
    """Waiting: the capability waiting for a decision, its tier and amount."""
    tier: Literal["confirm", "explicit"] | None = None
    amount_usd: Decimal | None = None


class TextAppended(_Bus):
    """The model's text, as it streams."""

    type: Literal["text"] = "text"
    text: str


class ToolCallPhase(_Bus):
    """A capability call moved on: started, succeeded, failed, denied (by the gates or a
    person: ``reason``), approved by a person, or reported by the client that executed it."""

    type: Literal["tool_call"] = "tool_call"
    tool_use_id: str
    phase: Phase
    name: str | None = None
    kind: str | None = None
    reason: str | None = None
    """denied: the gates' reason (``policy_denied``, ``denied`` by a person ...); failed: the
    error's code."""
    recovery: str | None = None


BusEvent = Annotated[RunStatusChanged | TextAppended | ToolCallPhase, Field(discriminator="type")]
BUS_ADAPTER: TypeAdapter[BusEvent] = TypeAdapter(BusEvent)


def run_event_types(types: Collection[BusType] | None = None) -> frozenset[str]:
    """The run event types that give the bus events of ``types`` (all: every mapped one)."""
    wanted = BUS_TYPES if types is None else types
    return frozenset(name for t in wanted for name in _RUN_TYPES[t])


def bus_event(found: GlobalEvent) -> BusEvent | None:
    """The bus event of a committed run event, or None if the bus does not carry it."""
    e = found.event
    base: dict[str, Any] = {
        "position": found.position,
        "run_id": e.run_id,
        "seq": e.seq,
        "at": e.at,
        "principal": found.principal,
    }
    match e:
        case RunStarted():
            return RunStatusChanged(**base, status="running")
        case PendingAction():
            waiting: RunStatus = waiting_status(e.executor)
            return RunStatusChanged(
                **base,
                status=waiting,
                approval_id=e.approval_id,
                tool_use_id=e.tool_use_id,
                name=e.name,
                tier=e.tier,
                amount_usd=e.amount_usd,
            )
        case RunCompleted():
            return RunStatusChanged(**base, status="completed")
        case RunFailed():
            if e.reason == "aborted":
                return RunStatusChanged(**base, status="cancelled", reason=e.reason)
            return RunStatusChanged(**base, status="failed", reason=e.reason)
        case TextDelta():
            return TextAppended(**base, text=e.text)
        case ToolCallStart():
            return ToolCallPhase(
                **base, tool_use_id=e.tool_use_id, phase="started", name=e.name, kind=e.kind
            )
        case ToolCallEnd():
            return ToolCallPhase(
                **base,
                tool_use_id=e.tool_use_id,
                phase="failed" if e.is_error else "succeeded",
                name=e.name,
                reason=e.error_code if e.is_error else None,
                recovery=e.recovery,
            )
        case ToolCallRejected():
            return ToolCallPhase(
                **base, tool_use_id=e.tool_use_id, phase="denied", name=e.name, reason=e.reason
            )
        case ActionResolved() if e.decision in ("approved", "client_result"):
            phase: Phase = "approved" if e.decision == "approved" else "reported"
            return ToolCallPhase(**base, tool_use_id=e.tool_use_id, phase=phase)
        case _:
            return None
