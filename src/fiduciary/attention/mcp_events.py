"""An MCP Events subscription as a ``Source``, over the official ``mcp`` SDK (extra ``mcp``).

The SDK (2.3) has no MCP Events support, so the draft's wire shapes live here: requests
``events/list`` (``{"events": [{"name", "push"}]}``), ``events/poll`` (``{name, arguments,
cursor, maxAgeMs, maxEvents}`` → ``{events: [{eventId, data, cursor}], cursor, truncated,
nextPollMs}``) and ``events/stream`` (the same parameters plus ``subscriptionId``; the request
stays open while the server sends ``notifications/events/active | event | heartbeat | error |
terminated``, each carrying the ``subscriptionId``).

``McpEventsExtension`` is a ``ClientExtension`` binding the five notification methods (the SDK
fixes bindings when the ``Client`` is built: pass it in ``Client(..., extensions=[...])``); it
routes each notification to the live stream its ``subscriptionId`` names and reports the rest
as stray. Its handlers only append to a buffer, so the SDK's own binding queue (256 per method,
dropping the oldest when full) drains as fast as the event loop runs.

``McpEvents`` behaviour: stream when ``events/list`` says the event supports push (``mode``
``auto``), else poll every ``poll_seconds`` (or the server's ``nextPollMs``). At most
``max_buffered`` notifications wait while the record takes earlier ones; past that the stream
is stopped, what is held is yielded (so persisted), ``overflow`` is reported and the stream
reopens from the committed cursor — at once if the held events moved it, else after
``reopen_seconds``. A stream with no notification (heartbeats included) for ``idle_seconds``
is reported ``idle`` and reopened from the committed cursor; so is a terminated one. A request
error the server marks retryable (``REQUEST_TIMEOUT``, ``-32025``) propagates as a plain error
(the watcher backs off and reopens); any other, and a closed client, is a ``PermanentError``.
A malformed payload is skipped (reported), keeping the cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

try:
    import mcp_types as types
    from mcp import Client
    from mcp.client.extension import ClientExtension, NotificationBinding
    from mcp.shared.exceptions import MCPError
    from pydantic import BaseModel, ConfigDict
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the MCP events source needs the 'mcp' extra: pip install 'fiduciary[mcp]'"
    ) from exc

from ..clock import Clock, SystemClock
from .types import Batch, Incoming, PermanentError

__all__ = ["EVENT_METHODS", "McpEvents", "McpEventsError", "McpEventsExtension"]

EVENT_METHODS = ("active", "event", "heartbeat", "error", "terminated")
RETRYABLE_CODES = frozenset({types.REQUEST_TIMEOUT, -32025})

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class McpEventsError:
    """Something the source survived. ``kind``: ``stream`` (the server's error notification),
    ``malformed``, ``overflow``, ``idle``, ``terminated`` or ``stray``."""

    kind: str
    message: str
    data: Any = None


class _Params(types.NotificationParams):
    model_config = ConfigDict(extra="allow")


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Stream:
    """The receiving end of one open stream."""

    def __init__(self) -> None:
        self.items: deque[tuple[str, dict[str, Any]]] = deque()
        self.wake = asyncio.Event()
        self.received = 0


class McpEventsExtension(ClientExtension):
    """Binds the five ``notifications/events/*`` methods; pass it to ``Client(extensions=)``."""

    identifier = "io.fiduciary/events"

    def __init__(self) -> None:
        self._streams: dict[str, _Stream] = {}
        self._closed: deque[str] = deque(maxlen=64)  # late frames of our own closed streams
        self.on_stray: Callable[[McpEventsError], None] | None = None

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method=f"notifications/events/{m}", params_type=_Params, handler=self._handler(m)
            )
            for m in EVENT_METHODS
        ]

    def _handler(self, method: str) -> Callable[[_Params], Awaitable[None]]:
        async def handle(params: _Params) -> None:
            payload = dict(params.model_extra or {})
            stream = self._streams.get(str(payload.get("subscriptionId")))
            if stream is None:
                if payload.get("subscriptionId") in self._closed:
                    return
                if self.on_stray is not None:
                    self.on_stray(
                        McpEventsError(
                            kind="stray",
                            message=f"notifications/events/{method} for a subscription no live "
                            "stream here opened",
                            data=payload.get("subscriptionId"),
                        )
                    )
                return
            stream.items.append((method, payload))
            stream.received += 1
            stream.wake.set()

        return handle

    def open(self, subscription_id: str) -> _Stream:
        stream = _Stream()
        self._streams[subscription_id] = stream
        return stream

    def close(self, subscription_id: str) -> None:
        if self._streams.pop(subscription_id, None) is not None:
            self._closed.append(subscription_id)


def _error(exc: MCPError, what: str) -> Exception:
    if exc.code in RETRYABLE_CODES:
        return ConnectionError(f"{what}: {exc.message} (code {exc.code})")
    closed = " (the client is closed: reconnect it)" if exc.code == types.CONNECTION_CLOSED else ""
    return PermanentError(f"{what}: {exc.message} (code {exc.code}){closed}")


class McpEvents:
    """One MCP Events subscription (``name`` + ``arguments``) as a ``Source``."""

    def __init__(
        self,
        client: Client,
        extension: McpEventsExtension,
        *,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        mode: str = "auto",
        source: str | None = None,
        poll_seconds: float = 10.0,
        max_events: int | None = None,
        max_buffered: int = 1000,
        idle_seconds: float = 300.0,
        reopen_seconds: float = 5.0,
        clock: Clock | None = None,
        sleep: Sleep = asyncio.sleep,
        on_error: Callable[[McpEventsError], None] | None = None,
    ) -> None:
        if mode not in ("auto", "stream", "poll"):
            raise ValueError("mode is auto, stream or poll")
        self._client = client
        self._extension = extension
        self._event = name
        self._arguments = dict(arguments or {})
        self._mode = mode
        self._name = source or f"mcp:{name}:{json.dumps(self._arguments, sort_keys=True)}"
        self._poll_seconds = poll_seconds
        self._max_events = max_events
        self._max_buffered = max_buffered
        self._idle_seconds = idle_seconds
        self._reopen_seconds = reopen_seconds
        self._clock: Clock = clock or SystemClock()
        self._sleep = sleep
        self.errors: list[McpEventsError] = []
        self._on_error = on_error
        if extension.on_stray is None:
            extension.on_stray = self._report

    @property
    def name(self) -> str:
        return self._name

    def _report(self, error: McpEventsError) -> None:
        self.errors.append(error)
        if self._on_error is not None:
            self._on_error(error)

    async def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request = types.Request[dict[str, Any], str](method=method, params=params)
        try:
            answer = await self._client.session.send_request(request, _Answer)
        except MCPError as exc:
            raise _error(exc, method) from exc
        except RuntimeError as exc:  # the session was never entered or is gone
            raise PermanentError(f"{method}: the client is closed: {exc}") from exc
        return dict(answer.model_extra or {})

    def _params(self, cursor: str | None) -> dict[str, Any]:
        params: dict[str, Any] = {"name": self._event, "arguments": self._arguments}
        if cursor is not None:
            params["cursor"] = cursor
        if self._max_events is not None:
            params["maxEvents"] = self._max_events
        return params

    async def _streams(self) -> bool:
        if self._mode != "auto":
            return self._mode == "stream"
        listed = await self._request("events/list", {})
        for entry in listed.get("events") or []:
            if isinstance(entry, Mapping) and entry.get("name") == self._event:
                return bool(entry.get("push"))
        raise PermanentError(f"the server offers no event named {self._event!r}")

    def _incoming(self, raw: object) -> Incoming | None:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("eventId"), str):
            self._report(
                McpEventsError(kind="malformed", message="an event without an eventId", data=raw)
            )
            return None
        data = raw.get("data")
        return Incoming(
            id=raw["eventId"],
            source=self._name,
            type=self._event,
            at=self._clock.now(),
            data=data if isinstance(data, Mapping) else {"value": data},
        )

    async def batches(self, cursor: str | None) -> AsyncIterator[Batch]:
        if await self._streams():
            async for batch in self._stream(cursor):
                yield batch
        else:
            async for batch in self._poll(cursor):
                yield batch

    # --- polling ---------------------------------------------------------------------------
    async def _poll(self, cursor: str | None) -> AsyncIterator[Batch]:
        while True:
            page = await self._request("events/poll", self._params(cursor))
            found = [e for raw in page.get("events") or [] if (e := self._incoming(raw))]
            next_cursor = page.get("cursor")
            cursor = next_cursor if isinstance(next_cursor, str) else cursor
            yield Batch(events=tuple(found), cursor=cursor, truncated=bool(page.get("truncated")))
            wait = page.get("nextPollMs")
            if isinstance(wait, int | float) and not isinstance(wait, bool) and wait >= 0:
                await self._sleep(float(wait) / 1000)
            else:
                await self._sleep(self._poll_seconds)

    # --- streaming -------------------------------------------------------------------------
    async def _stream(self, cursor: str | None) -> AsyncIterator[Batch]:
        while True:
            opened_at = cursor
            subscription = uuid4().hex
            stream = self._extension.open(subscription)
            params = {**self._params(cursor), "subscriptionId": subscription}
            request = asyncio.ensure_future(self._request("events/stream", params))
            outcome = ""
            last_seen = self._clock.now()
            try:
                while not outcome:
                    overflowed = len(stream.items) > self._max_buffered
                    if overflowed:
                        request.cancel()
                        self._extension.close(subscription)
                    held = len(stream.items)
                    if held:
                        last_seen = self._clock.now()
                    batch, outcome = self._drain(stream, cursor)
                    if overflowed:
                        outcome = "overflow"
                        moved = (batch.cursor if batch else cursor) != opened_at
                        self._report(
                            McpEventsError(
                                kind="overflow",
                                message=f"{held} notifications were waiting; reopening "
                                + ("at once" if moved else f"in {self._reopen_seconds:g} s"),
                                data={"buffered": held},
                            )
                        )
                    if batch is not None:
                        yield batch
                        cursor = batch.cursor
                    if outcome or stream.items:
                        continue
                    if request.done():
                        request.result()  # raises the request's error, mapped
                        outcome = "ended"
                        continue
                    remaining = self._idle_seconds - (self._clock.now() - last_seen).total_seconds()
                    if remaining <= 0:
                        self._report(
                            McpEventsError(
                                kind="idle",
                                message=f"no notification for {self._idle_seconds:g} s; reopening",
                            )
                        )
                        outcome = "idle"
                        continue
                    await self._wait(stream, request, remaining)
            finally:
                self._extension.close(subscription)
                if not request.done():
                    request.cancel()
                with contextlib.suppress(BaseException):
                    await request
            if outcome == "overflow" and cursor != opened_at:
                continue
            await self._sleep(self._reopen_seconds)

    async def _wait(self, stream: _Stream, request: asyncio.Future[Any], seconds: float) -> None:
        stream.wake.clear()
        waiters = [
            asyncio.ensure_future(stream.wake.wait()),
            asyncio.ensure_future(self._sleep(seconds)),
        ]
        try:
            await asyncio.wait([*waiters, request], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    def _drain(self, stream: _Stream, cursor: str | None) -> tuple[Batch | None, str]:
        """What the stream holds as one batch, and ``terminated`` when the server ended it."""
        events: list[Incoming] = []
        truncated = False
        outcome = ""
        start = cursor
        while stream.items and not outcome:
            method, payload = stream.items.popleft()
            if method == "error":
                self._report(
                    McpEventsError(
                        kind="stream",
                        message=str(payload.get("message", "")),
                        data={"code": payload.get("code"), "data": payload.get("data")},
                    )
                )
                continue
            if method == "terminated":
                self._report(
                    McpEventsError(
                        kind="terminated",
                        message="the server ended the stream; reopening",
                        data=payload.get("reason"),
                    )
                )
                outcome = "terminated"
                continue
            if method == "event":
                found = self._incoming(payload)
                if found is not None:
                    events.append(found)
            if method == "active" and payload.get("truncated") is True:
                truncated = True
            given = payload.get("cursor")
            if isinstance(given, str):
                cursor = given
        if events or truncated or cursor != start:
            return Batch(events=tuple(events), cursor=cursor, truncated=truncated), outcome
        return None, outcome
