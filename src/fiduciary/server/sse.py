"""Live events over server-sent events: one follower per run, many subscribers, resumable.

Wire format: each event is ``id: <seq>`` / ``event: <type>`` / ``data: <json>`` (``encode_sse``).
A client resumes after a disconnect by sending the last seq it processed as ``Last-Event-ID``
(browsers do) or ``?after=``; it then receives every later event exactly once, in seq order.
Comment lines (``: keep-alive``) are sent while the run is quiet, so proxies keep the
connection open and a dead client is noticed.

How: ``EventHub`` runs one follower per run that has subscribers (it takes this process's
commits from the store's subscription at once and reads the store for other processes'), and
fans each committed event out to every subscriber's bounded buffer, encoded once. A
subscriber attaches to the follower first, then reads the stored events after its position,
then takes live events, skipping seqs it already sent and reading any gap from the store; it
writes everything buffered in one write. A slow subscriber never slows the run or the others:
when its buffer is full it is dropped, sent what it had, then an ``event: reconnect`` message
with ``{"after": <last seq sent>}``, and the stream ends; the client reconnects from there.

``GlobalStreams`` serves the global stream (``GET /events``, ``fiduciary.bus``): each
subscriber follows the store's global order itself, woken by the store's commit bell, with
``id: <position>`` / ``event: run_status | text | tool_call`` / ``data: <json>``; it resumes
after ``Last-Event-ID`` the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from .._logs import logger
from ..agent import Agent
from ..bus import BUS_ADAPTER, BusEvent, BusType
from ..bus import follow as follow_bus
from ..events import Event, encode_sse
from ..stores.base import RunStatus

if TYPE_CHECKING:  # the apps package is imported only by a server that serves apps
    from ..apps.live import AppChannels, AppEmit

__all__ = ["EventHub", "GlobalStreams", "SSEResponse", "Subscriber"]

log = logger("fiduciary.server")

_PAGE = 500  # stored events read per query when catching up


@dataclass(frozen=True, slots=True)
class _Frame:
    seq: int
    data: bytes
    at: float  # when it was offered (time.monotonic)


class _Beat:
    """Returned by ``Subscriber.next`` when a heartbeat is due."""


BEAT = _Beat()


class Subscriber:
    """One client's bounded buffer of live frames."""

    __slots__ = ("_beat", "_buffer", "_capacity", "_waiter", "closed", "overflowed")

    def __init__(self, capacity: int) -> None:
        self._buffer: deque[_Frame] = deque()
        self._capacity = capacity
        self._waiter: asyncio.Future[None] | None = None
        self._beat = False
        self.overflowed = False
        self.closed = False

    def offer(self, frame: _Frame) -> bool:
        """Add a frame without waiting; False (and overflowed) when the buffer is full."""
        if self.closed:
            return False
        if len(self._buffer) >= self._capacity:
            self.overflowed = True
            self.end()
            return False
        self._buffer.append(frame)
        self._wake()
        return True

    def end(self) -> None:
        self.closed = True
        self._wake()

    def beat(self) -> None:
        """A heartbeat is due (the hub's ticker calls this)."""
        self._beat = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def next(self) -> _Frame | _Beat | None:
        """The next frame; ``BEAT`` when a heartbeat is due and nothing else is; None once
        ended and drained."""
        while not self._buffer and not self.closed and not self._beat:
            # a bare future (no task, no timer per wait): cheap, and a cancellation can never
            # be lost in a race with the wake-up
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        self._beat = False
        if self._buffer:
            return self._buffer.popleft()
        return None if self.closed else BEAT

    def take_ready(self) -> list[_Frame]:
        """Every frame buffered now, without waiting (sent together in one write)."""
        frames = list(self._buffer)
        self._buffer.clear()
        return frames


class _Follower:
    """One run's committed events, fanned out to its subscribers.

    It reads the store's subscription directly rather than through ``Agent.events``: events
    already queued are taken without suspending, so a burst of commits is offered to every
    subscriber before any of them runs, and each then sends the burst in one write. (Agent.events
    suspends once per event, which would make every subscriber write every event on its own.)
    Other processes' commits are found by reading the store when nothing arrived for
    ``poll_seconds``, as ``Agent.events`` does.
    """

    def __init__(self, hub: EventHub, run_id: UUID, after: int) -> None:
        self.hub = hub
        self.run_id = run_id
        self.last = after
        self.heard = time.monotonic()
        self.subscribers: set[Subscriber] = set()
        self.task = asyncio.create_task(self._follow(), name=f"fiduciary-sse-{run_id}")

    def _offer(self, events: list[Event]) -> bool:
        """Offer events in seq order; False at a gap (the caller reads it from the store)."""
        for event in events:
            if event.seq <= self.last:
                continue
            if event.seq != self.last + 1:
                return False
            frame = _Frame(event.seq, encode_sse(event).encode(), time.monotonic())
            for sub in list(self.subscribers):
                if not sub.offer(frame):
                    self.subscribers.discard(sub)
            self.last = event.seq
        return True

    async def _catch_up(self) -> None:
        store = self.hub.agent.store
        while True:
            page = await store.read_events(self.run_id, after_seq=self.last, limit=_PAGE)
            self._offer(page)
            if len(page) < _PAGE:
                return

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.hub.poll_seconds)
            if time.monotonic() - self.heard >= self.hub.poll_seconds:
                await self._catch_up()

    async def _follow(self) -> None:
        store = self.hub.agent.store
        poller: asyncio.Task[None] | None = None
        try:
            while True:
                # subscribe before reading the past: nothing committed in between is missed
                sub = store.subscribe(self.run_id, buffer=self.hub.store_buffer)
                try:
                    await self._catch_up()
                    if poller is None:
                        poller = asyncio.create_task(self._poll())
                    async for event in sub:
                        self.heard = time.monotonic()
                        if not self._offer([event]):
                            await self._catch_up()  # a gap: read it, then go on
                            self._offer([event])
                finally:
                    sub.close()
                if not sub.overflowed:  # the store is closing
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the store failed: subscribers reconnect and read it again
            log.warning("run %s: following events failed: %s", self.run_id, exc)
        finally:
            if poller is not None:
                poller.cancel()
                with contextlib.suppress(BaseException):
                    await poller
            for subscriber in list(self.subscribers):
                subscriber.end()
            self.subscribers.clear()
            if self.hub._followers.get(self.run_id) is self:
                del self.hub._followers[self.run_id]


class EventHub:
    """Subscriptions to runs' committed events, one follower per run."""

    def __init__(
        self,
        agent: Agent,
        *,
        buffer: int = 1000,
        heartbeat_seconds: float = 15.0,
        poll_seconds: float = 0.5,
        coalesce_seconds: float = 0.01,
        behind_seconds: float = 0.002,
    ) -> None:
        if buffer < 1:
            raise ValueError("the subscriber buffer must hold at least one event")
        self.agent = agent
        self.buffer = buffer
        self.heartbeat_seconds = heartbeat_seconds
        self.poll_seconds = poll_seconds
        self.coalesce_seconds = coalesce_seconds
        self.behind_seconds = behind_seconds
        self.store_buffer = max(4096, buffer)
        self._followers: dict[UUID, _Follower] = {}
        self._ticker: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        """One timer for every stream's heartbeat (rather than one per wait)."""
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            for follower in list(self._followers.values()):
                for subscriber in list(follower.subscribers):
                    subscriber.beat()

    @property
    def subscriber_count(self) -> int:
        return sum(len(f.subscribers) for f in self._followers.values())

    def _attach(self, run_id: UUID, last_seq: int) -> Subscriber:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._tick(), name="fiduciary-sse-heartbeat")
        sub = Subscriber(self.buffer)
        follower = self._followers.get(run_id)
        if follower is None or follower.task.done():
            follower = _Follower(self, run_id, last_seq)
            self._followers[run_id] = follower
        follower.subscribers.add(sub)
        return sub

    def _detach(self, run_id: UUID, sub: Subscriber) -> None:
        sub.end()
        follower = self._followers.get(run_id)
        if follower is None:
            return
        follower.subscribers.discard(sub)
        if not follower.subscribers:
            del self._followers[run_id]
            follower.task.cancel()

    async def stream(
        self, run_id: UUID, after: int, *, last_seq: int, follow: bool = True
    ) -> AsyncIterator[bytes]:
        """SSE bytes: the events after ``after``, then live ones (``follow``), heartbeats, and a
        ``reconnect`` message if this subscriber fell too far behind."""
        store = self.agent.store
        sub = self._attach(run_id, last_seq) if follow else None
        last = after
        try:
            # attached first: a client that has these bytes misses nothing committed later
            yield f"retry: 2000\n: run {run_id}\n\n".encode()
            while True:  # the past, a page per write
                page = await store.read_events(run_id, after_seq=last, limit=_PAGE)
                if page:
                    yield b"".join(encode_sse(event).encode() for event in page)
                    last = page[-1].seq
                if len(page) < _PAGE:
                    break
            if sub is None:
                return
            sent_at = 0.0
            while True:
                frame = await sub.next()
                if frame is None:
                    yield _reconnect(last)
                    return
                if isinstance(frame, _Beat):
                    yield b": keep-alive\n\n"
                    continue
                # when the server falls behind (this event waited to be picked up), write at
                # most once per coalesce_seconds: fewer, larger writes leave the run and the
                # other subscribers the time they need; when it keeps up, no wait at all
                now = time.monotonic()
                if now - frame.at > self.behind_seconds and not sub.closed:
                    wait = sent_at + self.coalesce_seconds - now
                    if wait > 0:
                        await asyncio.sleep(wait)
                # everything buffered meanwhile goes in the same write: under load, one send
                # carries many events; when quiet, each event goes out on its own at once
                out: list[bytes] = []
                for ready in [frame, *sub.take_ready()]:
                    if ready.seq <= last:
                        continue
                    if ready.seq > last + 1:  # a gap (the follower started late): read it
                        for event in await store.read_events(
                            run_id, after_seq=last, limit=ready.seq - last - 1
                        ):
                            out.append(encode_sse(event).encode())
                            last = event.seq
                        if last != ready.seq - 1:
                            out.append(_reconnect(last))
                            yield b"".join(out)
                            return
                    out.append(ready.data)
                    last = ready.seq
                if out:
                    yield b"".join(out)
                    sent_at = time.monotonic()
        finally:
            if sub is not None:
                self._detach(run_id, sub)

    def end_all(self) -> None:
        """End every stream now (each is told to reconnect): the server is going away."""
        for follower in list(self._followers.values()):
            for subscriber in list(follower.subscribers):
                subscriber.end()

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(BaseException):
                await self._ticker
        followers = list(self._followers.values())
        self._followers.clear()
        for follower in followers:
            follower.task.cancel()
        for follower in followers:
            with contextlib.suppress(BaseException):
                await follower.task


@dataclass(frozen=True, slots=True)
class AppEmitFeed:
    """The live app channels a server serves, and the principal its apps act for (whose keys,
    and ``admin`` keys, see the emits)."""

    channels: AppChannels
    principal: str


class GlobalStreams:
    """Subscriptions to the global stream: each follows the store's global order itself, and,
    when the server serves apps (``app_emits``), their live emits too."""

    def __init__(self, agent: Agent, *, heartbeat_seconds: float, poll_seconds: float) -> None:
        self.agent = agent
        self.heartbeat_seconds = heartbeat_seconds
        self.poll_seconds = poll_seconds
        self.app_emits: AppEmitFeed | None = None  # set where the apps are mounted
        self._stops: set[asyncio.Event] = set()

    @property
    def subscriber_count(self) -> int:
        return len(self._stops)

    async def stream(
        self,
        after: int,
        *,
        principal: str | None,
        statuses: frozenset[RunStatus] | None,
        types: frozenset[BusType] | None,
        follow: bool = True,
        app_emits: bool = True,
    ) -> AsyncIterator[bytes]:
        """SSE bytes: the bus events after the position ``after``, then live ones (``follow``),
        with heartbeats; ends (the client reconnects after its last id) when the server goes.
        Following, and with ``app_emits``, the apps' emits as they happen (``app_emit`` events
        without an id: live only) for the apps' principal or an admin (``principal`` None)."""
        stop = asyncio.Event()
        self._stops.add(stop)
        feed = self.app_emits if follow and app_emits else None
        if feed is not None and principal not in (None, feed.principal):
            feed = None  # another principal's key: not its apps
        # listening before the first byte: an emit after the client got it is not missed
        emits: asyncio.Queue[bytes] = asyncio.Queue(maxsize=_EMITS_QUEUED)
        unlisten = None if feed is None else feed.channels.listen(_queued(emits))
        try:
            yield b"retry: 2000\n: events\n\n"
            bus = self._bus(after, principal, statuses, types, follow, stop)
            frames = bus if unlisten is None else _merged(bus, emits)
            quiet = time.monotonic()
            async with contextlib.aclosing(frames):  # its reader task ends with the client
                async for frame in frames:
                    now = time.monotonic()
                    if frame:
                        yield frame
                        quiet = now
                    elif now - quiet >= self.heartbeat_seconds:
                        yield b": keep-alive\n\n"
                        quiet = now
        finally:
            if unlisten is not None:
                unlisten()
            self._stops.discard(stop)

    async def _bus(
        self,
        after: int,
        principal: str | None,
        statuses: frozenset[RunStatus] | None,
        types: frozenset[BusType] | None,
        follow: bool,
        stop: asyncio.Event,
    ) -> AsyncGenerator[bytes, None]:
        """The bus's frames, a batch at a time (``b""``: a quiet while)."""
        wait = min(self.poll_seconds, self.heartbeat_seconds)
        if types is not None and not types:  # app emits only: no run event is wanted
            while follow and not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)
                yield b""
            return
        async for batch in follow_bus(
            self.agent.store,
            after=after,
            principal=principal,
            statuses=statuses,
            types=types,
            wait_seconds=wait,
            stop=stop,
            live=follow,
        ):
            yield b"".join(map(_bus_frame, batch))

    def end_all(self) -> None:
        """End every stream now (their clients reconnect): the server is going away."""
        for stop in list(self._stops):
            stop.set()


_EMITS_QUEUED = 256  # frames waiting for a slow client; app emits beyond are dropped


def _queued(emits: asyncio.Queue[bytes]) -> Callable[[AppEmit], None]:
    def heard(emit: AppEmit) -> None:
        with contextlib.suppress(asyncio.QueueFull):  # a client that does not keep up
            emits.put_nowait(_emit_frame(emit))

    return heard


async def _merged(
    bus: AsyncGenerator[bytes, None], emits: asyncio.Queue[bytes]
) -> AsyncGenerator[bytes, None]:
    """The bus's frames and the apps' emits, each as it comes; ends with the bus."""
    frames: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=1)

    async def pump() -> None:
        try:
            async for frame in bus:
                await frames.put(frame)
        finally:
            await frames.put(None)  # the end, after the frames before it

    task = asyncio.create_task(pump())
    try:
        while True:
            if not emits.empty():
                yield emits.get_nowait()
                continue
            got_bus = asyncio.ensure_future(frames.get())
            got_emit = asyncio.ensure_future(emits.get())
            await asyncio.wait({got_bus, got_emit}, return_when=asyncio.FIRST_COMPLETED)
            for waiting in (got_bus, got_emit):
                if not waiting.done():
                    waiting.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await waiting
            if got_emit.done() and not got_emit.cancelled():
                yield got_emit.result()
            if got_bus.done() and not got_bus.cancelled():
                frame = got_bus.result()
                if frame is None:
                    return
                yield frame
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await bus.aclose()


def _emit_frame(emit: AppEmit) -> bytes:
    data = json.dumps(emit.as_json(), default=str, separators=(",", ":"))
    return f"event: app_emit\ndata: {data}\n\n".encode()


def _bus_frame(event: BusEvent) -> bytes:
    data = BUS_ADAPTER.dump_json(event).decode()
    return f"id: {event.position}\nevent: {event.type}\ndata: {data}\n\n".encode()


def _reconnect(after: int) -> bytes:
    return f"event: reconnect\ndata: {json.dumps({'after': after})}\n\n".encode()


class SSEResponse(Response):
    """An ASGI response that streams ``body`` and stops it, deterministically, on disconnect.

    Unlike a plain streaming response, the body generator is always closed (``aclose``) before
    the response returns, so a subscriber never outlives its client.
    """

    def __init__(self, body: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> None:
        # no call to Response.__init__: there is no body to render, only a stream
        self.body_stream = body
        self.status_code = 200
        self.background = None
        self.headers_out = {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache, no-store",
            "x-accel-buffering": "no",
            **(headers or {}),
        }
        self.init_headers(self.headers_out)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") == "HEAD":  # the headers only: no stream is opened for nobody
            aclose = getattr(self.body_stream, "aclose", None)
            if aclose is not None:
                await aclose()
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        stream = asyncio.create_task(self._stream(send, self.raw_headers))
        watch = asyncio.create_task(_disconnected(receive))
        try:
            await asyncio.wait({stream, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (stream, watch):
                task.cancel()
            for task in (stream, watch):
                with contextlib.suppress(BaseException):
                    await task

            aclose = getattr(self.body_stream, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(BaseException):
                    await aclose()
        if stream.done() and not stream.cancelled() and stream.exception() is not None:
            # the client went away while we wrote (ASGI 2.4 servers raise OSError then)
            exc = stream.exception()
            if not isinstance(exc, OSError):
                log.warning("an event stream failed: %r", exc)

    async def _stream(self, send: Send, raw: list[tuple[bytes, bytes]]) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": raw})
        async for chunk in self.body_stream:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return
