"""Memory in a Python dict: for tests and for agents on the in-memory store."""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime
from uuid import UUID, uuid4

from ..clock import Clock, SystemClock
from .base import MAX_TEXT, Embedder, MemoryRecord, blend, cosine, query_terms

__all__ = ["InMemoryMemory"]


class InMemoryMemory:
    """Ranked by a small BM25 over the namespace's records (k1 1.2, b 0.75), vectors blended."""

    def __init__(self, *, embedder: Embedder | None = None, clock: Clock | None = None) -> None:
        self.embedder = embedder
        self.clock = clock or SystemClock()
        self._records: dict[str, dict[UUID, tuple[MemoryRecord, list[float] | None]]] = {}

    async def remember(
        self, text: str, *, namespace: str, kind: str = "note", at: datetime | None = None
    ) -> MemoryRecord:
        text = text.strip()[:MAX_TEXT]
        if not text:
            raise ValueError("nothing to remember: the text is empty")
        vector = None
        if self.embedder is not None:
            (embedding,) = await self.embedder([text])
            vector = list(embedding)
        record = MemoryRecord(uuid4(), namespace, kind, text, at or self.clock.now())
        self._records.setdefault(namespace, {})[record.record_id] = (record, vector)
        return record

    async def recall(
        self, query: str, *, namespace: str, top_k: int = 5, since: datetime | None = None
    ) -> list[MemoryRecord]:
        kept = [
            (r, v)
            for r, v in self._records.get(namespace, {}).values()
            if since is None or r.at >= since
        ]
        terms = query_terms(query)
        docs = [(r, Counter(query_terms(r.text, limit=10_000))) for r, _v in kept]
        average = sum(sum(c.values()) for _r, c in docs) / len(docs) if docs else 1.0
        lexical: list[tuple[float, UUID]] = []
        for record, counts in docs:
            score = 0.0
            length = sum(counts.values())
            for term in terms:
                n = sum(1 for _r, c in docs if term in c)
                tf = counts.get(term, 0)
                if tf:
                    idf = math.log(1 + (len(docs) - n + 0.5) / (n + 0.5))
                    score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))
            if score > 0:
                lexical.append((score, record.record_id))
        rankings = [[rid for _s, rid in sorted(lexical, reverse=True)]]
        if self.embedder is not None and query.strip():
            (embedding,) = await self.embedder([query])
            scored = [(cosine(embedding, v), r.record_id) for r, v in kept if v is not None]
            rankings.append([rid for _s, rid in sorted(scored, reverse=True)])
        by_id = {r.record_id: r for r, _v in kept}
        best = sorted(blend(*rankings).items(), key=lambda item: item[1], reverse=True)[:top_k]
        return [
            MemoryRecord(rid, namespace, by_id[rid].kind, by_id[rid].text, by_id[rid].at, score)
            for rid, score in best
        ]

    async def records(
        self, *, namespace: str, kind: str | None = None, limit: int = 100
    ) -> list[MemoryRecord]:
        rows = [r for r, _v in self._records.get(namespace, {}).values()]
        rows = [r for r in rows if kind is None or r.kind == kind]
        return sorted(rows, key=lambda r: r.at, reverse=True)[:limit]

    async def forget(self, record_id: UUID, *, namespace: str) -> bool:
        return self._records.get(namespace, {}).pop(record_id, None) is not None

    async def close(self) -> None:
        return None
