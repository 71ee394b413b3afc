"""The intent table: what a chain write signed, committed before it is broadcast.

One row per call (keyed by the ledger's idempotency key, so by the call): chain id, sender,
nonce, the signed raw bytes and their hash, and what became of them. The row is written in the
same transaction that reserves the nonce, so two processes sharing the database never sign the
same nonce for one account (SQLite: ``BEGIN IMMEDIATE``; the UNIQUE (chain_id, sender, nonce)
constraint is the last word). The nonce taken is the lowest one at or above the chain's
pending count that no live intent holds: a gap left by a refused call is filled by the next.

Statuses: ``signed`` (committed, maybe broadcast), ``mined`` (receipt with status 1),
``reverted`` (status 0), ``refused`` (the node refused the bytes: no effect, nonce released),
``unknown`` (the nonce was taken by another transaction: never retried).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from .keys import SignedTx

__all__ = ["Intent", "IntentBook", "IntentStatus", "SQLiteIntentBook"]

IntentStatus = Literal["signed", "mined", "reverted", "refused", "unknown"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS chain_intents (
    key TEXT PRIMARY KEY,
    chain_id INTEGER NOT NULL,
    sender TEXT NOT NULL,
    nonce INTEGER,
    tx_hash TEXT NOT NULL,
    raw_tx TEXT NOT NULL,
    status TEXT NOT NULL,
    block_number INTEGER,
    detail TEXT,
    UNIQUE (chain_id, sender, nonce)
);
"""


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


_COLUMNS = "key, chain_id, sender, nonce, tx_hash, raw_tx, status, block_number, detail"


def _intent(row: tuple[object, ...]) -> Intent:
    key, chain_id, sender, nonce, tx_hash, raw, status, block, detail = row
    return Intent(
        key=str(key),
        chain_id=int(str(chain_id)),
        sender=str(sender),
        nonce=None if nonce is None else int(str(nonce)),
        tx_hash=str(tx_hash),
        raw_tx=bytes.fromhex(str(raw)),
        status=str(status),  # type: ignore[arg-type]  # the CHECK is the writer's
        block_number=None if block is None else int(str(block)),
        detail=None if detail is None else str(detail),
    )


class SQLiteIntentBook:
    """Intents in a SQLite file (the SQLiteStore's own file, or any other)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        with _closing(self._connect()) as con:
            con.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        con.execute("PRAGMA synchronous=FULL")  # committed means on disk: before broadcast
        return con

    async def get(self, key: str) -> Intent | None:
        def read() -> Intent | None:
            with _closing(self._connect()) as con:
                row = con.execute(
                    f"SELECT {_COLUMNS} FROM chain_intents WHERE key = ?", (key,)
                ).fetchone()
            return None if row is None else _intent(row)

        return await asyncio.to_thread(read)

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
            with _closing(self._connect()) as con:
                con.execute("BEGIN IMMEDIATE")  # one reserver per database at a time
                try:
                    row = con.execute(
                        f"SELECT {_COLUMNS} FROM chain_intents WHERE key = ?", (key,)
                    ).fetchone()
                    if row is not None:
                        con.execute("ROLLBACK")
                        return _intent(row)
                    held = {
                        int(n)
                        for (n,) in con.execute(
                            "SELECT nonce FROM chain_intents WHERE chain_id = ? AND sender = ?"
                            " AND nonce >= ?",
                            (chain_id, sender, chain_nonce),
                        )
                    }
                    nonce = chain_nonce
                    while nonce in held:
                        nonce += 1
                    tx = sign(nonce)
                    signed()
                    con.execute(
                        f"INSERT INTO chain_intents ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?,"
                        " NULL, NULL)",
                        (key, chain_id, sender, nonce, tx.tx_hash, tx.raw.hex(), "signed"),
                    )
                    con.execute("COMMIT")
                except BaseException:
                    if con.in_transaction:
                        con.execute("ROLLBACK")
                    raise
            return Intent(key, chain_id, sender, nonce, tx.tx_hash, tx.raw, "signed")

        return await asyncio.to_thread(write)

    async def mark(
        self, key: str, status: IntentStatus, *, block: int | None = None, detail: str | None = None
    ) -> None:
        def write() -> None:
            with _closing(self._connect()) as con:
                con.execute(
                    "UPDATE chain_intents SET status = ?, block_number = ?, detail = ?"
                    " WHERE key = ?",
                    (status, block, detail, key),
                )

        await asyncio.to_thread(write)

    async def release(self, key: str, detail: str) -> None:
        def write() -> None:
            with _closing(self._connect()) as con:
                con.execute(
                    "UPDATE chain_intents SET status = 'refused', nonce = NULL, detail = ?"
                    " WHERE key = ?",
                    (detail, key),
                )

        await asyncio.to_thread(write)

    async def by_sender(self, chain_id: int, sender: str) -> list[Intent]:
        def read() -> list[Intent]:
            with _closing(self._connect()) as con:
                rows = con.execute(
                    f"SELECT {_COLUMNS} FROM chain_intents WHERE chain_id = ? AND sender = ?"
                    " ORDER BY nonce",
                    (chain_id, sender),
                ).fetchall()
            return [_intent(r) for r in rows]

        return await asyncio.to_thread(read)


class _closing:  # noqa: N801 - used like contextlib.closing
    """``with`` that closes a sqlite3 connection (its own context manager only commits)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con

    def __enter__(self) -> sqlite3.Connection:
        return self.con

    def __exit__(self, *exc: object) -> None:
        self.con.close()
