"""One model turn: ask the model, stream its answer into the log, start its reads.

The request's tools and its plan (tier, effort, settings) are computed once per drive: no
user message arrives during one. A turn is priced against the run's budget before it is
asked; a model that fails ends the run (``run_failed``, reason ``error``), its partial turn
retracted.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal

from .._logs import logger
from ..context.tokens import LastRequest
from ..delegation import delegated_spend
from ..events import (
    Draft,
    ModelFallback,
    RunFailedDraft,
    TextDeltaDraft,
    ThinkingDeltaDraft,
    ThinkingDoneDraft,
    TurnCompleteDraft,
    TurnRetractedDraft,
    UsageDraft,
)
from ..exceptions import StoreError
from ..gates import ParsedCall
from ..models.base import (
    Model,
    StreamFallback,
    StreamRetry,
    StreamStop,
    StreamTextDelta,
    StreamThinkingDelta,
    StreamThinkingDone,
    StreamToolCall,
    StreamUsage,
)
from ..models.pricing import budget_refusal, cost_usd, estimate_call_usd
from ..models.tiers import plan_turn
from .context import Prepared, prepare
from .dispatch import reject, run_read, start
from .output import close_answers, wants
from .runtime import run_limits
from .state import Drive
from .stream_redaction import StreamRedactor

__all__ = ["model_turn"]

log = logger("fiduciary.loop")

_NO_USAGE = StreamUsage()


async def model_turn(d: Drive) -> tuple[bool, list[ParsedCall]] | None:
    """Stream one turn; reads start as soon as their arguments are complete.

    Returns whether the model called anything and the calls still to dispatch (writes and
    refusals), or None when the run failed.
    """
    rt, t = d.rt, d.t
    gates = rt.gates
    asked = await _request(d)
    if asked is None:
        return None
    prepared, answering = asked
    said = _Said(d)
    reads: list[asyncio.Task[None]] = []
    later: list[ParsedCall] = []
    answers: list[ParsedCall] = []  # final_result calls (a typed output), recorded at the end
    fallbacks: list[ModelFallback] = []
    fell_to: str | None = None  # the model that answered after another failed
    others = 0
    any_calls = False
    usage = _NO_USAGE
    answered_by: str | None = None
    stop = "end_turn"
    max_calls = rt.limits.max_tool_calls
    d.trace.chat_started(answering.name)
    try:
        async for item in rt.model.stream(prepared.request):
            match item:
                case StreamTextDelta(text=delta):
                    said.text(delta)
                case StreamThinkingDelta(text=delta, block_index=index):
                    said.thinking(delta, index)
                case StreamThinkingDone(block_index=index, signature=signature):
                    said.flush()
                    d.emit(ThinkingDoneDraft(block_index=index, signature=signature))
                case StreamToolCall(id=call_id, name=name, arguments=arguments):
                    said.flush()
                    any_calls = True
                    call = gates.parse(t.new_call_id(call_id), name, arguments)
                    if wants(d, name):
                        answers.append(call)
                        continue
                    others += 1
                    over = t.calls_since_user >= max_calls
                    start(d, call)
                    if over:
                        reject(
                            d,
                            call,
                            "tool_call_limit",
                            f"The limit of {max_calls} tool calls per request was reached; "
                            "answer with what you have.",
                        )
                    elif call.cap is not None and call.cap.concurrent:
                        reads.append(asyncio.create_task(run_read(d, call)))
                    else:
                        later.append(call)
                case StreamUsage():
                    answered_by = item.model or answered_by
                    # most models report once a turn: that report is the turn's usage
                    usage = item if usage is _NO_USAGE else _added(usage, item)
                case StreamStop(reason=reason):
                    stop = reason
                case StreamFallback(model=failed, reason=reason, next=following):
                    # nothing was streamed yet: the next model answers (priced as it)
                    fallbacks.append(ModelFallback(model=failed, reason=reason))
                    answered_by = fell_to = following
                    named = getattr(rt.model, "model_named", None)
                    answering = (named(following) if callable(named) else None) or answering
                case StreamRetry():
                    # the model is asked again: what this turn streamed so far is void
                    said.discard()
                    if t.partial_from is not None:
                        d.emit(TurnRetractedDraft(from_seq=t.partial_from))
    except (asyncio.CancelledError, StoreError):  # a failing store is not the model's
        said.discard()
        for task in reads:
            task.cancel()
        raise
    except Exception as exc:
        said.discard()  # the partial turn is retracted: what it held never reaches the log
        await _failed(d, exc, reads)
        return None
    said.flush()
    output_error = close_answers(d, answers, other_calls=others > 0)
    d.emit(
        _usage(d, prepared, answering, answered_by, usage),
        TurnCompleteDraft(
            stop_reason=stop,
            output_error=output_error,
            model=fell_to,
            fallbacks=fallbacks,
        ),
    )
    await _each(reads)
    return any_calls, later


async def _request(d: Drive) -> tuple[Prepared, Model] | None:
    """The turn's request (its tools and plan, fixed for the drive) and the model that will
    answer it, or None when the budget refuses the call (the run failed)."""
    rt, t, gates = d.rt, d.t, d.rt.gates
    if d.tools is None:
        d.tools = gates.tool_specs(sorted(d.allowed))
        if d.output is not None and d.output.tool is not None:  # the typed answer's tool
            d.tools = (*d.tools, d.output.tool)
    if d.plan is None:  # (a new run's first drive is given the plan its run_started records)
        d.plan = plan_turn(
            [c for n in d.allowed if (c := gates.get(n)) is not None],
            t.messages,
            allowed_kinds=d.allowed_kinds,
            settings=rt.model_settings,
            tier=rt.model_tier,
            effort=rt.thinking_effort,
        )
    prepared = await prepare(d, tools=d.tools, settings=d.plan.settings)
    request = prepared.request
    # the model that will answer (a tiered model routes by the plan's tier), and its price
    route = getattr(rt.model, "model_for", None)
    answering: Model = route(request) if callable(route) else rt.model
    budget = run_limits(rt.limits, t.started)[1]  # (a delegated run's: its share)
    if budget is not None:
        refusal = budget_refusal(
            budget_usd=budget,
            spent_usd=t.cost_usd + delegated_spend(t.messages),  # its children's count too
            next_call_usd=estimate_call_usd(
                d.price(answering), request, input_tokens=prepared.tokens
            ),
            model=answering.name,
        )
        if refusal is not None:
            d.emit(RunFailedDraft(reason="budget", message=refusal), status="failed")
            return None
    return prepared, answering


class _Said:
    """The answer and each thinking block, redacted as streams: a secret split across deltas
    is caught whole (what a stream holds is emitted before any other event)."""

    def __init__(self, d: Drive) -> None:
        self.d = d
        self.redact = d.rt.redactor.redact_text
        self.answer = StreamRedactor(self.redact)
        self.blocks: dict[int, StreamRedactor] = {}

    def text(self, delta: str) -> None:
        self.flush(keep_text=True)
        if said := self.answer.feed(delta):
            self.d.emit(TextDeltaDraft(text=said))

    def thinking(self, delta: str, index: int) -> None:
        self.flush(keep_thinking=index)
        opens = index not in self.blocks  # its first event opens the block (if empty)
        block = self.blocks.setdefault(index, StreamRedactor(self.redact))
        if (thought := block.feed(delta)) or opens:
            self.d.emit(ThinkingDeltaDraft(text=thought, block_index=index))

    def flush(self, *, keep_text: bool = False, keep_thinking: int | None = None) -> None:
        if not keep_text and (said := self.answer.flush()):
            self.d.emit(TextDeltaDraft(text=said))
        for index in [i for i in self.blocks if i != keep_thinking]:
            if thought := self.blocks.pop(index).flush():
                self.d.emit(ThinkingDeltaDraft(text=thought, block_index=index))

    def discard(self) -> None:
        self.answer.discard()
        self.blocks.clear()


def _added(usage: StreamUsage, item: StreamUsage) -> StreamUsage:
    return StreamUsage(
        usage.input_tokens + item.input_tokens,
        usage.output_tokens + item.output_tokens,
        usage.cache_read_tokens + item.cache_read_tokens,
        usage.cache_write_tokens + item.cache_write_tokens,
    )


async def _failed(d: Drive, exc: Exception, reads: list[asyncio.Task[None]]) -> None:
    """The model failed: the turn's reads cancelled, its partial turn retracted, the run
    failed (the message redacted)."""
    t = d.t
    for task in reads:
        task.cancel()
    await asyncio.gather(*reads, return_exceptions=True)
    log.warning("model %s failed: %s", d.rt.model.name, exc)
    events: list[Draft] = []
    if t.partial_from is not None:
        events.append(TurnRetractedDraft(from_seq=t.partial_from))
    message = d.rt.redactor.redact_text(str(exc))[:500] or type(exc).__name__
    events.append(RunFailedDraft(reason="error", message=f"model error: {message}"))
    d.emit(*events, status="failed")


def _usage(
    d: Drive, prepared: Prepared, answering: Model, answered_by: str | None, usage: StreamUsage
) -> UsageDraft:
    """The turn's usage and cost (priced as the model that answered); the drive's next call
    is measured from this one."""
    rt, t = d.rt, d.t
    assert d.plan is not None
    cost = cost_usd(d.price(answering, answered_by), usage)
    reported = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    if prepared.tokens is not None:  # the next call of the drive is measured from this one
        d.last_request = LastRequest(reported, prepared.tokens)
    return UsageDraft(
        model=answered_by or rt.model.name,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        total_input_tokens=t.input_tokens + usage.input_tokens,
        total_output_tokens=t.output_tokens + usage.output_tokens,
        tier=d.plan.tier,
        effort=d.plan.effort,
        cost_usd=cost,
        total_cost_usd=t.cost_usd + (cost or Decimal(0)),
    )


async def _each(reads: list[asyncio.Task[None]]) -> None:
    """The turn's reads, awaited in turn: what ``gather`` did, without its future and its
    callbacks (the drive wakes one loop iteration sooner). The first failure raises; cancelled,
    all are cancelled."""
    try:
        for task in reads:
            await task
    except asyncio.CancelledError:
        for task in reads:
            task.cancel()
        raise
