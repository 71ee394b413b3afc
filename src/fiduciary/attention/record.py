"""The attention record: source cursors, seen-id rings, events taken but not judged, decisions.

It lives in tables of its own (``attention_*``, created with ``CREATE TABLE IF NOT EXISTS``) in
the same SQLite file or PostgreSQL database as the fiduciary store, or in memory for tests.
The rules:

- ``take`` persists a batch's cursor, the ids it adds to the source's seen ring and the events it
  takes (``attention_pending``) in one transaction, **before** anything acts on them; an event
  whose id is in the ring is redelivery and is not taken again.
- Everything is keyed by the name of the source that yielded an event: an event whose own
  ``source`` field says otherwise is taken (and later decided) under that name, its field set to
  it, so the pending row, the decision and its copy of the event always agree.
- ``decide`` inserts the decision (unique per source and event id) and removes the pending event
  in one transaction: a kill at any point leaves either the event pending (judged again on
  restart) or its decision recorded (never a second one).
- A decision is recorded with ``action`` null; ``acted`` fills it once its action is done. The
  feed yields decisions in ``seq`` order and stops before the first one not acted on yet, so a
  consumer's cursor never skips a decision.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, TypeVar
from uuid import UUID

from .types import Incoming, JudgeImage

__all__ = ["SEEN_RING", "AttentionRecord", "DecisionRecord"]

SEEN_RING = 4096
"""How many event ids each source remembers for deduplication."""

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attention_cursors (
    source     TEXT PRIMARY KEY,
    cursor     TEXT,
    seen       TEXT NOT NULL DEFAULT '[]',
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS attention_pending (
    source   TEXT NOT NULL,
    event_id TEXT NOT NULL,
    position BIGINT NOT NULL,
    event    TEXT NOT NULL,
    PRIMARY KEY (source, event_id)
);
CREATE TABLE IF NOT EXISTS attention_decisions (
    seq           {serial},
    decision_id   TEXT NOT NULL UNIQUE,
    source        TEXT NOT NULL,
    event_id      TEXT NOT NULL,
    event_type    TEXT NOT NULL,
    principal     TEXT,
    at            TEXT NOT NULL,
    kind          TEXT NOT NULL,
    input_digest  TEXT NOT NULL,
    route         TEXT,
    probabilities TEXT NOT NULL DEFAULT '{}',
    predicates    TEXT NOT NULL DEFAULT '{}',
    model         TEXT NOT NULL DEFAULT '',
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd      TEXT,
    error         TEXT,
    action        TEXT,
    run_id        TEXT,
    event         TEXT,
    UNIQUE (source, event_id)
);
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRecord:
    """One judgment (``kind`` ``decision``) or an event the judge could not decide
    (``dead_letter``, with ``error``). ``action``: ``run:<status>``, ``notified``, ``dropped``,
    ``failed: ...`` or None while it is being acted on."""

    decision_id: UUID
    source: str
    event_id: str
    event_type: str
    principal: str | None
    at: datetime
    kind: str
    input_digest: str
    route: str | None
    probabilities: dict[str, float] = field(default_factory=dict)
    predicates: dict[str, float] = field(default_factory=dict)
    model: str = ""
    prompt_tokens: int = 0
    cost_usd: Decimal | None = None
    error: str | None = None
    action: str | None = None
    run_id: UUID | None = None
    seq: int = 0


def encode_incoming(event: Incoming) -> str:
    return json.dumps(
        {
            "id": event.id,
            "source": event.source,
            "type": event.type,
            "at": event.at.isoformat(),
            "data": dict(event.data),
            "principal": event.principal,
            "role": event.role,
            "images": [{"mime_type": i.mime_type, "data": i.data} for i in event.images],
        },
        default=str,
    )


def decode_incoming(text: str, *, source: str | None = None) -> Incoming:
    """The event ``text`` encodes; ``source``, when given, is the name it is recorded under."""
    raw = json.loads(text)
    return Incoming(
        id=raw["id"],
        source=raw["source"] if source is None else source,
        type=raw["type"],
        at=datetime.fromisoformat(raw["at"]),
        data=raw["data"],
        principal=raw["principal"],
        role=raw["role"],
        images=tuple(JudgeImage(**i) for i in raw["images"]),
    )


_COLUMNS = (
    "seq, decision_id, source, event_id, event_type, principal, at, kind, input_digest, route, "
    "probabilities, predicates, model, prompt_tokens, cost_usd, error, action, run_id"
)


def _decision(row: Sequence[Any]) -> DecisionRecord:
    return DecisionRecord(
        seq=row[0],
        decision_id=UUID(row[1]),
        source=row[2],
        event_id=row[3],
        event_type=row[4],
        principal=row[5],
        at=datetime.fromisoformat(row[6]),
        kind=row[7],
        input_digest=row[8],
        route=row[9],
        probabilities=json.loads(row[10]),
        predicates=json.loads(row[11]),
        model=row[12],
        prompt_tokens=row[13],
        cost_usd=Decimal(row[14]) if row[14] is not None else None,
        error=row[15],
        action=row[16],
        run_id=UUID(row[17]) if row[17] else None,
    )


Rows = list[tuple[Any, ...]]
Query = Callable[[str, Sequence[Any]], Awaitable[Rows]]


class _SQLite:
    """Short synchronous transactions on the event loop, as the SQLite store's are."""

    lock_row = ""

    def __init__(self, path: str, synchronous: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA busy_timeout = 5000")
        if path != ":memory:":
            # as the SQLite store: WAL, NORMAL by default (a commit survives the process being
            # killed; a power cut may lose the last ones), FULL on request
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        self.conn.executescript(_SCHEMA.replace("{serial}", "INTEGER PRIMARY KEY AUTOINCREMENT"))

    async def query(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        return self.conn.execute(sql, tuple(params)).fetchall()

    async def tx(self, work: Callable[[Query], Awaitable[T]], *, ordered: bool = False) -> T:
        # no await in ``work`` suspends (``query`` never does): nothing interleaves
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            out = await work(self.query)
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return out

    async def close(self) -> None:
        self.conn.close()


class _Postgres:
    """One connection, one transaction at a time (``psycopg``; the ``postgres`` extra)."""

    lock_row = " FOR UPDATE"

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._lock = asyncio.Lock()

    @classmethod
    async def connect(cls, dsn: str) -> _Postgres:
        try:
            import psycopg
        except ImportError as exc:
            raise ImportError(
                "a PostgreSQL attention record needs the 'postgres' extra: "
                "pip install 'fiduciary[postgres]'"
            ) from exc
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        driver = cls(conn)
        schema = _SCHEMA.replace("{serial}", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY")
        async with driver._lock, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_SCHEMA,))
            for statement in filter(str.strip, schema.split(";")):
                await conn.execute(statement.encode())
        return driver

    async def query(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        cursor = await self.conn.execute(sql.replace("?", "%s").encode(), tuple(params))
        return list(await cursor.fetchall()) if cursor.description else []

    async def tx(self, work: Callable[[Query], Awaitable[T]], *, ordered: bool = False) -> T:
        async with self._lock, self.conn.transaction():
            if ordered:  # decisions commit in seq order, so a feed reader never skips one
                await self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_DECISIONS,))
            return await work(self.query)

    async def close(self) -> None:
        await self.conn.close()


_LOCK_SCHEMA = 0x41_7474_0001  # advisory lock keys of the attention tables
_LOCK_DECISIONS = 0x41_7474_0002


class AttentionRecord:
    """The record over a SQLite database (a file shared with the store, or ``:memory:``) or,
    through ``await AttentionRecord.postgres(dsn)``, a PostgreSQL database."""

    def __init__(
        self,
        path: str = ":memory:",
        *,
        ring: int = SEEN_RING,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        _driver: _SQLite | _Postgres | None = None,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        self.path = path
        self.ring = ring
        self._db: _SQLite | _Postgres = _driver or _SQLite(path, synchronous)

    @classmethod
    async def postgres(cls, dsn: str, *, ring: int = SEEN_RING) -> AttentionRecord:
        return cls("postgres", ring=ring, _driver=await _Postgres.connect(dsn))

    async def close(self) -> None:
        await self._db.close()

    # --- cursors and the seen ring ---------------------------------------------------------
    async def cursor(self, source: str) -> str | None:
        rows = await self._db.query(
            "SELECT cursor FROM attention_cursors WHERE source = ?", (source,)
        )
        return None if not rows else rows[0][0]

    async def take(
        self, source: str, cursor: str | None, events: Sequence[Incoming], *, now: datetime
    ) -> list[Incoming]:
        """Persist the cursor and take the events not seen before (see the module docstring)."""
        lock_row = self._db.lock_row

        async def work(q: Query) -> list[Incoming]:
            rows = await q(
                f"SELECT seen FROM attention_cursors WHERE source = ?{lock_row}", (source,)
            )
            seen: list[str] = json.loads(rows[0][0]) if rows else []
            known = set(seen)
            fresh: list[Incoming] = []
            for event in events:
                if event.id in known:
                    continue
                known.add(event.id)
                seen.append(event.id)
                # keyed by the source's name on every side (see the module docstring)
                fresh.append(event if event.source == source else replace(event, source=source))
            seen = seen[-self.ring :]
            position = (await q("SELECT COALESCE(MAX(position), 0) FROM attention_pending", ()))[0][
                0
            ]
            for i, e in enumerate(fresh):
                await q(
                    "INSERT INTO attention_pending (source, event_id, position, event) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (source, e.id, position + i + 1, encode_incoming(e)),
                )
            await q(
                "INSERT INTO attention_cursors (source, cursor, seen, updated_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (source) DO UPDATE SET cursor = excluded.cursor, "
                "seen = excluded.seen, updated_at = excluded.updated_at",
                (source, cursor, json.dumps(seen), now.isoformat()),
            )
            return fresh

        return await self._db.tx(work)

    async def pending(self, source: str | None = None) -> list[Incoming]:
        """Events taken and not decided yet, in the order they were taken."""
        if source is None:
            rows = await self._db.query(
                "SELECT source, event FROM attention_pending ORDER BY position"
            )
        else:
            rows = await self._db.query(
                "SELECT source, event FROM attention_pending WHERE source = ? ORDER BY position",
                (source,),
            )
        # the row's source, not the copy's field: a row an older version took under another
        # name is decided (and deleted) under the key it is stored by
        return [decode_incoming(r[1], source=r[0]) for r in rows]

    # --- decisions -------------------------------------------------------------------------
    async def decide(self, decision: DecisionRecord) -> DecisionRecord:
        """Record ``decision`` and drop its pending event; an event decided before keeps its
        first decision, which is returned instead. A decision whose action has no effect
        (dropped, a dead letter) carries its ``action`` and is recorded acted on at once."""

        async def work(q: Query) -> DecisionRecord:
            await q(
                "INSERT INTO attention_decisions (decision_id, source, event_id, event_type, "
                "principal, at, kind, input_digest, route, probabilities, predicates, model, "
                "prompt_tokens, cost_usd, error, action, event) VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
                "?, ?, ?, ?, ?, ?, ?, ?, (SELECT event FROM attention_pending WHERE source = ? "
                "AND event_id = ?)) ON CONFLICT DO NOTHING",
                (
                    str(decision.decision_id),
                    decision.source,
                    decision.event_id,
                    decision.event_type,
                    decision.principal,
                    decision.at.isoformat(),
                    decision.kind,
                    decision.input_digest,
                    decision.route,
                    json.dumps(decision.probabilities),
                    json.dumps(decision.predicates),
                    decision.model,
                    decision.prompt_tokens,
                    None if decision.cost_usd is None else str(decision.cost_usd),
                    decision.error,
                    decision.action,
                    decision.source,
                    decision.event_id,
                ),
            )
            await q(
                "DELETE FROM attention_pending WHERE source = ? AND event_id = ?",
                (decision.source, decision.event_id),
            )
            rows = await q(
                f"SELECT {_COLUMNS} FROM attention_decisions WHERE source = ? AND event_id = ?",
                (decision.source, decision.event_id),
            )
            return _decision(rows[0])

        return await self._db.tx(work, ordered=True)

    async def acted(
        self, decision_id: UUID, action: str | None, run_id: UUID | None = None
    ) -> None:
        """Record what was done for a decision (None: not done, so act on it again)."""

        async def work(q: Query) -> None:
            await q(
                "UPDATE attention_decisions SET action = ?, run_id = ? WHERE decision_id = ?",
                (action, None if run_id is None else str(run_id), str(decision_id)),
            )

        await self._db.tx(work)

    async def unacted(self) -> list[DecisionRecord]:
        """Decisions whose action was not recorded (a kill between the two): act on them again."""
        rows = await self._db.query(
            f"SELECT {_COLUMNS} FROM attention_decisions WHERE action IS NULL ORDER BY seq"
        )
        return [_decision(r) for r in rows]

    async def decisions(self, *, after: int = 0, limit: int = 100) -> list[DecisionRecord]:
        """The feed: acted-on decisions after ``seq`` ``after``, stopping before the first one
        still being acted on."""
        rows = await self._db.query(
            f"SELECT {_COLUMNS} FROM attention_decisions WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, limit),
        )
        out: list[DecisionRecord] = []
        for row in rows:
            record = _decision(row)
            if record.action is None:
                break
            out.append(record)
        return out

    async def event_of(self, decision: DecisionRecord) -> Incoming | None:
        """The event a decision was made on (kept with the decision)."""
        rows = await self._db.query(
            "SELECT event FROM attention_decisions WHERE decision_id = ?",
            (str(decision.decision_id),),
        )
        if not rows or rows[0][0] is None:
            return None
        return decode_incoming(rows[0][0], source=decision.source)

    async def decision_for(self, source: str, event_id: str) -> DecisionRecord | None:
        rows = await self._db.query(
            f"SELECT {_COLUMNS} FROM attention_decisions WHERE source = ? AND event_id = ?",
            (source, event_id),
        )
        return None if not rows else _decision(rows[0])
