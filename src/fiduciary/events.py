"""The events of a run: their models, their JSON form, and the SSE wire codec.

A run's event log is the only authoritative record of the run. Every event carries ``run_id``,
``seq`` (1, 2, 3 ... without gaps), ``at`` (UTC) and ``type``; ``Event`` is the discriminated
union of all of them and ``EVENT_ADAPTER`` (de)serialises it. Types are extended, never renamed.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal, InvalidOperation
from functools import partial
from typing import Annotated, Any, Literal, final, get_args
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, field_validator

from ._sse import SSEMessage, parse_sse  # the wire's parser, beside its encoder here
from .steps import CardStep

__all__ = [
    "EVENT_ADAPTER",
    "ActionResolved",
    "ActionResolvedDraft",
    "Canvas",
    "CanvasDraft",
    "Compaction",
    "CompactionDraft",
    "ContextLayers",
    "ContextLayersDraft",
    "Draft",
    "Event",
    "EventBase",
    "GuardFired",
    "GuardFiredDraft",
    "GuardNote",
    "ModelFallback",
    "Origin",
    "PendingAction",
    "PendingActionDraft",
    "PendingInput",
    "PendingInputDraft",
    "PostGuardFired",
    "PostGuardFiredDraft",
    "RunCompleted",
    "RunCompletedDraft",
    "RunFailed",
    "RunFailedDraft",
    "RunStarted",
    "RunStartedDraft",
    "SSEMessage",
    "TextDelta",
    "TextDeltaDraft",
    "TextGuardFired",
    "TextGuardFiredDraft",
    "ThinkingDelta",
    "ThinkingDeltaDraft",
    "ThinkingDone",
    "ThinkingDoneDraft",
    "TodoItem",
    "TodoUpdate",
    "TodoUpdateDraft",
    "ToolCallEnd",
    "ToolCallEndDraft",
    "ToolCallRejected",
    "ToolCallRejectedDraft",
    "ToolCallStart",
    "ToolCallStartDraft",
    "ToolProgress",
    "ToolProgressDraft",
    "TurnComplete",
    "TurnCompleteDraft",
    "TurnRetracted",
    "TurnRetractedDraft",
    "Usage",
    "UsageDraft",
    "UserMessage",
    "UserMessageDraft",
    "decode_event",
    "encode_event",
    "encode_sse",
    "parse_sse",
    "stamp",
]

RejectReason = Literal[
    "not_allowed",
    "kind_not_allowed",
    "invalid_input",
    "guard_blocked",
    "unauthorized",
    "policy_denied",
    "denied",
    "expired",
    "tool_call_limit",
    "malformed_call",
    "cancelled",
    "tampered",
]
Recovery = Literal["replayed", "ledger", "unknown"]
TierName = Literal["auto", "confirm", "explicit", "deny"]


def _unset(value: object) -> bool:
    """A field that only some runs fill (typed output, dependencies, a fallback model) is left
    out of the JSON when empty: the events of the runs that do not use it are unchanged."""
    return value is None or value == []


class EventBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: UUID
    seq: int = Field(ge=1)
    at: datetime


class Draft(BaseModel):
    """An event's own fields, checked as it is built, before the loop gives it its ``run_id``,
    ``seq`` and ``at`` (``stamp``). ``XDraft`` is the draft of the event ``X``; the event class
    derives from it, so the fields are declared once."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str


class Origin(BaseModel):
    """Where a run's message came from when it is not its principal in person: an attention
    route, a webhook, an app's tick, a chat that is not the principal's own (``source`` says
    which, e.g. ``"attention:refund-requests"``). A write proposed in answer to such a message
    never runs on its own: a person approves it, unless its *autonomous budget* allows it —
    ``budget`` maps an operation to the most USD one call of it may move without a person
    (the call still counts toward, and is held by, the daily autonomous limit). Empty by
    default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(min_length=1, max_length=200)
    budget: dict[str, Decimal] = Field(default_factory=dict)

    @field_validator("budget", mode="before")
    @classmethod
    def _no_float(cls, value: object) -> object:
        if isinstance(value, dict):
            for op, usd in value.items():
                if isinstance(usd, float | bool):  # money is never a binary float
                    raise ValueError(f"budget[{op!r}] must be a Decimal, an int or a string")
                try:
                    amount = Decimal(usd) if isinstance(usd, Decimal | int | str) else None
                except InvalidOperation:
                    amount = None
                if amount is None or not amount.is_finite() or amount < 0:
                    raise ValueError(f"budget[{op!r}] must be an amount >= 0")
        return value

    def allows(self, operation: str | None, amount_usd: Decimal | None) -> bool:
        """Whether the budget lets an automatic write of ``operation`` run on its own."""
        cap = None if operation is None else self.budget.get(operation)
        if cap is None:
            return False
        return amount_usd is None or Decimal(0) <= amount_usd <= cap


class RunStartedDraft(Draft):
    type: Literal["run_started"] = "run_started"
    principal: str
    capabilities: list[str]
    model: str
    allowed_kinds: list[str]
    tier: str | None = None  # fast | standard | powerful, from the riskiest callable capability
    effort: str | None = None  # low | medium | high, from the first message's complexity
    # time travel (fiduciary.observability): a replay of a recorded run, or a fork of one
    replay_of: UUID | None = None
    fork_of: UUID | None = None
    fork_at: int | None = None
    # the run was started by an outside event (None: by its principal in person)
    origin: Origin | None = None
    # typed output (fiduciary.outputs): its answer's type (by name), the invalid answers the
    # model may correct; its dependencies' type (fiduciary.deps; never their value). Absent: none
    output_type: str | None = Field(default=None, exclude_if=_unset)
    output_retries: int | None = Field(default=None, ge=0, exclude_if=_unset)
    deps: str | None = Field(default=None, exclude_if=_unset)
    # delegation (fiduciary.delegation): the parent run, the name it called this one by, this
    # one's share of the parent's remaining budget and turns (absent: a run of its own)
    parent_run_id: UUID | None = Field(default=None, exclude_if=_unset)
    delegate: str | None = Field(default=None, exclude_if=_unset)
    budget_usd: Decimal | None = Field(default=None, exclude_if=_unset)
    max_turns: int | None = Field(default=None, exclude_if=_unset)


@final
class RunStarted(RunStartedDraft, EventBase):
    pass


class UserMessageDraft(Draft):
    type: Literal["user_message"] = "user_message"
    text: str
    skill: str | None = None  # the skill the person chose from this message on (its name)
    origin: Origin | None = None  # an outside event's message (None: the principal's own)


@final
class UserMessage(UserMessageDraft, EventBase):
    pass


class TextDeltaDraft(Draft):
    type: Literal["text_delta"] = "text_delta"
    text: str


@final
class TextDelta(TextDeltaDraft, EventBase):
    pass


class ThinkingDeltaDraft(Draft):
    type: Literal["thinking_delta"] = "thinking_delta"
    text: str
    block_index: int = 0


@final
class ThinkingDelta(ThinkingDeltaDraft, EventBase):
    pass


class ThinkingDoneDraft(Draft):
    type: Literal["thinking_done"] = "thinking_done"
    block_index: int = 0
    signature: str | None = None


@final
class ThinkingDone(ThinkingDoneDraft, EventBase):
    pass


class ToolCallStartDraft(Draft):
    type: Literal["tool_call_start"] = "tool_call_start"
    tool_use_id: str
    name: str
    input: dict[str, Any]
    args_digest: str
    kind: str | None = None
    # a read re-run after the write ``refresh_of`` succeeded (the write's capability declared
    # it): its result reaches the model with the write's result
    refresh_of: str | None = None


@final
class ToolCallStart(ToolCallStartDraft, EventBase):
    """The model called a tool. Exactly one ``tool_call_end`` or ``tool_call_rejected`` follows."""


class ToolCallEndDraft(Draft):
    type: Literal["tool_call_end"] = "tool_call_end"
    tool_use_id: str
    name: str
    output: str
    is_error: bool = False
    error_code: str | None = None
    recovery: Recovery | None = None
    truncated: bool = False
    hints: list[str] = Field(default_factory=list)
    # a write's tier and USD amount, as the policy decided them (auto included); None for
    # reads and previews, and in logs written before they were recorded
    tier: str | None = None
    amount_usd: Decimal | None = None


@final
class ToolCallEnd(ToolCallEndDraft, EventBase):
    pass


class ToolCallRejectedDraft(Draft):
    type: Literal["tool_call_rejected"] = "tool_call_rejected"
    tool_use_id: str
    name: str
    reason: RejectReason
    message: str


@final
class ToolCallRejected(ToolCallRejectedDraft, EventBase):
    pass


class GuardFiredDraft(Draft):
    type: Literal["guard_fired"] = "guard_fired"
    tool_use_id: str
    guard: str
    tier: Literal["safety", "financial", "ux"]
    phase: Literal["pre", "post"]
    verdict: Literal["hint", "warn", "block"]
    message: str
    for_person: str = ""  # the guard's sentence for the person ("": it wrote none)

    @property
    def shown(self) -> str:
        return self.for_person or self.message


@final
class GuardFired(GuardFiredDraft, EventBase):
    pass


class PostGuardFiredDraft(Draft):
    """A post-execution guard's hint or warning on a call that ran, after its ``tool_call_end``:
    ``message`` goes to the model with the result, ``for_person`` is shown beside it."""

    type: Literal["post_guard_fired"] = "post_guard_fired"
    tool_use_id: str
    name: str  # the capability that ran
    guard: str
    tier: Literal["safety", "financial", "ux"]
    verdict: Literal["hint", "warn"]
    message: str
    for_person: str = ""

    @property
    def shown(self) -> str:
        return self.for_person or self.message


@final
class PostGuardFired(PostGuardFiredDraft, EventBase):
    pass


class TextGuardFiredDraft(Draft):
    """A text guard's verdict on the person's message (``input``) or the final text
    (``output``); see ``fiduciary.text_guards``."""

    type: Literal["text_guard_fired"] = "text_guard_fired"
    guard: str
    tier: Literal["safety", "financial", "ux"]
    phase: Literal["input", "output"]
    verdict: Literal["hint", "warn", "block"]
    message: str
    for_person: str = ""

    @property
    def shown(self) -> str:
        return self.for_person or self.message


@final
class TextGuardFired(TextGuardFiredDraft, EventBase):
    pass


class GuardNote(BaseModel):
    """A guard's hint or warning on a pending action: ``message`` goes to the model with the
    result, ``for_person`` is what the person reads on the card (``shown``)."""

    model_config = ConfigDict(frozen=True)

    guard: str
    verdict: Literal["hint", "warn"]
    message: str
    for_person: str = ""  # "": the guard wrote none (or the log predates it); message is shown

    @property
    def shown(self) -> str:
        return self.for_person or self.message

    def redacted(self, redact: Callable[[str], str]) -> GuardNote:
        return self.model_copy(
            update={"message": redact(self.message), "for_person": redact(self.for_person)}
        )


class PendingActionDraft(Draft):
    type: Literal["pending_action"] = "pending_action"
    approval_id: UUID
    tool_use_id: str
    name: str
    input: dict[str, Any]
    description: str
    amount_usd: Decimal | None
    tier: Literal["confirm", "explicit"]
    acknowledge: Literal["amount"] | None = None
    modifiable_fields: list[str]
    guard_notes: list[GuardNote]
    expires_at: datetime
    args_digest: str
    executor: Literal["server", "client", "person"] = "server"
    quoted_at: datetime | None = Field(default=None, exclude_if=_unset)  # the card shows its age
    regenerated_from: UUID | None = Field(default=None, exclude_if=_unset)  # Agent.regenerate
    steps: list[CardStep] | None = Field(default=None, exclude_if=_unset)  # fiduciary.steps


@final
class PendingAction(PendingActionDraft, EventBase):
    """A write waits for a person. The approval binds to ``args_digest``."""


class ActionResolvedDraft(Draft):
    type: Literal["action_resolved"] = "action_resolved"
    approval_id: UUID
    tool_use_id: str
    decision: Literal["approved", "denied", "expired", "client_result", "superseded"]
    by: str | None = None
    reason: str | None = None
    edits: dict[str, Any] | None = None
    args_digest: str | None = None


@final
class ActionResolved(ActionResolvedDraft, EventBase):
    pass


class ToolProgressDraft(Draft):
    type: Literal["tool_progress"] = "tool_progress"
    tool_use_id: str
    name: str
    message: str
    pct: float | None = None


@final
class ToolProgress(ToolProgressDraft, EventBase):
    pass


class CompactionDraft(Draft):
    """What the model is sent was compacted (the log keeps everything). ``start`` carries the
    request's size before; ``end`` how (``method``: stub | summary | drop), the size after, and
    the cut it records for every later request of the run: messages before ``kept_from`` are
    replaced by ``summary`` (or dropped), tool results before ``stubbed_before`` are stubbed
    (indexes into the run's conversation, as the transcript folds it)."""

    type: Literal["compaction"] = "compaction"
    phase: Literal["start", "end"]
    summary: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    method: Literal["stub", "summary", "drop"] | None = None
    kept_from: int | None = Field(default=None, ge=0)
    stubbed_before: int | None = Field(default=None, ge=0)


@final
class Compaction(CompactionDraft, EventBase):
    pass


class ContextLayersDraft(Draft):
    """The system prompt's changing layers for the latest user message, computed once and
    recorded so that every model call of that message, in any process, sends the same: the
    domain context (``Agent(context=...)``) and what memory recalled."""

    type: Literal["context_layers"] = "context_layers"
    context: str = ""
    recalled: list[str] = Field(default_factory=list)


@final
class ContextLayers(ContextLayersDraft, EventBase):
    pass


class TodoItem(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(min_length=1, max_length=500)
    status: Literal["pending", "in_progress", "done"] = "pending"


class TodoUpdateDraft(Draft):
    """The run's to-do list, whole, as the model last set it (``update_todo``)."""

    type: Literal["todo_update"] = "todo_update"
    tool_use_id: str
    todos: list[TodoItem]


@final
class TodoUpdate(TodoUpdateDraft, EventBase):
    pass


class CanvasDraft(Draft):
    """A canvas the model showed the person (``render_canvas``, fiduciary.canvas): ``html`` is a
    whole document, which clients show only in a sandboxed frame; the model is not sent it."""

    type: Literal["canvas"] = "canvas"
    tool_use_id: str
    title: str
    kind: str  # the template that made it ("bar_chart", "table" ...) or "html"
    html: str


@final
class Canvas(CanvasDraft, EventBase):
    pass


class PendingInputDraft(Draft):
    """Reserved: the run waits for the person to fill a form (``input_schema``, a JSON Schema).
    The engine never emits it yet; every client must show or skip it without failing."""

    type: Literal["pending_input"] = "pending_input"
    input_id: str
    input_schema: dict[str, JsonValue]
    prompt: str | None = Field(default=None, exclude_if=_unset)


@final
class PendingInput(PendingInputDraft, EventBase):
    pass


class UsageDraft(Draft):
    type: Literal["usage"] = "usage"
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    tier: str | None = None
    effort: str | None = None
    cost_usd: Decimal | None = None
    total_cost_usd: Decimal | None = None


@final
class Usage(UsageDraft, EventBase):
    """One model call: ``model`` answered it (a tiered model's choice), at ``cost_usd`` (None
    when the model has no known price); ``total_cost_usd`` is the run's spend so far."""


class ModelFallback(BaseModel):
    """A model of a ``FallbackModel`` that failed before it streamed anything (``reason``: the
    error's code, e.g. ``overloaded``), so the next one was asked."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    reason: str


class TurnCompleteDraft(Draft):
    type: Literal["turn_complete"] = "turn_complete"
    stop_reason: str
    # a run with a typed output: why this turn's answer was not one (the model is told, and
    # asked again); absent when it was, or when the run has none
    output_error: str | None = Field(default=None, exclude_if=_unset)
    # a FallbackModel's turn on which a model failed: the one that answered, and the failures
    model: str | None = Field(default=None, exclude_if=_unset)
    fallbacks: list[ModelFallback] = Field(default_factory=list, exclude_if=_unset)


@final
class TurnComplete(TurnCompleteDraft, EventBase):
    pass


class TurnRetractedDraft(Draft):
    type: Literal["turn_retracted"] = "turn_retracted"
    from_seq: int


@final
class TurnRetracted(TurnRetractedDraft, EventBase):
    """A partial model turn lost in a crash: clients drop its text; the model is asked again."""


class RunCompletedDraft(Draft):
    type: Literal["run_completed"] = "run_completed"
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    cost_usd: Decimal | None = None
    # a typed output's validated answer as JSON (absent for other runs, and for a None answer)
    output: JsonValue = Field(default=None, exclude_if=lambda value: value is None)


@final
class RunCompleted(RunCompletedDraft, EventBase):
    pass


class RunFailedDraft(Draft):
    type: Literal["run_failed"] = "run_failed"
    reason: Literal["budget", "max_turns", "aborted", "error", "invalid_output", "guard_blocked"]
    message: str


@final
class RunFailed(RunFailedDraft, EventBase):
    pass


Event = Annotated[
    RunStarted
    | UserMessage
    | TextDelta
    | ThinkingDelta
    | ThinkingDone
    | ToolCallStart
    | ToolCallEnd
    | ToolCallRejected
    | GuardFired
    | PostGuardFired
    | TextGuardFired
    | PendingAction
    | ActionResolved
    | ToolProgress
    | Compaction
    | ContextLayers
    | TodoUpdate
    | Canvas
    | PendingInput
    | Usage
    | TurnComplete
    | TurnRetracted
    | RunCompleted
    | RunFailed,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)

_EVENT_OF: dict[str, type[EventBase]] = {
    cls.model_fields["type"].default: cls for cls in get_args(get_args(Event)[0])
}


def stamp(draft: Draft, run_id: UUID, seq: int, at: datetime) -> Event:
    """The event of ``draft`` as the ``seq``-th of run ``run_id``, recorded ``at``.

    The draft's fields were validated when it was built and the envelope comes from the loop,
    so the event is assembled as ``model_construct`` would, without its per-field work."""
    event = _new(_EVENT_OF[draft.type])
    fields = {"run_id": run_id, "seq": seq, "at": at}
    fields.update(draft.__dict__)
    _set(event, "__dict__", fields)
    _set(event, "__pydantic_fields_set__", draft.__pydantic_fields_set__ | _ENVELOPE)
    _set(event, "__pydantic_extra__", None)
    _set(event, "__pydantic_private__", None)
    return event  # type: ignore[return-value]  # one of Event's classes (_EVENT_OF)


_new = object.__new__
_set = object.__setattr__
_ENVELOPE = frozenset({"run_id", "seq", "at"})


def encode_event(event: Event) -> str:
    """The event as one line of JSON.

    Made once per event object: a SQL store's row and the SSE frame of a committed event share
    it. The text is kept beside the event (not on it: a copy of the event must not inherit it)
    for as long as the event lives."""
    key = id(event)
    known = _ENCODED.get(key)
    if known is not None and known[0]() is event:
        return known[1]
    # model_dump_json's own call, without its keyword plumbing (the same bytes)
    text = event.__pydantic_serializer__.to_json(event).decode()
    _ENCODED[key] = (weakref.ref(event, partial(_forget, key)), text)
    return text


# id of a live event -> (a weak reference to it, its JSON); an entry leaves with its event
_ENCODED: dict[int, tuple[weakref.ref[EventBase], str]] = {}


def _forget(key: int, ref: weakref.ref[EventBase]) -> None:
    known = _ENCODED.get(key)
    if known is not None and known[0] is ref:
        del _ENCODED[key]


def decode_event(data: str | bytes) -> Event:
    """Parse one event from JSON; raises ``pydantic.ValidationError`` on anything malformed."""
    return EVENT_ADAPTER.validate_json(data)


# --- Server-sent events -------------------------------------------------------------------


def encode_sse(event: Event) -> str:
    """The event as an SSE message with ``id: <seq>`` so a client can resume after it."""
    return f"id: {event.seq}\nevent: {event.type}\ndata: {encode_event(event)}\n\n"
