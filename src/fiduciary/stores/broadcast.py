"""Committed events handed to the listeners of this process: a ``Broadcaster`` per store (one
buffered ``BroadcastSubscription`` per listener of a run) and the ``CommitBell`` that wakes the
readers of the global order. A store publishes a commit only after it has returned from the
database, in seq order (the rule of ``stores/base.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from uuid import UUID

from ..events import Event

__all__ = ["BroadcastSubscription", "Broadcaster", "CommitBell"]


class _Queue:
    __slots__ = ("buffer", "closed", "overflowed", "queue")

    def __init__(self, buffer: int) -> None:
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self.buffer = buffer
        self.closed = False
        self.overflowed = False


class BroadcastSubscription:
    """One listener's view of a run's committed events.

    A slow listener never slows the run: when its buffer is full it is marked overflowed and its
    iteration ends, so it must re-read from its last seq (``Store.read_events``).
    """

    def __init__(self, owner: Broadcaster, run_id: UUID, buffer: int) -> None:
        self._owner = owner
        self._run_id = run_id
        self._q = _Queue(buffer)

    @property
    def overflowed(self) -> bool:
        return self._q.overflowed

    def put(self, event: Event) -> None:
        if self._q.closed:
            return
        if self._q.queue.qsize() >= self._q.buffer:
            self.interrupt()
            return
        self._q.queue.put_nowait(event)

    def interrupt(self) -> None:
        """End the subscription as overflowed: its listener must re-read from its last seq
        (what happens when its buffer is full; a store also does it when it may have missed
        events). Nothing if it is closed already."""
        if not self._q.closed:
            self._q.overflowed = True
            self.close()

    def close(self) -> None:
        if not self._q.closed:
            self._q.closed = True
            self._q.queue.put_nowait(None)
            self._owner._remove(self._run_id, self)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        while True:
            item = await self._q.queue.get()
            if item is None:
                return
            yield item


class CommitBell:
    """A generation counter to wait on: rung after commits (``GlobalEvents``'s wake-up)."""

    __slots__ = ("_waiters", "generation")

    def __init__(self) -> None:
        self.generation = 0
        self._waiters: asyncio.Event | None = None

    def ring(self) -> None:
        self.generation += 1
        waiters, self._waiters = self._waiters, None
        if waiters is not None:
            waiters.set()

    async def wait(self, since: int) -> int:
        """Wait until ``generation`` passes ``since``; return it."""
        while self.generation == since:
            if self._waiters is None:
                self._waiters = asyncio.Event()
            await self._waiters.wait()
        return self.generation


class Broadcaster:
    """In-process fan-out of committed events to the subscribers of each run; every publish
    also rings ``bell`` (the global stream's wake-up)."""

    def __init__(self) -> None:
        self._subs: dict[UUID, list[BroadcastSubscription]] = {}
        self.bell = CommitBell()

    def subscribe(self, run_id: UUID, buffer: int = 1024) -> BroadcastSubscription:
        sub = BroadcastSubscription(self, run_id, buffer)
        self._subs.setdefault(run_id, []).append(sub)
        return sub

    def publish(self, run_id: UUID, events: Sequence[Event]) -> None:
        if events:
            self.bell.ring()
        subs = self._subs.get(run_id)
        if not subs:
            return
        for sub in list(subs):
            for event in events:
                sub.put(event)

    def has_subscribers(self, run_id: UUID) -> bool:
        return run_id in self._subs

    def interrupt_all(self) -> None:
        """End every subscription as overflowed (``BroadcastSubscription.interrupt``); ring
        the bell (a global reader reads again)."""
        self.bell.ring()
        for subs in list(self._subs.values()):
            for sub in list(subs):
                sub.interrupt()

    def _remove(self, run_id: UUID, sub: BroadcastSubscription) -> None:
        subs = self._subs.get(run_id)
        if subs and sub in subs:
            subs.remove(sub)
            if not subs:
                del self._subs[run_id]

    def close_all(self) -> None:
        self.bell.ring()
        for subs in list(self._subs.values()):
            for sub in list(subs):
                sub.close()
