"""What the loop is given by its agent: a small frozen ``Runtime``, never the agent itself.

``Agent`` builds one, once, from its frozen options, and the loop reads nothing else of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..clock import Clock
from ..context.config import ContextConfig
from ..events import RunStarted
from ..gates import Gates
from ..models.base import Model
from ..models.pricing import PriceTable
from ..models.tiers import Effort, Tier
from ..redaction import Redactor
from ..stores.base import HeldPrincipalLock, Store
from ..text_guards import TextGuard
from ..tracing import NO_TRACER, RunTracer

__all__ = ["Held", "Limits", "Runtime", "run_limits"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Where a run stops: model turns and tool calls per user message, its model budget, and
    the length of its lease (renewed every third of it while the run is driven).

    ``commit_delay``: how long events wait for others to share their commit (and to reach
    listeners) unless the run needs them durable sooner — before a side effect, a suspension
    or its end. A model streaming a token every few tens of milliseconds sees each one
    committed within it; a burst (a fast model, tool results, a zero-latency test model)
    shares one transaction."""

    max_turns: int
    max_tool_calls: int
    budget_usd: Decimal | None
    lease_seconds: float
    commit_delay: float = 0.005


def run_limits(limits: Limits, started: RunStarted | None) -> tuple[int, Decimal | None]:
    """A run's max turns and budget: the agent's, or less where its ``run_started`` sets a
    share (a delegated run gets a share of its parent's remaining turns and budget)."""
    turns, budget = limits.max_turns, limits.budget_usd
    if started is not None:
        if started.max_turns is not None:
            turns = min(turns, started.max_turns)
        if started.budget_usd is not None:
            budget = started.budget_usd if budget is None else min(budget, started.budget_usd)
    return turns, budget


@dataclass(frozen=True, slots=True)
class Runtime:
    """Everything a drive of a run uses: the model and how it is asked, the gates, the store,
    the clock, the redactor, the limits, and the principal's write lock."""

    model: Model
    gates: Gates
    store: Store
    clock: Clock
    redactor: Redactor
    limits: Limits
    system: tuple[str, ...]
    model_settings: Mapping[str, Any]
    model_tier: Tier | None
    thinking_effort: Effort | None
    prices: PriceTable | None
    principal_lock: Callable[[str], AbstractAsyncContextManager[Held]]
    context: ContextConfig | None = None  # layers, shaping, compaction, memory (None: none)
    tracer: RunTracer = NO_TRACER  # spans and metrics of each drive (fiduciary.observability)
    text_guards: tuple[TextGuard, ...] = ()  # on the person's message and the final text


class Held:
    """A principal's write lock: the process's lock, then the store's (if any); keeps a strong
    reference to the process's lock while it is held (the agent's map holds weak ones)."""

    __slots__ = ("_guard", "_lock", "_shared")

    def __init__(
        self, lock: asyncio.Lock, shared: AbstractAsyncContextManager[HeldPrincipalLock] | None
    ) -> None:
        self._lock = lock
        self._shared = shared
        self._guard: HeldPrincipalLock | None = None

    async def __aenter__(self) -> Held:
        await self._lock.acquire()
        if self._shared is not None:
            try:
                self._guard = await self._shared.__aenter__()
            except BaseException:
                self._lock.release()
                raise
        return self

    async def verify(self) -> None:
        """Before an effect: raise ``StoreError`` if the store's lock was lost meanwhile."""
        if self._guard is not None:
            await self._guard.verify()

    async def __aexit__(self, *exc: Any) -> None:
        try:
            if self._shared is not None:
                await self._shared.__aexit__(*exc)
        finally:
            self._lock.release()
