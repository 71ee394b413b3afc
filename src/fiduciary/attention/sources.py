"""Sources shipped with fiduciary: its own events, inbound webhooks.

Each is a ``Source``: ``batches(cursor)`` yields ``Batch``es from the committed cursor. A source
keeps no cursor of its own; the record persists the one each batch carries.

- ``FiduciaryEvents`` reads the store through its public API every ``every`` seconds: a run that
  failed on its budget, an approval that expired (or is past its expiry) unanswered, a tool call
  whose outcome is unknown after a crash. Its cursor is the time of the last scan; each scan
  looks back ``overlap`` seconds further (commits from several processes do not land in time
  order) and the seen ring drops what it already took.
- ``Webhooks`` turns signed ``POST``s (the server's HMAC channel) into events; a delivery is
  answered only once its batch is taken, so a 2xx means it is in the record.

``polled`` is the loop of a polling source (the paper wallet's ``WalletWatch``, in
``fiduciary.wallet.watch``, is one).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..clock import Clock, SystemClock
from ..events import RunFailed, ToolCallEnd
from ..stores.base import Store
from .types import Batch, Incoming

__all__ = ["FiduciaryEvents", "Webhooks", "polled"]

Sleep = Callable[[float], Awaitable[None]]


def _parse(cursor: str | None) -> datetime | None:
    return None if cursor is None else datetime.fromisoformat(cursor)


async def polled(
    cursor: str | None,
    scan: Callable[[datetime | None, datetime], Awaitable[list[Incoming]]],
    clock: Clock,
    sleep: Sleep,
    every: float,
    once: bool,
) -> AsyncIterator[Batch]:
    """The batches of a polling source: each scans from the previous scan's time (the cursor)
    to now and carries now as its cursor; ``once`` stops after the first."""
    since = _parse(cursor)
    while True:
        now = clock.now()
        events = await scan(since, now)
        yield Batch(events=tuple(events), cursor=now.isoformat())
        since = now
        if once:
            return
        await sleep(every)


class FiduciaryEvents:
    """What in fiduciary's own store deserves attention (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        name: str = "fiduciary",
        every: float = 5.0,
        overlap: float = 60.0,
        scan: int = 200,
        clock: Clock | None = None,
        sleep: Sleep = asyncio.sleep,
        once: bool = False,
    ) -> None:
        self._store = store
        self._name = name
        self._every = every
        self._overlap = timedelta(seconds=overlap)
        self._scan = scan
        self._clock: Clock = clock or SystemClock()
        self._sleep = sleep
        self._once = once

    @property
    def name(self) -> str:
        return self._name

    def batches(self, cursor: str | None) -> AsyncIterator[Batch]:
        async def scan(since: datetime | None, now: datetime) -> list[Incoming]:
            return await self.scan(None if since is None else since - self._overlap, now)

        return polled(cursor, scan, self._clock, self._sleep, self._every, self._once)

    async def scan(self, since: datetime | None, now: datetime) -> list[Incoming]:
        out: list[Incoming] = []
        for run in await self._store.list_runs(limit=self._scan):
            if since is not None and run.updated_at < since:
                continue
            for event in await self._store.read_events(run.run_id):
                if since is not None and event.at < since:
                    continue
                if isinstance(event, RunFailed) and event.reason == "budget":
                    out.append(
                        Incoming(
                            id=f"run_failed_budget:{run.run_id}:{event.seq}",
                            source=self._name,
                            type="run_failed_budget",
                            at=event.at,
                            principal=run.principal,
                            role="consequence",
                            data={"run_id": str(run.run_id), "message": event.message},
                        )
                    )
                elif isinstance(event, ToolCallEnd) and event.recovery == "unknown":
                    out.append(
                        Incoming(
                            id=f"unknown_outcome:{run.run_id}:{event.seq}",
                            source=self._name,
                            type="unknown_outcome",
                            at=event.at,
                            principal=run.principal,
                            role="consequence",
                            data={"run_id": str(run.run_id), "capability": event.name},
                        )
                    )
        for approval in [
            *await self._store.list_approvals(status="pending"),
            *await self._store.list_approvals(status="expired"),
        ]:
            if approval.expires_at > now:
                continue
            if since is not None and approval.expires_at < since:
                continue
            out.append(
                Incoming(
                    id=f"approval_expired:{approval.approval_id}",
                    source=self._name,
                    type="approval_expired",
                    at=approval.expires_at,
                    principal=approval.principal,
                    role="consequence",
                    data={
                        "run_id": str(approval.run_id),
                        "capability": approval.capability,
                        "amount_usd": None
                        if approval.amount_usd is None
                        else str(approval.amount_usd),
                    },
                )
            )
        out.sort(key=lambda e: (e.at, e.id))
        return out


class Webhooks:
    """Inbound webhook deliveries as a source. ``deliver`` returns once the record took the
    delivery (the HTTP handler answers after that); deliveries wait while a batch is judged."""

    def __init__(self, *, name: str = "webhooks", clock: Clock | None = None) -> None:
        self._name = name
        self._clock: Clock = clock or SystemClock()
        self._queue: asyncio.Queue[tuple[Incoming, asyncio.Future[None]]] = asyncio.Queue()

    @property
    def name(self) -> str:
        return self._name

    async def deliver(
        self,
        delivery_id: str,
        body: Mapping[str, Any],
        *,
        principal: str | None = None,
        channel: str = "",
    ) -> None:
        """Hand over one verified delivery; returns when it is durably taken."""
        kind = body.get("type")
        event = Incoming(
            id=delivery_id,
            source=self._name,
            type=kind if isinstance(kind, str) and kind else f"webhook:{channel or 'message'}",
            at=self._clock.now(),
            principal=principal,
            data=dict(body),
        )
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put((event, done))
        await done

    async def batches(self, cursor: str | None) -> AsyncIterator[Batch]:
        while True:
            event, done = await self._queue.get()
            try:
                yield Batch(events=(event,), cursor=event.id)
            except BaseException as exc:
                if not done.done():
                    done.set_exception(exc)
                raise
            if not done.done():
                done.set_result(None)


def webhook_route(
    source: Webhooks,
    channels: Sequence[Any],
    *,
    path: str = "/attention/hooks/{name}",
    clock: Clock | None = None,
) -> Any:
    """A Starlette ``Route`` receiving signed deliveries (``InboundChannel``s, the server's
    signature scheme) into ``source``. The lead mounts it; needs the ``server`` extra."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from ..signing import SignatureError, SignatureVerifier

    by_name = {c.name: c for c in channels}
    verifier = SignatureVerifier(clock=clock)

    async def receive(request: Request) -> JSONResponse:
        channel = by_name.get(request.path_params["name"])
        if channel is None:
            return JSONResponse({"error": "unknown_channel"}, status_code=404)
        body = await request.body()
        try:
            verifier.verify(channel.secret, request.headers, body)
        except SignatureError as exc:
            return JSONResponse({"error": exc.code, "message": exc.message}, status_code=401)
        try:
            payload = json.loads(body)
        except ValueError:
            return JSONResponse({"error": "invalid_json"}, status_code=400)
        if not isinstance(payload, dict):
            return JSONResponse({"error": "invalid_json"}, status_code=400)
        # the sender's delivery id (a Standard Webhooks sender's webhook-id), else the
        # signature: a redelivery carries the same and is judged once
        delivery = (
            request.headers.get("webhook-id")
            or request.headers.get("x-fiduciary-delivery")
            or request.headers.get("x-fiduciary-signature", "")
        )
        await source.deliver(
            f"{channel.name}:{delivery}", payload, principal=channel.principal, channel=channel.name
        )
        return JSONResponse({"accepted": True}, status_code=202)

    return Route(path, receive, methods=["POST"])
