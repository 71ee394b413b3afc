"""The writer of one drive: seqs, the fold, group commit, delivery after commit, the lease.

``emit`` stamps each draft with the run's next seq and the time, folds it into the transcript
at once (the loop reads its own writes), and queues it for the run's next commit; one
background flush commits everything emitted meanwhile in one transaction, then hands the
committed events to ``out``. ``barrier`` waits for that commit: the loop calls it before a
side effect that is not in the ledger, and where others must see what it wrote.

The ledger's writes join the log's commits: ``begin`` commits everything emitted so far with
a write's ``started`` row (one durable transaction where the store can: the side effect
starts next), ``finish`` queues the row's end for the next commit, and ``close`` is the
drive's last commit, which also releases the lease. The lease is renewed every third of its
length while the run is driven; a timer, not a task, waits for it (most drives end long
before the first renewal).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

from ..clock import Clock
from ..events import Draft, Event, stamp
from ..exceptions import StoreError
from ..stores.base import (
    ApprovalRecord,
    AuditRecord,
    LedgerEntry,
    LedgerFinish,
    RunRecord,
    RunStatus,
    Store,
)
from ..tracing import NO_DRIVE, DriveTrace
from .relay import Relay
from .transcript import Transcript

__all__ = ["DONE", "Writer"]

DONE: Any = object()  # end-of-stream marker on a drive's output queue


class Writer:
    """Records the events of one leased run (``run``'s epoch fences every commit)."""

    __slots__ = (
        "_approvals",
        "_audit",
        "_closed",
        "_create",
        "_cut",
        "_error",
        "_events",
        "_finishes",
        "_flusher",
        "_next_seq",
        "_recorded",
        "_renewal",
        "_renewing",
        "_status",
        "_timer",
        "_waiters",
        "clock",
        "delay",
        "epoch",
        "lease_seconds",
        "out",
        "run_id",
        "store",
        "t",
        "trace",
    )

    def __init__(
        self,
        store: Store,
        clock: Clock,
        run: RunRecord,
        transcript: Transcript,
        lease_seconds: float,
        *,
        delay: float = 0.0,
        unrecorded: Sequence[Event] = (),
        trace: DriveTrace = NO_DRIVE,
    ) -> None:
        self.store = store
        self.clock = clock
        self.run_id = run.run_id
        self.epoch = run.epoch
        self.t = transcript
        self.lease_seconds = lease_seconds
        self.delay = delay
        self.trace = trace
        self.out: Relay | None = None
        self._next_seq = transcript.last_seq + 1
        self._events: list[Event] = []
        self._status: RunStatus | None = None
        self._approvals: list[ApprovalRecord] = []
        self._audit: list[AuditRecord] = []
        self._finishes: list[LedgerFinish] = []
        self._closed = False
        self._flusher: asyncio.Task[None] | None = None
        self._waiters: list[asyncio.Future[None]] = []  # for the end of the flush under way
        self._timer: asyncio.TimerHandle | None = None
        self._error: Exception | None = None
        self._renewal: asyncio.TimerHandle | None = None
        # a new run not in the store yet: its first commit creates it with its first events
        self._create: RunRecord | None = run if unrecorded else None
        self._recorded = not unrecorded
        self._cut: int | None = None  # where the creation's events end, when not at the end
        if unrecorded:
            self._events.extend(unrecorded)
            self._schedule()
        self._renewing: asyncio.Task[None] | None = None

    # --- emission ------------------------------------------------------------------------
    def emit(
        self,
        *drafts: Draft,
        status: RunStatus | None = None,
        approvals: Sequence[ApprovalRecord] = (),
        audit: Sequence[AuditRecord] = (),
    ) -> list[Event]:
        """Record events: the loop sees them at once, listeners only after their commit.

        Nothing waits for the disk here: the events join the run's next commit (one
        transaction for everything emitted meanwhile). Raises the error of a failed commit.
        """
        if self._error is not None:
            raise self._error
        now = self.clock.now()
        built: list[Event] = []
        for draft in drafts:
            event = stamp(draft, self.run_id, self._next_seq, now)
            self._next_seq += 1
            self.t.apply(event)
            built.append(event)
        if self._create is not None and self._cut is None and (status or approvals or audit):
            # the run's creation holds its first events only: these, and what comes with them,
            # go in the commit beside it (one transaction where the store can)
            self._cut = len(self._events)
        self._events.extend(built)
        if status is not None:
            self._status = status
        self._approvals.extend(approvals)
        self._audit.extend(audit)
        self._schedule()
        return built

    def finish(self, done: LedgerFinish) -> None:
        """A ledger row's end, written with the next commit, even if that is refused or an
        earlier one failed (the effect happened: the drive's last barrier still writes it)."""
        self._finishes.append(done)
        self._schedule()

    @property
    def spending(self) -> bool:
        """Whether an uncommitted audit row counts toward the daily autonomous limit."""
        return any(r.spends for r in self._audit)

    def _schedule(self) -> None:
        """A commit of what is pending, ``delay`` seconds from the first of it (what is
        emitted meanwhile joins it), or at once after the commit under way."""
        if self._flusher is None and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.delay, self._start)

    def _start(self) -> None:
        self._timer = None
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())

    async def _quiet(self) -> None:
        """No commit under way nor scheduled (what is pending stays pending)."""
        while True:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._flusher is None:
                break
            await self._flushed()
        if self._error is not None:
            raise self._error

    def _flushed(self) -> asyncio.Future[None]:
        """A future of one waiter's own, resolved when the flush under way ends. Like
        ``shield(flusher)``, a waiter cancelled meanwhile cancels its future, never the flush;
        unlike it, the flush wakes the waiter itself (no outer future, one hop fewer)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    async def barrier(self) -> None:
        """Wait until everything emitted so far is committed (raises if a commit failed)."""
        if self._timer is not None:  # now rather than later
            self._timer.cancel()
            self._start()
        while self._flusher is not None:
            await self._flushed()
        if self._error is not None:
            raise self._error

    async def begin(self, entry: LedgerEntry) -> LedgerEntry | None:
        """Commit everything emitted so far and begin the ledger row ``entry`` (durably, in
        one transaction where the store can); the existing row if its key exists."""
        await self._quiet()
        try:
            return await self._commit(ledger_begin=entry)
        except BaseException as exc:
            self._failed(exc)
            raise

    async def close(self) -> None:
        """The drive's last commit: everything emitted, then the lease is released."""
        await self._quiet()
        try:
            await self._commit(release=True)
        except BaseException as exc:
            self._failed(exc)
            raise
        self._closed = True

    @property
    def closed(self) -> bool:
        """The last commit released the lease."""
        return self._closed

    async def _flush(self) -> None:
        try:
            while (
                self._events
                or self._status is not None
                or self._approvals
                or self._audit
                or self._finishes
            ):
                await self._commit()
        except BaseException as exc:  # the drive stops; the run resumes from the store
            self._failed(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._flusher = None
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _failed(self, exc: BaseException) -> None:
        self._error = exc if isinstance(exc, Exception) else StoreError(repr(exc))

    async def _commit(
        self, *, ledger_begin: LedgerEntry | None = None, release: bool = False
    ) -> LedgerEntry | None:
        """One commit of everything emitted meanwhile, the ledger rows' ends beside it."""
        events, self._events = self._events, []
        status, self._status = self._status, None
        approvals, self._approvals = self._approvals, []
        audit, self._audit = self._audit, []
        finishes, self._finishes = self._finishes, []
        # queued together, so that a store with group commit writes them in one transaction:
        # the ledger rows' ends (which stand even if the commit is refused: the effect
        # happened), the run's creation with its first events, the commit of the rest
        steps: list[Awaitable[LedgerEntry | None]] = [f.write(self.store) for f in finishes]
        create, self._create = self._create, None
        rest = events
        if create is not None:  # the creation: the events before any status, approval or audit
            cut, self._cut = self._cut, None
            first, rest = (events, []) if cut is None else (events[:cut], events[cut:])
            steps.append(self._created(create, first))
        if create is None or rest or status or approvals or audit or release or ledger_begin:
            steps.append(
                self.store.commit(
                    self.run_id,
                    epoch=self.epoch,
                    events=rest,
                    status=status,
                    approvals=approvals,
                    audit=audit,
                    release=release,
                    ledger_begin=ledger_begin,
                )
            )
        if len(steps) == 1:
            existing = await steps[0]
        else:
            outcomes = await _together(steps)
            for outcome in (outcomes[-1], *outcomes[:-1]):
                if isinstance(outcome, BaseException):
                    raise outcome
            existing = outcomes[-1] if isinstance(outcomes[-1], LedgerEntry) else None
        self._committed(rest)  # (a creation's events are handed out once it is made)
        return existing

    def _committed(self, events: Sequence[Event]) -> None:
        self.trace.committed(len(events))
        if self.out is not None:
            self.out.put_all(events)

    async def _created(self, run: RunRecord, events: Sequence[Event]) -> None:
        await self.store.create_run(run, events)
        self._recorded = True
        self._committed(events)

    @property
    def recorded(self) -> bool:
        """The run is in the store (a new run's first commit creates it)."""
        return self._recorded

    # --- the lease -----------------------------------------------------------------------
    def start_renewing(self) -> None:
        loop = asyncio.get_running_loop()
        self._renewal = loop.call_later(self.lease_seconds / 3, self._renew_soon)

    def _renew_soon(self) -> None:
        self._renewal = None
        self._renewing = asyncio.create_task(self._renew())

    async def _renew(self) -> None:
        ttl = self.lease_seconds
        ok = await self.store.renew(
            self.run_id, epoch=self.epoch, now=self.clock.now(), ttl_seconds=ttl
        )
        self._renewing = None
        if ok:
            loop = asyncio.get_running_loop()
            self._renewal = loop.call_later(ttl / 3, self._renew_soon)

    def stop_renewing(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None
        if self._renewing is not None:
            self._renewing.cancel()
            self._renewing = None

    def end(self) -> None:
        """The drive is over: no more events for ``out``."""
        if self.out is not None:
            self.out.put_nowait(DONE)


async def _together(steps: Sequence[Awaitable[Any]]) -> list[Any]:
    """Each step's result or error, all started at once (as tasks: a store with group commit
    queues them for the same transaction). ``gather(..., return_exceptions=True)`` without
    its future and callbacks: the caller wakes one loop iteration sooner."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    outcomes: list[Any] = []
    try:
        for task in tasks:
            try:
                outcomes.append(await task)
            except Exception as exc:
                outcomes.append(exc)
    except asyncio.CancelledError:  # as gather: cancelled, so are the steps
        for task in tasks:
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()  # retrieved, as gather does: no "never retrieved" report
        raise
    return outcomes
