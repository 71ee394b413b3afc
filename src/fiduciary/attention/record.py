"""The attention record: source cursors, seen-id rings, events taken but not judged, decisions.

It lives in tables of its own (``attention_*``, created with ``CREATE TABLE IF NOT EXISTS``) in
the same SQLite file as the fiduciary store, or in memory for tests. The rules:

- ``take`` persists a batch's cursor, the ids it adds to the source's seen ring and the events it
  takes (``attention_pending``) in one transaction, **before** anything acts on them; an event
  whose id is in the ring is redelivery and is not taken again.
- ``decide`` inserts the decision (unique per source and event id) and removes the pending event
  in one transaction: a kill at any point leaves either the event pending (judged again on
  restart) or its decision recorded (never a second one).
- A decision is recorded with ``action`` null; ``acted`` fills it once its action is done. The
  feed yields decisions in ``seq`` order and stops before the first one not acted on yet, so a
  consumer's cursor never skips a decision.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
    position INTEGER NOT NULL,
    event    TEXT NOT NULL,
    PRIMARY KEY (source, event_id)
);
CREATE TABLE IF NOT EXISTS attention_decisions (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
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


def decode_incoming(text: str) -> Incoming:
    raw = json.loads(text)
    return Incoming(
        id=raw["id"],
        source=raw["source"],
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


class AttentionRecord:
    """The record over one SQLite database (a file shared with the store, or ``:memory:``).

    Calls are short synchronous transactions on the event loop, as the SQLite store's are.
    """

    def __init__(
        self,
        path: str = ":memory:",
        *,
        ring: int = SEEN_RING,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        self.path = path
        self.ring = ring
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA busy_timeout = 5000")
        if path != ":memory:":
            # as the SQLite store: WAL, NORMAL by default (a commit survives the process being
            # killed; a power cut may lose the last ones), FULL on request
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute(f"PRAGMA synchronous = {synchronous}")
        self._conn.executescript(_SCHEMA)
        self.transactions = 0

    def _tx(self, work: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = work(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        self.transactions += 1
        return out

    def close(self) -> None:
        self._conn.close()

    # --- cursors and the seen ring ---------------------------------------------------------
    async def cursor(self, source: str) -> str | None:
        row = self._conn.execute(
            "SELECT cursor FROM attention_cursors WHERE source = ?", (source,)
        ).fetchone()
        return None if row is None else row[0]

    async def take(
        self, source: str, cursor: str | None, events: Sequence[Incoming], *, now: datetime
    ) -> list[Incoming]:
        """Persist the cursor and take the events not seen before (see the module docstring)."""

        def work(conn: sqlite3.Connection) -> list[Incoming]:
            row = conn.execute(
                "SELECT seen FROM attention_cursors WHERE source = ?", (source,)
            ).fetchone()
            seen: list[str] = json.loads(row[0]) if row else []
            known = set(seen)
            fresh: list[Incoming] = []
            for event in events:
                if event.id in known:
                    continue
                known.add(event.id)
                seen.append(event.id)
                fresh.append(event)
            seen = seen[-self.ring :]
            position = conn.execute(
                "SELECT COALESCE(MAX(position), 0) FROM attention_pending"
            ).fetchone()[0]
            conn.executemany(
                "INSERT OR IGNORE INTO attention_pending (source, event_id, position, event) "
                "VALUES (?, ?, ?, ?)",
                [(source, e.id, position + i + 1, encode_incoming(e)) for i, e in enumerate(fresh)],
            )
            conn.execute(
                "INSERT INTO attention_cursors (source, cursor, seen, updated_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (source) DO UPDATE SET cursor = excluded.cursor, "
                "seen = excluded.seen, updated_at = excluded.updated_at",
                (source, cursor, json.dumps(seen), now.isoformat()),
            )
            return fresh

        return self._tx(work)

    async def pending(self, source: str | None = None) -> list[Incoming]:
        """Events taken and not decided yet, in the order they were taken."""
        if source is None:
            rows = self._conn.execute(
                "SELECT event FROM attention_pending ORDER BY position"
            ).fetchall()
        else:
            rows = self._conn.execute(
                "SELECT event FROM attention_pending WHERE source = ? ORDER BY position",
                (source,),
            ).fetchall()
        return [decode_incoming(r[0]) for r in rows]

    # --- decisions -------------------------------------------------------------------------
    async def decide(self, decision: DecisionRecord) -> DecisionRecord:
        """Record ``decision`` and drop its pending event; an event decided before keeps its
        first decision, which is returned instead. A decision whose action has no effect
        (dropped, a dead letter) carries its ``action`` and is recorded acted on at once."""

        def work(conn: sqlite3.Connection) -> DecisionRecord:
            conn.execute(
                "INSERT INTO attention_decisions (decision_id, source, event_id, event_type, "
                "principal, at, kind, input_digest, route, probabilities, predicates, model, "
                "prompt_tokens, cost_usd, error, action) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
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
                ),
            )
            conn.execute(
                "UPDATE attention_decisions SET event = (SELECT event FROM attention_pending "
                "WHERE source = ? AND event_id = ?) WHERE source = ? AND event_id = ? "
                "AND event IS NULL",
                (decision.source, decision.event_id) * 2,
            )
            conn.execute(
                "DELETE FROM attention_pending WHERE source = ? AND event_id = ?",
                (decision.source, decision.event_id),
            )
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM attention_decisions WHERE source = ? AND event_id = ?",
                (decision.source, decision.event_id),
            ).fetchone()
            return _decision(row)

        return self._tx(work)

    async def acted(self, decision_id: UUID, action: str, run_id: UUID | None = None) -> None:
        self._tx(
            lambda conn: conn.execute(
                "UPDATE attention_decisions SET action = ?, run_id = ? WHERE decision_id = ?",
                (action, None if run_id is None else str(run_id), str(decision_id)),
            )
        )

    async def unacted(self) -> list[DecisionRecord]:
        """Decisions whose action was not recorded (a kill between the two): act on them again."""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM attention_decisions WHERE action IS NULL ORDER BY seq"
        ).fetchall()
        return [_decision(r) for r in rows]

    async def decisions(self, *, after: int = 0, limit: int = 100) -> list[DecisionRecord]:
        """The feed: acted-on decisions after ``seq`` ``after``, stopping before the first one
        still being acted on."""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM attention_decisions WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, limit),
        ).fetchall()
        out: list[DecisionRecord] = []
        for row in rows:
            record = _decision(row)
            if record.action is None:
                break
            out.append(record)
        return out

    async def event_of(self, decision: DecisionRecord) -> Incoming | None:
        """The event a decision was made on (kept with the decision)."""
        row = self._conn.execute(
            "SELECT event FROM attention_decisions WHERE decision_id = ?",
            (str(decision.decision_id),),
        ).fetchone()
        return None if row is None or row[0] is None else decode_incoming(row[0])

    async def decision_for(self, source: str, event_id: str) -> DecisionRecord | None:
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM attention_decisions WHERE source = ? AND event_id = ?",
            (source, event_id),
        ).fetchone()
        return None if row is None else _decision(row)
