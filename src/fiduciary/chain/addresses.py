"""Recipients on a chain: a 0x address of 40 hex digits whose EIP-55 checksum holds when it is
written in mixed case, never the zero address (the funds are destroyed) and never the token's
own contract (tokens sent there are lost). Used by the wallet before signing and by the
guards before a person is asked."""

from __future__ import annotations

from eth_utils.address import is_checksum_address, is_hex_address, to_checksum_address

from .errors import ChainError

__all__ = ["checked_recipient"]


def checked_recipient(to: str, *, token: str | None = None, token_symbol: str = "token") -> str:
    """``to`` checksummed (EIP-55), or a ``ChainError`` saying what is wrong with it."""
    text = to.strip()
    if not is_hex_address(text):
        raise ChainError("bad_address", "the recipient must be a 0x address of 40 hex digits")
    mixed = text[2:] != text[2:].lower() and text[2:] != text[2:].upper()
    if mixed and not is_checksum_address(text):
        raise ChainError(
            "bad_checksum",
            f"{text} fails its EIP-55 checksum: a letter was mistyped; ask the person again",
        )
    if int(text, 16) == 0:
        raise ChainError("zero_address", "sending to the zero address destroys the funds")
    if token is not None and text.lower() == token.lower():
        raise ChainError(
            "token_contract_recipient",
            f"{text} is the {token_symbol} contract itself: tokens sent there are lost",
        )
    return str(to_checksum_address(text))
