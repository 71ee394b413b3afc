"""Private: the text rules of ``fiduciary.redaction``: the patterns (PEM blocks, auth schemes,
signed URLs, ``key: value`` pairs, well-known key shapes) and their triggers, and the helpers
that apply them. Whole-text scans only use literal-prefixed patterns or run on a lower-cased
copy (case-insensitive regexes are an order of magnitude slower in ``re``).
"""

from __future__ import annotations

import base64
import binascii
import re
import string
from collections.abc import Callable, Iterable
from typing import Final

__all__ = [
    "BARE_INT",
    "JSON_SCALAR",
    "KEY_CHARS",
    "KV_TAIL",
    "MAX_KEY_AFFIX",
    "MAX_TEXT_PASSES",
    "PEM_BLOCK",
    "QUOTED_KEY_STOP",
    "REDACTED",
    "REST_OF_LINE",
    "SAS_PARAMS",
    "SHAPES",
    "SHAPE_TRIGGERS",
    "URL_ALWAYS_PARAMS",
    "URL_BODY",
    "URL_SCHEME_BEFORE",
    "aligned_lower",
    "any_present",
    "auth_schemes",
    "minimal",
    "per_segment",
    "replace_keeping_scheme",
    "replacer",
]

REDACTED: Final = "[REDACTED]"
"""What every secret is replaced by."""

PEM_BLOCK: Final = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s\\:,\-]*)",
    re.DOTALL,
)

URL_SCHEME_BEFORE: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{0,30}\Z")
URL_BODY: Final = re.compile(r"[^\s\"'<>\\`]+")
URL_ALWAYS_PARAMS: Final = frozenset({"sig", "policy", "key-pair-id"})
SAS_PARAMS: Final = frozenset({"se", "sp", "sv", "sr", "st", "spr", "srt", "ss"})

AUTH_SCHEME_LOWER: Final = re.compile(r"(?:bearer|basic)[ \t]+")  # run on the lowered text
AUTH_CREDENTIAL: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
SCHEME_PREFIX: Final = re.compile(r"(?i:bearer|basic|token|digest)[ \t]+(?=\S)")

KEY_CHARS: Final = frozenset(string.ascii_letters + string.digits + "_.-")
QUOTED_KEY_STOP: Final = frozenset("\"'\\\r\n")
MAX_KEY_AFFIX: Final = 40
KV_TAIL: Final = re.compile(
    r"(?P<sep>[ \t]*[:=][ \t]*)"
    r"(?:(?P<dq>\"(?:[^\"\\\r\n]|\\.)*\")"
    r"|(?P<sq>'(?:[^'\\\r\n]|\\.)*')"
    r"|(?P<eq>\\{1,3}[\"'])(?P<eqbody>.*?)(?P=eq)"
    r"|(?P<bare>(?:(?i:bearer|basic|token|digest)[ \t]+)?"
    r"(?:\[REDACTED\]|[^\s\"'\\,;&<>{}\[\]()])+))"
)
REST_OF_LINE: Final = re.compile(r"(?:[^\r\n\"\\]|\\(?![nr\"]))+")
BARE_INT: Final = re.compile(r"-?\d+\Z")
JSON_SCALAR: Final = re.compile(r"(?:-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null)\Z")

# (case-sensitive triggers, pattern). Each pattern starts with its literal so `re` can skip
# ahead fast; the boundary lookbehind therefore comes after the literal.
SHAPES: Final[tuple[tuple[tuple[str, ...], re.Pattern[str]], ...]] = (
    (("sk-",), re.compile(r"sk-(?<![A-Za-z0-9_\-]sk-)[A-Za-z0-9_\-]{17,}")),
    (("sk_",), re.compile(r"sk_(?<![A-Za-z0-9_]sk_)(?:live|test)_[A-Za-z0-9]{10,}")),
    (("rk_",), re.compile(r"rk_(?<![A-Za-z0-9_]rk_)(?:live|test)_[A-Za-z0-9]{10,}")),
    (("whsec_",), re.compile(r"whsec_(?<![A-Za-z0-9_]whsec_)[A-Za-z0-9+/=]{16,}")),
    (
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        re.compile(r"gh[pousr]_(?<![A-Za-z0-9_]gh[pousr]_)[A-Za-z0-9]{20,}"),
    ),
    (("github_pat_",), re.compile(r"github_pat_(?<![A-Za-z0-9_]github_pat_)[A-Za-z0-9_]{20,}")),
    (
        ("AKIA", "ASIA"),
        re.compile(r"A(?:KIA|SIA)(?<![A-Za-z0-9]A[KS]IA)[0-9A-Z]{16}(?![0-9A-Za-z])"),
    ),
    (("AIza",), re.compile(r"AIza(?<![A-Za-z0-9_\-]AIza)[0-9A-Za-z_\-]{35}")),
    (("xox",), re.compile(r"xox[baprs]-(?<![A-Za-z0-9]xox[baprs]-)[A-Za-z0-9\-]{10,}")),
    (
        ("eyJ",),
        re.compile(
            r"eyJ(?<![A-Za-z0-9_\-]eyJ)[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"
        ),
    ),
)
SHAPE_TRIGGERS: Final = tuple(t for triggers, _ in SHAPES for t in triggers)

MAX_TEXT_PASSES: Final = 4


def aligned_lower(text: str) -> str:
    """``text.lower()``, keeping indices aligned with ``text`` (a few characters grow)."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(low if len(low := c.lower()) == 1 else c for c in text)


def minimal(triggers: Iterable[str]) -> tuple[str, ...]:
    """The triggers that do not contain another one (enough to decide "none present")."""
    unique = set(triggers)
    return tuple(sorted(t for t in unique if not any(o != t and o in t for o in unique)))


def any_present(triggers: Iterable[str], haystack: str) -> bool:
    return any(t in haystack for t in triggers)


def replace_keeping_scheme(value: str) -> str:
    prefix = SCHEME_PREFIX.match(value)
    return (prefix.group(0) if prefix else "") + REDACTED


def is_basic_credential(cred: str) -> bool:
    try:
        decoded = base64.b64decode(cred, validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def is_bearer_credential(cred: str) -> bool:
    """Long, or not a plain word: "bearer bonds" and "Bearer instrument" are prose."""
    return len(cred) >= 20 or (len(cred) >= 8 and not cred.isalpha())


def is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def auth_schemes(text: str, lowered: str) -> str:
    out: list[str] = []
    pos = 0
    for scheme in AUTH_SCHEME_LOWER.finditer(lowered):
        start = scheme.start()
        if start < pos or (start > 0 and is_word_char(text[start - 1])):
            continue
        cred = AUTH_CREDENTIAL.match(text, scheme.end())
        if cred is None:
            continue
        value = cred.group(0)
        basic = lowered.startswith("basic", start)
        if basic and not is_basic_credential(value):
            continue
        if not basic and not is_bearer_credential(value):
            continue
        out.append(text[pos : cred.start()])
        out.append(REDACTED)
        pos = cred.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def replacer(secret: str) -> Callable[[str], str]:
    def replace(segment: str) -> str:
        return segment.replace(secret, REDACTED)

    return replace


def per_segment(text: str, fn: Callable[[str], str]) -> str:
    """Apply ``fn`` to the text between existing ``REDACTED`` markers, never across them."""
    if REDACTED not in text:
        return fn(text)
    return REDACTED.join(fn(part) for part in text.split(REDACTED))
