"""How a value is shown to the person who approves it: what they see is what runs.

An approval binds the exact arguments (their digest), but the person decides on what a card
*shows*. A terminal or a browser draws some characters as nothing (zero-width spaces, joiners),
reorders text around others (bidi overrides and isolates: ``alice\\u202eecila-evil`` is drawn
``alicelive-alice``), and some letters of one script are drawn exactly like another's (Cyrillic
``а`` and Latin ``a``). So every card (the terminal's, the web console's, any later channel's)
shows values through these rules, never as raw strings:

- every character that is invisible or changes the direction of text (categories Cc, Cf, Zl,
  Zp, Co, Cs, Cn; spaces other than U+0020; blank letters and variation selectors) is shown as a
  visible escape ``⟨U+202E⟩`` and flagged (``bidi``, ``invisible`` or ``control``); ``⟨`` itself
  is escaped too, so a literal ``⟨U+202E⟩`` in the text cannot pass for an escape;
- a word mixing letters of Latin, Cyrillic, Greek, Armenian or Cherokee is flagged
  ``mixed_script``; a letter that is a compatibility form of another (fullwidth, mathematical
  bold ``𝐚``) is flagged ``lookalike``;
- an amount is a plain decimal (``150``, never ``1.5E+2``); a USD amount has at least two
  decimals and is never rounded; a string argument that is a number in exponent notation is
  shown in full and flagged ``exponent``, and such a number inside text is flagged with its
  value.

A balance is read, not approved, so it is rounded for reading (its exact amount stays one hover
away): ``show_balance`` writes an amount to the decimals that are worth at least a cent at its
price (``150.000000000`` SUI is ``150``, ``0.123456789`` BTC is ``0.1234568``), trailing zeros
dropped except at two decimals (``1,000.00`` USDC); with no price it drops trailing zeros and
rounds nothing. ``show_usd_cents`` writes a USD value to the cent: ``$1,234.57``.

The web console applies the same rules in its JavaScript (``server/static/app.js``,
``shown``); ``docs/security.md`` states them for people.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import Any, Literal

__all__ = [
    "Flag",
    "FlagKind",
    "Shown",
    "card_flags",
    "hidden_characters",
    "show_amount",
    "show_balance",
    "show_text",
    "show_usd",
    "show_usd_cents",
    "show_value",
    "worth_decimals",
]

FlagKind = Literal["bidi", "invisible", "control", "mixed_script", "lookalike", "exponent"]

# characters that change the direction of the text around them
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# letters and marks that are drawn as nothing (categories Lo / Mn / So, so named one by one)
_BLANK = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180f\u2800\u3164\uffa0"
    + "".join(chr(c) for c in range(0xFE00, 0xFE10))
    + "".join(chr(c) for c in range(0xE0100, 0xE01F0))
)
_UNSEEN_CATEGORIES = frozenset({"Cf", "Co", "Cs", "Cn"})
_CONTROL_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})
_ESCAPE_OPEN = "\u27e8"  # ⟨: escaped too, so the text cannot fake an escape
_CONFUSABLE_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE")
_MAX_EXPONENT = 60  # beyond this an amount is not written out digit by digit
_MAX_BALANCE_DECIMALS = 18  # finer than any asset's smallest unit
_CENT = Decimal("0.01")
# a decimal number in exponent notation, as pydantic writes Decimal("1.5E+2")
_EXPONENT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)[eE][+-]?\d{1,6}")
_EXPONENT_IN_TEXT = re.compile(r"(?<![\w.])(?:\d+\.?\d*|\.\d+)[eE][+-]?\d{1,6}(?!\w|\.\d)")


@dataclass(frozen=True, slots=True)
class Flag:
    """Something the person must notice about a shown value."""

    kind: FlagKind
    detail: str  # for a person: "direction-changing character U+202E"


@dataclass(frozen=True, slots=True)
class Shown:
    """A value as it may be shown: ``text`` draws exactly what the value holds."""

    text: str
    flags: tuple[Flag, ...] = ()

    @property
    def warning(self) -> str | None:
        """The flags in one line, or None when there are none."""
        return "; ".join(f.detail for f in self.flags) or None


def _kind(char: str) -> FlagKind | None:
    if char in _BIDI:
        return "bidi"
    category = unicodedata.category(char)
    if category in _CONTROL_CATEGORIES:
        return "control"
    if category in _UNSEEN_CATEGORIES or char in _BLANK:
        return "invisible"
    if category == "Zs" and char != " ":
        return "invisible"
    return None


_WHAT: dict[FlagKind, str] = {
    "bidi": "direction-changing character",
    "invisible": "invisible character",
    "control": "control character or line break",
}


def hidden_characters(text: str) -> list[str]:
    """The code points (``U+202E``) in ``text`` that a screen does not show as they are."""
    found: dict[str, None] = {}
    for char in text:
        if _kind(char) is not None:
            found.setdefault(f"U+{ord(char):04X}")
    return list(found)


def _script(char: str) -> str | None:
    name = unicodedata.name(char, "")
    first = name.split(" ", 1)[0]
    return first if first in _CONFUSABLE_SCRIPTS else None


def _lookalike(char: str) -> bool:
    return char.isalpha() and char not in _BLANK and unicodedata.normalize("NFKC", char) != char


def _words(text: str) -> list[str]:
    words: list[str] = []
    current: list[str] = []
    for char in text:
        if char.isalnum() or unicodedata.category(char).startswith("M"):
            current.append(char)
        elif current:
            words.append("".join(current))
            current = []
    if current:
        words.append("".join(current))
    return words


def _escape(char: str) -> str:
    if _kind(char) is None and char != _ESCAPE_OPEN:
        return char
    return f"{_ESCAPE_OPEN}U+{ord(char):04X}\u27e9"


def _escaped(text: str) -> str:
    return "".join(map(_escape, text))


def show_text(text: str) -> Shown:
    """``text`` with every invisible or direction-changing character made visible, and its flags."""
    seen: dict[FlagKind, dict[str, None]] = {}
    for char in text:
        kind = _kind(char)
        if kind is not None:
            seen.setdefault(kind, {})[f"U+{ord(char):04X}"] = None
    flags = [
        Flag(kind, f"{_WHAT[kind]}{'s' if len(codes) > 1 else ''} {', '.join(codes)}")
        for kind, codes in seen.items()
    ]
    for number in dict.fromkeys(m.group() for m in _EXPONENT_IN_TEXT.finditer(text)):
        plain = show_amount(Decimal(number))
        flags.append(Flag("exponent", f"{number} is {plain} written in exponent notation"))
    for word in dict.fromkeys(_words(text)):
        shown = _escaped(word)
        scripts = sorted({s for s in map(_script, word) if s is not None})
        if len(scripts) > 1:
            mixes = " and ".join(s.title() for s in scripts)
            flags.append(Flag("mixed_script", f"{shown} mixes {mixes} letters"))
        if any(_lookalike(c) for c in word):
            flags.append(Flag("lookalike", f"{shown} has letters drawn like others"))
    return Shown(_escaped(text), tuple(flags))


def show_amount(value: Decimal) -> str:
    """A plain decimal, never exponent notation: ``Decimal("1.5E+2")`` is ``150``."""
    if not value.is_finite():
        return str(value)
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    if abs(value.adjusted()) > _MAX_EXPONENT or exponent < -_MAX_EXPONENT:
        return f"(a number of about 10^{value.adjusted()}, too long to write out)"
    return format(value, "f")


def show_usd(value: Decimal | None) -> str:
    """``$1,234.50``: grouped, at least two decimals, never rounded; ``unknown`` for None."""
    if value is None:
        return "unknown"
    plain = show_amount(value)
    if not value.is_finite() or plain.startswith("("):
        return plain
    sign, digits = ("-", plain[1:]) if plain.startswith("-") else ("", plain)
    whole, _, fraction = digits.partition(".")
    return f"{sign}${int(whole):,}.{fraction.ljust(2, '0')}"


def _grouped(plain: str) -> str:
    """``-1234567.5`` as ``-1,234,567.5`` (a plain decimal from ``show_amount``)."""
    sign, digits = ("-", plain[1:]) if plain.startswith("-") else ("", plain)
    whole, point, fraction = digits.partition(".")
    return f"{sign}{int(whole):,}{point}{fraction}"


def _too_long(value: Decimal) -> bool:
    return not value.is_finite() or show_amount(value).startswith("(")


def worth_decimals(amount: Decimal, usd: Decimal | None) -> int | None:
    """How many decimals of ``amount`` are worth a cent or more when it is worth ``usd``: 2 for
    a dollar coin, 3 at $3.50, 7 at $95,000; None when there is no price to tell."""
    if usd is None or not amount or not usd or _too_long(amount) or _too_long(usd):
        return None
    with localcontext() as ctx:
        ctx.prec = 4 * _MAX_EXPONENT
        worth, held = abs(usd) * 100, abs(amount)
        for decimals in range(_MAX_BALANCE_DECIMALS + 1):
            if worth <= held.scaleb(decimals):  # a unit of the last decimal is worth <= 1 cent
                return decimals
    return _MAX_BALANCE_DECIMALS


def show_balance(amount: Decimal, usd: Decimal | None = None) -> str:
    """A balance for reading: ``1,000.00`` USDC, ``150`` SUI, ``0.5`` ETH (see the module's
    rules). A non-zero amount that would round to zero is written in full."""
    if _too_long(amount):
        return show_amount(amount)
    decimals = worth_decimals(amount, usd)
    value = amount
    if decimals is not None:
        with localcontext() as ctx:
            ctx.prec = 4 * _MAX_EXPONENT
            rounded = amount.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_EVEN)
        if rounded or not amount:
            value = rounded
    plain = show_amount(value)
    if "." in plain and (decimals != 2 or value is amount):
        plain = plain.rstrip("0").rstrip(".")
    return _grouped(plain)


def show_usd_cents(value: Decimal | None) -> str:
    """A USD value to the cent, grouped: ``$1,234.57``; ``unknown`` for None."""
    if value is None:
        return "unknown"
    if _too_long(value):
        return show_amount(value)
    with localcontext() as ctx:
        ctx.prec = 4 * _MAX_EXPONENT
        cents = value.quantize(_CENT, rounding=ROUND_HALF_EVEN)
    plain = show_amount(abs(cents))
    return f"{'-' if cents < 0 else ''}${_grouped(plain)}"


def card_flags(description: str, args: Shown) -> list[Flag]:
    """The flags of a card: its arguments', then its description's not already said."""
    said = " ".join(f.detail for f in args.flags)
    extra = [f for f in show_text(description).flags if f.detail not in said]
    return [*args.flags, *(Flag(f.kind, f"action: {f.detail}") for f in extra)]


def _plain(value: Any, flags: list[Flag], path: str) -> Any:
    if isinstance(value, str):
        if _EXPONENT.fullmatch(value.strip()):
            detail = f"{path}{value.strip()} is a number in exponent notation: shown in full"
            flags.append(Flag("exponent", detail))
            return show_amount(Decimal(value.strip()))
        shown = show_text(value)
        flags.extend(Flag(f.kind, path + f.detail) for f in shown.flags)
        return shown.text
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, Decimal | float):
        return show_amount(Decimal(str(value)))  # as its JSON string would be, but in full
    if isinstance(value, Mapping):
        # a flag names the top-level field it was found in: "to: direction-changing ..."
        return {
            _plain(str(k), flags, path): _plain(v, flags, path or _escaped(str(k)) + ": ")
            for k, v in value.items()
        }
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [_plain(v, flags, path) for v in value]
    return _plain(str(value), flags, path)


def show_value(value: Any) -> Shown:
    """A JSON-like value (what a pending action's ``input`` holds) as shown JSON text: strings
    through ``show_text``, numbers written in exponent notation in full."""
    flags: list[Flag] = []
    plain = _plain(value, flags, "")
    text = plain if isinstance(plain, str) else json.dumps(plain, ensure_ascii=False)
    return Shown(text, tuple(flags))
