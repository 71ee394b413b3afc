"""The SQLite store: the embedded default, one file, the full ``Store`` contract.

``SQLiteStore(path)`` opens the file on first use (``await SQLiteStore.open(path)``: now), in
WAL mode, and applies its migrations (``sql/migrations``). Writes are group-committed on the
event-loop thread; ``synchronous="NORMAL"`` (the default) or ``"FULL"``, and a batch holding a
ledger row is always fsynced before the side effect starts. ``transcripts=DIR`` also copies
each run's log to ``DIR/<run_id>.jsonl`` after its commits (``stores.transcripts``: a copy,
never the truth). The rules in full are in the
docstring of ``fiduciary.stores._sql.sqlite``, where the dialect lives; what it shares with
PostgreSQL is in ``fiduciary.stores._sql.core``.
"""

from __future__ import annotations

from pathlib import Path

from ._sql.migrations import Migration
from ._sql.migrations import load_migrations as _load_migrations
from ._sql.sqlite import (
    MIGRATIONS_DIR,
    SCHEMA_PATH,
    SQLiteStore,
    Synchronous,
    apply_migrations,
    split_statements,
)

__all__ = [
    "MIGRATIONS_DIR",
    "SCHEMA_PATH",
    "Migration",
    "SQLiteStore",
    "Synchronous",
    "apply_migrations",
    "load_migrations",
    "split_statements",
]


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migrations of ``directory`` (``NNNN_name.sql``; SQLite's by default), in order."""
    return _load_migrations(directory)
