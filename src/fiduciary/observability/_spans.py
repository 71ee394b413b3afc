"""The spans of one drive, built from its events (GenAI semantic conventions).

``invoke_agent`` spans the drive; ``chat`` each model call, from its start to its
``turn_complete`` (tokens, cached tokens, cost, finish reason); ``execute_tool`` each
capability call, from ``tool_call_start`` (or, after a resume, its ``action_resolved``) to its
end, a refusal or its suspension (kind, tier, outcome, ledger recovery). Guards, pending
actions and decisions are span events. Attributes carry names, ids, counts and verdicts only;
arguments, results and messages are added only when content capture is on, redacted first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from ..events import (
    ActionResolved,
    Event,
    GuardFired,
    PendingAction,
    RunCompleted,
    RunFailed,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
    TurnComplete,
    TurnRetracted,
    Usage,
)
from ..redaction import Redactor
from ..stores.base import AuditRecord, RunRecord
from ._ids import forced, root_context, root_parent, unforce

if TYPE_CHECKING:
    from ._metrics import Metrics

__all__ = ["DriveSpans"]

_MAX_CONTENT = 4096
_MAX_NAME = 128


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
        self._chat: Span | None = None
        self._tools: dict[str, Span] = {}
        self._audit: dict[str, AuditRecord] = {}
        self._facts: dict[str, dict[str, str]] = {}
        self._status = "stopped"
        run_id = run.run_id
        self._run = str(run_id)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "fiduciary",
            "gen_ai.conversation.id": str(run_id),
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": model,
            "fiduciary.run.id": str(run_id),
            "fiduciary.run.epoch": run.epoch,
            "fiduciary.run.resumed": resumed,
        }
        links: list[Link] = []
        caller = trace.get_current_span().get_span_context()
        if caller.is_valid:  # an HTTP request, a scheduler tick: linked, the run's trace is its own
            links.append(Link(caller, {"fiduciary.link": "caller"}))
        self._opening = (run_id, resumed, resumed or not owns_ids, attributes, links)
        self._span: Span | None = None  # opened by the drive's first report (``_agent``)
        self._ctx = otel_context.Context()

    def _agent(self) -> Span:
        """The drive's ``invoke_agent`` span, opened at its first use: a ``Driver`` made and
        never driven leaves no span."""
        if self._span is not None:
            return self._span
        run_id, resumed, child, attributes, links = self._opening
        name = "invoke_agent fiduciary"
        if child:
            # a later drive (or ids we cannot choose): a child of the run's first drive
            parent = trace.set_span_in_context(root_parent(run_id), otel_context.Context())
            if resumed:
                links.append(Link(root_context(run_id), {"fiduciary.link": "resumes"}))
            span = self._tracer.start_span(name, parent, SpanKind.INTERNAL, attributes, links)
        else:
            token = forced(run_id)
            try:
                span = self._tracer.start_span(
                    name, otel_context.Context(), SpanKind.INTERNAL, attributes, links
                )
            finally:
                unforce(token)
        self._span = span
        self._ctx = trace.set_span_in_context(span)
        return span

    # --- DriveTrace ------------------------------------------------------------------------
    def chat_started(self, model: str) -> None:
        self._agent()
        self._end_chat(None)
        self._chat = self._tracer.start_span(
            f"chat {model}",
            self._ctx,
            SpanKind.CLIENT,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": model.split(":", 1)[0],
                "gen_ai.request.model": model,
                "gen_ai.conversation.id": self._run,
            },
        )

    def observe(self, events: Sequence[Event], audit: Sequence[AuditRecord]) -> None:
        self._agent()
        for row in audit:
            self._audit[row.tool_use_id] = row
        for event in events:
            self._event(event)

    def committed(self, batch: int) -> None:
        self._metrics.batch(batch)

    def end(self, error: BaseException | None) -> None:
        if self._span is None:
            return
        self._end_chat(None)
        for tool_use_id in list(self._tools):
            self._end_tool(tool_use_id, "interrupted", error=True)
        span = self._span
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.set_attribute("error.type", type(error).__name__)
        span.set_attribute("fiduciary.run.status", self._status)
        self._metrics.run(self._status)
        span.end()

    # --- events ----------------------------------------------------------------------------
    def _event(self, event: Event) -> None:
        match event:
            case Usage():
                self._metrics.usage(event, self._provider)
                if self._chat is not None:
                    usage: dict[str, Any] = {
                        "gen_ai.response.model": event.model,
                        "gen_ai.usage.input_tokens": event.input_tokens,
                        "gen_ai.usage.output_tokens": event.output_tokens,
                        "gen_ai.usage.cache_read.input_tokens": event.cache_read_tokens,
                        "gen_ai.usage.cache_creation.input_tokens": event.cache_write_tokens,
                    }
                    if event.cost_usd is not None:
                        usage["fiduciary.cost_usd"] = str(event.cost_usd)
                    if event.tier is not None:
                        usage["fiduciary.model.tier"] = event.tier
                    self._chat.set_attributes(usage)
            case TurnComplete():
                if self._chat is not None:
                    self._chat.set_attribute("gen_ai.response.finish_reasons", [event.stop_reason])
                self._end_chat(None)
            case TurnRetracted():
                if self._chat is not None:
                    self._chat.add_event("fiduciary.turn_retracted", {"from_seq": event.from_seq})
            case ToolCallStart():
                span = self._start_tool(event.tool_use_id, event.name)
                if event.kind is not None:
                    self._fact(event.tool_use_id, "fiduciary.tool.kind", event.kind)
                if self._capture:
                    span.set_attribute("gen_ai.tool.call.arguments", self._content(event.input))
            case ToolCallEnd():
                span = self._tools.get(event.tool_use_id) or self._start_tool(
                    event.tool_use_id, event.name
                )
                if event.recovery is not None:
                    span.set_attribute("fiduciary.tool.recovery", event.recovery)
                    if event.recovery == "unknown":
                        self._metrics.ledger_unknown(event.name)
                if self._capture:
                    span.set_attribute("gen_ai.tool.call.result", self._content(event.output))
                if event.is_error:
                    span.set_attribute("error.type", event.error_code or "tool_error")
                name = self._redactor.redact_text(event.name)[:_MAX_NAME]
                span.update_name(f"execute_tool {name}")
                span.set_attribute("gen_ai.tool.name", name)
                outcome = "error" if event.is_error else "ok"
                self._end_tool(event.tool_use_id, outcome, error=event.is_error)
            case ToolCallRejected():
                span = self._tools.get(event.tool_use_id) or self._start_tool(
                    event.tool_use_id, event.name
                )
                span.set_attribute("error.type", event.reason)
                self._end_tool(event.tool_use_id, f"rejected:{event.reason}", error=True)
            case GuardFired():
                attributes: dict[str, Any] = {
                    "fiduciary.guard.name": event.guard,
                    "fiduciary.guard.tier": event.tier,
                    "fiduciary.guard.phase": event.phase,
                    "fiduciary.guard.verdict": event.verdict,
                }
                if self._capture:
                    attributes["fiduciary.guard.message"] = self._content(event.message)
                target = self._tools.get(event.tool_use_id) or self._agent()
                target.add_event("fiduciary.guard", attributes)
            case PendingAction():
                self._metrics.pending(event.approval_id, event.at)
                span = self._tools.get(event.tool_use_id) or self._start_tool(
                    event.tool_use_id, event.name
                )
                self._fact(event.tool_use_id, "fiduciary.tool.tier", event.tier)
                span.add_event(
                    "fiduciary.pending_action",
                    {
                        "fiduciary.approval.id": str(event.approval_id),
                        "fiduciary.approval.tier": event.tier,
                        "fiduciary.approval.executor": event.executor,
                        "fiduciary.approval.expires_at": event.expires_at.isoformat(),
                    },
                )
                self._status = (
                    "awaiting_approval" if event.executor == "server" else "awaiting_client_result"
                )
                self._end_tool(event.tool_use_id, "pending", error=False)
            case ActionResolved():
                self._metrics.resolved(event.approval_id, event.at, event.decision)
                span = self._tools.get(event.tool_use_id) or self._start_tool(
                    event.tool_use_id, None
                )
                span.add_event(
                    "fiduciary.decision",
                    {
                        "fiduciary.approval.id": str(event.approval_id),
                        "fiduciary.approval.decision": event.decision,
                        "fiduciary.approval.edited": bool(event.edits),
                    },
                )
            case RunCompleted():
                self._status = "completed"
            case RunFailed():
                self._status = "cancelled" if event.reason == "aborted" else "failed"
                self._agent().set_attribute("fiduciary.run.failure", event.reason)
                self._agent().set_status(Status(StatusCode.ERROR, event.reason))
                self._end_chat(event.reason)
            case _:
                pass

    # --- spans -----------------------------------------------------------------------------
    def _start_tool(self, tool_use_id: str, name: str | None) -> Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.call.id": tool_use_id,
            "gen_ai.tool.type": "function",
        }
        if name is not None:  # the model's words when the name is not a capability's
            name = self._redactor.redact_text(name)[:_MAX_NAME]
            attributes["gen_ai.tool.name"] = name
        span = self._tracer.start_span(
            f"execute_tool {name or ''}".rstrip(), self._ctx, SpanKind.INTERNAL, attributes
        )
        self._tools[tool_use_id] = span
        self._facts[tool_use_id] = {}
        return span

    def _fact(self, tool_use_id: str, key: str, value: str) -> None:
        """An attribute of a call's span that its metrics carry too (kind, tier)."""
        self._facts.setdefault(tool_use_id, {})[key] = value
        span = self._tools.get(tool_use_id)
        if span is not None:
            span.set_attribute(key, value)

    def _end_tool(self, tool_use_id: str, outcome: str, *, error: bool) -> None:
        span = self._tools.get(tool_use_id)
        if span is None:
            return
        row = self._audit.pop(tool_use_id, None)
        facts = self._facts.pop(tool_use_id, {})
        attributes: dict[str, Any] = {}
        if row is not None:
            span.update_name(f"execute_tool {row.capability}")
            attributes["gen_ai.tool.name"] = row.capability
            facts["fiduciary.tool.kind"] = row.kind
            if row.tier is not None:
                facts["fiduciary.tool.tier"] = row.tier
            attributes.update(facts)
            outcome = row.outcome if outcome in ("ok", "error") else outcome
        attributes["fiduciary.tool.outcome"] = outcome
        span.set_attributes(attributes)
        del self._tools[tool_use_id]
        self._metrics.tool_call(
            outcome, facts.get("fiduciary.tool.tier"), facts.get("fiduciary.tool.kind")
        )
        if error:
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    def _end_chat(self, failure: str | None) -> None:
        if self._chat is None:
            return
        if failure is not None:
            self._chat.set_status(Status(StatusCode.ERROR, failure))
            self._chat.set_attribute("error.type", failure)
        self._chat.end()
        self._chat = None

    def _content(self, value: Any) -> str:
        """Content for an opt-in attribute: redacted by the agent's rules, then bounded."""
        redacted = self._redactor.redact(value)
        text = redacted if isinstance(redacted, str) else json.dumps(redacted, default=str)
        return self._redactor.redact_text(text)[:_MAX_CONTENT]
