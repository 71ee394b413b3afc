"""Which chat account acts for which principal: one-time link codes and the links they make.

A chat channel binds a chat to a principal (``--allow CHAT_ID=PRINCIPAL``), but a chat is not
a person: in a group anyone who is, or later becomes, a member writes in it. So each principal
is also bound to one account of the chat network (a Telegram user id; such ids are the same
for every bot), and only that account's messages and presses count for the principal.

The binding is made once, with a code: ``issue`` (the CLI's ``fiduciary telegram link``) makes
a short-lived, single-use code and keeps only its SHA-256 hash; the person sends it to the bot
from their own account and ``redeem`` binds that account to the code's principal. A code is
refused when unknown, used or expired; a successful redeem marks it used in the same statement
that checks it was not, so two redeems of one code cannot both succeed. Linking again (a new
code) replaces the principal's account.

The tables, ``fiduciary_channel_links`` and ``fiduciary_channel_link_codes``, are created
with the channel's others (``channels.records``).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from ..exceptions import ConfigurationError
from .records import _Sql, open_records

__all__ = ["CODE_TTL", "LinkRefused", "Linked", "PersonLinks"]

CODE_TTL = timedelta(minutes=10)
# Crockford's base32 (no I, L, O, U): 12 characters are 60 random bits, typed as XXXX-XXXX-XXXX
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_CODE_LENGTH = 12


@dataclass(frozen=True, slots=True)
class Linked:
    principal: str
    user_id: int


@dataclass(frozen=True, slots=True)
class LinkRefused:
    reason: Literal["unknown", "used", "expired"]


def _normal(code: str) -> str:
    return "".join(code.split()).replace("-", "").upper()


def _hash(code: str) -> str:
    return hashlib.sha256(_normal(code).encode()).hexdigest()


class PersonLinks:
    """The links of one network (``telegram``); see the module docstring."""

    def __init__(self, sql: _Sql, network: str = "telegram") -> None:
        self._sql = sql
        self.network = network

    @classmethod
    async def open(
        cls, network: str = "telegram", *, sqlite_path: str | None = None, dsn: str | None = None
    ) -> PersonLinks:
        return cls(await open_records(sqlite_path=sqlite_path, dsn=dsn), network)

    async def close(self) -> None:
        await self._sql.close()

    async def issue(self, principal: str, *, now: datetime, ttl: timedelta = CODE_TTL) -> str:
        """A new code for ``principal``, valid for ``ttl``; only its hash is kept."""
        principal = principal.strip()
        if not principal:
            raise ConfigurationError("a link code needs a principal")
        if ttl <= timedelta(0):
            raise ConfigurationError("a link code must be valid for some time")
        raw = "".join(secrets.choice(_ALPHABET) for _ in range(_CODE_LENGTH))
        await self._sql.run(
            "INSERT INTO fiduciary_channel_link_codes (code_hash, network, principal, "
            "expires_at, used_at) VALUES (?, ?, ?, ?, NULL)",
            (_hash(raw), self.network, principal, (now + ttl).isoformat()),
        )
        return "-".join(raw[i : i + 4] for i in range(0, _CODE_LENGTH, 4))

    async def redeem(self, code: str, user_id: int, *, now: datetime) -> Linked | LinkRefused:
        """Bind ``user_id`` to the code's principal, once; or say why not."""
        digest = _hash(code)
        rows = await self._sql.run(
            "SELECT principal, expires_at, used_at FROM fiduciary_channel_link_codes "
            "WHERE code_hash = ? AND network = ?",
            (digest, self.network),
        )
        if not rows:
            return LinkRefused("unknown")
        principal, expires_at, used_at = str(rows[0][0]), str(rows[0][1]), rows[0][2]
        if used_at is not None:
            return LinkRefused("used")
        if datetime.fromisoformat(expires_at) <= now:
            return LinkRefused("expired")
        taken = await self._sql.run(
            "UPDATE fiduciary_channel_link_codes SET used_at = ? "
            "WHERE code_hash = ? AND network = ? AND used_at IS NULL RETURNING principal",
            (now.isoformat(), digest, self.network),
        )
        if not taken:  # redeemed by someone else meanwhile
            return LinkRefused("used")
        await self._sql.run(
            "INSERT INTO fiduciary_channel_links (network, principal, user_id, at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (network, principal) DO UPDATE "
            "SET user_id = excluded.user_id, at = excluded.at",
            (self.network, principal, user_id, now.isoformat()),
        )
        return Linked(principal, user_id)

    async def burn(self, code: str, *, now: datetime) -> None:
        """Make ``code`` unusable (it was shown where others could read it)."""
        await self._sql.run(
            "UPDATE fiduciary_channel_link_codes SET used_at = ? "
            "WHERE code_hash = ? AND network = ? AND used_at IS NULL",
            (now.isoformat(), _hash(code), self.network),
        )

    async def user_of(self, principal: str) -> int | None:
        """The account linked to act for ``principal`` (None: none yet)."""
        rows = await self._sql.run(
            "SELECT user_id FROM fiduciary_channel_links WHERE network = ? AND principal = ?",
            (self.network, principal),
        )
        return int(rows[0][0]) if rows else None
