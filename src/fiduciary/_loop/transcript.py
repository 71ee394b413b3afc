"""The fold: a run's log, event by event, into what the model and the guards need.

The same fold serves a live run (each event as it is emitted) and a resumed one (the whole log
read back), so a run continues identically in a new process. Every event type is handled or
explicitly ignored: a new type that is not is a type error (``assert_never``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import assert_never
from uuid import UUID, uuid4

from .._gates.attempt import error_content
from .._text import NOTES_MARKER
from ..context.compaction import SentView, Shape
from ..events import (
    ActionResolved,
    Canvas,
    Compaction,
    ContextLayers,
    Event,
    GuardFired,
    GuardNote,
    Origin,
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
from ..guards import CallRecord, RunHistory
from ..models.base import (
    AssistantMessage,
    Message,
    TextPart,
    ThinkingPart,
    ToolResult,
    ToolResultsMessage,
    ToolUsePart,
    UserTextMessage,
)
from ..outputs import OUTPUT_TOOL

__all__ = ["INVALID_ANSWER", "Transcript"]

INVALID_ANSWER = "invalid_answer"  # the error code of a final_result call that was not valid


@dataclass(slots=True)
class Transcript:
    """A run's log folded into messages, open calls, approvals and the guards' history."""

    started: RunStarted | None = None
    messages: list[Message] = field(default_factory=list)
    parts: list[TextPart | ThinkingPart | ToolUsePart] = field(default_factory=list)
    partial_from: int | None = None
    open_uses: list[ToolUsePart] = field(default_factory=list)
    results: dict[str, ToolResult] = field(default_factory=dict)
    approvals: dict[str, UUID] = field(default_factory=dict)
    # what each approval showed the person: the row is checked against it before execution
    pending_actions: dict[str, PendingAction] = field(default_factory=dict)
    notes: dict[str, list[GuardNote]] = field(default_factory=dict)
    resolved: set[UUID] = field(default_factory=set)
    history: RunHistory = field(default_factory=RunHistory)
    turns_since_user: int = 0
    calls_since_user: int = 0
    # answers that were not a valid typed output since the user's message (fiduciary.outputs)
    invalid_outputs: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal = Decimal(0)  # what the run's model calls cost so far (known prices)
    tool_calls: int = 0
    last_seq: int = 0
    last_text: str = ""
    # what the model is sent (the context package): the cut compaction recorded, whether a
    # compaction was started and not ended, the latest user message and its recorded layers
    shape: Shape = field(default_factory=Shape)
    compacting: int | None = None  # a compaction's tokens_before, from its start to its end
    user_text: str = ""
    layers: ContextLayers | None = None
    skill: str | None = None  # the person's latest choice, and the calls made since
    origin: Origin | None = None  # the outside event the latest message came from, if any
    skill_since: int = 0
    # not part of the fold: what the last model call was sent, kept up to date by the next
    # (``_loop.context``) so that it works on the messages added since, not the whole history
    view: SentView | None = None
    _records: dict[str, int] = field(default_factory=dict)
    # a refreshing read's id -> the call it refreshes (its result joins that call's), and
    # those started and not ended (a crash cut them off: they run again)
    _refreshes: dict[str, str] = field(default_factory=dict)
    refreshing: dict[str, ToolCallStart] = field(default_factory=dict)
    # for each message, how many assistant messages come before it (turns are numbered by it)
    _turns_before: list[int] = field(default_factory=list)

    def apply(self, event: Event) -> None:
        # ``type(event) is`` rather than ``match``: a class pattern that misses costs an
        # isinstance through pydantic's metaclass, and this runs for every event. The event
        # classes are final, so mypy still checks that every type is handled (assert_never).
        # The most frequent types come first.
        self.last_seq = event.seq
        if type(event) is TextDelta:
            self._start_partial(event.seq)
            parts = self.parts
            if parts and isinstance(parts[-1], TextPart):
                parts[-1] = TextPart(parts[-1].text + event.text)
            else:
                parts.append(TextPart(event.text))
        elif type(event) is ToolCallStart:
            if event.refresh_of is not None:
                self._refreshes[event.tool_use_id] = event.refresh_of
                self.refreshing[event.tool_use_id] = event
            else:
                self._start_partial(event.seq)
                self.parts.append(ToolUsePart(event.tool_use_id, event.name, event.input))
            self.calls_since_user += 1
            self.tool_calls += 1
            self._records[event.tool_use_id] = len(self.history.calls)
            self.history.calls.append(
                CallRecord(
                    tool_use_id=event.tool_use_id,
                    name=event.name,
                    kind=event.kind,
                    input=event.input,
                    args_digest=event.args_digest,
                    at=event.at,
                )
            )
        elif type(event) is ToolCallEnd:
            state = "failed" if event.is_error else "now"
            self._ended(event.tool_use_id, event.name, event.output, event.is_error, state)
            if event.error_code == INVALID_ANSWER and event.name == OUTPUT_TOOL:
                self.invalid_outputs += 1
        elif type(event) is Usage:
            self.input_tokens = event.total_input_tokens
            self.output_tokens = event.total_output_tokens
            if event.total_cost_usd is not None:
                self.cost_usd = event.total_cost_usd
        elif type(event) is TurnComplete:
            self._turn_complete(event)
        elif type(event) is ToolCallRejected:
            content = error_content(event.reason, event.message)
            self._ended(event.tool_use_id, event.name, content, True, "refused")
        elif type(event) is UserMessage:
            self._user_message(event)
        elif type(event) is RunStarted:
            self.started = event
        elif type(event) is PendingAction:
            self.approvals[event.tool_use_id] = event.approval_id
            self.pending_actions[event.tool_use_id] = event
            if event.guard_notes:
                self.notes[event.tool_use_id] = list(event.guard_notes)
        elif type(event) is ActionResolved:
            self.resolved.add(event.approval_id)
        elif type(event) is ThinkingDelta:
            self._start_partial(event.seq)
            last = self.parts[-1] if self.parts else None
            if isinstance(last, ThinkingPart) and last.signature is None:
                self.parts[-1] = ThinkingPart(last.text + event.text)
            else:
                self.parts.append(ThinkingPart(event.text))
        elif type(event) is ThinkingDone:
            last = self.parts[-1] if self.parts else None
            if isinstance(last, ThinkingPart):
                self.parts[-1] = ThinkingPart(last.text, event.signature or "")
        elif type(event) is TurnRetracted:
            for part in self.parts:
                if isinstance(part, ToolUsePart):
                    self.results.pop(part.id, None)
            self.parts = []
            self.partial_from = None
        elif type(event) is ContextLayers:
            self.layers = event
        elif type(event) is Compaction:
            self._compaction(event)
        elif type(event) is PostGuardFired:
            self._amend(event.tool_use_id, f"- [{event.guard}] {event.message}")
        elif (
            type(event) is GuardFired
            or type(event) is TextGuardFired
            or type(event) is ToolProgress
            or type(event) is TodoUpdate
            or type(event) is Canvas  # the model had the call's short result, not the html
            or type(event) is PendingInput  # reserved: no engine emits it yet
            or type(event) is RunCompleted
            or type(event) is RunFailed
        ):
            pass  # nothing the model or the guards are told
        else:
            assert_never(event)

    def _ended(self, use_id: str, name: str, content: str, is_error: bool, state: str) -> None:
        """A call's end (its result, or its refusal): a refreshing read's goes to the write
        it refreshes (``state``: now, failed or refused), any other's is its own result."""
        refreshed = self._refreshes.get(use_id)
        if refreshed is not None:
            self.refreshing.pop(use_id, None)
            self._amend(refreshed, f"{name} after this call ({state}): {content}")
        else:
            self._result(use_id, ToolResult(use_id, content, is_error))
        self._outcome(use_id, not is_error, content)

    def _turn_complete(self, event: TurnComplete) -> None:
        """The model's turn, whole: one assistant message; a wrong typed output is answered."""
        message = AssistantMessage(tuple(self.parts))
        self._append(message)
        self.last_text = message.text
        self.open_uses = message.tool_uses
        self.parts = []
        self.partial_from = None
        self.turns_since_user += 1
        self._close_turn()
        if event.output_error is not None:  # a text answer that is not the typed output
            self.invalid_outputs += 1
            self._append(UserTextMessage(event.output_error))

    def _user_message(self, event: UserMessage) -> None:
        """The person speaks: a new user turn, its counters back to zero."""
        self._append(UserTextMessage(event.text))
        self.history.add_user_message(event.text)
        self.turns_since_user = 0
        self.calls_since_user = 0
        self.invalid_outputs = 0
        self.user_text = event.text
        self.layers = None
        self.origin = event.origin
        if event.skill is not None:
            self.skill, self.skill_since = event.skill, len(self.history.calls)

    def _compaction(self, event: Compaction) -> None:
        """Compaction under way (its tokens before), or done (the history's new shape)."""
        if event.phase == "start":
            self.compacting = event.tokens_before or 0
        else:
            self.compacting = None
            if event.method is not None:
                self.shape = Shape(
                    kept_from=event.kept_from or 0,
                    stubbed_before=event.stubbed_before or 0,
                    summary=event.summary,
                )

    def new_call_id(self, proposed: str | None) -> str:
        """The id a call the model just made is recorded under: the provider's when no call of
        this run has it yet, else a fresh one. Ids are the call's identity in the run — its
        result, its approval and its idempotency key are all found by it — and providers do
        not promise unique ones (counters restart every turn, some servers send none)."""
        if proposed and proposed not in self._records:
            return proposed
        while True:
            fresh = f"call_{uuid4().hex}"
            if fresh not in self._records:
                return fresh

    def _start_partial(self, seq: int) -> None:
        if self.partial_from is None:
            self.partial_from = seq

    def _result(self, tool_use_id: str, result: ToolResult) -> None:
        self.results[tool_use_id] = result
        if self.open_uses:
            self._close_turn()

    def _amend(self, tool_use_id: str, note: str) -> None:
        """Add ``note`` (a post-guard's, a refreshing read's result) to the result of a call
        recorded already: in the open results, or in the tool results message it closed."""
        result = self.results.get(tool_use_id)
        if result is None:
            return
        content = result.content
        content += (" " if NOTES_MARKER in content else NOTES_MARKER) + note
        amended = ToolResult(tool_use_id, content, result.is_error)
        self.results[tool_use_id] = amended
        for index in range(len(self.messages) - 1, -1, -1):
            message = self.messages[index]
            if isinstance(message, ToolResultsMessage):
                if any(r.tool_use_id == tool_use_id for r in message.results):
                    self.messages[index] = ToolResultsMessage(
                        tuple(
                            amended if r.tool_use_id == tool_use_id else r for r in message.results
                        )
                    )
                return
            if isinstance(message, UserTextMessage):
                return  # only the latest turn's results are amended

    def _outcome(self, tool_use_id: str, ok: bool, output: str) -> None:
        index = self._records.get(tool_use_id)
        if index is not None:
            record = self.history.calls[index]
            self.history.calls[index] = CallRecord(
                tool_use_id=record.tool_use_id,
                name=record.name,
                kind=record.kind,
                input=record.input,
                args_digest=record.args_digest,
                at=record.at,
                ok=ok,
                output=output,
            )

    def _append(self, message: Message) -> None:
        before = self._turns_before[-1] if self._turns_before else 0
        if self.messages and isinstance(self.messages[-1], AssistantMessage):
            before += 1
        self._turns_before.append(before)
        self.messages.append(message)

    def turns_before(self, index: int) -> int:
        """How many assistant messages come before ``messages[index]`` (all, past the end)."""
        if index < len(self._turns_before):
            return self._turns_before[index]
        ends = bool(self.messages) and isinstance(self.messages[-1], AssistantMessage)
        return (self._turns_before[-1] if self._turns_before else 0) + ends

    def _close_turn(self) -> None:
        uses, results = self.open_uses, self.results
        if not uses:
            return
        for use in uses:
            if use.id not in results:
                return
        self._append(ToolResultsMessage(tuple([results[u.id] for u in uses])))
        self.open_uses = []

    @property
    def unresolved(self) -> list[ToolUsePart]:
        return [u for u in self.open_uses if u.id not in self.results]
