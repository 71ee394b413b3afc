"""The apps' own tables: app records (enabled, state, counters), tick slots, grants, the app log.

They live beside the run store (the same SQLite file, or in memory for tests) and are managed
here, with ``CREATE TABLE IF NOT EXISTS``: the core stores know nothing of apps. A tick slot is a
row keyed by (app, slot): the database's uniqueness decides which process runs it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar
from uuid import UUID

__all__ = [
    "AppRecord",
    "AppTables",
    "GrantRecord",
    "LogEntry",
    "MemoryAppTables",
    "SQLiteAppTables",
    "TickRecord",
    "TickStatus",
]

TickStatus = Literal["running", "waiting", "done"]


@dataclass(frozen=True, slots=True)
class AppRecord:
    app_id: str
    enabled: bool = False
    approved_mode: str | None = None  # the mode the enabling approval said (paper | live)
    enable_run: str | None = None  # the run holding the enabling approval, while it waits
    state: dict[str, Any] = field(default_factory=dict)
    state_saved_at: str | None = None
    last_hash: str | None = None
    counters: dict[str, int] = field(default_factory=dict)  # kept in a table of their own
    consecutive_errors: int = 0
    paused_until: str | None = None
    callbacks: tuple[str, ...] = ()  # when the result hook was last called back (the window)

    def to_json(self) -> str:
        data = asdict(self)
        data["callbacks"] = list(self.callbacks)
        data["counters"] = {}
        return json.dumps(data, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> AppRecord:
        data = json.loads(text)
        data["callbacks"] = tuple(data.get("callbacks", ()))
        return cls(**data)


@dataclass(frozen=True, slots=True)
class TickRecord:
    app_id: str
    slot: str
    run_id: str
    status: TickStatus
    outcome: str = ""  # ran | unchanged | busy | paused | error
    detail: str = ""
    owner: str = ""
    at: str = ""


@dataclass(frozen=True, slots=True)
class GrantRecord:
    """A scoped temporary grant, created only by a person's approval."""

    grant_id: str
    app_id: str
    principal: str
    operations: tuple[str, ...]
    limits_usd: dict[str, str]  # per operation, Decimal as text
    resources: tuple[str, ...]
    expires_at: str
    approval: str  # the run / approval that created it

    def to_json(self) -> str:
        data = asdict(self)
        data["operations"], data["resources"] = list(self.operations), list(self.resources)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> GrantRecord:
        data = json.loads(text)
        data["operations"] = tuple(data["operations"])
        data["resources"] = tuple(data["resources"])
        return cls(**data)


@dataclass(frozen=True, slots=True)
class LogEntry:
    app_id: str
    at: str
    kind: str
    detail: dict[str, Any]


class AppTables(Protocol):
    async def get_app(self, app_id: str) -> AppRecord | None: ...
    async def put_app(self, record: AppRecord) -> None: ...
    async def list_apps(self) -> list[AppRecord]: ...
    async def bump(self, app_id: str, name: str, by: int = 1) -> None: ...
    async def counters(self, app_id: str) -> dict[str, int]: ...
    async def claim_tick(self, tick: TickRecord) -> bool:
        """Insert the slot's row; False when it exists (another process has the slot)."""
        ...

    async def update_tick(self, tick: TickRecord) -> bool:
        """Update the slot's row unless it is done already; whether it was updated."""
        ...

    async def get_tick(self, app_id: str, slot: str) -> TickRecord | None: ...
    async def ticks(
        self, app_id: str | None = None, *, status: TickStatus | None = None, limit: int = 50
    ) -> list[TickRecord]: ...
    async def add_grant(self, grant: GrantRecord) -> bool: ...
    async def grants(self, app_id: str) -> list[GrantRecord]: ...
    async def use_grant(self, grant_id: str, key: str, operation: str, amount: Decimal) -> bool:
        """Record one use (idempotent by ``key``); False when the key was recorded before."""
        ...

    async def grant_spent(self, grant_id: str) -> dict[str, Decimal]: ...
    async def log(self, entry: LogEntry) -> None: ...
    async def read_log(self, app_id: str, *, limit: int = 100) -> list[LogEntry]: ...


class MemoryAppTables:
    """The tables in memory, for tests and a ``MemoryStore``."""

    def __init__(self) -> None:
        self._apps: dict[str, AppRecord] = {}
        self._counters: dict[str, dict[str, int]] = {}
        self._ticks: dict[str, dict[str, TickRecord]] = {}  # by app, by slot
        self._open: dict[tuple[str, str], TickRecord] = {}  # running or waiting
        self._grants: dict[str, GrantRecord] = {}
        self._uses: dict[tuple[str, str], tuple[str, Decimal]] = {}
        self._log: list[LogEntry] = []

    async def get_app(self, app_id: str) -> AppRecord | None:
        return self._apps.get(app_id)

    async def put_app(self, record: AppRecord) -> None:
        self._apps[record.app_id] = record

    async def list_apps(self) -> list[AppRecord]:
        return [self._apps[k] for k in sorted(self._apps)]

    async def bump(self, app_id: str, name: str, by: int = 1) -> None:
        counters = self._counters.setdefault(app_id, {})
        counters[name] = counters.get(name, 0) + by

    async def counters(self, app_id: str) -> dict[str, int]:
        return dict(sorted(self._counters.get(app_id, {}).items()))

    async def claim_tick(self, tick: TickRecord) -> bool:
        if tick.slot in self._ticks.setdefault(tick.app_id, {}):
            return False
        self._ticks[tick.app_id][tick.slot] = tick
        if tick.status != "done":
            self._open[(tick.app_id, tick.slot)] = tick
        return True

    async def update_tick(self, tick: TickRecord) -> bool:
        slots = self._ticks.setdefault(tick.app_id, {})
        known = slots.get(tick.slot)
        if known is not None and known.status == "done":
            return False
        slots[tick.slot] = tick
        key = (tick.app_id, tick.slot)
        if tick.status == "done":
            self._open.pop(key, None)
        else:
            self._open[key] = tick
        return True

    async def get_tick(self, app_id: str, slot: str) -> TickRecord | None:
        return self._ticks.get(app_id, {}).get(slot)

    async def ticks(
        self, app_id: str | None = None, *, status: TickStatus | None = None, limit: int = 50
    ) -> list[TickRecord]:
        if status in ("running", "waiting"):
            pool: list[TickRecord] = list(self._open.values())
        elif app_id is not None:
            pool = list(self._ticks.get(app_id, {}).values())
        else:
            pool = [t for slots in self._ticks.values() for t in slots.values()]
        rows = [
            t
            for t in pool
            if (app_id is None or t.app_id == app_id) and (status is None or t.status == status)
        ]
        rows.sort(key=lambda t: t.slot, reverse=True)
        return rows[:limit]

    async def add_grant(self, grant: GrantRecord) -> bool:
        if grant.grant_id in self._grants:
            return False
        self._grants[grant.grant_id] = grant
        return True

    async def grants(self, app_id: str) -> list[GrantRecord]:
        return [g for g in self._grants.values() if g.app_id == app_id]

    async def use_grant(self, grant_id: str, key: str, operation: str, amount: Decimal) -> bool:
        if (grant_id, key) in self._uses:
            return False
        self._uses[(grant_id, key)] = (operation, amount)
        return True

    async def grant_spent(self, grant_id: str) -> dict[str, Decimal]:
        spent: dict[str, Decimal] = {}
        for (gid, _), (op, amount) in self._uses.items():
            if gid == grant_id:
                spent[op] = spent.get(op, Decimal(0)) + amount
        return spent

    async def log(self, entry: LogEntry) -> None:
        self._log.append(entry)

    async def read_log(self, app_id: str, *, limit: int = 100) -> list[LogEntry]:
        return [e for e in self._log if e.app_id == app_id][-limit:]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS fiduciary_apps (app_id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fiduciary_app_counters (
    app_id TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL,
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
    grant_id TEXT NOT NULL, key TEXT NOT NULL, operation TEXT NOT NULL, amount TEXT NOT NULL,
    PRIMARY KEY (grant_id, key)
);
CREATE TABLE IF NOT EXISTS fiduciary_app_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, app_id TEXT NOT NULL, at TEXT NOT NULL,
    kind TEXT NOT NULL, detail TEXT NOT NULL
);
"""

T = TypeVar("T")


class SQLiteAppTables:
    """The tables in a SQLite file (the run store's, or any other); a connection of their own,
    used from a worker thread so that no query blocks the event loop."""

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 5_000) -> None:
        self.path = str(path)
        self._timeout = busy_timeout_ms / 1000
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            conn.executescript(_SCHEMA)
            self._conn = conn
        return self._conn

    async def _run(self, fn: Any, *args: Any) -> Any:
        def call() -> Any:
            with self._lock:
                return fn(self._connect(), *args)

        return await asyncio.to_thread(call)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    async def get_app(self, app_id: str) -> AppRecord | None:
        row = await self._run(
            lambda c, a: c.execute(
                "SELECT data FROM fiduciary_apps WHERE app_id = ?", (a,)
            ).fetchone(),
            app_id,
        )
        return None if row is None else AppRecord.from_json(row[0])

    async def put_app(self, record: AppRecord) -> None:
        await self._run(
            lambda c, r: c.execute(
                "INSERT INTO fiduciary_apps (app_id, data) VALUES (?, ?) "
                "ON CONFLICT (app_id) DO UPDATE SET data = excluded.data",
                (r.app_id, r.to_json()),
            ),
            record,
        )

    async def list_apps(self) -> list[AppRecord]:
        rows = await self._run(
            lambda c: c.execute("SELECT data FROM fiduciary_apps ORDER BY app_id").fetchall()
        )
        return [AppRecord.from_json(r[0]) for r in rows]

    async def bump(self, app_id: str, name: str, by: int = 1) -> None:
        await self._run(
            lambda c: c.execute(
                "INSERT INTO fiduciary_app_counters (app_id, name, value) VALUES (?, ?, ?) "
                "ON CONFLICT (app_id, name) DO UPDATE SET value = value + excluded.value",
                (app_id, name, by),
            )
        )

    async def counters(self, app_id: str) -> dict[str, int]:
        rows = await self._run(
            lambda c: c.execute(
                "SELECT name, value FROM fiduciary_app_counters WHERE app_id = ? ORDER BY name",
                (app_id,),
            ).fetchall()
        )
        return {name: int(value) for name, value in rows}

    async def claim_tick(self, tick: TickRecord) -> bool:
        cursor = await self._run(
            lambda c, t: c.execute(
                "INSERT INTO fiduciary_app_ticks (app_id, slot, data, status) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (app_id, slot) DO NOTHING",
                (t.app_id, t.slot, json.dumps(asdict(t)), t.status),
            ),
            tick,
        )
        return bool(cursor.rowcount == 1)

    async def update_tick(self, tick: TickRecord) -> bool:
        cursor = await self._run(
            lambda c, t: c.execute(
                "UPDATE fiduciary_app_ticks SET data = ?, status = ? "
                "WHERE app_id = ? AND slot = ? AND status <> 'done'",
                (json.dumps(asdict(t)), t.status, t.app_id, t.slot),
            ),
            tick,
        )
        return bool(cursor.rowcount == 1)

    async def get_tick(self, app_id: str, slot: str) -> TickRecord | None:
        row = await self._run(
            lambda c: c.execute(
                "SELECT data FROM fiduciary_app_ticks WHERE app_id = ? AND slot = ?",
                (app_id, slot),
            ).fetchone()
        )
        return None if row is None else TickRecord(**json.loads(row[0]))

    async def ticks(
        self, app_id: str | None = None, *, status: TickStatus | None = None, limit: int = 50
    ) -> list[TickRecord]:
        sql = "SELECT data FROM fiduciary_app_ticks WHERE 1 = 1"
        params: list[Any] = []
        if app_id is not None:
            sql, params = sql + " AND app_id = ?", [*params, app_id]
        if status is not None:
            sql, params = sql + " AND status = ?", [*params, status]
        sql += " ORDER BY slot DESC LIMIT ?"
        rows = await self._run(lambda c: c.execute(sql, (*params, limit)).fetchall())
        return [TickRecord(**json.loads(r[0])) for r in rows]

    async def add_grant(self, grant: GrantRecord) -> bool:
        cursor = await self._run(
            lambda c: c.execute(
                "INSERT INTO fiduciary_app_grants (grant_id, app_id, data) VALUES (?, ?, ?) "
                "ON CONFLICT (grant_id) DO NOTHING",
                (grant.grant_id, grant.app_id, grant.to_json()),
            )
        )
        return bool(cursor.rowcount == 1)

    async def grants(self, app_id: str) -> list[GrantRecord]:
        rows = await self._run(
            lambda c: c.execute(
                "SELECT data FROM fiduciary_app_grants WHERE app_id = ?", (app_id,)
            ).fetchall()
        )
        return [GrantRecord.from_json(r[0]) for r in rows]

    async def use_grant(self, grant_id: str, key: str, operation: str, amount: Decimal) -> bool:
        cursor = await self._run(
            lambda c: c.execute(
                "INSERT INTO fiduciary_app_grant_uses (grant_id, key, operation, amount) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (grant_id, key) DO NOTHING",
                (grant_id, key, operation, str(amount)),
            )
        )
        return bool(cursor.rowcount == 1)

    async def grant_spent(self, grant_id: str) -> dict[str, Decimal]:
        rows = await self._run(
            lambda c: c.execute(
                "SELECT operation, amount FROM fiduciary_app_grant_uses WHERE grant_id = ?",
                (grant_id,),
            ).fetchall()
        )
        spent: dict[str, Decimal] = {}
        for op, amount in rows:
            spent[op] = spent.get(op, Decimal(0)) + Decimal(amount)
        return spent

    async def log(self, entry: LogEntry) -> None:
        await self._run(
            lambda c: c.execute(
                "INSERT INTO fiduciary_app_log (app_id, at, kind, detail) VALUES (?, ?, ?, ?)",
                (entry.app_id, entry.at, entry.kind, json.dumps(entry.detail, default=str)),
            )
        )

    async def read_log(self, app_id: str, *, limit: int = 100) -> list[LogEntry]:
        rows = await self._run(
            lambda c: c.execute(
                "SELECT app_id, at, kind, detail FROM fiduciary_app_log WHERE app_id = ? "
                "ORDER BY seq DESC LIMIT ?",
                (app_id, limit),
            ).fetchall()
        )
        return [LogEntry(r[0], r[1], r[2], json.loads(r[3])) for r in reversed(rows)]


def _unused(_: datetime, __: UUID) -> None:  # pragma: no cover - keeps imports honest for mypy
    return None
