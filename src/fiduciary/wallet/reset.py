"""``fiduciary demo --reset``: the database file deleted, and made again with only its API keys
(unless ``--reset-keys``), under the file's exclusive lock: never while another process
(``serve``, ``chat``, another ``demo``) has it open."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..cli._common import CliError
from ..cli._holding import HeldError, exclusive

__all__ = ["reset_database"]

_KEYS = "server_api_keys"


def _saved_keys(db: Path) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The keys table's schema (table and indexes) and its rows; nothing without the table."""
    if not db.is_file():
        return [], []
    try:
        return _read_keys(db)
    except sqlite3.DatabaseError as exc:  # not a database, or a damaged one
        raise CliError(
            f"cannot read the API keys kept in {db} ({exc}), so nothing was deleted; "
            "--reset-keys deletes the file, keys and all"
        ) from None


def _read_keys(db: Path) -> tuple[list[str], list[tuple[Any, ...]]]:
    connection = sqlite3.connect(db)
    try:
        schema = [
            sql
            for (sql,) in connection.execute(
                "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND sql IS NOT NULL "
                "ORDER BY type DESC",  # the table before its indexes
                (_KEYS,),
            )
        ]
        rows = connection.execute(f"SELECT * FROM {_KEYS}").fetchall() if schema else []
    finally:
        connection.close()
    return schema, rows


def _restore_keys(db: Path, schema: list[str], rows: list[tuple[Any, ...]]) -> None:
    connection = sqlite3.connect(db)
    try:
        with connection:
            for sql in schema:
                connection.execute(sql)
            if rows:
                marks = ", ".join("?" * len(rows[0]))
                connection.executemany(f"INSERT INTO {_KEYS} VALUES ({marks})", rows)
    finally:
        connection.close()


def reset_database(db: Path, out: Console, *, keep_keys: bool = True) -> None:
    """Delete the demo's SQLite file (and its journal files): runs and books start afresh; its
    API keys are kept unless ``keep_keys`` is false. Refused (``CliError``), deleting nothing,
    while another process holds the file."""
    try:
        with exclusive(db):
            schema, rows = _saved_keys(db) if keep_keys else ([], [])
            removed = False
            for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
                if path.exists():
                    path.unlink()
                    removed = True
            if schema:
                _restore_keys(db, schema, rows)
    except HeldError as exc:
        raise CliError(f"cannot reset: {exc}; stop it first (nothing was deleted)") from None
    where = escape(os.path.abspath(db))
    if not removed:
        out.print(f"Nothing to delete at {where}: a fresh start.")
        return
    kept = ""
    if rows:
        keys = f"{len(rows)} API key{'s' if len(rows) != 1 else ''}"
        kept = f" (its {keys} kept: --reset-keys deletes them)"
    out.print(f"Deleted {where}{kept}: a fresh start.")
