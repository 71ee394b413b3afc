"""Webhooks: signed inbound messages, and outbound notifications signed the Standard Webhooks
way that cannot be aimed at the server's own network.

Inbound (``POST /hooks/{channel}``): ``X-Fiduciary-Timestamp: <unix seconds>`` and
``X-Fiduciary-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + body)>``. Several
``v1=`` values separated by commas are accepted (rotating a secret). The server refuses a
timestamp more than ``tolerance_seconds`` (300) away from its clock, and a signature it has
already accepted within that window (a replay).

Outbound notifications (``pending_action``, ``run_completed``, ``run_failed``) are POSTed as
JSON to each configured ``WebhookTarget``, signed as Standard Webhooks prescribes (so that a
receiver verifies them with an existing library): ``webhook-id`` (the delivery's id, the same
on every retry), ``webhook-timestamp`` (unix seconds of the attempt) and ``webhook-signature:
v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>." + body)>``, where the key is the base64 after
``whsec_`` of a ``whsec_...`` secret (``new_webhook_secret()``), or the UTF-8 bytes of any
other secret. They are retried with exponential backoff on network errors, 408, 429 and 5xx,
never following redirects. Before each attempt the URL is checked (``UrlGuard``): its scheme
must be allowed (https by default), its host is resolved, and every address must be public
unless ``allow_private`` is set; the connection then goes to the checked address (the name is
kept for the Host header and TLS), so a DNS answer cannot change between the check and the
connection.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import ipaddress
import json
import random
import secrets
import socket
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID, uuid4

import httpx

from .._logs import logger
from ..clock import Clock, SystemClock
from ..events import Event, PendingAction, RunCompleted, RunFailed

__all__ = [
    "NOTIFIED_TYPES",
    "InboundChannel",
    "Notifier",
    "SignatureError",
    "SignatureVerifier",
    "UnsafeUrlError",
    "UrlGuard",
    "WebhookTarget",
    "new_webhook_secret",
    "sign",
    "standard_signature",
]

log = logger("fiduciary.server.webhooks")

TIMESTAMP_HEADER = "x-fiduciary-timestamp"
SIGNATURE_HEADER = "x-fiduciary-signature"
SECRET_PREFIX = "whsec_"
NOTIFIED_TYPES: frozenset[str] = frozenset({"pending_action", "run_completed", "run_failed"})

Resolver = Callable[[str, int], Awaitable[list[str]]]
Sleep = Callable[[float], Awaitable[None]]


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


# --- inbound ------------------------------------------------------------------------------


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


# --- outbound -----------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class WebhookTarget:
    """Where notifications go. ``principals``: only these principals' runs (None: all)."""

    url: str
    secret: str
    events: frozenset[str] = NOTIFIED_TYPES
    principals: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if len(self.secret) < 16:
            raise ValueError("a webhook target's secret must be 16+ characters")
        if len(webhook_key(self.secret)) < 16:
            raise ValueError("a webhook target's whsec_ secret must encode 16+ bytes")
        unknown = sorted(set(self.events) - NOTIFIED_TYPES)
        if unknown:
            raise ValueError(f"unknown notification types: {', '.join(unknown)}")


@dataclass(slots=True)
class Delivery:
    """One notification to one target, and what happened to it."""

    target: WebhookTarget
    body: bytes
    delivery_id: UUID
    attempts: int = 0
    status: str = "pending"  # pending | delivered | failed | refused
    last_error: str | None = None
    statuses: list[int] = field(default_factory=list)


class Notifier:
    """Sends notifications signed the Standard Webhooks way in the background, with retries
    and the URL guard."""

    def __init__(
        self,
        targets: Sequence[WebhookTarget],
        *,
        guard: UrlGuard | None = None,
        clock: Clock | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep | None = None,
        max_attempts: int = 5,
        backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 60.0,
        timeout_seconds: float = 10.0,
        max_outstanding: int = 1000,
        concurrency: int = 8,
    ) -> None:
        self.targets = list(targets)
        self.guard = guard or UrlGuard()
        self._clock = clock or SystemClock()
        self._sleep = sleep or asyncio.sleep
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self._max_outstanding = max_outstanding
        self._semaphore = asyncio.Semaphore(concurrency)
        self._client = httpx.AsyncClient(
            transport=transport,
            follow_redirects=False,
            timeout=timeout_seconds,
            trust_env=False,  # a proxy from the environment would bypass the address check
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self.deliveries: list[Delivery] = []  # the latest ones, for inspection
        self._idle = asyncio.Event()
        self._idle.set()

    def notify(self, event: Event, *, principal: str) -> None:
        """Queue the notifications of an event (if it is of a notified type)."""
        if event.type not in NOTIFIED_TYPES or not self.targets:
            return
        payload = _payload(event, principal, self._clock.now())
        for target in self.targets:
            if event.type not in target.events:
                continue
            if target.principals is not None and principal not in target.principals:
                continue
            if len(self._tasks) >= self._max_outstanding:
                log.warning("webhooks: %d deliveries outstanding; dropping one", len(self._tasks))
                continue
            delivery_id = uuid4()
            body = json.dumps({"id": str(delivery_id), **payload}, separators=(",", ":")).encode()
            delivery = Delivery(target, body, delivery_id)
            self.deliveries.append(delivery)
            del self.deliveries[:-200]
            task = asyncio.create_task(self._deliver(delivery))
            self._tasks.add(task)
            self._idle.clear()
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._idle.set()

    async def _deliver(self, delivery: Delivery) -> None:
        for attempt in range(1, self.max_attempts + 1):
            delivery.attempts = attempt
            retry = await self._attempt(delivery)
            if not retry:
                return
            if attempt < self.max_attempts:
                delay = min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (attempt - 1))
                await self._sleep(delay * (0.5 + random.random() / 2))
        delivery.status = "failed"
        log.warning(
            "webhook %s to %s failed after %d attempts: %s",
            delivery.delivery_id,
            _safe(delivery.target.url),
            delivery.attempts,
            delivery.last_error,
        )

    async def _attempt(self, delivery: Delivery) -> bool:
        """One attempt; True if it should be retried."""
        try:
            checked = await self.guard.check(delivery.target.url)
        except UnsafeUrlError as exc:
            delivery.status, delivery.last_error = "refused", str(exc)
            log.warning("webhook to %s refused: %s", _safe(delivery.target.url), exc)
            return False
        timestamp = int(self._clock.now().timestamp())
        headers = {
            "content-type": "application/json",
            "user-agent": "fiduciary-webhooks/1",
            "host": checked.host_header,
            "webhook-id": str(delivery.delivery_id),
            "webhook-timestamp": str(timestamp),
            "webhook-signature": standard_signature(
                delivery.target.secret, str(delivery.delivery_id), timestamp, delivery.body
            ),
        }
        extensions: dict[str, Any] = {}
        if checked.sni_hostname is not None:
            extensions["sni_hostname"] = checked.sni_hostname
        try:
            async with self._semaphore:
                response = await self._client.post(
                    checked.connect_url,
                    content=delivery.body,
                    headers=headers,
                    extensions=extensions,
                )
        except httpx.HTTPError as exc:
            delivery.last_error = f"{type(exc).__name__}: {exc}"
            return True
        delivery.statuses.append(response.status_code)
        if 200 <= response.status_code < 300:
            delivery.status = "delivered"
            return False
        delivery.last_error = f"HTTP {response.status_code}"
        if response.status_code in (408, 429) or response.status_code >= 500:
            return True
        delivery.status = "failed"  # 3xx (not followed) and other 4xx are not retried
        return False

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        await self._client.aclose()


def _payload(event: Event, principal: str, now: datetime) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": event.type,
        "run_id": str(event.run_id),
        "seq": event.seq,
        "principal": principal,
        "sent_at": now.isoformat(),
        "event": json.loads(event.model_dump_json()),
    }
    if isinstance(event, PendingAction):
        body["approval_id"] = str(event.approval_id)
    elif isinstance(event, RunCompleted | RunFailed):
        body["status"] = "completed" if isinstance(event, RunCompleted) else "failed"
    return body


def _safe(url: str) -> str:
    """A URL for a log line: scheme, host and path, no query (it may carry a token)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(invalid URL)"
    return urlunsplit((parts.scheme, parts.hostname or "", parts.path, "", ""))
