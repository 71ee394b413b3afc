"""Memory as the loop uses it: one bounded recall per user message, remembering in the background.

A recall that raises or takes longer than ``timeout`` is logged ("memory recall failed;
continuing without") and the turn goes on with an empty ``<memory_recall>`` layer: memory being
down never stops a run. ``remember_soon`` never blocks a run: the text is redacted, then written
by a background task whose failure is logged. ``drain`` waits for those writes (tests, shutdown).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from .._logs import logger
from ..clock import Clock, SystemClock

if TYPE_CHECKING:
    from .memory import Memory

__all__ = ["MemoryLayer"]

log = logger("fiduciary.memory")


@dataclass(slots=True)
class MemoryLayer:
    """``recall_days``: only records of the last so many days are recalled (None: all)."""

    memory: Memory
    redact: Callable[[str], str]
    top_k: int = 5
    timeout: float = 2.0
    recall_days: int | None = None
    clock: Clock = field(default_factory=SystemClock)
    _writes: set[asyncio.Task[None]] = field(default_factory=set)

    async def recall(self, query: str, namespace: str) -> list[str]:
        """The texts recalled for ``query`` in ``namespace`` (empty when memory fails)."""
        if not query.strip():
            return []
        try:
            since = None
            if self.recall_days is not None:
                since = self.clock.now() - timedelta(days=self.recall_days)
            async with asyncio.timeout(self.timeout):
                found = await self.memory.recall(
                    query, namespace=namespace, top_k=self.top_k, since=since
                )
        except Exception as exc:  # TimeoutError included: a memory may fail in any way
            log.warning("memory recall failed; continuing without (%s)", type(exc).__name__)
            return []
        return [self.redact(record.text) for record in found]

    def remember_soon(self, text: str, namespace: str, kind: str = "note") -> None:
        """Remember ``text`` (redacted first) without waiting; a failure is logged."""
        safe = self.redact(text).strip()
        if not safe:
            return
        self.soon(self._remember(safe, namespace, kind))

    def soon(self, work: Awaitable[object]) -> None:
        """Run ``work`` in the background (``drain`` waits for it); a failure is logged."""
        task = asyncio.get_running_loop().create_task(self._quietly(work))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _quietly(self, work: Awaitable[object]) -> None:
        try:
            await work
        except Exception as exc:
            log.warning("a background memory write failed (%s)", type(exc).__name__)

    async def _remember(self, text: str, namespace: str, kind: str) -> None:
        try:
            await self.memory.remember(text, namespace=namespace, kind=kind)
        except Exception as exc:
            log.warning("remembering failed; the note is lost (%s)", type(exc).__name__)

    async def drain(self) -> None:
        """Wait until every background write has finished."""
        while self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
