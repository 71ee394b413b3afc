"""Memory in a SQLite file (the embedded default): FTS5 ranked by BM25, vectors optional.

The records live in their own tables of the same file as the run store (or any other file):
``memory_records`` and an external-content FTS5 index over their text. Queries run in a worker
thread on a connection of their own, so a recall never blocks the event loop. With an embedder,
each record's vector is kept as float32 bytes and the lexical candidates plus the namespace's
newest records are re-ranked by cosine similarity, blended by reciprocal rank fusion (the
sqlite-vec extension cannot be loaded by a Python built without ``enable_load_extension``, as
the one this was written on is).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from array import array
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TypeVar
from uuid import UUID, uuid4

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

__all__ = ["SQLiteMemory"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    at TEXT NOT NULL,
    vector BLOB
);
CREATE INDEX IF NOT EXISTS memory_records_ns ON memory_records (namespace, at);
CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(
    text, content='memory_records', content_rowid='seq', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS memory_ai AFTER INSERT ON memory_records BEGIN
    INSERT INTO memory_fts(rowid, text) VALUES (new.seq, new.text);
END;
CREATE TRIGGER IF NOT EXISTS memory_ad AFTER DELETE ON memory_records BEGIN
    INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.seq, old.text);
END;
"""

T = TypeVar("T")
Row = tuple[str, str, str, str, bytes | None]  # record_id, kind, text, at, vector

CANDIDATES = 200  # lexical candidates re-ranked by vector, with as many of the newest records


def _candidates(rows: list[Row]) -> list[Candidate]:
    return [
        (
            UUID(r[0]),
            r[1],
            r[2],
            datetime.fromisoformat(r[3]),
            None if r[4] is None else array("f", r[4]).tolist(),
        )
        for r in rows
    ]


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


class SQLiteMemory:
    def __init__(
        self,
        path: str | Path,
        *,
        embedder: Embedder | None = None,
        clock: Clock | None = None,
        busy_timeout_ms: int = 5_000,
    ) -> None:
        self.path = Path(path)
        self.embedder = embedder
        self.clock = clock or SystemClock()
        self._timeout = busy_timeout_ms / 1000
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # one statement at a time on the connection

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.executescript(SCHEMA)
            self._conn = conn
        return self._conn

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def locked() -> T:
            with self._lock:
                return fn(self._connect())

        return await asyncio.to_thread(locked)

    async def remember(
        self, text: str, *, namespace: str, kind: str = "note", at: datetime | None = None
    ) -> MemoryRecord:
        text = text.strip()[:MAX_TEXT]
        if not text:
            raise ValueError("nothing to remember: the text is empty")
        record = MemoryRecord(uuid4(), namespace, kind, text, at or self.clock.now())
        vector: bytes | None = None
        if self.embedder is not None:
            (embedding,) = await self.embedder([text])
            vector = array("f", embedding).tobytes()

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO memory_records (record_id, namespace, kind, text, at, vector)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (str(record.record_id), namespace, kind, text, record.at.isoformat(), vector),
            )

        await self._run(insert)
        return record

    async def recall(
        self, query: str, *, namespace: str, top_k: int = 5, since: datetime | None = None
    ) -> list[MemoryRecord]:
        terms = query_terms(query)
        query_vector = await embed_query(self.embedder, query)
        after = since.isoformat() if since is not None else ""
        width = CANDIDATES if query_vector is not None else top_k

        def search(conn: sqlite3.Connection) -> tuple[list[Row], list[Row]]:
            lexical: list[Row] = []
            recent: list[Row] = []
            ranked = terms
            if len(terms) > 1:
                counts = {
                    t: conn.execute(
                        "SELECT count(*) FROM memory_fts WHERE memory_fts MATCH ?", (_quote(t),)
                    ).fetchone()[0]
                    for t in terms
                }
                total = conn.execute("SELECT max(seq) FROM memory_records").fetchone()[0] or 0
                ranked = rare_terms(counts, total)
            if ranked:
                match = " OR ".join(_quote(t) for t in ranked)
                lexical = conn.execute(
                    "SELECT r.record_id, r.kind, r.text, r.at, r.vector"
                    " FROM memory_fts JOIN memory_records r ON r.seq = memory_fts.rowid"
                    " WHERE memory_fts MATCH ? AND r.namespace = ? AND r.at >= ?"
                    " ORDER BY bm25(memory_fts) LIMIT ?",
                    (match, namespace, after, width),
                ).fetchall()
            if query_vector is not None:
                recent = conn.execute(
                    "SELECT record_id, kind, text, at, vector FROM memory_records"
                    " WHERE namespace = ? AND at >= ? ORDER BY at DESC LIMIT ?",
                    (namespace, after, CANDIDATES),
                ).fetchall()
            return lexical, recent

        lexical, recent = await self._run(search)
        return fuse(namespace, _candidates(lexical), _candidates(recent), query_vector, top_k)

    async def records(
        self, *, namespace: str, kind: str | None = None, limit: int = 100
    ) -> list[MemoryRecord]:
        def listing(conn: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
            return conn.execute(
                "SELECT record_id, kind, text, at FROM memory_records WHERE namespace = ?"
                " AND (? IS NULL OR kind = ?) ORDER BY at DESC, seq DESC LIMIT ?",
                (namespace, kind, kind, limit),
            ).fetchall()

        rows = await self._run(listing)
        return [
            MemoryRecord(UUID(r[0]), namespace, r[1], r[2], datetime.fromisoformat(r[3]))
            for r in rows
        ]

    async def forget(self, record_id: UUID, *, namespace: str) -> bool:
        def delete(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "DELETE FROM memory_records WHERE record_id = ? AND namespace = ?",
                (str(record_id), namespace),
            )
            return cursor.rowcount

        return bool(await self._run(delete))

    async def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
