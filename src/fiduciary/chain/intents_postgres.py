"""The intent table in PostgreSQL (extra postgres), for processes on several machines sharing
one database: the same rows and rules as ``intents.SQLiteIntentBook``. A transaction-scoped
advisory lock per (chain, sender) serializes nonce reservations for one account, and the
UNIQUE (chain_id, sender, nonce) constraint is the last word."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from .intents import _COLUMNS, Intent, IntentStatus, _intent
from .keys import SignedTx

__all__ = ["PostgresIntentBook"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS chain_intents (
    key TEXT PRIMARY KEY,
    chain_id BIGINT NOT NULL,
    sender TEXT NOT NULL,
    nonce BIGINT,
    tx_hash TEXT NOT NULL,
    raw_tx TEXT NOT NULL,
    status TEXT NOT NULL,
    block_number BIGINT,
    detail TEXT,
    UNIQUE (chain_id, sender, nonce)
)
"""


class PostgresIntentBook:
    """Intents in a PostgreSQL database (the PostgresStore's own, or any other)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    @classmethod
    async def open(cls, dsn: str) -> PostgresIntentBook:
        book = cls(dsn)
        async with await book._connect() as con:
            # concurrent CREATE TABLE IF NOT EXISTS can race on the catalog: one at a time
            await con.execute("SELECT pg_advisory_xact_lock(hashtext('fiduciary.chain_intents'))")
            await con.execute(SCHEMA)
        return book

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self.dsn)

    async def get(self, key: str) -> Intent | None:
        async with await self._connect() as con:
            cur = await con.execute(f"SELECT {_COLUMNS} FROM chain_intents WHERE key = %s", (key,))
            row = await cur.fetchone()
        return None if row is None else _intent(tuple(row))

    async def reserve(
        self,
        key: str,
        *,
        chain_id: int,
        sender: str,
        chain_nonce: int,
        sign: Callable[[int], SignedTx],
        signed: Callable[[], None],
    ) -> Intent:
        async with await self._connect() as con:  # one transaction, committed on exit
            await con.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"chain:{chain_id}:{sender}",)
            )
            cur = await con.execute(f"SELECT {_COLUMNS} FROM chain_intents WHERE key = %s", (key,))
            row = await cur.fetchone()
            if row is not None:
                return _intent(tuple(row))
            cur = await con.execute(
                "SELECT nonce FROM chain_intents WHERE chain_id = %s AND sender = %s"
                " AND nonce >= %s",
                (chain_id, sender, chain_nonce),
            )
            held = {int(n) for (n,) in await cur.fetchall()}
            nonce = chain_nonce
            while nonce in held:
                nonce += 1
            tx = sign(nonce)
            signed()
            await con.execute(
                f"INSERT INTO chain_intents ({_COLUMNS}) VALUES"
                " (%s, %s, %s, %s, %s, %s, %s, NULL, NULL)",
                (key, chain_id, sender, nonce, tx.tx_hash, tx.raw.hex(), "signed"),
            )
        return Intent(key, chain_id, sender, nonce, tx.tx_hash, tx.raw, "signed")

    async def mark(
        self, key: str, status: IntentStatus, *, block: int | None = None, detail: str | None = None
    ) -> None:
        async with await self._connect() as con:
            await con.execute(
                "UPDATE chain_intents SET status = %s, block_number = %s, detail = %s"
                " WHERE key = %s",
                (status, block, detail, key),
            )

    async def release(self, key: str, detail: str) -> None:
        async with await self._connect() as con:
            await con.execute(
                "UPDATE chain_intents SET status = 'refused', nonce = NULL, detail = %s"
                " WHERE key = %s",
                (detail, key),
            )

    async def by_sender(self, chain_id: int, sender: str) -> list[Intent]:
        async with await self._connect() as con:
            cur = await con.execute(
                f"SELECT {_COLUMNS} FROM chain_intents WHERE chain_id = %s AND sender = %s"
                " ORDER BY nonce",
                (chain_id, sender),
            )
            rows = await cur.fetchall()
        return [_intent(tuple(r)) for r in rows]
