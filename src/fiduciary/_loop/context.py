"""What one model call is sent, beyond the log: system-prompt layers, shaping and compaction.

Before each model call (``prepare``): the changing layers of the system prompt are computed once
per user message and recorded (``context_layers``), so every call of that message — in this
process or after a resume — sends the same; the conversation is shaped as the last compaction
recorded it (cut, stubs, summary) and microcompacted; and when the request measures over the
compaction threshold, it is compacted and the new cut recorded (``compaction`` start, then end).
The log itself is never changed. ``remember_reply`` keeps a final answer in memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..capabilities import Kind
from ..context.compaction import SentView, Shape, compact
from ..context.config import ContextConfig, domain_text
from ..context.layers import SystemPrompt, recall_block
from ..context.skills import active_skill, skill_layer
from ..context.tokens import measured
from ..events import CompactionDraft, ContextLayersDraft
from ..gates import Gates
from ..models.base import ModelRequest, ToolSpec
from ..models.pricing import prompt_chars, tokens_of_chars
from .state import Drive

__all__ = ["Prepared", "prepare", "remember_reply"]

_DEDUPABLE = frozenset({Kind.READ, Kind.PREVIEW})


@dataclass(frozen=True, slots=True)
class Prepared:
    """A model call's request as it is to be sent, and its ``estimate_input_tokens`` when
    preparing it measured it (measured once: the budget and the next measure reuse it)."""

    request: ModelRequest
    tokens: int | None


def _dedupable(cfg: ContextConfig, gates: Gates) -> Callable[[str], bool]:
    # closes over the configuration only: the view it serves outlives the drive
    def dedupable(name: str) -> bool:
        cap = gates.get(name)
        return cfg.microcompact and cap is not None and cap.kind in _DEDUPABLE

    return dedupable


# the tools' prompt_chars by their specs' identities (the gates make one ToolSpec per
# capability), across runs: each run's first view would encode every schema again. The entry
# holds the specs, so their ids are not reused while it stands.
_TOOLS_CHARS: dict[tuple[int, ...], tuple[tuple[ToolSpec, ...], int]] = {}


def _tools_chars(tools: tuple[ToolSpec, ...]) -> int:
    key = tuple(map(id, tools))
    known = _TOOLS_CHARS.get(key)
    if known is None:
        if len(_TOOLS_CHARS) >= 256:
            _TOOLS_CHARS.clear()
        known = _TOOLS_CHARS[key] = (tools, prompt_chars((), tools))
    return known[1]


def _view(d: Drive, cfg: ContextConfig, shape: Shape, made: SentView | None = None) -> SentView:
    """The view for ``shape``, brought up to date: ``made`` or the one the transcript kept from
    its previous call when it is for the same shape and configuration, else built anew. Kept
    on the transcript when ``shape`` is the transcript's."""
    t, key = d.t, (cfg.microcompact, id(d.rt.gates))  # the view's dedupable holds the gates
    view = made if made is not None else t.view
    if view is None or view.shape != shape or view.key != key:
        first_turn = 1 + t.turns_before(shape.kept_from)
        view = SentView(shape, _dedupable(cfg, d.rt.gates), first_turn=first_turn, key=key)
    view.extend(t.messages)
    if shape == t.shape:
        t.view = view
    return view


async def prepare(d: Drive, *, tools: tuple[ToolSpec, ...], settings: dict[str, Any]) -> Prepared:
    """The next model call's request: the system prompt and the conversation as sent."""
    rt, cfg, t = d.rt, d.rt.context, d.t
    if cfg is None:
        whole = tuple(t.messages)
        return Prepared(ModelRequest(rt.system, whole, tools, settings), None)
    system, stable = rt.system, None
    calls = t.history.calls[t.skill_since :]
    skill = skill_layer(active_skill(cfg.skills, t.skill, calls, rt.gates.get))
    if cfg.layered or skill:
        redact = rt.redactor.redact_text
        if cfg.layered and t.layers is None:
            context = "" if cfg.domain is None else await domain_text(cfg.domain, d.principal)
            recalled: list[str] = []
            if cfg.memory is not None:
                recalled = await cfg.memory.recall(t.user_text, d.principal.actor_id)
            d.emit(ContextLayersDraft(context=redact(context), recalled=recalled))
        layers = t.layers  # (the fold applied the draft just emitted)
        prompt = SystemPrompt.assemble(
            system,
            context=layers.context if layers else "",
            recall=recall_block(layers.recalled) if layers else "",
            skill=skill,
        )
        system, stable = prompt.layers, prompt.stable
    view = _view(d, cfg, t.shape)
    fixed = prompt_chars(system, ()) + _tools_chars(tools)
    estimate = tokens_of_chars(fixed + view.chars)
    request = ModelRequest(system, tuple(view.messages), tools, settings, stable)
    policy = cfg.compaction
    if policy is None:
        return Prepared(request, estimate)
    if t.compacting is None:
        tokens = measured(estimate, d.last_request)
        if tokens <= policy.threshold:
            return Prepared(request, estimate)
        d.emit(CompactionDraft(phase="start", tokens_before=tokens))
    else:  # a compaction started before a crash and not ended: done again, the same way
        tokens = t.compacting
    # one measure for the whole compaction, fixed by what the start recorded, so that a run
    # resumed between start and end cuts where the first process would have
    ratio = tokens / estimate

    def measure(chars: int) -> int:
        return round(tokens_of_chars(fixed + chars) * ratio)

    shape, method = await compact(
        t.messages,
        t.shape,
        policy,
        measure=measure,
        dedupable=_dedupable(cfg, rt.gates),
        summarize=cfg.summarize,
        redact=rt.redactor.redact_text,
        turns_before=t.turns_before,
    )
    sent = _view(d, cfg, shape)
    d.emit(
        CompactionDraft(
            phase="end",
            method=method,
            kept_from=shape.kept_from,
            stubbed_before=shape.stubbed_before,
            summary=shape.summary,
            tokens_before=tokens,
            tokens_after=measure(sent.chars),
        )
    )
    sent = _view(d, cfg, t.shape, sent)  # the shape as the log has it: what a resume sends
    estimate = tokens_of_chars(fixed + sent.chars)
    request = ModelRequest(system, tuple(sent.messages), tools, settings, stable)
    return Prepared(request, estimate)


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
