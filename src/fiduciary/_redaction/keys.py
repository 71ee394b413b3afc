"""Private: the key-name rule of ``fiduciary.redaction`` (which dict keys and ``key: value``
keys are sensitive: the built-in fragments, the ticker, asset and count exemptions), and the
constants of the redactor's fast paths."""

from __future__ import annotations

import re
import string
from typing import Any, Final

__all__ = [
    "BUILTIN_KEYS",
    "BUILTIN_KEY_TRIGGERS",
    "CACHED_TEXT_LENGTH",
    "CACHE_LIMIT",
    "INERT_CHARS",
    "NOT_SENSITIVE",
    "REST_OF_LINE_FRAGMENTS",
    "SENSITIVE",
    "TOKEN",
    "TOKEN_ONLY",
    "is_exempt",
    "key_parts",
    "normalize_key",
]

# Sensitive key fragments; `_` marks where text may put a separator ("api-key", "API Key").
BUILTIN_KEYS: Final = (
    "cookie",
    "passkey",
    "passphrase",
    "token",
    "api_key",
    "authorization",
    "password",
    "passwd",
    "secret",
    "private_key",
    "session_id",
    "credential",
    "mnemonic",
    "seed_phrase",
    "client_secret",
    "signature",
)
# Substrings of `lowered` text, one of which every built-in fragment above contains.
BUILTIN_KEY_TRIGGERS: Final = (
    "api",
    "authorization",
    "cookie",
    "credential",
    "mnemonic",
    "pass",
    "phrase",
    "private",
    "secret",
    "session",
    "signature",
    "token",
)
TOKEN: Final = "token"
# An unquoted `key: value` with one of these in the key covers the rest of the line.
REST_OF_LINE_FRAGMENTS: Final = ("authorization", "cookie", "mnemonic", "seedphrase", "passphrase")

SEPARATORS: Final = str.maketrans("", "", "-_ .")
KEY_PART_SPLIT: Final = re.compile(r"[-_. ]+")
TOKEN_COUNT_NAME: Final = re.compile(
    r"(?:tokens|tokencount|tokensused|tokenlimit|tokenbudget|tokenstosample|tokensremaining)\Z"
)
# In finance "token" usually means an asset: these names describe one and hide no credential.
ASSET_NAME: Final = re.compile(
    r"tokens?(?:symbol|symbols|address|addresses|name|decimals|in|out|a|b|mint|contract|price"
    r"|prices|amount|balance|balances|pair|list|type)"
)
TICKER: Final = re.compile(r"(?=[^A-Z]*[A-Z])[a-z]{0,3}[A-Z0-9]{2,10}(?:\.[a-z]{1,2})?\Z")

NOT_SENSITIVE: Final = 0
TOKEN_ONLY: Final = 1  # contains "token" and nothing else: the ticker / count rules may apply
SENSITIVE: Final = 2
CACHE_LIMIT: Final = 4096
CACHED_TEXT_LENGTH: Final = 64
# Text made only of these (numbers, amounts, hex addresses and hashes, timestamps) cannot
# contain any trigger, so it needs no scan at all.
INERT_CHARS: Final = string.digits + "abcdefABCDEFxX.,:+-_ TZ"


def normalize_key(name: str) -> str:
    return name.lower().translate(SEPARATORS)


def looks_like_ticker(value: str) -> bool:
    return len(value) <= 12 and TICKER.match(value) is not None


def is_exempt(normalized: str, value: Any) -> bool:
    """Whether a key that is sensitive only because it contains "token" keeps ``value``."""
    if ASSET_NAME.fullmatch(normalized):
        return True  # an asset descriptor (token_symbol, token_in, ...): scrubbed like any value
    if normalized in (TOKEN, "tokens") and isinstance(value, list):
        return all(isinstance(v, str) and looks_like_ticker(v) for v in value)
    if normalized == TOKEN and isinstance(value, str):
        return looks_like_ticker(value)
    if TOKEN_COUNT_NAME.search(normalized) is None:
        return False
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def key_parts(key: str) -> list[str]:
    return [p for p in KEY_PART_SPLIT.split(key.lower()) if p]
