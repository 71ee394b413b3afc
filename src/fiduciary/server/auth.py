"""API keys: who a request acts for, and what it may do.

A key is ``fid_<key id>_<secret>``: 16 hex characters that name it, and 32 random bytes
(base64url). Only the sha256 of the whole key is stored; a key is checked by looking its id up
and comparing digests in constant time. sha256 without a slow KDF is enough here because the
secret has 256 bits of entropy: nothing can be guessed by brute force, unlike a password.

A key is bound to one principal and a set of scopes:

| scope | allows |
| --- | --- |
| ``runs:write`` | starting runs, sending messages, cancelling runs |
| ``runs:read`` | reading runs, their events and their pending approvals |
| ``approvals:decide`` | approving, denying and reporting results of pending actions |
| ``admin`` | all of the above on every principal's runs |

Keys live in a ``KeyStore``: ``SQLiteKeyStore`` (a table of its own, ``server_api_keys``, in the
same file as the runs, through stdlib ``sqlite3``), ``PostgresKeyStore`` (the same table in the
runs' PostgreSQL database, shared by every server instance: a key created or revoked on one is
honoured by all at their next request) or ``MemoryKeyStore`` (tests).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import re
import secrets
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..clock import Clock, SystemClock
from ..exceptions import StoreError

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

__all__ = [
    "ALL_SCOPES",
    "DEFAULT_SCOPES",
    "ApiKey",
    "KeyStore",
    "MemoryKeyStore",
    "PostgresKeyStore",
    "SQLiteKeyStore",
    "Scope",
    "SqlTable",
    "new_key",
]

Scope = str
RUNS_WRITE: Scope = "runs:write"
RUNS_READ: Scope = "runs:read"
APPROVALS_DECIDE: Scope = "approvals:decide"
ADMIN: Scope = "admin"
ALL_SCOPES: frozenset[Scope] = frozenset({RUNS_WRITE, RUNS_READ, APPROVALS_DECIDE, ADMIN})
DEFAULT_SCOPES: tuple[Scope, ...] = (APPROVALS_DECIDE, RUNS_READ, RUNS_WRITE)

_KEY = re.compile(r"^fid_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_DUMMY = hashlib.sha256(b"fiduciary: no such key").hexdigest()


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored key (never the key itself): its id, owner, scopes and state."""

    key_id: str
    principal: str
    scopes: frozenset[Scope]
    created_at: datetime
    label: str = ""
    revoked_at: datetime | None = None

    def allows(self, scope: Scope) -> bool:
        return ADMIN in self.scopes or scope in self.scopes

    @property
    def is_admin(self) -> bool:
        return ADMIN in self.scopes


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> tuple[str, str]:
    """A fresh key and its id."""
    key_id = secrets.token_hex(8)
    return f"fid_{key_id}_{secrets.token_urlsafe(32)}", key_id


def _check_scopes(scopes: Iterable[str]) -> frozenset[Scope]:
    wanted = frozenset(scopes)
    unknown = sorted(wanted - ALL_SCOPES)
    if unknown:
        raise ValueError(f"unknown scopes: {', '.join(unknown)} (known: {sorted(ALL_SCOPES)})")
    if not wanted:
        raise ValueError("a key needs at least one scope")
    return wanted


class KeyStore(Protocol):
    """Where API keys live. ``verify`` returns the key's record, or None for any failure."""

    async def create(
        self, principal: str, scopes: Iterable[Scope], *, label: str = ""
    ) -> tuple[str, ApiKey]:
        """A new key for ``principal``: the key (shown once, never stored) and its record."""
        ...

    async def verify(self, presented: str) -> ApiKey | None: ...

    async def list(self, *, principal: str | None = None) -> list[ApiKey]: ...

    async def revoke(self, key_id: str) -> bool: ...

    async def aclose(self) -> None:
        """Release connections (the store is not used afterwards)."""
        ...


def _matches(presented: str, stored_digest: str | None) -> bool:
    # compare even when there is nothing to compare to, so that timing says little
    return hmac.compare_digest(digest(presented), stored_digest or _DUMMY) and (
        stored_digest is not None
    )


class MemoryKeyStore:
    """Keys in a dict: for tests."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._rows: dict[str, tuple[str, ApiKey]] = {}

    async def create(
        self, principal: str, scopes: Iterable[Scope], *, label: str = ""
    ) -> tuple[str, ApiKey]:
        if not principal:
            raise ValueError("a key needs a principal")
        key, key_id = new_key()
        record = ApiKey(key_id, principal, _check_scopes(scopes), self._clock.now(), label)
        self._rows[key_id] = (digest(key), record)
        return key, record

    async def verify(self, presented: str) -> ApiKey | None:
        match = _KEY.match(presented)
        row = self._rows.get(match.group(1)) if match else None
        if not _matches(presented, row[0] if row else None) or row is None:
            return None
        return None if row[1].revoked_at is not None else row[1]

    async def list(self, *, principal: str | None = None) -> list[ApiKey]:
        return [r for _, r in self._rows.values() if principal in (None, r.principal)]

    async def revoke(self, key_id: str) -> bool:
        row = self._rows.get(key_id)
        if row is None or row[1].revoked_at is not None:
            return False
        self._rows[key_id] = (row[0], replace(row[1], revoked_at=self._clock.now()))
        return True

    async def aclose(self) -> None:
        return None


_SCHEMA = """CREATE TABLE IF NOT EXISTS server_api_keys (
    key_id     TEXT PRIMARY KEY,
    digest     TEXT NOT NULL,
    principal  TEXT NOT NULL,
    scopes     TEXT NOT NULL,
    label      TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    revoked_at TEXT
)"""
_COLUMNS = "key_id, digest, principal, scopes, label, created_at, revoked_at"


@runtime_checkable
class SqlTable(Protocol):
    """A key store in a database, which also holds the server's own small tables (the default
    model's choices: ``ai.py``), created on first use as ``server_api_keys`` is."""

    async def execute(
        self, sql: str, params: tuple[object, ...] = ()
    ) -> list[tuple[object, ...]]: ...


class _TableKeyStore:
    """The ``server_api_keys`` table, whatever the database: the queries of ``create``,
    ``verify``, ``list`` and ``revoke``, written once with ``?`` parameters. A subclass runs
    them (``_run``: the rows and the row count) and says how a time is stored (``_stored``)."""

    _clock: Clock

    async def _run(
        self, sql: str, params: tuple[object, ...] = ()
    ) -> tuple[list[tuple[object, ...]], int]:
        raise NotImplementedError

    def _stored(self, when: datetime) -> object:
        raise NotImplementedError

    async def execute(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        """One statement (``?`` parameters) on the keys' database: ``SqlTable``."""
        rows, _ = await self._run(sql, params)
        return rows

    async def create(
        self, principal: str, scopes: Iterable[Scope], *, label: str = ""
    ) -> tuple[str, ApiKey]:
        if not principal:
            raise ValueError("a key needs a principal")
        key, key_id = new_key()
        record = ApiKey(key_id, principal, _check_scopes(scopes), self._clock.now(), label)
        await self._run(
            f"INSERT INTO server_api_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL)",
            (
                key_id,
                digest(key),
                principal,
                json.dumps(sorted(record.scopes)),
                label,
                self._stored(record.created_at),
            ),
        )
        return key, record

    async def verify(self, presented: str) -> ApiKey | None:
        match = _KEY.match(presented)
        rows: list[tuple[object, ...]] = []
        if match:
            rows, _ = await self._run(
                f"SELECT {_COLUMNS} FROM server_api_keys WHERE key_id = ?", (match[1],)
            )
        stored = str(rows[0][1]) if rows else None
        if not _matches(presented, stored) or not rows:
            return None
        record = _record(rows[0])
        return None if record.revoked_at is not None else record

    async def list(self, *, principal: str | None = None) -> list[ApiKey]:
        if principal is None:
            rows, _ = await self._run(f"SELECT {_COLUMNS} FROM server_api_keys ORDER BY created_at")
        else:
            rows, _ = await self._run(
                f"SELECT {_COLUMNS} FROM server_api_keys WHERE principal = ? ORDER BY created_at",
                (principal,),
            )
        return [_record(row) for row in rows]

    async def revoke(self, key_id: str) -> bool:
        _, count = await self._run(
            "UPDATE server_api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
            (self._stored(self._clock.now()), key_id),
        )
        return count == 1


class SQLiteKeyStore(_TableKeyStore):
    """Keys in the ``server_api_keys`` table of a SQLite file (the runs' file, by default).

    The table is created on first use, outside the store's migrations: it belongs to the server,
    and a database without a server never has it. Queries are one-row lookups by primary key,
    run on the event-loop thread as the SQLite store's are.
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: Clock | None = None) -> None:
        self.path = os.fspath(path)
        self._clock = clock or SystemClock()
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
                conn.execute("PRAGMA busy_timeout = 5000")
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(_SCHEMA)
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite: {exc} (opening the API keys in {self.path})") from exc
            self._conn = conn
        return self._conn

    async def _run(
        self, sql: str, params: tuple[object, ...] = ()
    ) -> tuple[list[tuple[object, ...]], int]:
        try:
            cursor = self._connection().execute(sql, params)
            return cursor.fetchall(), cursor.rowcount
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite: {exc} (API keys)") from exc

    def _stored(self, when: datetime) -> object:
        return _ts(when)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def aclose(self) -> None:
        self.close()


_PG_SCHEMA = """CREATE TABLE IF NOT EXISTS server_api_keys (
    key_id     text PRIMARY KEY,
    digest     text NOT NULL,
    principal  text NOT NULL,
    scopes     text NOT NULL,
    label      text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
)"""
_PG_LOCK = 0x6669647563696B  # pg_advisory_xact_lock: instances starting together create it once


class PostgresKeyStore(_TableKeyStore):
    """Keys in the ``server_api_keys`` table of the runs' PostgreSQL database.

    Every server instance on the database sees the same keys: one created with
    ``fiduciary keys create --postgres DSN`` works on all of them, and a revocation takes effect
    at each instance's next request (nothing is cached). The table is created on first use
    (under an advisory lock), outside the store's migrations, as ``SQLiteKeyStore`` does. A small
    pool of its own (``max_size`` connections) serves the one-row lookups.
    """

    def __init__(self, dsn: str, *, clock: Clock | None = None, max_size: int = 4) -> None:
        self.dsn = dsn
        self._clock = clock or SystemClock()
        self._max_size = max_size
        self._pool: AsyncConnectionPool[Any] | None = None
        self._opening = asyncio.Lock()  # concurrent first requests open one pool

    @classmethod
    async def open(cls, dsn: str, **options: Any) -> PostgresKeyStore:
        keys = cls(dsn, **options)
        await keys._ready()
        return keys

    async def _ready(self) -> AsyncConnectionPool[Any]:
        if self._pool is not None:
            return self._pool
        async with self._opening:
            return self._pool or await self._open()

    async def _open(self) -> AsyncConnectionPool[Any]:
        try:
            import psycopg
            from psycopg_pool import AsyncConnectionPool
        except ImportError as exc:  # pragma: no cover - exercised without the extra
            raise StoreError("API keys on PostgreSQL need 'fiduciary[postgres]'") from exc
        try:  # one connection first: an unreachable server is an error at once, not a wait
            conn = await psycopg.AsyncConnection.connect(self.dsn)
            async with conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_LOCK,))
                await conn.execute(_PG_SCHEMA)
        except psycopg.Error as exc:
            raise StoreError(f"postgres: {exc} (opening the API keys)") from exc
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.dsn, min_size=1, max_size=self._max_size, open=False, timeout=10.0
        )
        await pool.open()
        self._pool = pool
        return pool

    async def _run(
        self, sql: str, params: tuple[object, ...] = ()
    ) -> tuple[list[tuple[object, ...]], int]:
        import psycopg

        pool = await self._ready()
        try:
            async with pool.connection() as conn:
                cursor = await conn.execute(sql.replace("?", "%s").encode(), params)
                rows = await cursor.fetchall() if cursor.description else []
                return rows, cursor.rowcount
        except (psycopg.Error, TimeoutError) as exc:
            raise StoreError(f"postgres: {exc} (API keys)") from exc

    def _stored(self, when: datetime) -> object:
        return when

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


def _ts(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _when(value: object) -> datetime:
    """A stored time: ISO text (SQLite) or an aware datetime (PostgreSQL), as UTC."""
    when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return when.astimezone(UTC)


def _record(row: tuple[object, ...]) -> ApiKey:
    return ApiKey(
        key_id=str(row[0]),
        principal=str(row[2]),
        scopes=frozenset(json.loads(str(row[3]))),
        label=str(row[4]),
        created_at=_when(row[5]),
        revoked_at=None if row[6] is None else _when(row[6]),
    )
