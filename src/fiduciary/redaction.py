"""Secret redaction: the one place that decides what a secret looks like and scrubs it.

Anything that leaves the host's trust boundary -- a tool result on its way to a model, an event
payload, an audit row, a log line -- goes through :func:`redact` (JSON-like data) or
:func:`redact_text` (free text) first. This module owns the rules below; nothing else in
fiduciary should grow its own ad-hoc masking.

Structured data (:func:`redact`)
    Returns a deep copy; the input is never mutated. Pydantic models are dumped with
    ``model_dump(mode="json")`` first, dataclasses with :func:`dataclasses.asdict`; other
    mappings become ``dict``, sets and other sequences ``list`` (tuples stay tuples), ``bytes``
    are decoded (UTF-8, replacing errors) and scrubbed, and any other non-JSON object is turned
    into ``str`` and scrubbed (dates, UUIDs and enum members pass through unchanged). Numbers,
    booleans and ``None`` pass through.

    The value of a dict key is replaced by ``REDACTED`` -- whatever its type, nested dicts and
    lists included -- when the key's *normalized* name (lower-cased, with ``-``, ``_``, spaces
    and dots removed) contains one of: ``cookie``, ``passkey``, ``passphrase``, ``token``,
    ``apikey``, ``authorization``, ``password``, ``passwd``, ``secret``, ``privatekey``,
    ``sessionid``, ``credential``, ``mnemonic``, ``seedphrase``, ``clientsecret``, ``signature``
    (plus a :class:`Redactor`'s ``extra_keys``). Two exceptions keep false positives low, and
    both apply only when ``token`` is the *only* fragment the name contains:

    * **Ticker rule.** A key whose normalized name is exactly ``token`` keeps a string value
      that looks like an asset ticker: at most 12 characters, optionally up to three lower-case
      letters in front (``stETH``, ``cbBTC``), then 2-10 upper-case letters or digits with at
      least one letter, optionally a ``.`` plus one or two lower-case letters (``USDC.e``).
      ``{"token": "USDC"}`` stays; ``{"token": "ghp_..."}``, ``{"token": "123456"}`` and
      ``{"token": {...}}`` are redacted; ``"token"``/``"tokens"`` keep a list of tickers.
    * **Asset rule.** Names that describe an asset (``token_symbol``, ``token_address``,
      ``token_in``, ``token_out``, ``token_decimals``, ``token_price`` ...) are not treated as
      credentials: their values are scrubbed like any other value. ``tokenizer`` and
      ``token_secret`` are redacted.
    * **Count rule.** A name ending in ``tokens`` (``tokens``, ``input_tokens``,
      ``max_tokens``, ``cached_tokens`` ...) or in ``token_count`` / ``tokens_used`` /
      ``token_limit`` / ``token_budget`` / ``tokens_to_sample`` / ``tokens_remaining`` keeps an
      ``int`` (not ``bool``) or ``None`` value. Any other value under such a name is redacted.

    Every other string, dict keys included, goes through :func:`redact_text` (non-string keys
    are redacted like values). Containers nested deeper than ``MAX_DEPTH`` levels, cycles, and
    anything that fails to dump or stringify are replaced by ``REDACTED`` (fail closed):
    :func:`redact` never raises.

Free text (:func:`redact_text`)
    Replaces with ``REDACTED``: PEM private-key blocks (also truncated ones); credentials after
    ``Bearer`` (long or non-alphabetic tokens, so "bearer bonds" survives) and ``Basic`` (only
    when it base64-decodes to ``user:password``); URL user-info
    (``https://[REDACTED]@host/``); the values of signed-URL query and fragment parameters --
    any name the key rule above calls sensitive (``X-Amz-Signature``, ``X-Amz-Credential``,
    ``X-Amz-Security-Token``, ``X-Goog-Signature``, ``X-Goog-Credential``, ``Signature``,
    ``token``, ``access_token``, ``api_key``, ``apikey``, ``password``, ``secret`` ...) plus
    ``sig``, ``Policy`` and ``Key-Pair-Id``, the Azure SAS fields ``se``/``sp``/``sv``/``sr``/
    ``st``/``spr``/``srt``/``ss`` when ``sig`` is present, and ``key`` when a signature
    parameter is present; ``key: value`` / ``key=value`` pairs (JSON-ish, also with escaped
    quotes, YAML, headers, query strings) whose key is sensitive by the key rule -- after an
    unquoted key at the start of a line, and after ``authorization`` / ``cookie`` /
    ``mnemonic`` / ``seed phrase`` / ``passphrase`` keys, the value runs to the end of the line;
    and well-known key shapes: ``sk-...`` (OpenAI, Anthropic ``sk-ant-...``; >= 20 chars),
    Stripe ``sk_live_``/``rk_live_``/``sk_test_``/``whsec_``, GitHub ``ghp_``/``gho_``/``ghu_``/
    ``ghs_``/``ghr_``/``github_pat_``, AWS ``AKIA``/``ASIA`` access key ids, Google ``AIza``
    keys, Slack ``xox[baprs]-``, and JWTs. An auth scheme word in front of a redacted value is
    kept (``Authorization: Bearer [REDACTED]``), and so are parameter and key names.

    Speed: text made only of digits, hex and timestamp characters returns at once; other text
    is first checked with a few dozen plain ``in`` tests for trigger substrings (``token``,
    ``pass``, ``://``, ``bearer``, ``sk-``, ``eyJ`` ...) and, with none present, returned
    unchanged without running any regex (about 35 us for 2 KB of JSON). Rules only run when
    their own triggers are present, and whole-text scans never use case-insensitive regexes.

Known limits: a secret that is a *structured* value inside text (``"credentials": {...}`` in a
JSON string) is only caught by its inner keys and shapes; raw hex private keys cannot be told
apart from transaction hashes and are only caught by key name. Hosts should register the
secrets they actually hold as ``known_secrets`` of a :class:`Redactor`: every exact occurrence
(and its JSON-escaped and URL-encoded forms) is then replaced, whatever its shape. In text,
redaction errs towards over-redaction: ``password: click the link`` loses ``click the link``.

Redaction is idempotent: ``redact(redact(x)) == redact(x)``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
import re
import urllib.parse
import uuid
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from decimal import Decimal
from typing import Any, Final

from ._redaction.keys import (
    BUILTIN_KEY_TRIGGERS,
    BUILTIN_KEYS,
    CACHE_LIMIT,
    CACHED_TEXT_LENGTH,
    INERT_CHARS,
    NOT_SENSITIVE,
    REST_OF_LINE_FRAGMENTS,
    SENSITIVE,
    TOKEN,
    TOKEN_ONLY,
    is_exempt,
    key_parts,
    normalize_key,
)
from ._redaction.text import (
    BARE_INT,
    JSON_SCALAR,
    KEY_CHARS,
    KV_TAIL,
    MAX_KEY_AFFIX,
    MAX_TEXT_PASSES,
    PEM_BLOCK,
    QUOTED_KEY_STOP,
    REDACTED,
    REST_OF_LINE,
    SAS_PARAMS,
    SHAPE_TRIGGERS,
    SHAPES,
    URL_ALWAYS_PARAMS,
    URL_BODY,
    URL_SCHEME_BEFORE,
    aligned_lower,
    any_present,
    auth_schemes,
    minimal,
    per_segment,
    replace_keeping_scheme,
    replacer,
)
from .exceptions import ConfigurationError

__all__ = [
    "MAX_DEPTH",
    "MIN_KNOWN_SECRET_LENGTH",
    "REDACTED",
    "Redactor",
    "redact",
    "redact_text",
]

MAX_DEPTH: Final = 100
"""Containers nested deeper than this are replaced by ``REDACTED`` as a whole."""

MIN_KNOWN_SECRET_LENGTH: Final = 6
"""Known secrets shorter than this are ignored: replacing them would shred ordinary text."""

# --------------------------------------------------------------------------------------------
# The redactor
# --------------------------------------------------------------------------------------------


class Redactor:
    """Redacts secrets from JSON-like data and free text (see the module docstring for rules).

    ``extra_keys`` adds key-name fragments: a dict key or text key is sensitive when its
    normalized name contains the normalized fragment (at least 3 characters; no ticker or count
    exemptions). In text, separators may appear where the fragment has ``-``, ``_``, ``.`` or a
    space (``"vault_token"`` also matches ``Vault Token:``). ``extra_patterns`` are regexes whose
    every non-empty match is replaced; they run on every string, so keep them cheap.
    ``known_secrets`` are the literal secrets the host holds: every exact occurrence of one of
    at least ``MIN_KNOWN_SECRET_LENGTH`` characters -- or of its JSON-escaped or URL-encoded
    form -- is replaced wherever it appears. Shorter ones are ignored.

    A ``Redactor``'s rules never change after construction; it is safe to share between
    threads (its small memo caches are only added to or cleared).
    """

    def __init__(
        self,
        *,
        extra_keys: Iterable[str] = (),
        extra_patterns: Iterable[re.Pattern[str] | str] = (),
        known_secrets: Iterable[str] = (),
    ) -> None:
        extra = tuple(extra_keys)
        for key in extra:
            if len(normalize_key(key)) < 3:
                raise ConfigurationError(f"extra redaction key {key!r} is too short")
        self._sensitive_fragments: tuple[str, ...] = tuple(
            sorted(
                {normalize_key(k) for k in BUILTIN_KEYS if normalize_key(k) != TOKEN}
                | {normalize_key(k) for k in extra}
            )
        )
        fragments = sorted(
            {"[-_. ]?".join(re.escape(p) for p in key_parts(k)) for k in (*BUILTIN_KEYS, *extra)},
            key=len,
            reverse=True,
        )
        # Runs on the lowered text, so no IGNORECASE.
        self._key_fragment: re.Pattern[str] = re.compile("|".join(fragments))
        self._key_triggers: tuple[str, ...] = minimal(
            (*BUILTIN_KEY_TRIGGERS, *(max(key_parts(k), key=len) for k in extra))
        )

        self._patterns: tuple[re.Pattern[str], ...] = tuple(
            p if isinstance(p, re.Pattern) else re.compile(p) for p in extra_patterns
        )

        variants: set[str] = set()
        for secret in known_secrets:
            if len(secret) < MIN_KNOWN_SECRET_LENGTH:
                continue
            for form in (
                secret,
                json.dumps(secret)[1:-1],
                json.dumps(secret, ensure_ascii=False)[1:-1],
                urllib.parse.quote(secret, safe=""),
            ):
                # A "secret" inside the marker (or containing it) would make redaction grow.
                if form not in REDACTED and REDACTED not in form:
                    variants.add(form)
        self._known: tuple[str, ...] = tuple(sorted(variants, key=lambda s: (-len(s), s)))

        self._lower_triggers: tuple[str, ...] = minimal(
            ("://", "private key", "bearer", "basic", *self._key_triggers)
        )
        self._inert_fast_path = not self._known and not self._patterns
        self._kind_cache: dict[str, tuple[int, str]] = {}  # key -> its kind, normalized
        self._clean: set[str] = set()  # short strings known to need no change

    # -- structured data ----------------------------------------------------------------------

    def redact(self, value: Any) -> Any:
        """Return a deep copy of ``value`` with every secret replaced; never raises."""
        try:
            return self._redact(value, 0, set())
        except Exception:  # fail closed: a value we cannot inspect is not let through
            return REDACTED

    def _redact(self, value: Any, depth: int, active: set[int]) -> Any:
        """``active`` holds the ids of the containers being copied (to cut cycles)."""
        if isinstance(value, str):
            scrubbed = self.redact_text(value)
            return value if scrubbed == value else scrubbed
        if value is None or isinstance(value, bool | int | float | Decimal):
            return value
        if depth >= MAX_DEPTH or id(value) in active:
            return REDACTED
        if type(value) is dict or isinstance(value, Mapping):  # the ABC check is slow
            active.add(id(value))
            out: dict[Any, Any] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    out[self._redact(key, depth + 1, active)] = self._redact(
                        item, depth + 1, active
                    )
                elif self._key_hides(key, item):
                    out[self.redact_text(key)] = REDACTED
                elif type(item) is str:  # the common case, as _redact does it, without a call
                    scrubbed = self.redact_text(item)
                    out[self.redact_text(key)] = item if scrubbed == item else scrubbed
                else:
                    out[self.redact_text(key)] = self._redact(item, depth + 1, active)
            active.discard(id(value))
            return out
        if isinstance(value, list | tuple):
            active.add(id(value))
            items = [self._redact(item, depth + 1, active) for item in value]
            active.discard(id(value))
            return tuple(items) if isinstance(value, tuple) else items
        if not isinstance(value, type):
            dump = getattr(value, "model_dump", None)
            if callable(dump):  # a pydantic model, without importing pydantic
                return self._redact(dump(mode="json"), depth, active)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                return self._redact(dataclasses.asdict(value), depth, active)
        if isinstance(value, bytes | bytearray | memoryview):
            return self.redact_text(bytes(value).decode("utf-8", "replace"))
        if isinstance(value, AbstractSet | Sequence):
            active.add(id(value))
            items = [self._redact(item, depth + 1, active) for item in value]
            active.discard(id(value))
            return items
        if isinstance(
            value, _dt.date | _dt.time | _dt.timedelta | _dt.tzinfo | uuid.UUID | enum.Enum
        ):
            return value
        return self.redact_text(str(value))

    def _key_kind(self, key: str) -> tuple[int, str]:
        """The kind of a key and its normalized form, memoized by the key as written."""
        known = self._kind_cache.get(key)
        if known is not None:
            return known
        normalized = normalize_key(key)
        if any(f in normalized for f in self._sensitive_fragments):
            kind = SENSITIVE
        elif TOKEN in normalized:
            kind = TOKEN_ONLY
        else:
            kind = NOT_SENSITIVE
        if len(self._kind_cache) >= CACHE_LIMIT:
            self._kind_cache.clear()
        self._kind_cache[key] = known = (kind, normalized)
        return known

    def _key_hides(self, key: str, value: Any) -> bool:
        """Whether the value under ``key`` must be replaced as a whole."""
        kind, normalized = self._kind_cache.get(key) or self._key_kind(key)
        if kind == TOKEN_ONLY:
            return not is_exempt(normalized, value)
        return kind == SENSITIVE

    # -- free text ----------------------------------------------------------------------------

    def redact_text(self, text: str) -> str:
        """Return ``text`` with every credential it contains replaced by ``REDACTED``."""
        if self._inert_fast_path and not text.strip(INERT_CHARS):
            return text
        short = len(text) <= CACHED_TEXT_LENGTH
        if short and text in self._clean:
            return text
        result = self._pass(text)
        passes = 1
        previous = text
        while passes < MAX_TEXT_PASSES and result != previous:
            previous, result = result, self._pass(result)
            passes += 1
        if short and result == text:
            if len(self._clean) >= CACHE_LIMIT:
                self._clean.clear()
            self._clean.add(text)
        return result

    def _pass(self, text: str) -> str:
        """One application of every rule; a second pass over its output changes nothing."""
        lowered = aligned_lower(text)
        known = [s for s in self._known if s in text]
        if (
            not known
            and not any_present(self._lower_triggers, lowered)
            and not any_present(SHAPE_TRIGGERS, text)
        ):
            return self._apply_patterns(text) if self._patterns else text

        if "private key" in lowered:
            text = PEM_BLOCK.sub(REDACTED, text)
        for secret in known:
            text = per_segment(text, replacer(secret))
        if "://" in text:
            text = self._urls(text)
        if "bearer" in lowered or "basic" in lowered:
            lowered = aligned_lower(text)
            text = auth_schemes(text, lowered)
        if any_present(self._key_triggers, lowered):
            text = self._key_values(text, aligned_lower(text))
        for triggers, pattern in SHAPES:
            if any_present(triggers, text):
                text = pattern.sub(REDACTED, text)
        if self._patterns:
            text = self._apply_patterns(text)
        return text

    def _apply_patterns(self, text: str) -> str:
        def one_segment(segment: str) -> str:
            for pattern in self._patterns:
                segment = pattern.sub(lambda m: REDACTED if m.group(0) else "", segment)
            return segment

        return per_segment(text, one_segment)

    # URLs: user-info and signed / credential-bearing query and fragment parameters.

    def _urls(self, text: str) -> str:
        out: list[str] = []
        pos = 0
        at = text.find("://")
        while at != -1:
            scheme = URL_SCHEME_BEFORE.search(text, max(pos, at - 31), at)
            body = URL_BODY.match(text, at + 3)
            if scheme is not None and body is not None:
                out.append(text[pos : scheme.start()])
                out.append(self._scrub_url(text[scheme.start() : body.end()]))
                pos = body.end()
            at = text.find("://", max(pos, at + 3))
        if not out:
            return text
        out.append(text[pos:])
        return "".join(out)

    def _scrub_url(self, url: str) -> str:
        head, _, rest = url.partition("://")
        cut = len(rest)
        for sep in "/?#":
            at = rest.find(sep)
            if at != -1:
                cut = min(cut, at)
        authority, tail = rest[:cut], rest[cut:]
        if "@" in authority:
            userinfo, host = authority.rsplit("@", 1)
            if userinfo != REDACTED:
                authority = REDACTED + "@" + host
        if "?" not in tail and "#" not in tail:
            return head + "://" + authority + tail
        before_fragment, hash_sign, fragment = tail.partition("#")
        path, question, query = before_fragment.partition("?")
        params = [p for p in (*query.split("&"), *fragment.split("&")) if p]
        names = {urllib.parse.unquote(p.partition("=")[0]).lower() for p in params}
        has_sig = "sig" in names
        has_signature = has_sig or any("signature" in normalize_key(n) for n in names)
        query = self._scrub_params(query, has_sig, has_signature)
        if "=" in fragment:
            fragment = self._scrub_params(fragment, has_sig, has_signature)
        return head + "://" + authority + path + question + query + hash_sign + fragment

    def _scrub_params(self, query: str, has_sig: bool, has_signature: bool) -> str:
        out = []
        for param in query.split("&"):
            name, eq, value = param.partition("=")
            if eq and value and self._param_hides(name, value, has_sig, has_signature):
                param = name + "=" + REDACTED
            out.append(param)
        return "&".join(out)

    def _param_hides(self, name: str, value: str, has_sig: bool, has_signature: bool) -> bool:
        lname = urllib.parse.unquote(name).lower()
        if lname in URL_ALWAYS_PARAMS:
            return True
        if has_sig and lname in SAS_PARAMS:
            return True
        if has_signature and lname == "key":
            return True
        return self._key_hides(lname, 0 if BARE_INT.match(value) else value)

    # `key: value` / `key=value` pairs in text.

    def _key_values(self, text: str, lowered: str) -> str:
        out: list[str] = []
        pos = 0
        for fragment in self._key_fragment.finditer(lowered):
            if fragment.start() < pos:
                continue
            found = self._pair_at(text, fragment.start(), fragment.end(), pos)
            if found is None:
                continue
            start, end, new = found
            out.append(text[pos:start])
            out.append(text[start:end] if new is None else new)
            pos = end
        if not out:
            return text
        out.append(text[pos:])
        return "".join(out)

    def _pair_at(
        self, text: str, start: int, end: int, floor: int
    ) -> tuple[int, int, str | None] | None:
        """The pair whose key contains ``text[start:end]``: (value start, value end, new value
        or ``None`` to keep it), or ``None`` if there is no pair there."""
        n = len(text)
        # A quoted key: "...", '...', \"...\" (the key may hold spaces).
        left = start
        while (
            left > floor and start - left < MAX_KEY_AFFIX and text[left - 1] not in QUOTED_KEY_STOP
        ):
            left -= 1
        right = end
        while right < n and right - end < MAX_KEY_AFFIX and text[right] not in QUOTED_KEY_STOP:
            right += 1
        if left > floor and text[left - 1] in "\"'":
            quote_start = left - 1
            while quote_start > floor and left - quote_start < 4 and text[quote_start - 1] == "\\":
                quote_start -= 1
            quote = text[quote_start:left]
            if text.startswith(quote, right) and not (
                quote_start > 0 and text[quote_start - 1] in KEY_CHARS
            ):
                tail = KV_TAIL.match(text, right + len(quote))
                if tail is not None:
                    return self._pair_value(text, tail, text[left:right], quote, quote_start)
        # An unquoted key: letters, digits, `_`, `.`, `-` only.
        left = start
        while left > floor and start - left < MAX_KEY_AFFIX and text[left - 1] in KEY_CHARS:
            left -= 1
        if left > 0 and text[left - 1] in KEY_CHARS:
            return None
        right = end
        while right < n and right - end < MAX_KEY_AFFIX and text[right] in KEY_CHARS:
            right += 1
        if right < n and text[right] in KEY_CHARS:
            return None
        tail = KV_TAIL.match(text, right)
        if tail is None:
            return None
        return self._pair_value(text, tail, text[left:right], "", left)

    def _pair_value(
        self, text: str, tail: re.Match[str], key: str, quote: str, key_start: int
    ) -> tuple[int, int, str | None]:
        kind, normalized = self._key_kind(key)
        value_start = tail.end("sep")
        if kind == NOT_SENSITIVE:
            return value_start, tail.end(), None
        for group in ("dq", "sq"):
            raw = tail.group(group)
            if raw is not None:
                if kind == TOKEN_ONLY and is_exempt(normalized, raw[1:-1]):
                    return value_start, tail.end(), None
                new = raw[0] + replace_keeping_scheme(raw[1:-1]) + raw[-1]
                return value_start, tail.end(), new
        if tail.group("eq") is not None:
            body = tail.group("eqbody")
            if kind == TOKEN_ONLY and is_exempt(normalized, body):
                return value_start, tail.end(), None
            new = tail.group("eq") + replace_keeping_scheme(body) + tail.group("eq")
            return value_start, tail.end(), new

        end = tail.end()
        if (
            not quote
            and ":" in tail.group("sep")
            and self._rest_of_line(text, key_start, normalized)
        ):
            rest = REST_OF_LINE.match(text, value_start)
            if rest is not None:
                rest_end = rest.end()
                # Inside a quoted string ('Authorization: Bearer x'), stop at its closing quote.
                opener = text[key_start - 1] if key_start > 0 else ""
                if opener in ("'", '"'):
                    close = text.find(opener, value_start, rest_end)
                    rest_end = close if close != -1 else rest_end
                end = max(end, rest_end)
        raw = text[value_start:end]
        value: Any = raw
        if BARE_INT.match(raw):
            value = 0
        elif raw.lower() in ("null", "none"):
            value = None
        if kind == TOKEN_ONLY and is_exempt(normalized, value):
            return value_start, end, None
        if '"' in quote and JSON_SCALAR.match(raw.lower()):
            return value_start, end, quote + REDACTED + quote
        return value_start, end, replace_keeping_scheme(raw)

    @staticmethod
    def _rest_of_line(text: str, key_start: int, normalized: str) -> bool:
        if any(f in normalized for f in REST_OF_LINE_FRAGMENTS):
            return True
        line_start = text.rfind("\n", 0, key_start) + 1
        return not text[line_start:key_start].strip(" \t-")


_DEFAULT: Final = Redactor()


def redact(value: Any) -> Any:
    """Return a deep copy of JSON-like ``value`` with every secret replaced by ``REDACTED``."""
    return _DEFAULT.redact(value)


def redact_text(text: str) -> str:
    """Return ``text`` with every credential it contains replaced by ``REDACTED``."""
    return _DEFAULT.redact_text(text)
