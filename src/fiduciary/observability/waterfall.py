"""A run's trace as a waterfall, built from its event log alone (no OpenTelemetry needed).

The spans have the shape of those ``fiduciary.observability`` exports to OpenTelemetry
(``_spans.py``): an ``invoke_agent`` span per drive (a run suspended for a person and resumed
is two drives), a ``chat`` span per model call (model, tokens in, out and cached, cost, finish
reason), an ``execute_tool`` span per capability call (kind, tier, outcome, ledger recovery),
guards and decisions as span events; and, what a trace cannot show once a process has ended,
an ``await_approval`` span for the time a pending action waited for a person (open while it
waits). The console draws it (``GET /runs/{run_id}/trace``).

Times are the events' (the injectable clock's). A model call starts when the event before its
first one was committed (the loop asks the model right after) and ends with its
``turn_complete``; a call's span starts at its ``tool_call_start`` (or, after a resume, its
``action_resolved``) and ends at its end, its refusal or its suspension. Attributes hold names,
ids, counts and verdicts: never arguments, results or messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from ..events import (
    ActionResolved,
    Event,
    GuardFired,
    PendingAction,
    PostGuardFired,
    RunCompleted,
    RunFailed,
    RunStarted,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
    TurnComplete,
    TurnRetracted,
    Usage,
    UserMessage,
)
from ..stores.base import AuditRecord

__all__ = ["SpanEventView", "SpanView", "TraceView", "waterfall"]

Attribute = str | int | bool
_TURN = ("text_delta", "thinking_delta", "thinking_done", "tool_call_start", "usage")


class SpanEventView(BaseModel):
    """Something that happened inside a span: a guard, a pending action, a decision."""

    name: str
    at: datetime
    attributes: dict[str, Attribute] = Field(default_factory=dict)


class SpanView(BaseModel):
    """One span of the waterfall."""

    span_id: str
    parent_id: str | None = None
    name: str
    kind: Literal["agent", "chat", "tool", "approval"]
    start: datetime
    end: datetime | None = None
    """None: still open (an approval waiting for a person)."""
    status: Literal["ok", "error", "open"] = "ok"
    attributes: dict[str, Attribute] = Field(default_factory=dict)
    events: list[SpanEventView] = Field(default_factory=list)


class TraceView(BaseModel):
    """A run's spans, parents before their children, in the order they started."""

    run_id: str
    start: datetime | None
    end: datetime | None
    spans: list[SpanView]


def waterfall(events: Sequence[Event], audit: Sequence[AuditRecord] = ()) -> TraceView:
    """The waterfall of a run's events (and its audit rows: the calls' kind, tier, outcome)."""
    builder = _Builder(audit)
    for event in events:
        builder.add(event)
    builder.finish()
    run_id = str(events[0].run_id) if events else ""
    return TraceView(
        run_id=run_id,
        start=events[0].at if events else None,
        end=events[-1].at if events else None,
        spans=builder.spans,
    )


class _Builder:
    def __init__(self, audit: Sequence[AuditRecord]) -> None:
        self.spans: list[SpanView] = []
        self.rows: dict[str, list[AuditRecord]] = {}
        for row in audit:
            self.rows.setdefault(row.tool_use_id, []).append(row)
        self.drive: SpanView | None = None
        self.drives = 0
        self.model = ""
        self.chat: SpanView | None = None
        self.tools: dict[str, SpanView] = {}
        self.approvals: dict[str, SpanView] = {}  # by tool_use_id
        self.suspended = False  # the drive has put a call before a person: it ends there
        self.last: datetime | None = None  # the previous event's time
        self.counter = 0

    # --- spans ------------------------------------------------------------------------------
    def _open(self, kind: Literal["agent", "chat", "tool", "approval"], name: str, at: datetime,
              parent: SpanView | None, **attributes: Attribute) -> SpanView:  # fmt: skip
        self.counter += 1
        span = SpanView(
            span_id=f"{kind}-{self.counter}",
            parent_id=None if parent is None else parent.span_id,
            name=name,
            kind=kind,
            start=at,
            attributes=dict(attributes),
        )
        self.spans.append(span)
        return span

    def _agent(self, at: datetime) -> SpanView:
        if self.drive is None:
            self.drives += 1
            attributes: dict[str, Attribute] = {
                "gen_ai.operation.name": "invoke_agent",
                "fiduciary.drive": self.drives,
            }
            self.drive = self._open("agent", "invoke_agent fiduciary", at, None, **attributes)
            if self.model:
                self.drive.attributes["gen_ai.request.model"] = self.model
        return self.drive

    def _end_drive(self, at: datetime, status: str) -> None:
        if self.drive is None:
            return
        self._end_chat(at)
        for tool_use_id in list(self.tools):
            self._end_tool(tool_use_id, at, "interrupted", error=True)
        self.drive.end = at
        self.drive.attributes["fiduciary.run.status"] = status
        if status in ("failed", "cancelled"):
            self.drive.status = "error"
        self.drive = None
        self.suspended = False

    def _chat(self, at: datetime) -> SpanView:
        if self.chat is None:
            drive = self._agent(at)
            start = self.last if self.last is not None and self.last >= drive.start else at
            self.chat = self._open(
                "chat",
                f"chat {self.model}".rstrip(),
                start,
                drive,
                **{"gen_ai.operation.name": "chat"},
            )
        return self.chat

    def _end_chat(self, at: datetime, finish: str | None = None) -> None:
        if self.chat is None:
            return
        if finish is not None:
            self.chat.attributes["gen_ai.response.finish_reasons"] = finish
        self.chat.end = at
        self.chat = None

    def _tool(self, tool_use_id: str, name: str | None, at: datetime) -> SpanView:
        span = self.tools.get(tool_use_id)
        if span is None:
            attributes: dict[str, Attribute] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.call.id": tool_use_id,
            }
            if name:
                attributes["gen_ai.tool.name"] = name
            span = self._open(
                "tool", f"execute_tool {name or ''}".rstrip(), at, self._agent(at), **attributes
            )
            self.tools[tool_use_id] = span
        return span

    def _end_tool(self, tool_use_id: str, at: datetime, outcome: str, *, error: bool) -> None:
        span = self.tools.pop(tool_use_id, None)
        if span is None:
            return
        rows = self.rows.get(tool_use_id)
        if rows:
            row = rows.pop(0)  # a pending call has two rows: pending, then its outcome
            span.name = f"execute_tool {row.capability}"
            span.attributes["gen_ai.tool.name"] = row.capability
            span.attributes["fiduciary.tool.kind"] = row.kind
            if row.tier is not None:
                span.attributes["fiduciary.tool.tier"] = row.tier
            if outcome in ("ok", "error"):
                outcome = row.outcome
        span.attributes["fiduciary.tool.outcome"] = outcome
        span.end = at
        if error:
            span.status = "error"

    def _usage(self, e: Usage, at: datetime) -> None:
        chat = self._chat(at)
        chat.name = f"chat {e.model}"
        chat.attributes.update(
            {
                "gen_ai.response.model": e.model,
                "gen_ai.usage.input_tokens": e.input_tokens,
                "gen_ai.usage.output_tokens": e.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": e.cache_read_tokens,
            }
        )
        if e.cost_usd is not None:
            chat.attributes["fiduciary.cost_usd"] = str(e.cost_usd)
        if e.tier is not None:
            chat.attributes["fiduciary.model.tier"] = e.tier

    def _pending(self, e: PendingAction, at: datetime) -> None:
        """The call's span ends pending; an approval span opens and the drive is suspended."""
        span = self._tool(e.tool_use_id, e.name, at)
        span.attributes["fiduciary.tool.tier"] = e.tier
        self._end_tool(e.tool_use_id, at, "pending", error=False)
        attributes: dict[str, Attribute] = {
            "fiduciary.approval.id": str(e.approval_id),
            "fiduciary.approval.tier": e.tier,
            "fiduciary.approval.executor": e.executor,
        }
        if e.amount_usd is not None:
            attributes["fiduciary.approval.amount_usd"] = str(e.amount_usd)
        waiting = self._open("approval", f"await_approval {e.name}", at, None, **attributes)
        waiting.status = "open"
        self.approvals[e.tool_use_id] = waiting
        self.suspended = True

    def _resolved(self, e: ActionResolved, at: datetime) -> None:
        """The approval span ends with the decision, noted on the call's span."""
        waited = self.approvals.pop(e.tool_use_id, None)
        if waited is not None:
            waited.end = at
            waited.status = "ok" if e.decision in ("approved", "client_result") else "error"
            waited.attributes["fiduciary.approval.decision"] = e.decision
            if e.by is not None:
                waited.attributes["fiduciary.approval.by"] = e.by
        span = self._tool(e.tool_use_id, None, at)
        if waited is not None and "gen_ai.tool.name" not in span.attributes:
            name = waited.name.removeprefix("await_approval ")
            span.name = f"execute_tool {name}"
            span.attributes["gen_ai.tool.name"] = name
        span.events.append(
            SpanEventView(
                name="decision",
                at=at,
                attributes={
                    "fiduciary.approval.decision": e.decision,
                    "fiduciary.approval.edited": bool(e.edits),
                },
            )
        )

    # --- events -----------------------------------------------------------------------------
    def add(self, e: Event) -> None:
        at = e.at
        if self.suspended and isinstance(e, ActionResolved | UserMessage):
            self._end_drive(self.last or at, "awaiting_approval")
        match e:
            case RunStarted():
                self.model = e.model
                self._agent(at).attributes["gen_ai.request.model"] = e.model
            case UserMessage():
                self._agent(at)
            case Usage():
                self._usage(e, at)
            case TurnComplete():
                self._chat(at)
                self._end_chat(at, e.stop_reason)
            case TurnRetracted():
                self._chat(at).events.append(
                    SpanEventView(name="turn_retracted", at=at, attributes={"from_seq": e.from_seq})
                )
                self._end_chat(at, "retracted")
            case ToolCallStart():
                self._chat(at)
                span = self._tool(e.tool_use_id, e.name, at)
                if e.kind is not None:
                    span.attributes["fiduciary.tool.kind"] = e.kind
            case ToolCallEnd():
                span = self._tool(e.tool_use_id, e.name, at)
                if e.recovery is not None:
                    span.attributes["fiduciary.tool.recovery"] = e.recovery
                if e.is_error:
                    span.attributes["error.type"] = e.error_code or "tool_error"
                outcome = "error" if e.is_error else "ok"
                self._end_tool(e.tool_use_id, at, outcome, error=e.is_error)
            case ToolCallRejected():
                self._tool(e.tool_use_id, e.name, at).attributes["error.type"] = e.reason
                self._end_tool(e.tool_use_id, at, f"rejected:{e.reason}", error=True)
            case GuardFired() | PostGuardFired():
                target = self.tools.get(e.tool_use_id) or self._agent(at)
                target.events.append(
                    SpanEventView(
                        name="guard",
                        at=at,
                        attributes={
                            "fiduciary.guard.name": e.guard,
                            "fiduciary.guard.tier": e.tier,
                            "fiduciary.guard.verdict": e.verdict,
                        },
                    )
                )
            case PendingAction():
                self._pending(e, at)
            case ActionResolved():
                self._resolved(e, at)
            case RunCompleted():
                self._end_drive(at, "completed")
            case RunFailed():
                self._end_drive(at, "cancelled" if e.reason == "aborted" else "failed")
            case _:
                if e.type in _TURN:
                    self._chat(at)
        self.last = at

    def finish(self) -> None:
        """A drive still open at the end of the log: suspended (the run waits), or running."""
        if self.drive is not None and self.last is not None:
            if self.suspended:
                self._end_drive(self.last, "awaiting_approval")
            else:
                self.drive.status = "open"
