"""The ``Memory`` seam: ``remember`` a text in a namespace, ``recall`` the most relevant ones.

A namespace is whose memory it is; the agent uses the run's principal, so one principal never
recalls another's records. Records are plain, redacted text with a kind (``note``, ``advice``,
``fact``) and a time. Ranking is lexical (full-text, BM25 on SQLite, ``ts_rank`` on PostgreSQL);
with an ``embedder`` the vector similarity is blended in by reciprocal rank fusion.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable
from uuid import UUID

__all__ = [
    "Embedder",
    "Memory",
    "MemoryRecord",
    "blend",
    "cosine",
    "query_terms",
]

Embedder = Callable[[Sequence[str]], Awaitable[Sequence[Sequence[float]]]]
"""Texts in, one vector each out (an embeddings endpoint through its official SDK, say)."""

MAX_TEXT = 4_000  # characters kept of one record
RRF_K = 60  # reciprocal rank fusion's usual constant


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


_WORD = re.compile(r"\w+", re.UNICODE)


def query_terms(text: str, limit: int = 32) -> list[str]:
    """The distinct words of a query, lower-cased, in order (at most ``limit``)."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if len(word) > 1 or word.isdigit():
            seen.setdefault(word, None)
        if len(seen) >= limit:
            break
    return list(seen)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def blend(*rankings: Sequence[UUID]) -> dict[UUID, float]:
    """Reciprocal rank fusion of several best-first rankings."""
    scores: dict[UUID, float] = {}
    for ranking in rankings:
        for rank, record_id in enumerate(ranking):
            scores[record_id] = scores.get(record_id, 0.0) + 1.0 / (RRF_K + rank + 1)
    return scores
