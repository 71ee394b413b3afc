"""Private: the registered passkeys, the signatures made with them and the registration
challenges handed out, in the run store's database (SQLite or PostgreSQL).

The tables are the store's (migrations ``0009_passkeys`` on SQLite, ``0007_passkeys`` on
PostgreSQL), so several servers on one PostgreSQL share them: a passkey registered on one
signs on another, and an assertion used on one is refused on every other. A credential
belongs to one principal (name, created, last used, revoked). A signature row keeps the
assertion's exact bytes (authenticator data, client data JSON, signature), the binding that
was signed (canonical JSON) and the relying party it was checked against, so that
``verify_run`` can check it again offline, years later. Using a credential is one
transaction: its sign counter moves only from the value it was checked against, and a
(credential, challenge) pair is stored once (a replayed assertion is refused). A
registration challenge is one per principal (the latest options), taken once.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from ..stores.base import Store

__all__ = ["Credential", "PasskeyRegistry", "StoredSignature"]

# a registry on a SQLite file the store has not migrated yet makes the tables itself (the
# migration's own statements: IF NOT EXISTS both ways)
_SQLITE_SCHEMA = (
    Path(__file__).parent.parent / "stores" / "sql" / "migrations" / "0009_passkeys.sql"
)


@dataclass(frozen=True, slots=True)
class Credential:
    credential_id: bytes
    principal: str
    name: str
    public_key: bytes  # COSE, as py_webauthn verified it at registration
    sign_count: int
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class StoredSignature:
    run_id: UUID
    approval_id: UUID
    approver: str
    credential_id: bytes
    binding: str  # the canonical JSON that was signed
    challenge: bytes
    authenticator_data: bytes
    client_data_json: bytes
    signature: bytes
    rp_id: str
    origins: str  # JSON list
    at: datetime


def _time(value: object) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def _uuid(value: object) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))


class PasskeyRegistry:
    """Credentials, signatures and registration challenges in a SQL database: the run
    store's (``for_store``), or a SQLite file of their own (``PasskeyRegistry(path)``,
    ``":memory:"`` for tests). Its calls are short and synchronous."""

    def __init__(self, path: Path | str) -> None:
        self._conn: Any = sqlite3.connect(
            str(path), check_same_thread=False, isolation_level=None, timeout=10
        )
        self._postgres = False
        self._lock = threading.Lock()
        with self._lock:
            self._conn.executescript(_SQLITE_SCHEMA.read_text(encoding="utf-8"))

    @classmethod
    def postgres(cls, dsn: str) -> PasskeyRegistry:
        """The registry in a PostgreSQL database its store migrated (``PostgresStore``)."""
        import psycopg

        made = cls.__new__(cls)
        made._conn = psycopg.connect(dsn, autocommit=True)
        made._postgres = True
        made._lock = threading.Lock()
        return made

    @classmethod
    def for_store(cls, store: Store) -> PasskeyRegistry:
        """The registry in ``store``'s database: its SQLite file or its PostgreSQL database
        (an in-memory store: an in-memory registry)."""
        dsn = getattr(store, "dsn", None)
        if isinstance(dsn, str):
            return cls.postgres(dsn)
        path = getattr(store, "path", None)
        return cls(path if isinstance(path, str) else ":memory:")

    def close(self) -> None:
        self._conn.close()

    # --- the two dialects: "?" placeholders, times as text or timestamptz, ids as text or uuid
    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self._postgres else sql

    def _at(self, at: datetime | None) -> object:
        return at if self._postgres or at is None else at.isoformat()

    def _id(self, value: UUID) -> object:
        return value if self._postgres else str(value)

    def _execute(self, sql: str, params: Sequence[object] = ()) -> Any:
        return self._conn.execute(self._sql(sql), tuple(params))

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        if self._postgres:
            with self._conn.transaction():
                yield
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _integrity_errors(self) -> tuple[type[Exception], ...]:
        if not self._postgres:
            return (sqlite3.IntegrityError,)
        import psycopg

        return (psycopg.IntegrityError,)

    # --- credentials ---------------------------------------------------------------------------
    def add(self, credential: Credential) -> None:
        with self._lock:
            self._execute(
                "INSERT INTO passkey_credentials VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    credential.credential_id,
                    credential.principal,
                    credential.name,
                    credential.public_key,
                    credential.sign_count,
                    self._at(credential.created_at),
                    None,
                    None,
                ),
            )

    def get(self, credential_id: bytes) -> Credential | None:
        with self._lock:
            row = self._execute(
                f"SELECT {_CREDENTIAL} FROM passkey_credentials WHERE credential_id = ?",
                (credential_id,),
            ).fetchone()
        return None if row is None else _credential(row)

    def of(self, principal: str) -> list[Credential]:
        """The principal's passkeys (revoked ones too), oldest first."""
        with self._lock:
            rows = self._execute(
                f"SELECT {_CREDENTIAL} FROM passkey_credentials WHERE principal = ?"
                " ORDER BY created_at, credential_id",
                (principal,),
            ).fetchall()
        return [_credential(r) for r in rows]

    def revoke(self, principal: str, credential_id: bytes, at: datetime) -> bool:
        with self._lock:
            cur = self._execute(
                "UPDATE passkey_credentials SET revoked_at = ? WHERE credential_id = ?"
                " AND principal = ? AND revoked_at IS NULL",
                (self._at(at), credential_id, principal),
            )
        return int(cur.rowcount) == 1

    # --- registration challenges -------------------------------------------------------------
    def put_challenge(self, principal: str, challenge: bytes, expires_at: datetime) -> None:
        """The challenge of the latest registration options given to ``principal``."""
        with self._lock, self._transaction():
            self._execute("DELETE FROM passkey_challenges WHERE principal = ?", (principal,))
            self._execute(
                "INSERT INTO passkey_challenges VALUES (?, ?, ?)",
                (principal, challenge, self._at(expires_at)),
            )

    def take_challenge(self, principal: str, now: datetime) -> bytes | None:
        """The principal's registration challenge, once (deleted as it is read), if it has
        not expired; None otherwise."""
        with self._lock:
            row = self._execute(
                "DELETE FROM passkey_challenges WHERE principal = ? RETURNING challenge,"
                " expires_at",
                (principal,),
            ).fetchone()
        if row is None:
            return None
        expires = _time(row[1])
        return bytes(row[0]) if expires is not None and now < expires else None

    # --- signatures ----------------------------------------------------------------------------
    def record_use(self, used: Credential, new_count: int, signature: StoredSignature) -> bool:
        """Advance the sign counter from the value checked and keep the signature, in one
        transaction; False (nothing written) if either was taken meanwhile or before."""
        with self._lock:
            try:
                with self._transaction():
                    moved = self._execute(
                        "UPDATE passkey_credentials SET sign_count = ?, last_used_at = ?"
                        " WHERE credential_id = ? AND sign_count = ? AND revoked_at IS NULL",
                        (
                            new_count,
                            self._at(signature.at),
                            used.credential_id,
                            used.sign_count,
                        ),
                    ).rowcount
                    if moved != 1:
                        raise _TakenError
                    self._execute(
                        "INSERT INTO passkey_signatures (run_id, approval_id, approver,"
                        " credential_id, binding, challenge, authenticator_data,"
                        " client_data_json, signature, rp_id, origins, at)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            self._id(signature.run_id),
                            self._id(signature.approval_id),
                            signature.approver,
                            signature.credential_id,
                            signature.binding,
                            signature.challenge,
                            signature.authenticator_data,
                            signature.client_data_json,
                            signature.signature,
                            signature.rp_id,
                            signature.origins,
                            self._at(signature.at),
                        ),
                    )
            except _TakenError:
                return False
            except self._integrity_errors():  # this credential already signed this challenge
                return False
        return True

    def signatures(self, run_id: UUID) -> list[StoredSignature]:
        with self._lock:
            rows = self._execute(
                "SELECT run_id, approval_id, approver, credential_id, binding, challenge,"
                " authenticator_data, client_data_json, signature, rp_id, origins, at"
                " FROM passkey_signatures WHERE run_id = ? ORDER BY id",
                (self._id(run_id),),
            ).fetchall()
        out: list[StoredSignature] = []
        for r in rows:
            at = _time(r[11])
            assert at is not None
            out.append(
                StoredSignature(
                    _uuid(r[0]),
                    _uuid(r[1]),
                    str(r[2]),
                    bytes(r[3]),
                    str(r[4]),
                    bytes(r[5]),
                    bytes(r[6]),
                    bytes(r[7]),
                    bytes(r[8]),
                    str(r[9]),
                    str(r[10]),
                    at,
                )
            )
        return out


class _TakenError(Exception):
    """The sign counter moved meanwhile (or the credential was revoked): nothing written."""


_CREDENTIAL = (
    "credential_id, principal, name, public_key, sign_count, created_at, last_used_at, revoked_at"
)


def _credential(row: Sequence[Any]) -> Credential:
    created = _time(row[5])
    assert created is not None
    return Credential(
        credential_id=bytes(row[0]),
        principal=str(row[1]),
        name=str(row[2]),
        public_key=bytes(row[3]),
        sign_count=int(row[4]),
        created_at=created,
        last_used_at=_time(row[6]),
        revoked_at=_time(row[7]),
    )
