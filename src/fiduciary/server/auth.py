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
same file as the runs, through stdlib ``sqlite3``) or ``MemoryKeyStore`` (tests).
"""

from __future__ import annotations

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
from typing import Protocol

from ..clock import Clock, SystemClock
from ..exceptions import StoreError

__all__ = [
    "ALL_SCOPES",
    "DEFAULT_SCOPES",
    "ApiKey",
    "KeyStore",
    "MemoryKeyStore",
    "SQLiteKeyStore",
    "Scope",
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


class SQLiteKeyStore:
    """Keys in the ``server_api_keys`` table of a SQLite file (the runs' file, by default).

    The table is created on first use, outside the store's migrations: it belongs to the server,
    and a database without a server never has it. Queries are one-row lookups by primary key,
    run on the event-loop thread as the SQLite store's are.
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: Clock | None = None) -> None:
        self.path = os.fspath(path)
        self._clock = clock or SystemClock()
        self._conn: sqlite3.Connection | None = None
        self._rowcount = 0

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

    def _execute(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        try:
            cursor = self._connection().execute(sql, params)
            rows = cursor.fetchall()
            self._rowcount = cursor.rowcount
            return rows
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite: {exc} (API keys)") from exc

    async def create(
        self, principal: str, scopes: Iterable[Scope], *, label: str = ""
    ) -> tuple[str, ApiKey]:
        if not principal:
            raise ValueError("a key needs a principal")
        key, key_id = new_key()
        record = ApiKey(key_id, principal, _check_scopes(scopes), self._clock.now(), label)
        self._execute(
            f"INSERT INTO server_api_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL)",
            (
                key_id,
                digest(key),
                principal,
                json.dumps(sorted(record.scopes)),
                label,
                _ts(record.created_at),
            ),
        )
        return key, record

    async def verify(self, presented: str) -> ApiKey | None:
        match = _KEY.match(presented)
        rows = (
            self._execute(f"SELECT {_COLUMNS} FROM server_api_keys WHERE key_id = ?", (match[1],))
            if match
            else []
        )
        stored = str(rows[0][1]) if rows else None
        if not _matches(presented, stored) or not rows:
            return None
        record = _record(rows[0])
        return None if record.revoked_at is not None else record

    async def list(self, *, principal: str | None = None) -> list[ApiKey]:
        if principal is None:
            rows = self._execute(f"SELECT {_COLUMNS} FROM server_api_keys ORDER BY created_at")
        else:
            rows = self._execute(
                f"SELECT {_COLUMNS} FROM server_api_keys WHERE principal = ? ORDER BY created_at",
                (principal,),
            )
        return [_record(row) for row in rows]

    async def revoke(self, key_id: str) -> bool:
        self._execute(
            "UPDATE server_api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
            (_ts(self._clock.now()), key_id),
        )
        return self._rowcount == 1

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _ts(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _record(row: tuple[object, ...]) -> ApiKey:
    return ApiKey(
        key_id=str(row[0]),
        principal=str(row[2]),
        scopes=frozenset(json.loads(str(row[3]))),
        label=str(row[4]),
        created_at=datetime.fromisoformat(str(row[5])),
        revoked_at=None if row[6] is None else datetime.fromisoformat(str(row[6])),
    )
