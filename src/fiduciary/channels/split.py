"""Long replies cut into messages a chat accepts, at sensible boundaries.

Telegram refuses a message over 4096 characters, counted in UTF-16 code units (what its
entity offsets use), so an emoji counts twice. A long text is cut at the last paragraph break
(a blank line) that fits, else the last line break, else the last sentence end, else the last
space, else hard at the limit (never inside a surrogate pair: a Python ``str`` holds code
points). Whitespace at a cut is dropped; the pieces, joined, hold every other character.
"""

from __future__ import annotations

__all__ = ["TELEGRAM_LIMIT", "split_message", "utf16_length"]

TELEGRAM_LIMIT = 4096

_BOUNDARIES = ("\n\n", "\n", ". ", "! ", "? ", " ")


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _fits(text: str, limit: int) -> int:
    """How many code points of ``text`` fit in ``limit`` UTF-16 code units."""
    if utf16_length(text) <= limit:
        return len(text)
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return index
    return len(text)


def split_message(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """``text`` as pieces of at most ``limit`` UTF-16 units each; ``[]`` for blank text."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    pieces: list[str] = []
    rest = text.strip()
    while rest:
        room = _fits(rest, limit)
        if room == len(rest):
            pieces.append(rest)
            break
        window = rest[:room]
        cut = room
        for boundary in _BOUNDARIES:
            at = window.rfind(boundary)
            if at > 0:
                # keep the sentence's punctuation with it; drop the whitespace
                cut = at + (1 if boundary.strip() else 0)
                break
        piece = rest[:cut].rstrip()
        if not piece:  # only whitespace before the boundary: cut hard
            piece, cut = window, room
        pieces.append(piece)
        rest = rest[cut:].lstrip()
    return pieces
