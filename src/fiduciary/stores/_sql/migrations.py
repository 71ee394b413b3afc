"""Private: numbered migrations, the same rules for every SQL dialect.

A dialect's migrations are the files ``NNNN_name.sql`` of its directory, numbered 1, 2, 3 ...
without gaps. Opening a store applies those ``schema_migrations`` does not list, in order, each
with its ``schema_migrations`` row, under the dialect's write lock (SQLite's ``BEGIN
IMMEDIATE``, a PostgreSQL advisory lock), after checking again under that lock, so processes
that open a fresh database together apply each once. A database that lists a version this
code does not know is newer than it and is refused with ``StoreError``. The table
``schema_migrations`` itself is migration zero (each dialect's ``BOOTSTRAP``): never changed.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...exceptions import StoreError

__all__ = ["Migration", "load_migrations", "to_apply"]

_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(directory: Path) -> list[Migration]:
    """The migrations of ``directory`` (``NNNN_name.sql``), in order, numbered 1, 2, 3 ..."""
    migrations: list[Migration] = []
    try:
        paths = sorted(directory.iterdir())
    except OSError as exc:
        raise StoreError(f"cannot read the migrations in {directory}: {exc}") from exc
    for path in paths:
        if path.suffix != ".sql":
            continue
        match = _MIGRATION_NAME.match(path.name)
        if match is None:
            raise StoreError(f"migration file {path.name!r} is not named NNNN_name.sql")
        migrations.append(
            Migration(int(match.group(1)), match.group(2), path.read_text(encoding="utf-8"))
        )
    for expected, migration in enumerate(migrations, start=1):
        if migration.version != expected:
            raise StoreError(
                f"migrations must be numbered 1, 2, 3 ... without gaps: "
                f"found {migration.version:04d} where {expected:04d} was expected"
            )
    return migrations


def to_apply(applied: Collection[int], migrations: Sequence[Migration]) -> list[Migration]:
    """The migrations not applied yet, in order; ``StoreError`` if the database is newer."""
    known = {m.version for m in migrations}
    newer = set(applied) - known
    if newer:
        raise StoreError(
            f"the database has schema version {max(newer)}, newer than this fiduciary "
            f"knows ({max(known, default=0)}): upgrade fiduciary"
        )
    return [m for m in migrations if m.version not in applied]
