"""The spans of one drive, built from its events (GenAI semantic conventions).

``invoke_agent`` spans the drive; ``chat`` each model call, from its start to its
``turn_complete`` (tokens, cached tokens, cost, finish reason); ``execute_tool`` each
capability call, from ``tool_call_start`` (or, after a resume, its ``action_resolved``) to its
end, a refusal or its suspension (kind, tier, outcome, ledger recovery). Guards, pending
actions and decisions are span events. Attributes carry names, ids, counts and verdicts only;
arguments, results and messages are added only when content capture is on, redacted first.

Recorded, then handed over in bursts: while a drive runs, each span is a small record (name,
times, attributes, events) and the SDK sees nothing; a finished span reaches the SDK when the
drive ends or when ``_BURST`` finished spans are waiting, started and ended at once with the
times it recorded. A span was exported only once ended anyway, and one SDK call per span with
all its attributes (rather than a start, attribute updates and an end spread over the drive)
costs a third of the CPU (``bench/loop.py``'s traced ratio). A process killed mid-drive loses
the spans of that drive not handed over yet, as it loses the drive's unended root in any case;
the run's log still holds everything (``waterfall``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from ..delegation import delegating_run
from ..events import (
    ActionResolved,
    Event,
    GuardFired,
    PendingAction,
    PostGuardFired,
    RunCompleted,
    RunFailed,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
    TurnComplete,
    TurnRetracted,
    Usage,
)
from ..questions import waiting_status
from ..redaction import Redactor
from ..stores.base import AuditRecord, RunRecord
from ._ids import forced, root_context, root_parent, unforce

if TYPE_CHECKING:
    from ._metrics import Metrics

__all__ = ["DriveSpans"]

_MAX_CONTENT = 4096
_MAX_NAME = 128
_BURST = 64  # finished spans kept before they are handed to the SDK mid-drive


class _Record:
    """One span while its drive runs: what the SDK is given when it is handed over."""

    __slots__ = ("attributes", "end", "error", "events", "kind", "name", "start")

    def __init__(self, name: str, kind: SpanKind, attributes: dict[str, Any]) -> None:
        self.name = name
        self.kind = kind
        self.attributes = attributes
        self.start = time.time_ns()
        self.end: int | None = None
        self.events: list[tuple[str, dict[str, Any], int]] | None = None  # made on first use
        self.error: str | None = None  # set: the span's status is ERROR with this description

    def event(self, name: str, attributes: dict[str, Any]) -> None:
        if self.events is None:
            self.events = []
        self.events.append((name, attributes, time.time_ns()))

    def fail(self, description: str = "") -> None:
        self.error = description

    def hand_over(self, span: Span) -> None:
        """Give an SDK span (started with this record's name, kind, attributes and start) the
        rest: its events, status and end."""
        if self.events is not None:
            for name, attributes, at in self.events:
                span.add_event(name, attributes, at)
        if self.error is not None:
            span.set_status(Status(StatusCode.ERROR, self.error or None))
        span.end(self.end)


class DriveSpans:
    """A ``DriveTrace`` (``fiduciary.tracing``) over OpenTelemetry."""

    def __init__(
        self,
        tracer: trace.Tracer,
        metrics: Metrics,
        run: RunRecord,
        *,
        resumed: bool,
        model: str,
        redactor: Redactor,
        capture_content: bool,
        owns_ids: bool,
    ) -> None:
        self._tracer = tracer
        self._metrics = metrics
        self._redactor = redactor
        self._capture = capture_content
        self._provider = model.split(":", 1)[0]
        self._chat: _Record | None = None
        self._tools: dict[str, _Record] = {}
        self._done: list[_Record] = []  # finished, not handed to the SDK yet
        self._audit: dict[str, AuditRecord] = {}
        self._status = "stopped"
        self._late: dict[str, Any] = {}  # the root's attributes known only at the end
        self._names: dict[str, str] = {}
        self._chats: dict[str, tuple[str, dict[str, Any]]] = {}
        run_id = run.run_id
        self._run_id = run_id
        self._run = str(run_id)
        self._resumed = resumed
        # a later drive (or ids we cannot choose): a child of the run's first drive
        self._child = resumed or not owns_ids
        self._root_attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "fiduciary",
            "gen_ai.conversation.id": self._run,
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": model,
            "fiduciary.run.id": self._run,
            "fiduciary.run.epoch": run.epoch,
            "fiduciary.run.resumed": resumed,
        }
        self._links: list[Link] = []
        caller = trace.get_current_span().get_span_context()
        if caller.is_valid:  # an HTTP request, a scheduler tick: linked, the run's trace is its own
            self._links.append(Link(caller, {"fiduciary.link": "caller"}))
        parent_run = delegating_run()
        if parent_run is not None and parent_run != run_id:  # a child run: its parent's trace
            self._links.append(Link(root_context(parent_run), {"fiduciary.link": "delegated_by"}))
            self._root_attributes["fiduciary.run.parent_id"] = str(parent_run)
        self._root: _Record | None = None  # recorded at the drive's first report (``_agent``)
        self._span: Span | None = None  # the SDK's root span, started by the first hand-over
        self._ctx = otel_context.Context()

    def _agent(self) -> _Record:
        """The drive's ``invoke_agent`` span, recorded at its first use: a ``Driver`` made and
        never driven leaves no span."""
        root = self._root
        if root is None:
            root = self._root = _Record(
                "invoke_agent fiduciary", SpanKind.INTERNAL, self._root_attributes
            )
        return root

    # --- DriveTrace ------------------------------------------------------------------------
    def chat_started(self, model: str) -> None:
        if self._root is None:
            self._agent()
        if self._chat is not None:
            self._end_chat(None)
        chat = self._chats.get(model)
        if chat is None:  # (a drive's turns mostly ask one model: its name and attributes once)
            chat = self._chats[model] = (
                f"chat {model}",
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": model.split(":", 1)[0],
                    "gen_ai.request.model": model,
                    "gen_ai.conversation.id": self._run,
                },
            )
        self._chat = _Record(chat[0], SpanKind.CLIENT, chat[1].copy())

    def observe(self, events: Sequence[Event], audit: Sequence[AuditRecord]) -> None:
        if self._root is None:
            self._agent()
        for row in audit:
            self._audit[row.tool_use_id] = row
        # by exact type (events are final): a ``match`` over pydantic classes pays an
        # isinstance check per case for every text delta
        handlers = _HANDLERS
        for event in events:
            handler = handlers.get(type(event))
            if handler is not None:
                handler(self, event)

    def committed(self, batch: int) -> None:
        self._metrics.batch(batch)

    def end(self, error: BaseException | None) -> None:
        root = self._root
        if root is None:
            return
        self._end_chat(None)
        for tool_use_id in list(self._tools):
            self._end_tool(tool_use_id, "interrupted", error=True)
        if error is not None:
            root.fail(type(error).__name__)
            self._late["error.type"] = type(error).__name__
        self._late["fiduciary.run.status"] = self._status
        self._metrics.run(self._status)
        if self._span is None:  # the whole drive in one hand-over: the root with everything
            root.attributes.update(self._late)
            self._hand_over()
        else:
            self._hand_over()
            self._span.set_attributes(self._late)
        assert self._span is not None
        root.end = time.time_ns()
        root.hand_over(self._span)

    # --- events ----------------------------------------------------------------------------
    def _usage(self, event: Usage) -> None:
        self._metrics.usage(event, self._provider)
        if self._chat is not None:
            usage = self._chat.attributes
            usage["gen_ai.response.model"] = event.model
            usage["gen_ai.usage.input_tokens"] = event.input_tokens
            usage["gen_ai.usage.output_tokens"] = event.output_tokens
            usage["gen_ai.usage.cache_read.input_tokens"] = event.cache_read_tokens
            usage["gen_ai.usage.cache_creation.input_tokens"] = event.cache_write_tokens
            if event.cost_usd is not None:
                usage["fiduciary.cost_usd"] = str(event.cost_usd)
            if event.tier is not None:
                usage["fiduciary.model.tier"] = event.tier

    def _turn_complete(self, event: TurnComplete) -> None:
        if self._chat is not None:
            self._chat.attributes["gen_ai.response.finish_reasons"] = [event.stop_reason]
        self._end_chat(None)

    def _turn_retracted(self, event: TurnRetracted) -> None:
        if self._chat is not None:
            self._chat.event("fiduciary.turn_retracted", {"from_seq": event.from_seq})

    def _tool_call_start(self, event: ToolCallStart) -> None:
        span = self._start_tool(event.tool_use_id, event.name)
        if event.kind is not None:
            span.attributes["fiduciary.tool.kind"] = event.kind
        if self._capture:
            span.attributes["gen_ai.tool.call.arguments"] = self._content(event.input)

    def _tool_call_end(self, event: ToolCallEnd) -> None:
        span = self._tools.get(event.tool_use_id) or self._start_tool(event.tool_use_id, event.name)
        attributes = span.attributes
        if event.recovery is not None:
            attributes["fiduciary.tool.recovery"] = event.recovery
            if event.recovery == "unknown":
                self._metrics.ledger_unknown(event.name)
        if self._capture:
            attributes["gen_ai.tool.call.result"] = self._content(event.output)
        if event.is_error:
            attributes["error.type"] = event.error_code or "tool_error"
        outcome = "error" if event.is_error else "ok"
        self._end_tool(event.tool_use_id, outcome, error=event.is_error, name=event.name)

    def _tool_call_rejected(self, event: ToolCallRejected) -> None:
        span = self._tools.get(event.tool_use_id) or self._start_tool(event.tool_use_id, event.name)
        span.attributes["error.type"] = event.reason
        self._end_tool(event.tool_use_id, f"rejected:{event.reason}", error=True)

    def _guard_fired(self, event: GuardFired | PostGuardFired) -> None:
        attributes: dict[str, Any] = {
            "fiduciary.guard.name": event.guard,
            "fiduciary.guard.tier": event.tier,
            "fiduciary.guard.phase": "post" if isinstance(event, PostGuardFired) else event.phase,
            "fiduciary.guard.verdict": event.verdict,
        }
        if self._capture:
            attributes["fiduciary.guard.message"] = self._content(event.message)
        target = self._tools.get(event.tool_use_id) or self._agent()
        target.event("fiduciary.guard", attributes)

    def _pending_action(self, event: PendingAction) -> None:
        self._metrics.pending(event.approval_id, event.at)
        span = self._tools.get(event.tool_use_id) or self._start_tool(event.tool_use_id, event.name)
        span.attributes["fiduciary.tool.tier"] = event.tier
        span.event(
            "fiduciary.pending_action",
            {
                "fiduciary.approval.id": str(event.approval_id),
                "fiduciary.approval.tier": event.tier,
                "fiduciary.approval.executor": event.executor,
                "fiduciary.approval.expires_at": event.expires_at.isoformat(),
            },
        )
        self._status = waiting_status(event.executor)
        self._end_tool(event.tool_use_id, "pending", error=False)

    def _action_resolved(self, event: ActionResolved) -> None:
        self._metrics.resolved(event.approval_id, event.at, event.decision)
        span = self._tools.get(event.tool_use_id) or self._start_tool(event.tool_use_id, None)
        span.event(
            "fiduciary.decision",
            {
                "fiduciary.approval.id": str(event.approval_id),
                "fiduciary.approval.decision": event.decision,
                "fiduciary.approval.edited": bool(event.edits),
            },
        )

    def _run_completed(self, event: RunCompleted) -> None:
        self._status = "completed"

    def _run_failed(self, event: RunFailed) -> None:
        self._status = "cancelled" if event.reason == "aborted" else "failed"
        self._late["fiduciary.run.failure"] = event.reason
        self._agent().fail(event.reason)
        self._end_chat(event.reason)

    # --- spans -----------------------------------------------------------------------------
    def _start_tool(self, tool_use_id: str, name: str | None) -> _Record:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.call.id": tool_use_id,
            "gen_ai.tool.type": "function",
        }
        if name is not None:  # the model's words when the name is not a capability's
            name = self._name(name)
            attributes["gen_ai.tool.name"] = name
        span = _Record(f"execute_tool {name or ''}".rstrip(), SpanKind.INTERNAL, attributes)
        self._tools[tool_use_id] = span
        return span

    def _name(self, name: str) -> str:
        """A tool's name as the model gave it, redacted and bounded (once per name)."""
        shown = self._names.get(name)
        if shown is None:
            shown = self._names[name] = self._redactor.redact_text(name)[:_MAX_NAME]
        return shown

    def _end_tool(
        self, tool_use_id: str, outcome: str, *, error: bool, name: str | None = None
    ) -> None:
        """End a call's span; ``name``: the call's name in its event, where its audit row
        (the capability's own name, kind and tier) is not known."""
        span = self._tools.pop(tool_use_id, None)
        if span is None:
            return
        row = self._audit.pop(tool_use_id, None)
        attributes = span.attributes
        if row is not None:
            span.name = f"execute_tool {row.capability}"
            attributes["gen_ai.tool.name"] = row.capability
            attributes["fiduciary.tool.kind"] = row.kind
            if row.tier is not None:
                attributes["fiduciary.tool.tier"] = row.tier
            outcome = row.outcome if outcome in ("ok", "error") else outcome
        elif name is not None:
            shown = self._name(name)
            span.name = f"execute_tool {shown}"
            attributes["gen_ai.tool.name"] = shown
        attributes["fiduciary.tool.outcome"] = outcome
        self._metrics.tool_call(
            outcome, attributes.get("fiduciary.tool.tier"), attributes.get("fiduciary.tool.kind")
        )
        if error:
            span.fail()
        self._finish(span)

    def _end_chat(self, failure: str | None) -> None:
        chat = self._chat
        if chat is None:
            return
        if failure is not None:
            chat.fail(failure)
            chat.attributes["error.type"] = failure
        self._chat = None
        self._finish(chat)

    def _finish(self, record: _Record) -> None:
        record.end = time.time_ns()
        self._done.append(record)
        if len(self._done) >= _BURST:  # a long drive: its spans are not all held to its end
            self._hand_over()

    # --- the hand-over to the SDK ----------------------------------------------------------
    def _hand_over(self) -> None:
        """Give the SDK the finished spans (the drive's root first, started if it is not)."""
        if self._span is None:
            self._start_root()
        done, self._done = self._done, []
        start_span, ctx = self._tracer.start_span, self._ctx
        for record in done:
            record.hand_over(
                start_span(record.name, ctx, record.kind, record.attributes, None, record.start)
            )

    def _start_root(self) -> None:
        root = self._agent()
        run_id, links = self._run_id, self._links
        if self._child:
            parent = trace.set_span_in_context(root_parent(run_id), otel_context.Context())
            if self._resumed:
                links.append(Link(root_context(run_id), {"fiduciary.link": "resumes"}))
            span = self._tracer.start_span(
                root.name, parent, root.kind, root.attributes, links, root.start
            )
        else:
            token = forced(run_id)
            try:
                span = self._tracer.start_span(
                    root.name, otel_context.Context(), root.kind, root.attributes, links, root.start
                )
            finally:
                unforce(token)
        self._span = span
        self._ctx = trace.set_span_in_context(span)

    def _content(self, value: Any) -> str:
        """Content for an opt-in attribute: redacted by the agent's rules, then bounded."""
        redacted = self._redactor.redact(value)
        text = redacted if isinstance(redacted, str) else json.dumps(redacted, default=str)
        return self._redactor.redact_text(text)[:_MAX_CONTENT]


_HANDLERS: dict[type[Any], Callable[[DriveSpans, Any], None]] = {
    Usage: DriveSpans._usage,
    TurnComplete: DriveSpans._turn_complete,
    TurnRetracted: DriveSpans._turn_retracted,
    ToolCallStart: DriveSpans._tool_call_start,
    ToolCallEnd: DriveSpans._tool_call_end,
    ToolCallRejected: DriveSpans._tool_call_rejected,
    GuardFired: DriveSpans._guard_fired,
    PostGuardFired: DriveSpans._guard_fired,
    PendingAction: DriveSpans._pending_action,
    ActionResolved: DriveSpans._action_resolved,
    RunCompleted: DriveSpans._run_completed,
    RunFailed: DriveSpans._run_failed,
}
