"""Payment links and invoices in PostgreSQL (extra postgres): the dialect of
``payments.ChainReceivables`` (same rows, statements and rules), for processes sharing one
database. A transaction-scoped advisory lock per wallet serializes its writers (a tag is taken
by one at a time), and the UNIQUE constraints are the last word."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from .payments import SCHEMA, ChainReceivables, Tx

__all__ = ["PostgresReceivables"]


class PostgresReceivables(ChainReceivables):
    """The books in a PostgreSQL database (the PostgresStore's own, or any other)."""

    def __init__(
        self, dsn: str, *, chain_id: int, token: str, recipient: str, decimals: int
    ) -> None:
        super().__init__(chain_id=chain_id, token=token, recipient=recipient, decimals=decimals)
        self.dsn = dsn
        with psycopg.connect(dsn) as con:
            # concurrent CREATE TABLE IF NOT EXISTS can race on the catalog: one at a time
            con.execute("SELECT pg_advisory_xact_lock(hashtext('fiduciary.chain_receivables'))")
            for statement in SCHEMA:
                con.execute(statement.format(int="BIGINT"))

    @contextmanager
    def _transaction(self) -> Iterator[Tx]:
        with psycopg.connect(self.dsn) as con:  # one transaction, committed on exit
            con.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))",
                (f"receivables:{self.chain_id}:{self.token}:{self.recipient}",),
            )
            yield _PostgresTx(con)


class _PostgresTx:
    def __init__(self, con: psycopg.Connection[Any]) -> None:
        self.con = con

    def rows(self, sql: str, params: Sequence[Any]) -> list[Sequence[Any]]:
        return list(self.con.execute(sql.replace("?", "%s"), tuple(params)).fetchall())

    def execute(self, sql: str, params: Sequence[Any]) -> None:
        self.con.execute(sql.replace("?", "%s"), tuple(params))
