"""The intent table in PostgreSQL (extra postgres), for processes on several machines sharing
one database: the dialect of ``intents.SQLIntentBook`` (same rows, statements and rules). A
transaction-scoped advisory lock per (chain, sender) serializes nonce reservations for one
account, and the UNIQUE (chain_id, sender, nonce) constraint is the last word."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from .intents import SCHEMA, Rows, SQLIntentBook, Tx

__all__ = ["PostgresIntentBook"]


class PostgresIntentBook(SQLIntentBook):
    """Intents in a PostgreSQL database (the PostgresStore's own, or any other)."""

    param_mark = "%s"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    @classmethod
    async def open(cls, dsn: str) -> PostgresIntentBook:
        book = cls(dsn)
        async with await book._connect() as con:
            # concurrent CREATE TABLE IF NOT EXISTS can race on the catalog: one at a time
            await con.execute("SELECT pg_advisory_xact_lock(hashtext('fiduciary.chain_intents'))")
            await con.execute(SCHEMA.format(int="BIGINT"))
        return book

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self.dsn)

    async def _fetch(self, sql: str, params: Sequence[Any]) -> Rows:
        async with await self._connect() as con:
            cur = await con.execute(sql, tuple(params))
            return list(await cur.fetchall())

    async def _execute(self, sql: str, params: Sequence[Any]) -> None:
        async with await self._connect() as con:
            await con.execute(sql, tuple(params))

    async def _insert_new(self, sql: str, params: Sequence[Any]) -> bool:
        try:
            await self._execute(sql, params)
        except psycopg.errors.UniqueViolation:
            return False
        return True

    @contextmanager
    def _transaction(self, chain_id: int, sender: str) -> Iterator[Tx]:
        with psycopg.connect(self.dsn) as con:  # one transaction, committed on exit
            con.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"chain:{chain_id}:{sender}",)
            )
            yield _PostgresTx(con)


class _PostgresTx:
    def __init__(self, con: psycopg.Connection[Any]) -> None:
        self.con = con

    def fetch(self, sql: str, params: Sequence[Any]) -> Rows:
        return list(self.con.execute(sql, tuple(params)).fetchall())

    def execute(self, sql: str, params: Sequence[Any]) -> None:
        self.con.execute(sql, tuple(params))
