"""What one model call is sent, beyond the log: system-prompt layers, shaping and compaction.

Before each model call (``prepare``): the changing layers of the system prompt are computed once
per user message and recorded (``context_layers``), so every call of that message — in this
process or after a resume — sends the same; the conversation is shaped as the last compaction
recorded it (cut, stubs, summary) and microcompacted; and when the request measures over the
compaction threshold, it is compacted and the new cut recorded (``compaction`` start, then end).
The log itself is never changed. ``remember_reply`` keeps a final answer in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..capabilities import Kind
from ..context.compaction import Shape, compact, shaped
from ..context.config import domain_text
from ..context.layers import SystemPrompt, recall_block
from ..context.skills import active_skill, skill_layer
from ..context.tokens import measure_request
from ..events import CompactionDraft, ContextLayersDraft
from ..models.base import Message, ModelRequest
from ..models.pricing import estimate_input_tokens
from .state import Drive

__all__ = ["prepare", "remember_reply"]

_DEDUPABLE = frozenset({Kind.READ, Kind.PREVIEW})


async def prepare(d: Drive, request: ModelRequest) -> ModelRequest:
    """``request`` (the base system prompt and the whole conversation) as it is to be sent."""
    cfg, t = d.rt.context, d.t
    if cfg is None:
        return request
    redact = d.rt.redactor.redact_text
    calls = t.history.calls[t.skill_since :]
    skill = skill_layer(active_skill(cfg.skills, t.skill, calls, d.rt.gates.get))
    if cfg.layered or skill:
        if cfg.layered and t.layers is None:
            context = "" if cfg.domain is None else await domain_text(cfg.domain, d.principal)
            recalled: list[str] = []
            if cfg.memory is not None:
                recalled = await cfg.memory.recall(t.user_text, d.principal.actor_id)
            d.emit(ContextLayersDraft(context=redact(context), recalled=recalled))
        layers = t.layers  # (the fold applied the draft just emitted)
        prompt = SystemPrompt.assemble(
            request.system,
            context=layers.context if layers else "",
            recall=recall_block(layers.recalled) if layers else "",
            skill=skill,
        )
        request = replace(request, system=prompt.layers, stable_layers=prompt.stable)

    def dedupable(name: str) -> bool:
        cap = d.rt.gates.get(name)
        return cfg.microcompact and cap is not None and cap.kind in _DEDUPABLE

    if cfg.microcompact or t.shape != Shape():
        sent = shaped(t.messages, t.shape, dedupable, turns_before=t.turns_before)
        request = replace(request, messages=sent)
    policy = cfg.compaction
    if policy is None:
        return request
    if t.compacting is None:
        tokens = measure_request(request, d.last_request)
        if tokens <= policy.threshold:
            return request
        d.emit(CompactionDraft(phase="start", tokens_before=tokens))
    else:  # a compaction started before a crash and not ended: done again, the same way
        tokens = t.compacting
    # one measure for the whole compaction, fixed by what the start recorded, so that a run
    # resumed between start and end cuts where the first process would have
    ratio = tokens / max(1, estimate_input_tokens(request))

    def measure(messages: Sequence[Message]) -> int:
        return round(estimate_input_tokens(replace(request, messages=tuple(messages))) * ratio)

    shape, method = await compact(
        t.messages,
        t.shape,
        policy,
        measure=measure,
        dedupable=dedupable,
        summarize=cfg.summarize,
        redact=redact,
    )
    sent = shaped(t.messages, shape, dedupable, turns_before=t.turns_before)
    d.emit(
        CompactionDraft(
            phase="end",
            method=method,
            kept_from=shape.kept_from,
            stubbed_before=shape.stubbed_before,
            summary=shape.summary,
            tokens_before=tokens,
            tokens_after=measure(sent),
        )
    )
    return replace(request, messages=sent)


def remember_reply(d: Drive, text: str) -> None:
    """After a completed run: keep its final answer in the principal's memory (kind ``advice``),
    and start the agent's ``remember_after_run``, if so configured (both in the background)."""
    cfg = d.rt.context
    if cfg is None or cfg.memory is None:
        return
    if cfg.remember_replies and text.strip():
        cfg.memory.remember_soon(text, d.principal.actor_id, kind="advice")
    if cfg.after_run is not None:
        cfg.memory.soon(cfg.after_run(d.principal.actor_id))
