"""The PostgreSQL store: the full ``Store`` contract shared by many processes and machines.

Install with ``pip install 'fiduciary[postgres]'`` (psycopg 3 and psycopg_pool).

``await PostgresStore.open(dsn)`` connects, applies the migrations of ``sql/postgres/migrations``
and starts listening (LISTEN/NOTIFY carries every process's commits to this one's
subscribers). Commits are group-committed; leases are fenced by an epoch checked under the runs
row lock; workers claim runs with ``FOR UPDATE SKIP LOCKED``; principal locks and cancel
requests hold across processes. The rules in full are in the docstring of
``fiduciary.stores._sql.postgres``, where the dialect lives; what it shares with SQLite is in
``fiduciary.stores._sql.core``.
"""

from __future__ import annotations

try:
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "fiduciary.stores.postgres needs psycopg 3 and psycopg_pool: "
        "pip install 'fiduciary[postgres]'"
    ) from exc

from ._sql.postgres import MIGRATIONS_DIR, SCHEMA_PATH, PostgresStore, apply_migrations
from ._sql.postgres_writer import EVENTS_CHANNEL, RUNNABLE_CHANNEL

__all__ = [
    "EVENTS_CHANNEL",
    "MIGRATIONS_DIR",
    "RUNNABLE_CHANNEL",
    "SCHEMA_PATH",
    "PostgresStore",
    "apply_migrations",
]
