"""The wallet's contacts: names a principal saved for addresses (the ``wallet_contacts`` table)."""

from __future__ import annotations

import re
from datetime import datetime

from .addresses import normalize_address
from .errors import WalletError
from .ledger import Ledger, timestamp
from .views import Contact

__all__ = ["ContactBook"]

_CONTACT_NAME = re.compile(r"[\w][\w .'-]{0,39}")


class ContactBook:
    """Each principal's contacts, in the wallet's ledger database."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def save(self, principal: str, name: str, address: str, *, key: str, when: datetime) -> Contact:
        """Save a name for an address (once per key; a name keeps its first address)."""
        clean = " ".join(name.split())
        if not _CONTACT_NAME.fullmatch(clean) or clean.lower().startswith("0x"):
            raise WalletError(
                "invalid_contact", "a contact name is 1-40 letters, digits, spaces, . ' or -"
            )
        to = normalize_address(address)
        with self.ledger.batch() as batch:
            row = batch.one(
                "SELECT name, address, saved_at, idempotency_key FROM wallet_contacts "
                "WHERE principal = ? AND (name_key = ? OR idempotency_key = ?)",
                (principal, clean.casefold(), key),
            )
            if row is not None:
                if row[1] != to or (row[3] == key and row[0].casefold() != clean.casefold()):
                    raise WalletError(
                        "contact_exists",
                        f"{row[0]} is already saved with the address {row[1]}",
                    )
                return Contact(name=row[0], address=row[1], saved_at=datetime.fromisoformat(row[2]))
            batch.execute(
                "INSERT INTO wallet_contacts (principal, name_key, name, address, saved_at, "
                "idempotency_key) VALUES (?, ?, ?, ?, ?, ?)",
                (principal, clean.casefold(), clean, to, timestamp(when), key),
            )
        return Contact(name=clean, address=to, saved_at=when)

    def of(self, principal: str) -> list[Contact]:
        rows = self.ledger.read().query(
            "SELECT name, address, saved_at FROM wallet_contacts WHERE principal = ? "
            "ORDER BY name_key",
            (principal,),
        )
        return [Contact(name=n, address=a, saved_at=datetime.fromisoformat(s)) for n, a, s in rows]

    def named(self, principal: str, name: str) -> Contact | None:
        wanted = " ".join(name.split()).casefold()
        return next((c for c in self.of(principal) if c.name.casefold() == wanted), None)

    def name_at(self, principal: str, address: str) -> str | None:
        return next((c.name for c in self.of(principal) if c.address == address.lower()), None)
