"""``Relay``: a drive's committed events, from its writer's task to the stream that yields them.

The writer puts each committed event (``put_nowait``), then ``DONE`` once the drive is over;
one reader takes them in order. It does what the ``asyncio.Queue`` it replaces did for this one
producer and one reader — unbounded, in order — without the queue's bookkeeping (join counts,
putters, a wake-up per item): the reader is woken once per commit and drains the batch.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from typing import Any

__all__ = ["Relay"]


class Relay:
    """Unbounded, one reader; ``items`` is read by the reader directly (``popleft``)."""

    __slots__ = ("_waiter", "items")

    def __init__(self) -> None:
        self.items: deque[Any] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: Any) -> None:
        self.items.append(item)
        self._wake()

    def put_all(self, items: Iterable[Any]) -> None:
        """Every item, in order, with one wake-up (a commit's events)."""
        self.items.extend(items)
        if self.items:
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        """Until there is an item (at once if there is one)."""
        if self.items:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None
