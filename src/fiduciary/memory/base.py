"""What the memory stores share: the ``Memory`` seam's names, and how they rank what they recall.

A namespace is whose memory it is; the agent uses the run's principal, so one principal never
recalls another's records. Records are plain, redacted text with a kind (``note``, ``advice``,
``fact``) and a time. Ranking is lexical (full-text, BM25 on SQLite, ``ts_rank`` on PostgreSQL);
with an ``embedder`` the vector similarity is blended in by reciprocal rank fusion.

The seam itself (``Memory``, ``MemoryRecord``, ``Embedder``) lives in the core,
``fiduciary.context.memory``; this module keeps those names and the ranking its stores share.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from ..context.memory import Embedder, Memory, MemoryRecord

__all__ = [
    "Candidate",
    "Embedder",
    "Memory",
    "MemoryRecord",
    "blend",
    "cosine",
    "embed_query",
    "fuse",
    "query_terms",
    "rare_terms",
]

MAX_TEXT = 4_000  # characters kept of one record
RRF_K = 60  # reciprocal rank fusion's usual constant


_WORD = re.compile(r"\w+", re.UNICODE)

# English function words: a question's "how much did I ..." matches every record and ranks none
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "after",
        "again",
        "all",
        "am",
        "an",
        "and",
        "any",
        "anything",
        "are",
        "as",
        "at",
        "be",
        "been",
        "before",
        "being",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "for",
        "from",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "more",
        "most",
        "my",
        "no",
        "not",
        "now",
        "of",
        "on",
        "or",
        "our",
        "out",
        "over",
        "she",
        "should",
        "so",
        "some",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)
COMMON_SHARE = 0.05  # a term in more than this share of the records ranks little and costs much
COMMON_FLOOR = 500  # ... but below this many records every term is kept


def query_terms(text: str, limit: int = 32) -> list[str]:
    """The distinct words of a query, lower-cased, in order (at most ``limit``); stop words are
    left out unless the query has nothing else."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if len(word) > 1 or word.isdigit():
            seen.setdefault(word, None)
        if len(seen) >= limit:
            break
    words = list(seen)
    return [w for w in words if w not in STOP_WORDS] or words


def rare_terms(counts: dict[str, int], total: int) -> list[str]:
    """The terms worth ranking by: those in at most ``COMMON_SHARE`` of ``total`` records (all of
    them in a small memory); when every term is common, the rarest one. Ranking cost grows with
    the records matched, and a common term adds matches while adding almost nothing to BM25."""
    limit = max(COMMON_FLOOR, int(total * COMMON_SHARE))
    rare = [t for t, n in counts.items() if 0 < n <= limit]
    if rare:
        return rare
    present = sorted((n, t) for t, n in counts.items() if n > 0)
    return [present[0][1]] if present else []


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


Candidate = tuple[UUID, str, str, datetime, Sequence[float] | None]
"""A record found by a backend: id, kind, text, time, vector (None without an embedder)."""


async def embed_query(embedder: Embedder | None, query: str) -> list[float] | None:
    """The query's vector, or None without an embedder (or an empty query)."""
    if embedder is None or not query.strip():
        return None
    (embedding,) = await embedder([query])
    return [float(x) for x in embedding]


def fuse(
    namespace: str,
    lexical: Sequence[Candidate],
    recent: Sequence[Candidate],
    query_vector: Sequence[float] | None,
    top_k: int,
) -> list[MemoryRecord]:
    """The ``top_k`` records: the lexical ranking (best first), blended with the cosine ranking
    of every candidate (lexical and recent) when there is a query vector."""
    found = {c[0]: c for c in [*recent, *lexical]}
    rankings: list[list[UUID]] = [[c[0] for c in lexical]]
    if query_vector is not None:
        scored = [
            (cosine(query_vector, c[4]), record_id)
            for record_id, c in found.items()
            if c[4] is not None
        ]
        rankings.append([record_id for _s, record_id in sorted(scored, reverse=True)])
    best = sorted(blend(*rankings).items(), key=lambda item: item[1], reverse=True)[:top_k]
    return [
        MemoryRecord(rid, namespace, found[rid][1], found[rid][2], found[rid][3], score)
        for rid, score in best
    ]


def blend(*rankings: Sequence[UUID]) -> dict[UUID, float]:
    """Reciprocal rank fusion of several best-first rankings."""
    scores: dict[UUID, float] = {}
    for ranking in rankings:
        for rank, record_id in enumerate(ranking):
            scores[record_id] = scores.get(record_id, 0.0) + 1.0 / (RRF_K + rank + 1)
    return scores
