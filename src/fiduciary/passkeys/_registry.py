"""Private: the registered passkeys and the signatures made with them, in one SQLite file.

A credential belongs to one principal (name, created, last used, revoked). A signature row
keeps the assertion's exact bytes (authenticator data, client data JSON, signature), the
binding that was signed (canonical JSON) and the relying party it was checked against, so
that ``verify_run`` can check it again offline, years later. Using a credential is one
transaction: its sign counter moves only from the value it was checked against, and a
(credential, challenge) pair is stored once (a replayed assertion is refused).
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from uuid import UUID

__all__ = ["Credential", "PasskeyRegistry", "StoredSignature"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS credentials (
    credential_id BLOB PRIMARY KEY,
    principal     TEXT NOT NULL,
    name          TEXT NOT NULL,
    public_key    BLOB NOT NULL,
    sign_count    INTEGER NOT NULL,
    created_at    TEXT NOT NULL,
    last_used_at  TEXT,
    revoked_at    TEXT
);
CREATE TABLE IF NOT EXISTS signatures (
    id                 INTEGER PRIMARY KEY,
    run_id             TEXT NOT NULL,
    approval_id        TEXT NOT NULL,
    approver           TEXT NOT NULL,
    credential_id      BLOB NOT NULL REFERENCES credentials (credential_id),
    binding            TEXT NOT NULL,
    challenge          BLOB NOT NULL,
    authenticator_data BLOB NOT NULL,
    client_data_json   BLOB NOT NULL,
    signature          BLOB NOT NULL,
    rp_id              TEXT NOT NULL,
    origins            TEXT NOT NULL,
    at                 TEXT NOT NULL,
    UNIQUE (credential_id, challenge)
);
CREATE INDEX IF NOT EXISTS signatures_by_run ON signatures (run_id, id);
"""


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


def _time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


class PasskeyRegistry:
    """Credentials and signatures in a SQLite file (``":memory:"`` for tests)."""

    def __init__(self, path: Path | str) -> None:
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._conn.executescript(_SCHEMA)

    def close(self) -> None:
        self._conn.close()

    def add(self, credential: Credential) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO credentials VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    credential.credential_id,
                    credential.principal,
                    credential.name,
                    credential.public_key,
                    credential.sign_count,
                    credential.created_at.isoformat(),
                    None,
                    None,
                ),
            )

    def get(self, credential_id: bytes) -> Credential | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM credentials WHERE credential_id = ?", (credential_id,)
            ).fetchone()
        return None if row is None else _credential(row)

    def of(self, principal: str) -> list[Credential]:
        """The principal's passkeys (revoked ones too), oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM credentials WHERE principal = ? ORDER BY created_at, rowid",
                (principal,),
            ).fetchall()
        return [_credential(r) for r in rows]

    def revoke(self, principal: str, credential_id: bytes, at: datetime) -> bool:
        with self._lock:
            cur = self._conn.execute(
                "UPDATE credentials SET revoked_at = ? WHERE credential_id = ? AND principal = ?"
                " AND revoked_at IS NULL",
                (at.isoformat(), credential_id, principal),
            )
        return cur.rowcount == 1

    def record_use(self, used: Credential, new_count: int, signature: StoredSignature) -> bool:
        """Advance the sign counter from the value checked and keep the signature, in one
        transaction; False (nothing written) if either was taken meanwhile or before."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                moved = conn.execute(
                    "UPDATE credentials SET sign_count = ?, last_used_at = ?"
                    " WHERE credential_id = ? AND sign_count = ? AND revoked_at IS NULL",
                    (new_count, signature.at.isoformat(), used.credential_id, used.sign_count),
                ).rowcount
                if moved != 1:
                    conn.execute("ROLLBACK")
                    return False
                conn.execute(
                    "INSERT INTO signatures (run_id, approval_id, approver, credential_id,"
                    " binding, challenge, authenticator_data, client_data_json, signature,"
                    " rp_id, origins, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        str(signature.run_id),
                        str(signature.approval_id),
                        signature.approver,
                        signature.credential_id,
                        signature.binding,
                        signature.challenge,
                        signature.authenticator_data,
                        signature.client_data_json,
                        signature.signature,
                        signature.rp_id,
                        signature.origins,
                        signature.at.isoformat(),
                    ),
                )
            except sqlite3.IntegrityError:  # this credential already signed this challenge
                conn.execute("ROLLBACK")
                return False
            conn.execute("COMMIT")
            return True

    def signatures(self, run_id: UUID) -> list[StoredSignature]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT run_id, approval_id, approver, credential_id, binding, challenge,"
                " authenticator_data, client_data_json, signature, rp_id, origins, at"
                " FROM signatures WHERE run_id = ? ORDER BY id",
                (str(run_id),),
            ).fetchall()
        return [
            StoredSignature(
                UUID(r[0]),
                UUID(r[1]),
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                r[7],
                r[8],
                r[9],
                r[10],
                datetime.fromisoformat(r[11]),
            )
            for r in rows
        ]


def _credential(row: tuple[object, ...]) -> Credential:
    created = _time(str(row[5]))
    assert created is not None
    return Credential(
        credential_id=bytes(row[0]),  # type: ignore[call-overload]
        principal=str(row[1]),
        name=str(row[2]),
        public_key=bytes(row[3]),  # type: ignore[call-overload]
        sign_count=int(row[4]),  # type: ignore[call-overload]
        created_at=created,
        last_used_at=_time(row[6] if isinstance(row[6], str) else None),
        revoked_at=_time(row[7] if isinstance(row[7], str) else None),
    )
