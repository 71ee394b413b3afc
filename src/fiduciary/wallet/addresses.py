"""Paper addresses: ``0x`` and 40 hex digits, derived from a principal's id; and the rule that a
recipient (an address or a contact's name) is plain text a person can read as it is."""

from __future__ import annotations

import hashlib
import re

from ..display import show_text
from .errors import WalletError

__all__ = ["ADDRESS", "address_of", "normalize_address", "plain_recipient"]

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


def plain_recipient(text: str) -> str:
    """``text`` if a person reads it as it is, else ``ValueError`` (a validation error for the
    model): no invisible, direction-changing or control characters, no word mixing scripts or
    drawn like another. A card would show and flag them; money is not sent to such a name."""
    shown = show_text(text)
    if shown.flags:
        raise ValueError(
            f"a recipient must be plain text a person can read as it is, and {shown.text!r} "
            f"holds {shown.warning}: ask the person to type it again"
        )
    return text
