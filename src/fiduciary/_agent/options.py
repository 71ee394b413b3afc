"""``AgentOptions``: what an ``Agent`` is given, frozen.

An agent's options never change after its construction: ``agent.with_options(**changes)`` is
another agent, made with ``dataclasses.replace``, that shares the first one's store, clock and
everything else not changed (and, in this process, its lease owner and its principals' write
locks). What a drive needs of them is built once, when the agent is.

Values are normalised here, so that ``with_options`` takes what the constructor takes: a
``system`` string becomes a one-part tuple, ``budget_usd`` a ``Decimal``, ``model_settings`` a
read-only mapping, ``capabilities`` / ``guards`` / ``skills`` tuples.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..capabilities import Capability
from ..clock import Clock, SystemClock
from ..context.compaction import Summarizer
from ..context.config import DomainContext
from ..context.skills import Skill
from ..deps import DepsFactory
from ..exceptions import ConfigurationError
from ..gates import DEFAULT_AUTHORIZE_TIMEOUT, Authorize
from ..guards import Guard
from ..models.base import Model
from ..models.pricing import PriceTable, parse_budget
from ..models.tiers import Effort, Tier
from ..outputs import DEFAULT_OUTPUT_RETRIES
from ..policy import Policy
from ..redaction import Redactor
from ..signed_approvals import SignatureCheck
from ..stores.base import Store
from ..stores.memory import MemoryStore
from ..text_guards import TextGuard
from ..tracing import NO_TRACER, RunTracer

if TYPE_CHECKING:
    from ..context.memory import Memory

__all__ = ["DEFAULT_SYSTEM", "AgentOptions", "option_names", "replaced"]

DEFAULT_SYSTEM = (
    "You act on behalf of a person through the tools you are given, and only through them. "
    "Read before you write. Never claim an action happened unless a tool result says so. "
    "When a tool reports an error, a refusal or an unknown outcome, tell the person plainly."
)


def _no_settings() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentOptions:
    """Everything an ``Agent`` is made of, as its constructor takes it (see ``Agent``), plus
    what is set on an agent built already: ``signatures`` (verifies passkey-signed approvals,
    ``fiduciary.passkeys``; None: nothing can be signed), ``tracer`` (spans and metrics of each
    drive; the entry points set OpenTelemetry's) and ``drives_replays`` (a replay agent's: it
    drives runs marked as replays, whose writes never execute; ``fiduciary.observability``)."""

    model: Model
    capabilities: tuple[Capability, ...]
    store: Store = field(default_factory=MemoryStore)
    policy: Policy = field(default_factory=Policy)
    guards: tuple[Guard, ...] | None = None  # None: default_guards()
    authorize: Authorize | None = None
    system: tuple[str, ...] = (DEFAULT_SYSTEM,)
    max_turns: int = 12
    max_tool_calls: int = 40
    clock: Clock = field(default_factory=SystemClock)
    redactor: Redactor = field(default_factory=Redactor)
    model_settings: Mapping[str, Any] = field(default_factory=_no_settings)
    lease_seconds: float = 30.0
    model_tier: Tier | None = None  # tier and effort are chosen per turn unless fixed here
    thinking_effort: Effort | None = None
    budget_usd: Decimal | None = None
    prices: PriceTable | None = None
    authorize_timeout: float = DEFAULT_AUTHORIZE_TIMEOUT
    context: DomainContext | None = None
    memory: Memory | None = None
    remember_replies: bool = False
    recall_days: int | None = None
    remember_after_run: Callable[[str], Awaitable[object]] | None = None
    context_window: int | None = None
    compact_at: float = 0.85
    summarizer: Summarizer | None = None
    microcompact: bool = True
    skills: tuple[Skill, ...] = ()
    output_type: Any = None  # the type a run's answer must be (fiduciary.outputs)
    output_retries: int = DEFAULT_OUTPUT_RETRIES
    deps_type: Any = None  # what its capabilities get as ctx.deps (fiduciary.deps)
    deps_factory: DepsFactory | None = None
    text_guards: tuple[TextGuard, ...] = ()  # the message in, the final text out
    # the agents this one may hand a task to, by name (the delegate capability,
    # fiduciary.delegation; the mapping is read at each call)
    delegates: Mapping[str, Any] | None = None
    signatures: SignatureCheck | None = None
    tracer: RunTracer = NO_TRACER
    drives_replays: bool = False

    def __post_init__(self) -> None:
        put = object.__setattr__  # (frozen: normalised once, here)
        put(self, "capabilities", tuple(self.capabilities))
        if self.guards is not None:
            put(self, "guards", tuple(self.guards))
        system: object = self.system
        put(self, "system", (system,) if isinstance(system, str) else tuple(self.system))
        put(self, "model_settings", MappingProxyType(dict(self.model_settings or {})))
        put(self, "budget_usd", parse_budget(self.budget_usd))  # (also from a string)
        put(self, "skills", tuple(self.skills))
        put(self, "text_guards", tuple(self.text_guards))
        if self.max_turns < 1 or self.max_tool_calls < 1:
            raise ConfigurationError("max_turns and max_tool_calls must be at least 1")
        if not self.authorize_timeout > 0:
            raise ConfigurationError("authorize_timeout must be a positive number of seconds")
        if self.remember_after_run is not None and self.memory is None:
            raise ConfigurationError("remember_after_run needs a memory (memory=...)")


def replaced(options: AgentOptions, changes: Mapping[str, Any]) -> AgentOptions:
    """``options`` with ``changes`` (``Agent.with_options``), checked as when first made."""
    unknown = sorted(set(changes) - _NAMES)
    if unknown:
        raise ConfigurationError(f"unknown agent options: {', '.join(unknown)}")
    return replace(options, **changes)


def option_names() -> frozenset[str]:
    """The names ``with_options`` takes."""
    return _NAMES


_NAMES = frozenset(f.name for f in fields(AgentOptions))
