"""Private: ``PostgresStore``'s listener — one LISTEN connection per store.

It feeds the store's subscribers with the events other processes commit (``fiduciary_events``:
a notification names, per run, the range of seqs a batch committed; the events themselves are
read back, one query per burst), wakes the store's workers (``fiduciary_runnable``) and hands
cancel requests to whoever drives runs here (``fiduciary_cancel``: a request's id; the request
is read from ``cancel_requests``, so a NOTIFY that names no recorded request is ignored). If
the connection drops, notifications may have been lost: every subscription is ended as
overflowed (its follower re-reads from its last seq), the workers are woken, and it reconnects
(a cancel request's sender sends it again every second until the run ends).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from ..._logs import logger
from ...events import Event, decode_event
from ..base import Broadcaster, CancelRequest
from .codec import Params
from .postgres_writer import CANCEL_CHANNEL, EVENTS_CHANNEL, QUERIES, RUNNABLE_CHANNEL, Conn

log = logger("fiduciary.stores.postgres")

Fetch = Callable[[str, Params], Awaitable[list[Any]]]

_RECHECK_FIRST = 0.01  # seconds before a held-back global read is tried again, doubling ...
_RECHECK_MOST = 1.0  # ... up to this, until events arrive again


class Listener:
    """The LISTEN connection of one store, and what arrives on it."""

    def __init__(self, *, instance: str, connect: Callable[[], Awaitable[Conn]], fetch: Fetch):
        self.instance = instance
        self.fanout = Broadcaster()
        self.listening = asyncio.Event()
        """Set once LISTEN is in effect (subscriptions made before may have missed events)."""
        self.work_generation = 0
        """Increases whenever workers are told that a run may be claimable."""
        self._connect = connect
        self._fetch = fetch
        self._work = asyncio.Event()
        self._arrived: list[tuple[UUID, int, int]] = []
        self._arrival = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False
        self.cancel_callbacks: list[Callable[[CancelRequest], None]] = []
        self._reading: set[asyncio.Task[None]] = set()
        self._recheck: asyncio.TimerHandle | None = None
        self._recheck_delay = _RECHECK_FIRST

    def start(self) -> None:
        self._stopped = False
        self._tasks = [
            asyncio.create_task(self._listen(), name="fiduciary-pg-listener"),
            asyncio.create_task(self._read_arrivals(), name="fiduciary-pg-reader"),
        ]

    async def halt(self) -> None:
        """Stop listening (``start`` again to resume); subscriptions stay as they are."""
        self._stopped = True
        for task in [*self._tasks, *self._reading]:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self._tasks = []

    def recheck_soon(self) -> None:
        """Ring the commit bell again soon (a global read was held back)."""
        if self._recheck is not None or self._stopped:
            return
        delay = self._recheck_delay
        self._recheck_delay = min(delay * 2, _RECHECK_MOST)
        self._recheck = asyncio.get_running_loop().call_later(delay, self._recheck_now)

    def _recheck_now(self) -> None:
        self._recheck = None
        self.fanout.bell.ring()

    async def close(self) -> None:
        """Stop listening, end every subscription, wake the workers (the store is closing)."""
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        await self.halt()
        self.fanout.close_all()
        self.wake_workers()

    def wake_workers(self) -> None:
        self.work_generation += 1
        event, self._work = self._work, asyncio.Event()
        event.set()

    async def wait_for_work(self, since: int) -> int:
        if self.work_generation == since:
            await self._work.wait()
        return self.work_generation

    async def _listen(self) -> None:
        """Receive notifications until stopped, reconnecting if needed."""
        delay = 0.05
        first = True
        while not self._stopped:
            conn: Conn | None = None
            try:
                conn = await self._connect()
                await conn.execute(f"LISTEN {EVENTS_CHANNEL}")
                await conn.execute(f"LISTEN {RUNNABLE_CHANNEL}")
                await conn.execute(f"LISTEN {CANCEL_CHANNEL}")
                if not first:
                    # notifications may have been lost while disconnected
                    self.fanout.interrupt_all()
                    self.wake_workers()
                first = False
                delay = 0.05
                self.listening.set()
                async for notice in conn.notifies():
                    if notice.channel == RUNNABLE_CHANNEL:
                        self.wake_workers()
                    elif notice.channel == CANCEL_CHANNEL:
                        self._cancel_requested(notice.payload)
                    else:
                        self._arrive(notice.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._stopped:
                    return
                log.warning("lost the notification connection (%s); reconnecting", exc)
                self.fanout.interrupt_all()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()

    def _cancel_requested(self, payload: str) -> None:
        if not self.cancel_callbacks:
            return  # nobody drives runs here
        try:
            request_id = UUID(payload)
        except ValueError:
            log.warning("ignored a malformed cancel request: %.80r", payload)
            return
        task = asyncio.create_task(self._read_cancel(request_id), name="fiduciary-pg-cancel")
        self._reading.add(task)
        task.add_done_callback(self._reading.discard)

    async def _read_cancel(self, request_id: UUID) -> None:
        try:
            rows = await self._fetch(QUERIES.read_cancel, (request_id,))
        except Exception as exc:  # the sender sends it again
            log.warning("could not read cancel request %s (%s)", request_id, exc)
            return
        if not rows:  # never recorded, or too old (a replay): a NOTIFY anyone could send
            log.debug("ignored cancel request %s: no recent request has that id", request_id)
            return
        run_id, by, scopes, reason = rows[0]
        request = CancelRequest(
            run_id=run_id, by=by, scopes=tuple(scopes), reason=reason, request_id=request_id
        )
        for callback in list(self.cancel_callbacks):
            try:
                callback(request)
            except Exception:
                log.exception("a cancel request's callback failed (run %s)", request.run_id)

    def _arrive(self, payload: str) -> None:
        instance, _, body = payload.partition(" ")
        if instance == self.instance:
            return  # the store's own commit: already handed to its subscribers
        self._recheck_delay = _RECHECK_FIRST
        self.fanout.bell.ring()
        for part in body.split():
            try:
                run_text, first, last = part.split(":")
                run_id = UUID(run_text)
            except ValueError:
                log.warning("ignored a malformed notification: %.80r", part)
                continue
            if self.fanout.has_subscribers(run_id):
                self._arrived.append((run_id, int(first), int(last)))
        if self._arrived:
            self._arrival.set()

    async def _read_arrivals(self) -> None:
        """Read back the events other processes committed, for the runs followed here."""
        while not self._stopped:
            await self._arrival.wait()
            self._arrival.clear()
            arrived, self._arrived = self._arrived, []
            wanted = [a for a in arrived if self.fanout.has_subscribers(a[0])]
            if not wanted:
                continue
            try:
                rows = await self._fetch(
                    QUERIES.read_ranges,
                    ([a[0] for a in wanted], [a[1] for a in wanted], [a[2] for a in wanted]),
                )
                by_run: dict[UUID, list[Event]] = {}
                for run_id, payload in rows:
                    by_run.setdefault(run_id, []).append(decode_event(payload))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._stopped:
                    return
                log.warning("could not read notified events (%s); subscribers must re-read", exc)
                self.fanout.interrupt_all()
                continue
            for run_id, events in by_run.items():
                self.fanout.publish(run_id, events)
