"""Following a run's events: the stored ones, then live ones as they are committed.

``Agent.events`` is this over the agent's store. Live events come from the store's subscription
(this process's commits at once, PostgreSQL's notifications), with a re-read of the store every
``poll_seconds`` for commits no subscription reports (another process on SQLite). No event is
yielded twice or skipped: the subscription starts before the past is read, and a gap in the
seqs it delivers is filled from the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from uuid import UUID

from ..events import Event
from ..stores.base import Store, existing_run, follow_poll_seconds

__all__ = ["run_events"]


async def run_events(
    store: Store,
    run_id: UUID,
    after_seq: int = 0,
    *,
    follow: bool = True,
    poll_seconds: float | None = None,
) -> AsyncGenerator[Event, None]:
    """``Agent.events`` over ``store``."""
    if poll_seconds is None:
        poll_seconds = follow_poll_seconds(store)
    await existing_run(store, run_id)
    last = after_seq
    # subscribe before reading the past, so nothing committed in between is missed
    sub = store.subscribe(run_id) if follow else None
    waiting: asyncio.Future[Event] | None = None
    try:
        for event in await store.read_events(run_id, after_seq=last):
            last = event.seq
            yield event
        if sub is None:
            return
        iterator = sub.__aiter__()
        while True:
            if waiting is None:
                waiting = asyncio.ensure_future(anext(iterator))
            # asyncio.wait leaves the pending read alone on timeout (wait_for would cancel
            # it, and with it the subscription)
            done, _ = await asyncio.wait({waiting}, timeout=poll_seconds)
            if not done:  # quiet here: another process may be committing
                for stored in await store.read_events(run_id, after_seq=last):
                    last = stored.seq
                    yield stored
                continue
            finished, waiting = waiting, None
            try:
                event = finished.result()
            except StopAsyncIteration:
                if not sub.overflowed:  # closed (the store is closing): stop following
                    return
                sub = store.subscribe(run_id)
                iterator = sub.__aiter__()
                for stored in await store.read_events(run_id, after_seq=last):
                    last = stored.seq
                    yield stored
                continue
            if event.seq <= last:
                continue
            if event.seq > last + 1:
                for stored in await store.read_events(
                    run_id, after_seq=last, limit=event.seq - last - 1
                ):
                    last = stored.seq
                    yield stored
            last = event.seq
            yield event
    finally:
        if waiting is not None:
            waiting.cancel()
        if sub is not None:
            sub.close()
