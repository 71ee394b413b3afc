"""The in-memory store: the full ``Store`` contract in dictionaries, for tests and benchmarks.

Nothing survives the process; everything else behaves as the durable stores do.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from ..events import Event
from ..exceptions import ConflictError, StoreError
from ._rules import epoch_refusal, seq_error
from .base import (
    ApprovalRecord,
    ApprovalStatus,
    ApprovalVote,
    AuditRecord,
    Broadcaster,
    BroadcastSubscription,
    GlobalEvent,
    GlobalPage,
    LedgerEntry,
    LedgerRow,
    LedgerStatus,
    RecordQuery,
    RunRecord,
    RunStatus,
)

__all__ = ["MemoryStore"]

_SUSPENDED: frozenset[RunStatus] = frozenset(
    {"awaiting_approval", "awaiting_client_result", "awaiting_input"}
)


class MemoryStore:
    def __init__(self) -> None:
        self._runs: dict[UUID, RunRecord] = {}
        self._events: dict[UUID, list[Event]] = {}
        self._global: list[Event] = []  # every committed event, in commit order (position - 1)
        self._approvals: dict[UUID, ApprovalRecord] = {}
        self._votes: dict[UUID, list[ApprovalVote]] = {}
        self._ledger: dict[str, LedgerEntry] = {}
        self._audit: list[AuditRecord] = []
        # key -> (principal, amount, at): reservations of the daily autonomous spend
        self._reserved: dict[str, tuple[str, Decimal, datetime]] = {}
        # the wake marker: runs with a decision that no drive has taken up yet (set when an
        # approval leaves pending, cleared by the commit that sets the run running or ends it)
        self._woken: set[UUID] = set()
        self._broadcaster = Broadcaster()
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")

    def _check_epoch(self, run_id: UUID, epoch: int) -> RunRecord:
        """The run, if ``epoch`` is its current epoch (the fencing of commit and ledger_begin)."""
        run = self._runs.get(run_id)
        error = epoch_refusal(run_id, epoch, None if run is None else run.epoch)
        if error is not None or run is None:
            raise error or StoreError(f"run {run_id} does not exist")
        return run

    # --- runs ----------------------------------------------------------------------------
    async def create_run(self, run: RunRecord, events: Sequence[Event] = ()) -> None:
        self._check_open()
        if run.run_id in self._runs:
            raise ConflictError(f"run {run.run_id} already exists")
        _check_seqs(run.run_id, 0, events)
        self._runs[run.run_id] = replace(run, last_seq=len(events))
        self._events[run.run_id] = list(events)
        self._global.extend(events)
        self._broadcaster.publish(run.run_id, events)

    async def get_run(self, run_id: UUID) -> RunRecord | None:
        self._check_open()
        return self._runs.get(run_id)

    async def list_runs(
        self,
        *,
        principal: str | None = None,
        status: RunStatus | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        self._check_open()
        runs = [
            r
            for r in self._runs.values()
            if (principal is None or r.principal == principal)
            and (status is None or r.status == status)
        ]
        runs.sort(key=lambda r: (r.created_at, str(r.run_id)), reverse=True)
        return runs[:limit]

    async def commit(
        self,
        run_id: UUID,
        *,
        epoch: int,
        events: Sequence[Event] = (),
        status: RunStatus | None = None,
        approvals: Sequence[ApprovalRecord] = (),
        audit: Sequence[AuditRecord] = (),
        release: bool = False,
        ledger_begin: LedgerEntry | None = None,
    ) -> LedgerEntry | None:
        self._check_open()
        run = self._check_epoch(run_id, epoch)
        if ledger_begin is not None and ledger_begin.run_id != run_id:
            raise StoreError(f"ledger row of run {ledger_begin.run_id} in a commit of {run_id}")
        _check_seqs(run_id, run.last_seq, events)
        for a in approvals:
            if a.approval_id in self._approvals:
                raise ConflictError(f"approval {a.approval_id} already exists")
        changes: dict[str, Any] = {"last_seq": run.last_seq + len(events)}
        if status is not None:
            changes["status"] = status
            if status not in _SUSPENDED:
                self._woken.discard(run_id)
        if events:
            changes["updated_at"] = events[-1].at
        if release:
            changes["lease_owner"] = changes["lease_until"] = None
        self._runs[run_id] = replace(run, **changes)
        self._events[run_id].extend(events)
        self._global.extend(events)
        for a in approvals:
            self._approvals[a.approval_id] = a
        self._audit.extend(audit)
        self._broadcaster.publish(run_id, events)
        if ledger_begin is None:
            return None
        existing = self._ledger.get(ledger_begin.key)
        if existing is None:
            self._ledger[ledger_begin.key] = ledger_begin
        return existing

    async def read_events(
        self, run_id: UUID, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        self._check_open()
        events = self._events.get(run_id, [])
        out = events[after_seq:] if after_seq >= 0 else events
        return out[:limit] if limit is not None else list(out)

    async def acquire(
        self, run_id: UUID, *, owner: str, now: datetime, ttl_seconds: float
    ) -> RunRecord | None:
        self._check_open()
        run = self._runs.get(run_id)
        if run is None:
            return None
        live = run.lease_owner is not None and run.lease_until is not None and run.lease_until > now
        if live and run.lease_owner != owner:
            return None
        run = replace(
            run,
            lease_owner=owner,
            lease_until=now + timedelta(seconds=ttl_seconds),
            epoch=run.epoch + 1,
        )
        self._runs[run_id] = run
        return run

    async def renew(self, run_id: UUID, *, epoch: int, now: datetime, ttl_seconds: float) -> bool:
        self._check_open()
        run = self._runs.get(run_id)
        if run is None or run.epoch != epoch or run.lease_owner is None:
            return False
        self._runs[run_id] = replace(run, lease_until=now + timedelta(seconds=ttl_seconds))
        return True

    async def release(self, run_id: UUID, *, epoch: int) -> None:
        self._check_open()
        run = self._runs.get(run_id)
        if run is not None and run.epoch == epoch:
            self._runs[run_id] = replace(run, lease_owner=None, lease_until=None)

    async def runs_to_resume(self, *, now: datetime, limit: int = 100) -> list[RunRecord]:
        self._check_open()
        expired = {
            a.run_id
            for a in self._approvals.values()
            if a.status == "pending" and a.expires_at <= now
        }
        out = [
            r
            for r in self._runs.values()
            if (r.lease_until is None or r.lease_until <= now)
            and (
                r.status == "running"
                or (r.status in _SUSPENDED and (r.run_id in self._woken or r.run_id in expired))
            )
        ]
        out.sort(key=lambda r: (r.created_at, str(r.run_id)))
        return out[:limit]

    # --- approvals ------------------------------------------------------------------------
    async def get_approval(self, approval_id: UUID) -> ApprovalRecord | None:
        self._check_open()
        return self._approvals.get(approval_id)

    async def list_approvals(
        self,
        *,
        principal: str | None = None,
        run_id: UUID | None = None,
        status: ApprovalStatus | None = None,
    ) -> list[ApprovalRecord]:
        self._check_open()
        out = [
            a
            for a in self._approvals.values()
            if (principal is None or a.principal == principal)
            and (run_id is None or a.run_id == run_id)
            and (status is None or a.status == status)
        ]
        out.sort(key=lambda a: (a.created_at, str(a.approval_id)))
        return out

    async def decide_approval(
        self, approval: ApprovalRecord, *, expected_status: ApprovalStatus = "pending"
    ) -> bool:
        self._check_open()
        current = self._approvals.get(approval.approval_id)
        if current is None or current.status != expected_status:
            return False
        self._approvals[approval.approval_id] = approval
        run = self._runs.get(approval.run_id)
        if (
            current.status == "pending"
            and approval.status != "pending"
            and run is not None
            and (run.status == "running" or run.status in _SUSPENDED)
        ):
            self._woken.add(approval.run_id)
        return True

    async def add_vote(self, vote: ApprovalVote) -> bool:
        self._check_open()
        current = self._approvals.get(vote.approval_id)
        if current is None or current.status != "pending":
            return False
        votes = self._votes.setdefault(vote.approval_id, [])
        if any(v.approver == vote.approver and v.args_digest == vote.args_digest for v in votes):
            return False
        votes.append(vote)
        return True

    async def list_votes(self, approval_id: UUID) -> list[ApprovalVote]:
        self._check_open()
        return list(self._votes.get(approval_id, ()))

    # --- ledger ---------------------------------------------------------------------------

    async def ledger_begin(self, entry: LedgerEntry, *, epoch: int) -> LedgerEntry | None:
        self._check_open()
        self._check_epoch(entry.run_id, epoch)
        existing = self._ledger.get(entry.key)
        if existing is not None:
            return existing
        self._ledger[entry.key] = entry
        return None

    async def ledger_finish(
        self,
        key: str,
        *,
        status: LedgerStatus,
        at: datetime,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        self._check_open()
        entry = self._ledger.get(key)
        if entry is None:
            raise StoreError(f"no ledger entry {key!r}")
        self._ledger[key] = replace(
            entry, status=status, finished_at=at, result=result, error=error
        )

    async def ledger_retry(self, key: str, *, at: datetime) -> bool:
        self._check_open()
        entry = self._ledger.get(key)
        if entry is None or entry.status != "failed":
            return False
        self._ledger[key] = replace(
            entry, status="started", started_at=at, finished_at=None, result=None, error=None
        )
        return True

    async def ledger_get(self, key: str) -> LedgerEntry | None:
        self._check_open()
        return self._ledger.get(key)

    async def find_ledger(self, query: RecordQuery) -> list[LedgerRow]:
        self._check_open()
        rows = [
            LedgerRow(self._runs[e.run_id].principal, e)
            for e in self._ledger.values()
            if query.matches(e.run_id, self._runs[e.run_id].principal, e.capability, e.started_at)
        ]
        rows.sort(key=lambda r: (r.entry.started_at, r.entry.key), reverse=True)
        return rows[: query.limit]

    # --- audit and spend ------------------------------------------------------------------
    async def audit_records(self, run_id: UUID) -> list[AuditRecord]:
        self._check_open()
        return [a for a in self._audit if a.run_id == run_id]

    async def find_audit(self, query: RecordQuery) -> list[AuditRecord]:
        self._check_open()
        found = [
            (a.at, i, a)
            for i, a in enumerate(self._audit)
            if query.matches(a.run_id, a.principal, a.capability, a.at)
        ]
        found.sort(key=lambda f: (f[0], f[1]), reverse=True)
        return [a for _, _, a in found[: query.limit]]

    async def autonomous_spend(self, principal: str, *, since: datetime) -> Decimal:
        self._check_open()
        return self._spend(principal, since)

    def _spend(self, principal: str, since: datetime) -> Decimal:
        total = Decimal(0)
        spent_keys: set[str | None] = set()
        for a in self._audit:
            if a.principal == principal and a.spends and a.amount_usd is not None:
                spent_keys.add(a.idempotency_key)
                if a.at >= since:
                    total += a.amount_usd
        for key, (who, amount, at) in self._reserved.items():
            if who == principal and at >= since and key not in spent_keys:
                total += amount
        return total

    async def reserve_autonomous(
        self,
        principal: str,
        amount_usd: Decimal,
        *,
        limit: Decimal,
        since: datetime,
        key: str,
        at: datetime,
    ) -> bool:
        self._check_open()
        # no await between the check and the insert: one transaction on one event loop
        if key in self._reserved:
            return True
        if self._spend(principal, since) + amount_usd > limit:
            return False
        self._reserved[key] = (principal, amount_usd, at)
        return True

    async def release_autonomous(self, key: str) -> None:
        self._check_open()
        self._reserved.pop(key, None)

    # --- live events ----------------------------------------------------------------------
    def subscribe(self, run_id: UUID, *, buffer: int = 1024) -> BroadcastSubscription:
        return self._broadcaster.subscribe(run_id, buffer)

    # --- the global order -----------------------------------------------------------------
    async def read_global(
        self,
        *,
        after: int = 0,
        limit: int = 500,
        principal: str | None = None,
        statuses: Collection[RunStatus] | None = None,
        types: Collection[str] | None = None,
    ) -> GlobalPage:
        self._check_open()
        first = max(after, 0)
        read = self._global[first : first + max(limit, 0)]
        out: list[GlobalEvent] = []
        for position, event in enumerate(read, start=first + 1):
            run = self._runs[event.run_id]
            if (
                (principal is None or run.principal == principal)
                and (statuses is None or run.status in statuses)
                and (types is None or event.type in types)
            ):
                out.append(GlobalEvent(position, run.principal, run.status, event))
        more = first + len(read) < len(self._global)
        return GlobalPage(out, first + len(read) if read else after, more)

    @property
    def commit_generation(self) -> int:
        return self._broadcaster.bell.generation

    async def wait_for_commits(self, *, since: int) -> int:
        return await self._broadcaster.bell.wait(since)

    async def close(self) -> None:
        self._closed = True
        self._broadcaster.close_all()


def _check_seqs(run_id: UUID, last_seq: int, events: Sequence[Event]) -> None:
    error = seq_error(run_id, last_seq, events)
    if error is not None:
        raise error
