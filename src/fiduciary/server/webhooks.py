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

The signing, the verification and the URL guard live in ``fiduciary.signing`` (the apps,
channels and attention use them too); they are imported here under their old names.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID, uuid4

import httpx

from .._logs import logger
from ..clock import Clock, SystemClock
from ..events import Event, PendingAction, RunCompleted, RunFailed
from ..signing import (
    InboundChannel,
    SignatureError,
    SignatureVerifier,
    UnsafeUrlError,
    UrlGuard,
    new_webhook_secret,
    sign,
    standard_signature,
    webhook_key,
)

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

NOTIFIED_TYPES: frozenset[str] = frozenset({"pending_action", "run_completed", "run_failed"})

Sleep = Callable[[float], Awaitable[None]]


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
