"""Memory in PostgreSQL: its full-text search (``tsvector``, GIN, ``ts_rank_cd``), vectors optional.

One table, ``memory_records``, beside the run store's, with a generated ``tsvector`` column in the
configured text-search language (``english`` by default: "paid" finds "pay"). Several processes
may share it; the table is created under an advisory lock. With an embedder each record's vector
is kept as ``real[]`` and the lexical candidates plus the namespace's newest records are
re-ranked by cosine similarity, blended by reciprocal rank fusion (pgvector is not required).

Install with ``pip install 'fiduciary[postgres]'``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

try:
    from psycopg_pool import AsyncConnectionPool
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "fiduciary.memory.postgres needs psycopg 3 and psycopg_pool: "
        "pip install 'fiduciary[postgres]'"
    ) from exc

from ..clock import Clock, SystemClock
from .base import (
    MAX_TEXT,
    Candidate,
    Embedder,
    MemoryRecord,
    embed_query,
    fuse,
    query_terms,
    rare_terms,
)

__all__ = ["PostgresMemory"]

CANDIDATES = 200
_LANGUAGES = frozenset({"simple", "english", "french", "german", "spanish", "italian", "dutch"})


def _schema(language: str) -> str:
    return f"""
CREATE TABLE IF NOT EXISTS memory_records (
    seq BIGSERIAL PRIMARY KEY,
    record_id UUID NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    at TIMESTAMPTZ NOT NULL,
    vector REAL[],
    tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('{language}', text)) STORED
);
CREATE INDEX IF NOT EXISTS memory_records_tsv ON memory_records USING GIN (tsv);
CREATE INDEX IF NOT EXISTS memory_records_ns ON memory_records (namespace, at DESC);
"""


def _rows(rows: list[tuple[Any, ...]]) -> list[Candidate]:
    return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]


class PostgresMemory:
    def __init__(
        self,
        dsn: str,
        *,
        embedder: Embedder | None = None,
        clock: Clock | None = None,
        language: str = "english",
        max_connections: int = 4,
    ) -> None:
        if language not in _LANGUAGES:
            raise ValueError(f"language must be one of {sorted(_LANGUAGES)}, not {language!r}")
        self.dsn = dsn
        self.embedder = embedder
        self.clock = clock or SystemClock()
        self.language = language
        self._pool = AsyncConnectionPool(
            dsn, min_size=1, max_size=max_connections, open=False, kwargs={"autocommit": True}
        )
        self._ready = False

    async def _conn(self) -> AsyncConnectionPool:
        if not self._ready:
            await self._pool.open()
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext('fiduciary.memory'))")
                await conn.execute(_schema(self.language))
            self._ready = True
        return self._pool

    async def remember(
        self, text: str, *, namespace: str, kind: str = "note", at: datetime | None = None
    ) -> MemoryRecord:
        text = text.strip()[:MAX_TEXT]
        if not text:
            raise ValueError("nothing to remember: the text is empty")
        record = MemoryRecord(uuid4(), namespace, kind, text, at or self.clock.now())
        vector: list[float] | None = None
        if self.embedder is not None:
            (embedding,) = await self.embedder([text])
            vector = [float(x) for x in embedding]
        pool = await self._conn()
        async with pool.connection() as conn:
            await conn.execute(
                "INSERT INTO memory_records (record_id, namespace, kind, text, at, vector)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (record.record_id, namespace, kind, text, record.at, vector),
            )
        return record

    async def recall(
        self, query: str, *, namespace: str, top_k: int = 5, since: datetime | None = None
    ) -> list[MemoryRecord]:
        terms = query_terms(query)
        query_vector = await embed_query(self.embedder, query)
        width = CANDIDATES if query_vector is not None else top_k
        pool = await self._conn()
        lexical: list[tuple[Any, ...]] = []
        recent: list[tuple[Any, ...]] = []
        async with pool.connection() as conn:
            if len(terms) > 1:
                counts = {}
                for term in terms:
                    cursor = await conn.execute(
                        "SELECT count(*) FROM memory_records"
                        " WHERE tsv @@ to_tsquery(%s::regconfig, %s)",
                        (self.language, term),
                    )
                    row = await cursor.fetchone()
                    counts[term] = int(row[0]) if row else 0
                cursor = await conn.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE relname = 'memory_records'"
                )
                row = await cursor.fetchone()
                terms = rare_terms(counts, max(int(row[0]) if row else 0, 0))
            if terms:
                cursor = await conn.execute(
                    "SELECT record_id, kind, text, at, vector FROM memory_records,"
                    " to_tsquery(%s::regconfig, %s) q"
                    " WHERE namespace = %s AND tsv @@ q AND (%s::timestamptz IS NULL OR at >= %s)"
                    " ORDER BY ts_rank_cd(tsv, q) DESC, at DESC LIMIT %s",
                    (self.language, " | ".join(terms), namespace, since, since, width),
                )
                lexical = await cursor.fetchall()
            if query_vector is not None:
                cursor = await conn.execute(
                    "SELECT record_id, kind, text, at, vector FROM memory_records"
                    " WHERE namespace = %s AND (%s::timestamptz IS NULL OR at >= %s)"
                    " ORDER BY at DESC LIMIT %s",
                    (namespace, since, since, CANDIDATES),
                )
                recent = await cursor.fetchall()
        return fuse(namespace, _rows(lexical), _rows(recent), query_vector, top_k)

    async def records(
        self, *, namespace: str, kind: str | None = None, limit: int = 100
    ) -> list[MemoryRecord]:
        pool = await self._conn()
        async with pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT record_id, kind, text, at FROM memory_records WHERE namespace = %s"
                " AND (%s::text IS NULL OR kind = %s) ORDER BY at DESC, seq DESC LIMIT %s",
                (namespace, kind, kind, limit),
            )
            rows = await cursor.fetchall()
        return [MemoryRecord(r[0], namespace, r[1], r[2], r[3]) for r in rows]

    async def forget(self, record_id: UUID, *, namespace: str) -> bool:
        pool = await self._conn()
        async with pool.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM memory_records WHERE record_id = %s AND namespace = %s",
                (record_id, namespace),
            )
            return cursor.rowcount > 0

    async def close(self) -> None:
        await self._pool.close()
