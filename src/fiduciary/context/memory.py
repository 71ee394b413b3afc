"""The ``Memory`` seam: ``remember`` a text in a namespace, ``recall`` the most relevant ones.

A namespace is whose memory it is; the agent uses the run's principal, so one principal never
recalls another's records. Records are plain, redacted text with a kind (``note``, ``advice``,
``fact``) and a time. The seam sits in the core beside the layers that read it
(``context.recall``); its implementations and their ranking live in ``fiduciary.memory``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable
from uuid import UUID

__all__ = ["Embedder", "Memory", "MemoryRecord"]

Embedder = Callable[[Sequence[str]], Awaitable[Sequence[Sequence[float]]]]
"""Texts in, one vector each out (an embeddings endpoint through its official SDK, say)."""


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    record_id: UUID
    namespace: str
    kind: str
    text: str
    at: datetime
    score: float = 0.0  # the recall's relevance (higher is better); 0 in listings


@runtime_checkable
class Memory(Protocol):
    async def remember(
        self, text: str, *, namespace: str, kind: str = "note", at: datetime | None = None
    ) -> MemoryRecord:
        """Keep ``text`` (already redacted by the caller) in ``namespace``."""
        ...

    async def recall(
        self, query: str, *, namespace: str, top_k: int = 5, since: datetime | None = None
    ) -> list[MemoryRecord]:
        """The ``top_k`` records of ``namespace`` most relevant to ``query``, best first."""
        ...

    async def records(
        self, *, namespace: str, kind: str | None = None, limit: int = 100
    ) -> list[MemoryRecord]:
        """The newest records of a namespace, newest first (for a person to see)."""
        ...

    async def forget(self, record_id: UUID, *, namespace: str) -> bool:
        """Delete one record of ``namespace``; False when there is no such record there."""
        ...

    async def close(self) -> None: ...
