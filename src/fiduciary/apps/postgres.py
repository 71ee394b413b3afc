"""The apps' tables in PostgreSQL, beside the run store's (several processes share them).

The same tables as ``SQLiteAppTables`` (``tables.py``), created with ``CREATE TABLE IF NOT
EXISTS`` under an advisory lock. A tick slot's row is inserted with ``ON CONFLICT DO NOTHING``:
with several schedulers on one database, the one whose insert lands runs the slot.

Install with ``pip install 'fiduciary[postgres]'``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from decimal import Decimal
from typing import Any

try:
    from psycopg_pool import AsyncConnectionPool
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "fiduciary.apps.postgres needs psycopg 3 and psycopg_pool: "
        "pip install 'fiduciary[postgres]'"
    ) from exc

from .tables import AppRecord, GrantRecord, LogEntry, TickRecord, TickStatus

__all__ = ["PostgresAppTables"]

_LOCK = 0x61707073  # "apps": the advisory lock the schema is created under

_SCHEMA = """
CREATE TABLE IF NOT EXISTS fiduciary_apps (app_id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fiduciary_app_counters (
    app_id TEXT NOT NULL, name TEXT NOT NULL, value BIGINT NOT NULL,
    PRIMARY KEY (app_id, name)
);
CREATE TABLE IF NOT EXISTS fiduciary_app_ticks (
    app_id TEXT NOT NULL, slot TEXT NOT NULL, data TEXT NOT NULL, status TEXT NOT NULL,
    PRIMARY KEY (app_id, slot)
);
CREATE INDEX IF NOT EXISTS fiduciary_app_ticks_open ON fiduciary_app_ticks (status, app_id);
CREATE TABLE IF NOT EXISTS fiduciary_app_grants (
    grant_id TEXT PRIMARY KEY, app_id TEXT NOT NULL, data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS fiduciary_app_grant_uses (
    grant_id TEXT NOT NULL, key TEXT NOT NULL, operation TEXT NOT NULL, amount NUMERIC NOT NULL,
    PRIMARY KEY (grant_id, key)
);
CREATE TABLE IF NOT EXISTS fiduciary_app_log (
    seq BIGSERIAL PRIMARY KEY, app_id TEXT NOT NULL, at TEXT NOT NULL,
    kind TEXT NOT NULL, detail TEXT NOT NULL
);
"""


class PostgresAppTables:
    """``await PostgresAppTables.open(dsn)``; ``close()`` when done."""

    def __init__(self, dsn: str, *, max_connections: int = 4) -> None:
        self.dsn = dsn
        self._pool = AsyncConnectionPool(
            dsn, min_size=1, max_size=max_connections, open=False, kwargs={"autocommit": True}
        )

    @classmethod
    async def open(cls, dsn: str, **options: Any) -> PostgresAppTables:
        tables = cls(dsn, **options)
        await tables._pool.open()
        async with tables._pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            await conn.execute(_SCHEMA.encode())
        return tables

    async def close(self) -> None:
        await self._pool.close()

    async def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(sql.encode(), params)
            return list(await cursor.fetchall())

    async def _count(self, sql: str, params: tuple[Any, ...]) -> int:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(sql.encode(), params)
            return int(cursor.rowcount)

    async def get_app(self, app_id: str) -> AppRecord | None:
        rows = await self._all("SELECT data FROM fiduciary_apps WHERE app_id = %s", (app_id,))
        return AppRecord.from_json(rows[0][0]) if rows else None

    async def put_app(self, record: AppRecord) -> None:
        await self._count(
            "INSERT INTO fiduciary_apps (app_id, data) VALUES (%s, %s) "
            "ON CONFLICT (app_id) DO UPDATE SET data = excluded.data",
            (record.app_id, record.to_json()),
        )

    async def list_apps(self) -> list[AppRecord]:
        rows = await self._all("SELECT data FROM fiduciary_apps ORDER BY app_id")
        return [AppRecord.from_json(r[0]) for r in rows]

    async def bump(self, app_id: str, name: str, by: int = 1) -> None:
        await self._count(
            "INSERT INTO fiduciary_app_counters (app_id, name, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (app_id, name) DO UPDATE "
            "SET value = fiduciary_app_counters.value + excluded.value",
            (app_id, name, by),
        )

    async def counters(self, app_id: str) -> dict[str, int]:
        rows = await self._all(
            "SELECT name, value FROM fiduciary_app_counters WHERE app_id = %s ORDER BY name",
            (app_id,),
        )
        return {str(name): int(value) for name, value in rows}

    async def claim_tick(self, tick: TickRecord) -> bool:
        inserted = await self._count(
            "INSERT INTO fiduciary_app_ticks (app_id, slot, data, status) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (app_id, slot) DO NOTHING",
            (tick.app_id, tick.slot, json.dumps(asdict(tick)), tick.status),
        )
        return inserted == 1

    async def update_tick(self, tick: TickRecord) -> bool:
        updated = await self._count(
            "UPDATE fiduciary_app_ticks SET data = %s, status = %s "
            "WHERE app_id = %s AND slot = %s AND status <> 'done'",
            (json.dumps(asdict(tick)), tick.status, tick.app_id, tick.slot),
        )
        return updated == 1

    async def get_tick(self, app_id: str, slot: str) -> TickRecord | None:
        rows = await self._all(
            "SELECT data FROM fiduciary_app_ticks WHERE app_id = %s AND slot = %s",
            (app_id, slot),
        )
        return TickRecord(**json.loads(rows[0][0])) if rows else None

    async def ticks(
        self, app_id: str | None = None, *, status: TickStatus | None = None, limit: int = 50
    ) -> list[TickRecord]:
        sql = "SELECT data FROM fiduciary_app_ticks WHERE TRUE"
        params: list[Any] = []
        if app_id is not None:
            sql, params = sql + " AND app_id = %s", [*params, app_id]
        if status is not None:
            sql, params = sql + " AND status = %s", [*params, status]
        rows = await self._all(sql + " ORDER BY slot DESC LIMIT %s", (*params, limit))
        return [TickRecord(**json.loads(r[0])) for r in rows]

    async def add_grant(self, grant: GrantRecord) -> bool:
        inserted = await self._count(
            "INSERT INTO fiduciary_app_grants (grant_id, app_id, data) VALUES (%s, %s, %s) "
            "ON CONFLICT (grant_id) DO NOTHING",
            (grant.grant_id, grant.app_id, grant.to_json()),
        )
        return inserted == 1

    async def grants(self, app_id: str) -> list[GrantRecord]:
        rows = await self._all("SELECT data FROM fiduciary_app_grants WHERE app_id = %s", (app_id,))
        return [GrantRecord.from_json(r[0]) for r in rows]

    async def use_grant(self, grant_id: str, key: str, operation: str, amount: Decimal) -> bool:
        inserted = await self._count(
            "INSERT INTO fiduciary_app_grant_uses (grant_id, key, operation, amount) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (grant_id, key) DO NOTHING",
            (grant_id, key, operation, amount),
        )
        return inserted == 1

    async def grant_spent(self, grant_id: str) -> dict[str, Decimal]:
        rows = await self._all(
            "SELECT operation, SUM(amount) FROM fiduciary_app_grant_uses WHERE grant_id = %s "
            "GROUP BY operation",
            (grant_id,),
        )
        return {str(op): Decimal(str(total)) for op, total in rows}

    async def log(self, entry: LogEntry) -> None:
        await self._count(
            "INSERT INTO fiduciary_app_log (app_id, at, kind, detail) VALUES (%s, %s, %s, %s)",
            (entry.app_id, entry.at, entry.kind, json.dumps(entry.detail, default=str)),
        )

    async def read_log(self, app_id: str, *, limit: int = 100) -> list[LogEntry]:
        rows = await self._all(
            "SELECT app_id, at, kind, detail FROM fiduciary_app_log WHERE app_id = %s "
            "ORDER BY seq DESC LIMIT %s",
            (app_id, limit),
        )
        return [LogEntry(r[0], r[1], r[2], json.loads(r[3])) for r in reversed(rows)]
