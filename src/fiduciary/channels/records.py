"""What a chat channel keeps durably, in its own tables beside the store's (same SQLite file or
PostgreSQL database); the store's schema is not touched.

- ``fiduciary_channel_updates``: each update received, by id: ``received`` once recorded,
  ``handled`` once its handling ended. Recording is an insert that does nothing when the id is
  there already: an update redelivered after a restart is seen as recorded and never handled
  again (one left ``received`` was interrupted mid-handling: it is audited, not re-run).
- ``fiduciary_channel_offsets``: the next update id to ask for, committed only after the
  update before it was recorded.
- ``fiduciary_channel_cards``: the short token an Approve / Deny button carries, bound to the
  approval id, the digest of its arguments, the chat and its principal.
- ``fiduciary_channel_awaiting``: a chat asked to type the amount of an ``explicit`` action.
- ``fiduciary_channel_audit``: what was refused or ignored (a chat not allowed, a forged or
  stale button, an interrupted update, a person who is not the principal's), with the time.
- ``fiduciary_channel_links``: (network, principal) → the chat account that acts for the
  principal; ``fiduciary_channel_link_codes``: the hashes of one-time codes that link one
  (``channels.links``; these two rows name the network, ``telegram``, not a bot).

Each row names its channel (``telegram:<bot id>``), so several bots share the tables.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from ..exceptions import ConfigurationError, StoreError

__all__ = ["AuditEntry", "Card", "ChannelRecords", "open_records"]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS fiduciary_channel_updates (
        channel TEXT NOT NULL, update_id BIGINT NOT NULL, state TEXT NOT NULL,
        at TEXT NOT NULL, PRIMARY KEY (channel, update_id))""",
    """CREATE TABLE IF NOT EXISTS fiduciary_channel_offsets (
        channel TEXT PRIMARY KEY, next_offset BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS fiduciary_channel_cards (
        token TEXT PRIMARY KEY, channel TEXT NOT NULL, chat_id BIGINT NOT NULL,
        approval_id TEXT NOT NULL, args_digest TEXT NOT NULL, principal TEXT NOT NULL,
        message_id BIGINT, at TEXT NOT NULL, UNIQUE (channel, chat_id, approval_id))""",
    """CREATE TABLE IF NOT EXISTS fiduciary_channel_awaiting (
        channel TEXT NOT NULL, chat_id BIGINT NOT NULL, token TEXT NOT NULL,
        PRIMARY KEY (channel, chat_id))""",
    """CREATE TABLE IF NOT EXISTS fiduciary_channel_audit (
        n {serial}, channel TEXT NOT NULL, at TEXT NOT NULL, chat_id BIGINT,
        what TEXT NOT NULL, detail TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS fiduciary_channel_links (
        network TEXT NOT NULL, principal TEXT NOT NULL, user_id BIGINT NOT NULL,
        at TEXT NOT NULL, PRIMARY KEY (network, principal))""",
    """CREATE TABLE IF NOT EXISTS fiduciary_channel_link_codes (
        code_hash TEXT PRIMARY KEY, network TEXT NOT NULL, principal TEXT NOT NULL,
        expires_at TEXT NOT NULL, used_at TEXT)""",
)
SERIAL = {"sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT", "postgres": "BIGSERIAL PRIMARY KEY"}


@dataclass(frozen=True, slots=True)
class Card:
    token: str
    chat_id: int
    approval_id: UUID
    args_digest: str
    principal: str
    message_id: int | None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: datetime
    chat_id: int | None
    what: str
    detail: str


class _Sql(Protocol):
    async def run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    async def close(self) -> None: ...


class _SQLite:
    """One connection in autocommit mode: each statement is its own durable transaction."""

    def __init__(self, path: str) -> None:
        try:
            self._conn = sqlite3.connect(path, timeout=5.0, isolation_level=None)
            self._conn.execute("PRAGMA busy_timeout = 5000")
            self._conn.execute("PRAGMA synchronous = FULL")
            for statement in SCHEMA:
                self._conn.execute(statement.replace("{serial}", SERIAL["sqlite"]))
        except sqlite3.Error as exc:
            raise StoreError(f"channel records in {path}: {exc}") from exc
        self._lock = asyncio.Lock()

    async def run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        async with self._lock:
            try:
                return self._conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"channel records: {exc}") from exc

    async def close(self) -> None:
        self._conn.close()


class _Postgres:
    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, dsn: str) -> _Postgres:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - the extra is in dev
            raise ConfigurationError(
                "PostgreSQL needs the 'postgres' extra: pip install 'fiduciary[postgres]'"
            ) from exc
        try:
            conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            for statement in SCHEMA:
                await conn.execute(statement.replace("{serial}", SERIAL["postgres"]))
        except psycopg.Error as exc:
            raise StoreError(f"channel records: {type(exc).__name__}") from None
        return cls(conn)

    async def run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        async with self._lock:
            try:
                cursor = await self._conn.execute(sql.replace("?", "%s"), tuple(params))
                return list(await cursor.fetchall()) if cursor.description else []
            except psycopg.Error as exc:
                raise StoreError(f"channel records: {type(exc).__name__}: {exc}") from None

    async def close(self) -> None:
        await self._conn.close()


async def open_records(*, sqlite_path: str | None = None, dsn: str | None = None) -> _Sql:
    if (sqlite_path is None) == (dsn is None):
        raise ConfigurationError("channel records need one SQLite path or one PostgreSQL DSN")
    if dsn is not None:
        return await _Postgres.open(dsn)
    assert sqlite_path is not None
    return _SQLite(sqlite_path)


class ChannelRecords:
    """The rows of one channel (``telegram:<bot id>``); see the module docstring."""

    def __init__(self, sql: _Sql, channel: str) -> None:
        self._sql = sql
        self.channel = channel

    @property
    def sql(self) -> _Sql:
        """The connection, for the channel's other tables (``channels.links``)."""
        return self._sql

    @classmethod
    async def open(
        cls, channel: str, *, sqlite_path: str | None = None, dsn: str | None = None
    ) -> ChannelRecords:
        return cls(await open_records(sqlite_path=sqlite_path, dsn=dsn), channel)

    async def close(self) -> None:
        await self._sql.close()

    # --- updates and the offset -------------------------------------------------------------
    async def next_offset(self) -> int | None:
        rows = await self._sql.run(
            "SELECT next_offset FROM fiduciary_channel_offsets WHERE channel = ?", (self.channel,)
        )
        return int(rows[0][0]) if rows else None

    async def record_update(self, update_id: int, at: datetime) -> str | None:
        """Record ``update_id`` as received: None if new, else the state it was recorded in."""
        rows = await self._sql.run(
            "INSERT INTO fiduciary_channel_updates (channel, update_id, state, at) "
            "VALUES (?, ?, 'received', ?) ON CONFLICT DO NOTHING RETURNING update_id",
            (self.channel, update_id, at.isoformat()),
        )
        if rows:
            return None
        found = await self._sql.run(
            "SELECT state FROM fiduciary_channel_updates WHERE channel = ? AND update_id = ?",
            (self.channel, update_id),
        )
        return str(found[0][0]) if found else "received"

    async def handled(self, update_id: int) -> None:
        await self._sql.run(
            "UPDATE fiduciary_channel_updates SET state = 'handled' "
            "WHERE channel = ? AND update_id = ?",
            (self.channel, update_id),
        )

    async def commit_offset(self, next_offset: int) -> None:
        """Ask for updates from ``next_offset`` on (never moves backwards)."""
        await self._sql.run(
            "INSERT INTO fiduciary_channel_offsets (channel, next_offset) VALUES (?, ?) "
            "ON CONFLICT (channel) DO UPDATE SET next_offset = excluded.next_offset "
            "WHERE fiduciary_channel_offsets.next_offset < excluded.next_offset",
            (self.channel, next_offset),
        )

    # --- cards ------------------------------------------------------------------------------
    async def add_card(self, card: Card, at: datetime) -> bool:
        """Keep ``card``; False if this chat has a card for that approval already."""
        rows = await self._sql.run(
            "INSERT INTO fiduciary_channel_cards (token, channel, chat_id, approval_id, "
            "args_digest, principal, message_id, at) VALUES (?, ?, ?, ?, ?, ?, NULL, ?) "
            "ON CONFLICT DO NOTHING RETURNING token",
            (
                card.token,
                self.channel,
                card.chat_id,
                str(card.approval_id),
                card.args_digest,
                card.principal,
                at.isoformat(),
            ),
        )
        return bool(rows)

    async def card_sent(self, token: str, message_id: int) -> None:
        await self._sql.run(
            "UPDATE fiduciary_channel_cards SET message_id = ? WHERE token = ? AND channel = ?",
            (message_id, token, self.channel),
        )

    async def card(self, token: str) -> Card | None:
        rows = await self._sql.run(
            "SELECT token, chat_id, approval_id, args_digest, principal, message_id "
            "FROM fiduciary_channel_cards WHERE token = ? AND channel = ?",
            (token, self.channel),
        )
        return _card(rows[0]) if rows else None

    async def cards_of(self, chat_id: int) -> list[Card]:
        rows = await self._sql.run(
            "SELECT token, chat_id, approval_id, args_digest, principal, message_id "
            "FROM fiduciary_channel_cards WHERE channel = ? AND chat_id = ?",
            (self.channel, chat_id),
        )
        return [_card(r) for r in rows]

    # --- typed amounts ----------------------------------------------------------------------
    async def await_amount(self, chat_id: int, token: str) -> None:
        await self._sql.run(
            "INSERT INTO fiduciary_channel_awaiting (channel, chat_id, token) VALUES (?, ?, ?) "
            "ON CONFLICT (channel, chat_id) DO UPDATE SET token = excluded.token",
            (self.channel, chat_id, token),
        )

    async def awaiting_amount(self, chat_id: int) -> str | None:
        rows = await self._sql.run(
            "SELECT token FROM fiduciary_channel_awaiting WHERE channel = ? AND chat_id = ?",
            (self.channel, chat_id),
        )
        return str(rows[0][0]) if rows else None

    async def stop_awaiting(self, chat_id: int) -> None:
        await self._sql.run(
            "DELETE FROM fiduciary_channel_awaiting WHERE channel = ? AND chat_id = ?",
            (self.channel, chat_id),
        )

    # --- audit ------------------------------------------------------------------------------
    async def audit(self, at: datetime, chat_id: int | None, what: str, detail: str) -> None:
        await self._sql.run(
            "INSERT INTO fiduciary_channel_audit (channel, at, chat_id, what, detail) "
            "VALUES (?, ?, ?, ?, ?)",
            (self.channel, at.isoformat(), chat_id, what, detail),
        )

    async def audit_entries(self) -> list[AuditEntry]:
        rows = await self._sql.run(
            "SELECT at, chat_id, what, detail FROM fiduciary_channel_audit WHERE channel = ? "
            "ORDER BY n",
            (self.channel,),
        )
        return [
            AuditEntry(
                datetime.fromisoformat(r[0]), None if r[1] is None else int(r[1]), r[2], r[3]
            )
            for r in rows
        ]


def _card(row: tuple[Any, ...]) -> Card:
    return Card(
        token=str(row[0]),
        chat_id=int(row[1]),
        approval_id=UUID(str(row[2])),
        args_digest=str(row[3]),
        principal=str(row[4]),
        message_id=None if row[5] is None else int(row[5]),
    )
