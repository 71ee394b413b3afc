"""Private: following the global stream — read a page, wait for the commit bell, read again."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection
from typing import Any

from ..stores.base import GlobalEvents, RunStatus
from ._map import BusEvent, BusType, bus_event, run_event_types

__all__ = ["follow"]


async def follow(
    store: GlobalEvents,
    *,
    after: int = 0,
    principal: str | None = None,
    statuses: Collection[RunStatus] | None = None,
    types: Collection[BusType] | None = None,
    page: int = 500,
    wait_seconds: float = 0.5,
    stop: asyncio.Event | None = None,
    live: bool = True,
) -> AsyncIterator[list[BusEvent]]:
    """The bus events after the position ``after``, a batch per read, forever (until ``stop``
    is set): the stored ones first, then each commit's as the store's bell rings.

    An empty batch means nothing arrived for ``wait_seconds`` (a time to send a heartbeat);
    the store is read then anyway, for another process's commits that rang no bell here (a
    second process on a SQLite file). Filters as ``GlobalEvents.read_global``'s; ``types`` are
    the bus's (``run_status``, ``text``, ``tool_call``). ``live=False``: end once the events
    stored now have been read.
    """
    wanted = sorted(run_event_types(types))
    position = after
    while stop is None or not stop.is_set():
        since = store.commit_generation
        read = await store.read_global(
            after=position, limit=page, principal=principal, statuses=statuses, types=wanted
        )
        position = read.next_after
        batch = [b for b in map(bus_event, read.events) if b is not None]
        if batch:
            yield batch
        if read.more:
            continue  # more is stored: read on at once
        if not live:
            return
        if not await _rung(store, since, wait_seconds, stop):
            yield []


async def _rung(
    store: GlobalEvents, since: int, seconds: float, stop: asyncio.Event | None
) -> bool:
    """Wait for the bell (True), ``stop`` (True) or ``seconds`` (False)."""
    waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(store.wait_for_commits(since=since))}
    if stop is not None:
        waits.add(asyncio.ensure_future(stop.wait()))
    try:
        done, _ = await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
        for waiting in waits:
            with contextlib.suppress(BaseException):
                await waiting
    return bool(done)
