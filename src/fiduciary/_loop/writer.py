"""The writer of one drive: seqs, the fold, group commit, delivery after commit, the lease.

``emit`` stamps each draft with the run's next seq and the time, folds it into the transcript
at once (the loop reads its own writes), and queues it for the run's next commit; one
background flush commits everything emitted meanwhile in one transaction, then hands the
committed events to ``out``. ``barrier`` waits for that commit: the loop calls it before any
side effect and before it stops. The lease is renewed every third of its length while the run
is driven; a timer, not a task, waits for it (most drives end long before the first renewal).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..clock import Clock
from ..events import Draft, Event, stamp
from ..exceptions import StoreError
from ..stores.base import ApprovalRecord, AuditRecord, RunRecord, RunStatus, Store
from ..tracing import NO_DRIVE, DriveTrace
from .transcript import Transcript

__all__ = ["DONE", "Writer"]

DONE: Any = object()  # end-of-stream marker on a drive's output queue


class Writer:
    """Records the events of one leased run (``run``'s epoch fences every commit)."""

    __slots__ = (
        "_approvals",
        "_audit",
        "_error",
        "_events",
        "_flusher",
        "_next_seq",
        "_renewal",
        "_renewing",
        "_status",
        "clock",
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
        trace: DriveTrace = NO_DRIVE,
    ) -> None:
        self.store = store
        self.clock = clock
        self.run_id = run.run_id
        self.epoch = run.epoch
        self.t = transcript
        self.lease_seconds = lease_seconds
        self.trace = trace
        self.out: asyncio.Queue[Any] | None = None
        self._next_seq = transcript.last_seq + 1
        self._events: list[Event] = []
        self._status: RunStatus | None = None
        self._approvals: list[ApprovalRecord] = []
        self._audit: list[AuditRecord] = []
        self._flusher: asyncio.Task[None] | None = None
        self._error: Exception | None = None
        self._renewal: asyncio.TimerHandle | None = None
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
        self._events.extend(built)
        if status is not None:
            self._status = status
        self._approvals.extend(approvals)
        self._audit.extend(audit)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        return built

    async def barrier(self) -> None:
        """Wait until everything emitted so far is committed (raises if a commit failed)."""
        while self._flusher is not None:
            await asyncio.shield(self._flusher)
        if self._error is not None:
            raise self._error

    async def _flush(self) -> None:
        try:
            while self._events or self._status is not None or self._approvals or self._audit:
                events, self._events = self._events, []
                status, self._status = self._status, None
                approvals, self._approvals = self._approvals, []
                audit, self._audit = self._audit, []
                await self.store.commit(
                    self.run_id,
                    epoch=self.epoch,
                    events=events,
                    status=status,
                    approvals=approvals,
                    audit=audit,
                )
                self.trace.committed(len(events))
                if self.out is not None:
                    for event in events:
                        self.out.put_nowait(event)
        except BaseException as exc:  # the drive stops; the run resumes from the store
            self._error = exc if isinstance(exc, Exception) else StoreError(repr(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._flusher = None

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

    def finish(self) -> None:
        """The drive is over: no more events for ``out``."""
        if self.out is not None:
            self.out.put_nowait(DONE)
