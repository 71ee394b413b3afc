"""The values of the attention layer: what a source yields, what a judge reads and answers.

An ``Incoming`` is one event from outside a run (a price move, a payment received, a run that
failed on its budget). A judge sees a window of them as ``WindowEvent``s, each with a role:
``act`` (something fiduciary did: a run started, a person notified), ``consequence`` (what
followed an act), ``context`` (the world moving on its own) and ``flush`` (a boundary the window
was judged at). Budget trimming drops the oldest consequence and context events first; acts and
flushes always stay.

Errors: a ``PermanentError`` is never retried (a refusal, a closed client, a bad configuration);
every other exception a judge or source raises counts as retryable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from ..exceptions import FiduciaryError

__all__ = [
    "DEFAULT_CRITERIA",
    "DEFAULT_ROUTES",
    "AttentionError",
    "Batch",
    "Incoming",
    "JudgeImage",
    "JudgeInput",
    "Judgment",
    "PermanentError",
    "Predicate",
    "Role",
    "RouteOffer",
    "WindowEvent",
]

Role = Literal["act", "consequence", "context", "flush"]

DEFAULT_ROUTES: tuple[str, ...] = ("act", "notify", "drop")
"""The routes a judge offers when none are configured."""

DEFAULT_CRITERIA: Mapping[str, str] = {
    "act": "the events call for the agent to do something now on the person's behalf",
    "notify": "a person should look at this, but nothing should be done without them",
    "drop": "nothing here needs the agent or a person",
}


class AttentionError(FiduciaryError):
    """Something in the attention layer failed; see the subclasses."""


class PermanentError(AttentionError):
    """A failure that asking again will not fix: it is reported, never retried."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeImage:
    """An image for the judge, base64 data: passed to the model after the prompt."""

    mime_type: str
    data: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Incoming:
    """One event from a source. ``id`` is unique within its source (redelivery reuses it)."""

    id: str
    source: str
    type: str
    at: datetime
    data: Mapping[str, Any] = field(default_factory=dict)
    principal: str | None = None
    role: Role = "context"
    images: tuple[JudgeImage, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """What a source yields: events, the cursor after them, and whether a gap precedes them."""

    events: tuple[Incoming, ...]
    cursor: str | None
    truncated: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowEvent:
    role: Role
    type: str
    at: datetime
    data: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteOffer:
    """A route on offer; ``criterion`` here wins over the judge's configured one."""

    route: str
    criterion: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Predicate:
    """A yes/no question the judge answers with a probability of yes."""

    name: str
    question: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeInput:
    routes: tuple[RouteOffer, ...]
    window: tuple[WindowEvent, ...]
    predicates: tuple[Predicate, ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)
    recent_routes: tuple[str, ...] = ()
    images: tuple[JudgeImage, ...] = ()
    truncated: bool = False
    omitted: int = 0  # events the budget dropped from the window (set by the judge)


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgment:
    """A judge's answer. ``probabilities`` sum to 1 when any survived parsing (else empty)."""

    route: str
    probabilities: Mapping[str, float]
    predicates: Mapping[str, float] = field(default_factory=dict)
    model: str = ""
    prompt_tokens: int = 0
    cost_usd: Decimal | None = None
