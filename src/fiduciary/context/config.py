"""What an agent configures of the context its model is sent (frozen; part of the loop's runtime).

``Agent`` builds a ``ContextConfig`` from its options (``context=``, ``memory=``,
``context_window=``, ``compact_at=``, ``summarizer=``, ``microcompact=``); the loop reads only it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._logs import logger
from ..capabilities import Principal
from ..exceptions import ConfigurationError
from ..models.base import Model, ModelRequest
from .compaction import CompactionPolicy, Summarizer
from .skills import Skill
from .tokens import context_window

if TYPE_CHECKING:
    from .recall import MemoryLayer

__all__ = [
    "ContextConfig",
    "DomainContext",
    "context_config",
    "domain_text",
    "model_summarizer",
]

log = logger("fiduciary.context")

DomainContext = str | Callable[[Principal], "str | Awaitable[str]"]
"""A block of the system prompt about the principal's situation, or a callable computing it
(once per user message)."""

SUMMARY_SYSTEM = (
    "You summarise the earlier part of a conversation between a person and an assistant that "
    "acts on their behalf, so that the assistant can continue without it. Keep every fact the "
    "assistant may need: what the person asked and decided, amounts, recipients, what was done "
    "and its outcome, what is still pending. Leave out pleasantries. Write plain prose, at most "
    "300 words."
)
SUMMARY_SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class ContextConfig:
    compaction: CompactionPolicy | None = None
    summarize: Summarizer | None = None
    domain: DomainContext | None = None
    memory: MemoryLayer | None = None
    microcompact: bool = True
    remember_replies: bool = False  # each final answer is remembered (kind "advice")
    # called with the principal's id after each completed run, in the background (MemoryLayer)
    after_run: Callable[[str], Awaitable[object]] | None = None
    skills: Mapping[str, Skill] = field(default_factory=dict)  # for the skill layer, by name

    @property
    def layered(self) -> bool:
        """Whether the system prompt has changing layers (domain context, recalled memory)."""
        return self.domain is not None or self.memory is not None


async def domain_text(domain: DomainContext, principal: Principal) -> str:
    """The domain context for ``principal``; '' (and a warning) when computing it fails."""
    if isinstance(domain, str):
        return domain
    try:
        value = domain(principal)
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:  # host code: the turn goes on without the layer
        log.warning("the domain context failed; continuing without (%s)", type(exc).__name__)
        return ""
    return str(value)


def model_summarizer(model: Model) -> Summarizer:
    """A summariser asking ``model`` (its fast tier, when tiered) through ``complete_json``."""

    async def summarize(text: str) -> str:
        target: object = model
        route = getattr(model, "model_for", None)
        if callable(route):
            target = route(
                ModelRequest(system=(), messages=(), tools=(), settings={"tier": "fast"})
            )
        complete = getattr(target, "complete_json", None)
        if not callable(complete):
            raise TypeError(f"{model.name} cannot summarise: it has no complete_json")
        answer = await complete(SUMMARY_SYSTEM, text, SUMMARY_SCHEMA)
        summary = answer.get("summary") if isinstance(answer, dict) else None
        if not isinstance(summary, str) or not summary.strip():
            raise ValueError("the summariser returned no summary")
        return summary

    return summarize


def context_config(
    model: Model,
    *,
    window: int | None,
    compact_at: float,
    summarizer: Summarizer | None,
    domain: DomainContext | None,
    memory: MemoryLayer | None,
    microcompact: bool,
    remember_replies: bool,
    after_run: Callable[[str], Awaitable[object]] | None,
    skills: Mapping[str, Skill] | None = None,
) -> ContextConfig:
    """An agent's context options as the loop reads them: the window is the given one, else the
    model's from the table (no window: no compaction); the summariser defaults to the model."""
    window = window or context_window(model.name)
    policy = None
    if window is not None:
        try:
            policy = CompactionPolicy(
                window=window, compact_at=compact_at, compact_to=min(0.5, compact_at * 0.6)
            )
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
    return ContextConfig(
        compaction=policy,
        summarize=summarizer or model_summarizer(model),
        domain=domain,
        memory=memory,
        microcompact=microcompact,
        remember_replies=remember_replies,
        after_run=after_run,
        skills=dict(skills or {}),
    )
