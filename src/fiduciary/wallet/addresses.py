"""Paper addresses: ``0x`` and 40 hex digits, derived from a principal's id."""

from __future__ import annotations

import hashlib
import re

from .errors import WalletError

__all__ = ["ADDRESS", "address_of", "normalize_address"]

ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")


def address_of(principal: str) -> str:
    """The paper address of a principal: stable, and different for every principal."""
    digest = hashlib.sha256(f"fiduciary/paper-wallet/{principal}".encode()).hexdigest()
    return "0x" + digest[:40]


def normalize_address(text: str) -> str:
    """An address in its one stored form (lower case), or ``WalletError`` if it is not one."""
    value = text.strip()
    if not ADDRESS.fullmatch(value):
        raise WalletError("invalid_address", f"{text!r} is not an address (0x and 40 hex digits)")
    return value.lower()
