"""The intent table: what a chain write signed, committed before it is broadcast.

One row per call (keyed by the ledger's idempotency key, so by the call): chain id, sender,
nonce, the signed raw bytes and their hash, and what became of them. The row is written in the
same transaction that reserves the nonce, so two processes sharing the database never sign the
same nonce for one account (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: an advisory lock per
account; the UNIQUE (chain_id, sender, nonce) constraint is the last word). The nonce taken is
the lowest one at or above the chain's pending count that no live intent holds: a gap left by a
refused call is filled by the next.

Statuses: ``signed`` (committed, maybe broadcast), ``mined`` (receipt with status 1),
``reverted`` (status 0), ``refused`` (the node refused the bytes: no effect, nonce released),
``unknown`` (the nonce was taken by another transaction: never retried).

One core (``SQLIntentBook``: the queries and every rule) over two dialects, as the stores do:
``SQLiteIntentBook`` here, ``PostgresIntentBook`` in ``intents_postgres``. A dialect gives its
schema, its parameter mark, and a transaction (``_transaction``: the lock that serializes one
account's reservations) in which the core's statements run.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from ._sqlite import immediate
from .keys import SignedTx

__all__ = ["Intent", "IntentBook", "IntentStatus", "SQLIntentBook", "SQLiteIntentBook"]

IntentStatus = Literal["signed", "mined", "reverted", "refused", "unknown"]

# the schema, written once; a dialect names its integer type
SCHEMA = """
CREATE TABLE IF NOT EXISTS chain_intents (
    key TEXT PRIMARY KEY,
    chain_id {int} NOT NULL,
    sender TEXT NOT NULL,
    nonce {int},
    tx_hash TEXT NOT NULL,
    raw_tx TEXT NOT NULL,
    status TEXT NOT NULL,
    block_number {int},
    detail TEXT,
    UNIQUE (chain_id, sender, nonce)
)
"""

_COLUMNS = "key, chain_id, sender, nonce, tx_hash, raw_tx, status, block_number, detail"
# the core's statements, with ``?`` marks (a dialect with another mark rewrites them once)
_BY_KEY = f"SELECT {_COLUMNS} FROM chain_intents WHERE key = ?"
_HELD = "SELECT nonce FROM chain_intents WHERE chain_id = ? AND sender = ? AND nonce >= ?"
_INSERT = f"INSERT INTO chain_intents ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, 'signed', NULL, NULL)"
_CLAIM = (
    f"INSERT INTO chain_intents ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, '', 'mined', ?,"
    " 'signed and sent by the client')"
)
_MARK = "UPDATE chain_intents SET status = ?, block_number = ?, detail = ? WHERE key = ?"
_RELEASE = "UPDATE chain_intents SET status = 'refused', nonce = NULL, detail = ? WHERE key = ?"
_BY_SENDER = (
    f"SELECT {_COLUMNS} FROM chain_intents WHERE chain_id = ? AND sender = ? ORDER BY nonce"
)


@dataclass(frozen=True, slots=True)
class Intent:
    key: str
    chain_id: int
    sender: str
    nonce: int | None  # None once released (refused)
    tx_hash: str
    raw_tx: bytes
    status: IntentStatus
    block_number: int | None = None
    detail: str | None = None


class IntentBook(Protocol):
    """Where intents are kept (the run store's database)."""

    async def get(self, key: str) -> Intent | None: ...

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
        """Take a nonce, sign with it and commit the intent, in one transaction; the row
        already there if ``key`` has one. ``signed`` runs between signing and the commit."""
        ...

    async def mark(
        self, key: str, status: IntentStatus, *, block: int | None = None, detail: str | None = None
    ) -> None: ...

    async def release(self, key: str, detail: str) -> None:
        """The node refused the bytes: the nonce is free again (status ``refused``)."""
        ...

    async def by_sender(self, chain_id: int, sender: str) -> list[Intent]: ...

    async def claim(
        self, key: str, *, chain_id: int, sender: str, nonce: int, tx_hash: str, block: int
    ) -> bool:
        """Record a mined transaction a client signed; False if already recorded."""
        ...


def _intent(row: Sequence[object]) -> Intent:
    key, chain_id, sender, nonce, tx_hash, raw, status, block, detail = row
    return Intent(
        key=str(key),
        chain_id=int(str(chain_id)),
        sender=str(sender),
        nonce=None if nonce is None else int(str(nonce)),
        tx_hash=str(tx_hash),
        raw_tx=bytes.fromhex(str(raw)),
        status=str(status),  # type: ignore[arg-type]  # the writer's statuses only
        block_number=None if block is None else int(str(block)),
        detail=None if detail is None else str(detail),
    )


Rows = list[Sequence[Any]]


class Tx(Protocol):
    """One open database transaction of a dialect, used from one thread."""

    def fetch(self, sql: str, params: Sequence[Any]) -> Rows: ...

    def execute(self, sql: str, params: Sequence[Any]) -> None: ...


class SQLIntentBook:
    """The intent book's rules over a SQL dialect. A dialect gives ``_transaction`` (a
    context manager, entered in a worker thread, yielding a ``Tx`` in which no other
    reservation for the account runs; committed on a normal exit) and the one-statement
    ``_fetch`` and ``_execute``. The reservation runs whole in one thread: a cancelled caller
    never leaves a connection half-used by another thread."""

    param_mark: str = "?"

    def _sql(self, sql: str) -> str:
        return sql if self.param_mark == "?" else sql.replace("?", self.param_mark)

    def _transaction(self, chain_id: int, sender: str) -> AbstractContextManager[Tx]:
        raise NotImplementedError

    async def _fetch(self, sql: str, params: Sequence[Any]) -> Rows:
        raise NotImplementedError

    async def _execute(self, sql: str, params: Sequence[Any]) -> None:
        raise NotImplementedError

    async def _insert_new(self, sql: str, params: Sequence[Any]) -> bool:
        """One INSERT; False when a UNIQUE constraint refused it."""
        raise NotImplementedError

    async def claim(
        self, key: str, *, chain_id: int, sender: str, nonce: int, tx_hash: str, block: int
    ) -> bool:
        """Record a transaction a client signed and sent (checked on chain) as ``key``'s: False
        if another call holds it (its account's nonce) or ``key`` holds another; True again for
        the same key and hash (a report checked again after a crash)."""
        params = (key, chain_id, sender, nonce, tx_hash, block)
        if await self._insert_new(self._sql(_CLAIM), params):
            return True
        held = await self.get(key)
        return held is not None and held.tx_hash == tx_hash

    async def get(self, key: str) -> Intent | None:
        rows = await self._fetch(self._sql(_BY_KEY), (key,))
        return _intent(rows[0]) if rows else None

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
        def write() -> Intent:
            with self._transaction(chain_id, sender) as tx:
                rows = tx.fetch(self._sql(_BY_KEY), (key,))
                if rows:
                    return _intent(rows[0])
                held = {
                    int(n) for (n,) in tx.fetch(self._sql(_HELD), (chain_id, sender, chain_nonce))
                }
                nonce = chain_nonce
                while nonce in held:
                    nonce += 1
                made = sign(nonce)
                signed()
                tx.execute(
                    self._sql(_INSERT), (key, chain_id, sender, nonce, made.tx_hash, made.raw.hex())
                )
            return Intent(key, chain_id, sender, nonce, made.tx_hash, made.raw, "signed")

        return await asyncio.to_thread(write)

    async def mark(
        self, key: str, status: IntentStatus, *, block: int | None = None, detail: str | None = None
    ) -> None:
        await self._execute(self._sql(_MARK), (status, block, detail, key))

    async def release(self, key: str, detail: str) -> None:
        await self._execute(self._sql(_RELEASE), (detail, key))

    async def by_sender(self, chain_id: int, sender: str) -> list[Intent]:
        rows = await self._fetch(self._sql(_BY_SENDER), (chain_id, sender))
        return [_intent(r) for r in rows]


class SQLiteIntentBook(SQLIntentBook):
    """Intents in a SQLite file (the SQLiteStore's own file, or any other)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        con = self._connect()
        try:
            con.execute(SCHEMA.format(int="INTEGER"))
        finally:
            con.close()

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        con.execute("PRAGMA synchronous=FULL")  # committed means on disk: before broadcast
        return con

    async def _fetch(self, sql: str, params: Sequence[Any]) -> Rows:
        def read() -> Rows:
            con = self._connect()
            try:
                return list(con.execute(sql, tuple(params)).fetchall())
            finally:
                con.close()

        return await asyncio.to_thread(read)

    async def _execute(self, sql: str, params: Sequence[Any]) -> None:
        await self._fetch(sql, params)

    async def _insert_new(self, sql: str, params: Sequence[Any]) -> bool:
        try:
            await self._fetch(sql, params)
        except sqlite3.IntegrityError:
            return False
        return True

    @contextmanager
    def _transaction(self, chain_id: int, sender: str) -> Iterator[Tx]:
        with immediate(self._connect()) as con:
            yield _SQLiteTx(con)


class _SQLiteTx:
    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con

    def fetch(self, sql: str, params: Sequence[Any]) -> Rows:
        return list(self.con.execute(sql, tuple(params)))

    def execute(self, sql: str, params: Sequence[Any]) -> None:
        self.con.execute(sql, tuple(params))
