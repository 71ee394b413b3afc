"""Signing and the URL guard: what the server, apps, channels and attention share.

Inbound signatures (``X-Fiduciary-Timestamp: <unix seconds>`` and ``X-Fiduciary-Signature:
v1=<hex HMAC-SHA256(secret, "<timestamp>." + body)>``; several ``v1=`` values separated by
commas are accepted, for rotating a secret): ``sign`` makes one, ``SignatureVerifier`` checks
one, refusing a timestamp more than ``tolerance_seconds`` (300) away from its clock and a
signature it already accepted within that window (a replay). ``InboundChannel``: a channel's
secret and the principal its messages act for.

Outbound signatures the Standard Webhooks way (``standard_signature``, ``new_webhook_secret``,
``webhook_key``): ``v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>." + body)>``, where the key
is the base64 after ``whsec_`` of a ``whsec_...`` secret, or the UTF-8 bytes of any other.

``UrlGuard``: SSRF protection for any URL fiduciary calls on someone's say (webhooks, the
apps' endpoints): the scheme must be allowed (https by default), the host is resolved and
every address must be public unless ``allow_private`` is set; the caller then connects to the
checked address (``Checked.connect_url``; the name kept for the Host header and TLS), so a DNS
answer cannot change between the check and the connection.

This module sits below every package that uses it and imports only the standard library and
the clock.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import ipaddress
import secrets
import socket
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from .clock import Clock, SystemClock

__all__ = [
    "SECRET_PREFIX",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Checked",
    "InboundChannel",
    "SignatureError",
    "SignatureVerifier",
    "UnsafeUrlError",
    "UrlGuard",
    "new_webhook_secret",
    "resolve",
    "sign",
    "standard_signature",
    "webhook_key",
]

TIMESTAMP_HEADER = "x-fiduciary-timestamp"
SIGNATURE_HEADER = "x-fiduciary-signature"
SECRET_PREFIX = "whsec_"

Resolver = Callable[[str, int], Awaitable[list[str]]]


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header value for a body sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"v1={mac.hexdigest()}"


def webhook_key(secret: str) -> bytes:
    """The HMAC key of an outbound secret: the bytes a ``whsec_<base64>`` secret encodes (as
    Standard Webhooks libraries decode it), else the secret's UTF-8 bytes."""
    if not secret.startswith(SECRET_PREFIX):
        return secret.encode()
    text = secret[len(SECRET_PREFIX) :].rstrip("=")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a whsec_ secret must be base64 after the prefix") from None


def standard_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` of Standard Webhooks for ``body`` sent as ``msg_id`` at
    ``timestamp``: ``v1,<base64 HMAC-SHA256(key, "<msg_id>.<timestamp>." + body)>``."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    mac = hmac.new(webhook_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


def new_webhook_secret() -> str:
    """A fresh outbound secret in the Standard Webhooks form: ``whsec_`` + 32 random bytes in
    base64 (what a receiver's library is given as is)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


@dataclass(frozen=True, slots=True)
class InboundChannel:
    """``POST /hooks/{name}``: messages signed with ``secret`` act for ``principal``."""

    name: str
    secret: str
    principal: str

    def __post_init__(self) -> None:
        if len(self.secret) < 16:
            raise ValueError(f"the secret of channel {self.name!r} must be 16+ characters")


class SignatureError(Exception):
    """``code``: ``invalid_signature``, ``stale_signature`` or ``replayed``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class SignatureVerifier:
    """Checks signatures and timestamps, and remembers accepted signatures for the window."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        tolerance_seconds: int = 300,
        remember: int = 100_000,
    ) -> None:
        self._clock = clock or SystemClock()
        self.tolerance_seconds = tolerance_seconds
        self._remember = remember
        self._seen: OrderedDict[str, float] = OrderedDict()

    def verify(self, secret: str, headers: Mapping[str, str], body: bytes) -> None:
        raw_ts = headers.get(TIMESTAMP_HEADER, "")
        given = headers.get(SIGNATURE_HEADER, "")
        if not raw_ts or not given:
            raise SignatureError("invalid_signature", "the timestamp and signature are required")
        if not (raw_ts.isascii() and raw_ts.isdigit()) or len(raw_ts) > 12:
            raise SignatureError("invalid_signature", "the timestamp must be unix seconds")
        timestamp = int(raw_ts)
        now = self._clock.now().timestamp()
        expected = sign(secret, timestamp, body)
        candidates = [c.strip() for c in given.split(",") if c.strip().startswith("v1=")]
        if not any(hmac.compare_digest(expected, c) for c in candidates[:5]):
            raise SignatureError("invalid_signature", "the signature does not match the body")
        # checked after the signature, so an unsigned request learns nothing about the window
        if abs(now - timestamp) > self.tolerance_seconds:
            raise SignatureError(
                "stale_signature",
                f"the timestamp is more than {self.tolerance_seconds} s from the server's clock",
            )
        self._forget(now)
        if expected in self._seen:
            raise SignatureError("replayed", "this delivery was already received")
        self._seen[expected] = timestamp + self.tolerance_seconds
        while len(self._seen) > self._remember:
            self._seen.popitem(last=False)

    def _forget(self, now: float) -> None:
        # entries are nearly ordered by expiry; pop expired ones from the front
        while self._seen:
            key, until = next(iter(self._seen.items()))
            if until >= now:
                break
            del self._seen[key]


class UnsafeUrlError(Exception):
    """A webhook URL that must not be called (scheme, host, or where it resolves)."""


async def resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped or address.sixtofour
        if mapped is not None:
            return _public(mapped)
        if address.teredo is not None:
            return False
    return address.is_global and not (
        address.is_multicast
        or address.is_loopback
        or address.is_link_local
        or address.is_private
        or address.is_reserved
        or address.is_unspecified
    )


@dataclass(frozen=True, slots=True)
class Checked:
    """A URL that passed the guard, and the address to connect to."""

    url: str
    connect_url: str
    host_header: str
    sni_hostname: str | None


class UrlGuard:
    """SSRF protection: scheme allow-list, DNS resolved and every address checked."""

    def __init__(
        self,
        *,
        schemes: Iterable[str] = ("https",),
        allow_private: bool = False,
        resolver: Resolver | None = None,
    ) -> None:
        self.schemes = frozenset(s.lower() for s in schemes)
        self.allow_private = allow_private
        self._resolve = resolver or resolve

    async def check(self, url: str) -> Checked:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise UnsafeUrlError(f"not a URL: {exc}") from exc
        scheme = parts.scheme.lower()
        if scheme not in self.schemes:
            raise UnsafeUrlError(
                f"scheme {scheme or '(none)'} is not allowed ({sorted(self.schemes)})"
            )
        host = parts.hostname
        if not host:
            raise UnsafeUrlError("the URL has no host")
        if parts.username is not None or parts.password is not None:
            raise UnsafeUrlError("credentials in a webhook URL are refused")
        port = port or (443 if scheme == "https" else 80)
        try:
            literal: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(
                host
            )
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [str(literal)]
        else:
            try:
                addresses = await self._resolve(host, port)
            except (OSError, UnicodeError) as exc:
                raise UnsafeUrlError(f"{host} does not resolve: {exc}") from exc
        if not addresses:
            raise UnsafeUrlError(f"{host} does not resolve")
        parsed = []
        for text in addresses:
            try:
                parsed.append(ipaddress.ip_address(text.split("%", 1)[0]))
            except ValueError as exc:
                raise UnsafeUrlError(f"{host} resolved to {text!r}") from exc
        if not self.allow_private:
            bad = [str(a) for a in parsed if not _public(a)]
            if bad:
                raise UnsafeUrlError(f"{host} resolves to a non-public address ({', '.join(bad)})")
        chosen = parsed[0]
        ip_host = f"[{chosen}]" if chosen.version == 6 else str(chosen)
        default_port = (scheme == "https" and port == 443) or (scheme == "http" and port == 80)
        netloc = ip_host if default_port else f"{ip_host}:{port}"
        host_header = parts.netloc.rsplit("@", 1)[-1]
        connect = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
        return Checked(
            url=url,
            connect_url=connect,
            host_header=host_header,
            sni_hostname=host if scheme == "https" and literal is None else None,
        )
