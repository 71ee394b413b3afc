"""One SQLite write transaction, as the chain's SQLite books (intents, receivables) take it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["immediate"]


@contextmanager
def immediate(con: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction on ``con`` (``BEGIN IMMEDIATE``: one writer of the file at a time),
    committed when the block ends, rolled back when it raises; ``con`` is closed either way."""
    try:
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
    finally:
        con.close()
