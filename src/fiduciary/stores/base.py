"""The ``Store`` contract: what every backend (memory, SQLite, PostgreSQL) must do.

The store holds runs (status, lease, fencing epoch), events (primary key run_id, seq), the
idempotency ledger, approvals, audit records and the per-principal autonomous spend. One contract
test suite (``tests/contract``) runs against every implementation.

The contract is drawn as roles, each a small protocol: ``RunLog`` (runs and their events),
``Leases`` (who drives a run), ``Approvals``, ``Ledger``, ``Audit`` (with the autonomous spend),
``LiveEvents`` and ``GlobalEvents`` (every run's events in one order); ``Store`` is their union,
and what every backend implements. Stores may also
offer ``CancelChannel`` and ``PrincipalLocking`` (PostgreSQL), checked at run time.

Rules every implementation keeps:
- ``commit`` is all or nothing: its events, status change, approvals and audit rows land together.
- Events are appended with the next seqs (last_seq + 1, + 2 ...) or the commit is refused with
  ``ConflictError``; a commit with an epoch that is no longer the run's raises ``StaleEpochError``.
- ``ledger_begin`` is fenced the same way: it carries the holder's epoch, checked atomically with
  the insert, so a worker whose run was taken over cannot start a side effect either.
- Listeners (``subscribe``) see an event only after the commit that holds it has returned from the
  database, in seq order. To follow a run without a gap: subscribe, then read the past, then skip
  seqs already read.
- Every committed event also has a position in one global order (``GlobalEvents``): a reader
  that has read up to a position never sees a later commit appear before it, and the events
  of one run appear in seq order.
- Times are timezone-aware UTC.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, Protocol, runtime_checkable
from uuid import UUID, uuid4

from ..events import Event
from ..exceptions import RunError
from .broadcast import Broadcaster, BroadcastSubscription, CommitBell

__all__ = [
    "IDLE",
    "ApprovalRecord",
    "ApprovalStatus",
    "ApprovalVote",
    "Approvals",
    "Audit",
    "AuditRecord",
    "BroadcastSubscription",
    "Broadcaster",
    "CancelChannel",
    "CancelRequest",
    "CommitBell",
    "GlobalEvent",
    "GlobalEvents",
    "GlobalPage",
    "HeldPrincipalLock",
    "Leases",
    "Ledger",
    "LedgerEntry",
    "LedgerFinish",
    "LedgerRow",
    "LedgerStatus",
    "LiveEvents",
    "PrincipalLocking",
    "RecordQuery",
    "RunLog",
    "RunRecord",
    "RunStatus",
    "Store",
    "Subscription",
    "existing_run",
    "follow_poll_seconds",
]

RunStatus = Literal[
    "running",
    "awaiting_approval",
    "awaiting_client_result",
    "awaiting_input",
    "awaiting_child",  # a delegate call waits for the run it delegated to (fiduciary.delegation)
    "completed",
    "failed",
    "cancelled",
]
IDLE: frozenset[RunStatus] = frozenset({"completed", "failed", "cancelled"})
"""A run in one of these is driven by nobody until a new message continues it."""
# superseded: its call was regenerated (fresh arguments, a new approval); it can never run
ApprovalStatus = Literal["pending", "approved", "denied", "expired", "client_result", "superseded"]
LedgerStatus = Literal["started", "done", "failed"]


@dataclass(frozen=True, slots=True)
class RunRecord:
    run_id: UUID
    principal: str
    status: RunStatus
    created_at: datetime
    updated_at: datetime
    last_seq: int = 0
    epoch: int = 0
    lease_owner: str | None = None
    lease_until: datetime | None = None
    title: str = ""
    scopes: tuple[str, ...] = ()

    def with_(self, **changes: Any) -> RunRecord:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    approval_id: UUID
    run_id: UUID
    tool_use_id: str
    principal: str
    capability: str
    args: dict[str, Any]
    args_digest: str
    tier: Literal["confirm", "explicit"]
    amount_usd: Decimal | None
    modifiable_fields: tuple[str, ...]
    executor: Literal["server", "client", "person"]
    status: ApprovalStatus
    created_at: datetime
    expires_at: datetime
    decided_by: str | None = None
    decided_at: datetime | None = None
    reason: str | None = None
    approved_args: dict[str, Any] | None = None
    approved_digest: str | None = None
    client_result: Any = None

    def with_(self, **changes: Any) -> ApprovalRecord:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class ApprovalVote:
    """One approver's approval of a pending action under dual control, for the arguments
    whose digest it names (an edit starts a new set: other digests do not count with it)."""

    approval_id: UUID
    approver: str
    args_digest: str
    approved_args: dict[str, Any]
    tier: Literal["confirm", "explicit"]
    amount_usd: Decimal | None
    at: datetime


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    key: str
    run_id: UUID
    tool_use_id: str
    capability: str
    status: LedgerStatus
    started_at: datetime
    finished_at: datetime | None = None
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class LedgerFinish:
    """How a ledger row's call ended (``Ledger.ledger_finish``'s arguments, as a value)."""

    key: str
    status: LedgerStatus
    at: datetime
    result: Any = None
    error: str | None = None

    async def write(self, ledger: Ledger) -> None:
        """``ledger.ledger_finish`` with these arguments."""
        await ledger.ledger_finish(
            self.key, status=self.status, at=self.at, result=self.result, error=self.error
        )


@dataclass(frozen=True, slots=True)
class AuditRecord:
    run_id: UUID
    at: datetime
    principal: str
    capability: str
    kind: str
    tool_use_id: str
    outcome: str  # ok | error | rejected:<reason> | pending | ledger | unknown
    tier: str | None = None
    amount_usd: Decimal | None = None
    input: dict[str, Any] = field(default_factory=dict)
    output: str | None = None
    idempotency_key: str | None = None
    duration_ms: float | None = None

    @property
    def spends(self) -> bool:
        """Whether the row counts toward its principal's daily autonomous spend (an automatic
        call with an amount that acted, or may have): what ``autonomous_spend`` sums."""
        return (
            self.tier == "auto"
            and self.outcome in ("ok", "unknown")
            and self.amount_usd is not None
        )


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """A ledger row as ``Ledger.find_ledger`` reads it: with the principal of its run."""

    principal: str
    entry: LedgerEntry


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordQuery:
    """Which audit or ledger rows to read (``Audit.find_audit``, ``Ledger.find_ledger``).

    Every filter that is not None applies: the run, its principal, the capability, and a time
    range — ``since`` included, ``until`` excluded — over an audit row's ``at`` or a ledger
    row's ``started_at``. Rows come newest first, at most ``limit`` of them.
    """

    run_id: UUID | None = None
    principal: str | None = None
    capability: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError("limit must be at least 1")
        for name, value in (("since", self.since), ("until", self.until)):
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{name} must be timezone-aware")

    def matches(self, run_id: UUID, principal: str, capability: str, at: datetime) -> bool:
        """Whether a row of these values passes every filter (what the SQL's WHERE says)."""
        return (
            (self.run_id is None or run_id == self.run_id)
            and (self.principal is None or principal == self.principal)
            and (self.capability is None or capability == self.capability)
            and (self.since is None or at >= self.since)
            and (self.until is None or at < self.until)
        )


class Subscription(Protocol):
    """Committed events of one run, live. Ends when closed or when its buffer overflowed
    (``overflowed`` is then True and the listener must re-read from its last seq)."""

    @property
    def overflowed(self) -> bool: ...

    def __aiter__(self) -> AsyncIterator[Event]: ...

    def close(self) -> None: ...


class RunLog(Protocol):
    """Runs and their event logs: the role the loop writes through."""

    async def create_run(self, run: RunRecord, events: Sequence[Event] = ()) -> None:
        """Record a new run (and its first events) durably. ``ConflictError`` if it exists."""

    async def get_run(self, run_id: UUID) -> RunRecord | None: ...

    async def list_runs(
        self,
        *,
        principal: str | None = None,
        status: RunStatus | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        """Newest first."""

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
        """Append events (with the next seqs) and apply the rest, all or nothing.

        ``release``: then clear the run's lease as ``release`` does (the drive's last commit),
        in the same transaction where the store can; never if the commit is refused.

        ``ledger_begin``: then begin that ledger row as ``ledger_begin`` does (durably, fenced
        by the same epoch), returning the existing row if its key exists (else None). The
        commit and the row share one durable transaction where the store can; where it cannot,
        the commit is made first: the ledger row is never durable without the events that led
        to it, and a refused commit begins nothing."""

    async def read_events(
        self, run_id: UUID, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]: ...


class Leases(Protocol):
    """Who drives a run: a lease with an epoch that fences a stale holder's writes."""

    async def acquire(
        self, run_id: UUID, *, owner: str, now: datetime, ttl_seconds: float
    ) -> RunRecord | None:
        """Take the run's lease: free, lapsed or already ours → a new epoch; else None."""

    async def renew(
        self, run_id: UUID, *, epoch: int, now: datetime, ttl_seconds: float
    ) -> bool: ...

    async def release(self, run_id: UUID, *, epoch: int) -> None: ...

    async def runs_to_resume(self, *, now: datetime, limit: int = 100) -> list[RunRecord]:
        """Runs that can make progress and that nobody leases (no live lease), oldest first:
        ``running`` (new, or its process died); suspended with a decision no drive has taken
        up yet (an approval left ``pending`` — decided, expired, or a client's result — in any
        process: the run's wake marker, cleared by the commit that sets it ``running`` again or
        ends it); suspended with a pending approval that has expired by ``now``."""


class Approvals(Protocol):
    """Pending actions and the decisions on them (created by ``RunLog.commit``)."""

    async def get_approval(self, approval_id: UUID) -> ApprovalRecord | None: ...

    async def list_approvals(
        self,
        *,
        principal: str | None = None,
        run_id: UUID | None = None,
        status: ApprovalStatus | None = None,
    ) -> list[ApprovalRecord]: ...

    async def decide_approval(
        self, approval: ApprovalRecord, *, expected_status: ApprovalStatus = "pending"
    ) -> bool:
        """Write a decision only if the row is still in ``expected_status``; False otherwise."""

    async def add_vote(self, vote: ApprovalVote) -> bool:
        """Record a vote, in one statement, only if its approval is still ``pending`` and this
        approver has not voted for these arguments yet (a unique key); False otherwise. The
        vote is committed when this returns, so of two approvers voting at once the later
        one's ``list_votes`` sees both."""

    async def list_votes(self, approval_id: UUID) -> list[ApprovalVote]:
        """The votes on an approval, oldest first."""


class Ledger(Protocol):
    """The idempotency ledger: a write's effect happens at most once."""

    async def ledger_begin(self, entry: LedgerEntry, *, epoch: int) -> LedgerEntry | None:
        """Insert a ``started`` row durably. If the key exists, return the existing row.

        Fenced like ``commit``: ``epoch`` is the caller's lease epoch of ``entry.run_id``; if it
        is no longer the run's, ``StaleEpochError`` is raised and nothing is written (whether or
        not the key exists). The check and the insert are one atomic step. ``StoreError`` if the
        run does not exist.

        Results (here and in ``client_result``) must be JSON values: a durable store keeps JSON.
        """

    async def ledger_finish(
        self,
        key: str,
        *,
        status: LedgerStatus,
        at: datetime,
        result: Any = None,
        error: str | None = None,
    ) -> None: ...

    async def ledger_retry(self, key: str, *, at: datetime) -> bool:
        """Turn a ``failed`` row back into ``started`` for a new attempt (durably).

        Only for failures known to have had no effect (the caller decides). False if the row is
        not ``failed`` (someone else retried first, or it succeeded).
        """

    async def ledger_get(self, key: str) -> LedgerEntry | None: ...

    async def find_ledger(self, query: RecordQuery) -> list[LedgerRow]:
        """The ledger rows ``query`` selects (by their ``started_at``), newest first, each with
        its run's principal: what ``fiduciary ledger`` and ``GET /ledger`` show."""


class Audit(Protocol):
    """The audit trail (written by ``RunLog.commit``) and the autonomous spend it counts."""

    async def audit_records(self, run_id: UUID) -> list[AuditRecord]: ...

    async def find_audit(self, query: RecordQuery) -> list[AuditRecord]:
        """The audit rows ``query`` selects, newest first (by ``at``, then by the order they
        were written): what ``fiduciary audit`` and ``GET /audit`` show."""

    async def autonomous_spend(self, principal: str, *, since: datetime) -> Decimal:
        """USD auto-executed for a principal since a time: audit rows of tier auto, outcome ok
        or unknown (a call that may have acted counts), plus the reservations made since then
        whose call has no such audit row yet (it runs, or its outcome was lost in a crash)."""

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
        """Reserve ``amount_usd`` of the principal's autonomous spend for the call ``key``.

        The check (``autonomous_spend(since) + amount_usd <= limit``) and the insert are one
        transaction, so the limit holds for any number of agents and processes on the store.
        True if reserved, or if ``key`` holds a reservation already (the same call replayed
        after a crash: counted once); False if it would pass the limit (nothing reserved).
        """

    async def release_autonomous(self, key: str) -> None:
        """Delete the reservation of ``key`` (none: nothing happens). Only for a call that
        failed before any effect: any other reservation keeps counting."""


class LiveEvents(Protocol):
    """Committed events, as they are committed."""

    def subscribe(self, run_id: UUID, *, buffer: int = 1024) -> Subscription:
        """Committed events of a run as they are committed (not the past: read those first)."""


@dataclass(frozen=True, slots=True)
class GlobalEvent:
    """One committed event in the global order, with what a reader filters it by."""

    position: int
    """Where it is in the global order: read on with ``read_global(after=position)``. Only
    an opaque cursor: on PostgreSQL, positions are not increasing in the global order."""
    principal: str
    """The principal of the event's run."""
    run_status: RunStatus
    """The run's status when the event was read (not when it was committed)."""
    event: Event


@dataclass(frozen=True, slots=True)
class GlobalPage:
    """What one ``read_global`` read."""

    events: list[GlobalEvent]
    """The events read that pass the filters, in the global order."""
    next_after: int
    """Read on after this position: past every event read, whether it passed or not."""
    more: bool
    """The read stopped at its limit: more is stored, read on at once."""


class GlobalEvents(Protocol):
    """Every run's committed events in one global order: the source of a global event stream.

    The order is the commit order on SQLite and in memory. On PostgreSQL, where transactions
    of many processes commit in parallel, it is the order of their transaction ids, and an
    event is readable only once every transaction older than its own has ended (committed
    or rolled back): a reader that has read up to a position never sees an event appear
    before it later. So a long transaction anywhere on the database server delays the
    global stream (never a run's own stream) until it ends.
    """

    async def read_global(
        self,
        *,
        after: int = 0,
        limit: int = 500,
        principal: str | None = None,
        statuses: Collection[RunStatus] | None = None,
        types: Collection[str] | None = None,
    ) -> GlobalPage:
        """Read on in the global order after the position ``after`` (0: from the first), at
        most ``limit`` events, and return those that pass the filters: runs of ``principal``,
        runs whose status is now one of ``statuses``, events of one of ``types`` (``None``:
        any). Events that do not pass are read past (``GlobalPage.next_after``), so a reader
        of a few runs among many reads each event once, never the same ones again."""

    @property
    def commit_generation(self) -> int:
        """Increases whenever events may have become readable by ``read_global``."""

    async def wait_for_commits(self, *, since: int) -> int:
        """Wait until ``commit_generation`` passes ``since``; return it. Bound it with a
        timeout: another process's commits to the same SQLite file ring no bell here."""


class Store(RunLog, Leases, Approvals, Ledger, Audit, LiveEvents, GlobalEvents, Protocol):
    """The durable state of fiduciary: every role above, in one store. Every method is a
    coroutine (``subscribe`` aside) and every write is atomic. A part of fiduciary that needs
    one role asks for that role (a ``RunLog``, a ``Ledger`` ...); every store gives them all."""

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRequest:
    """Someone asked for a run to be cancelled, and another process holds its lease.

    ``by`` and ``scopes`` are the requester's: the process that acts on the request checks
    them against the run's principal (the principal itself, or ``admin``) before it stops
    anything. ``request_id`` names the request (sending it again notifies again). A request is
    valid for two minutes after it was last sent (by the database's clock).
    """

    run_id: UUID
    by: str
    scopes: tuple[str, ...] = ()
    reason: str = ""
    request_id: UUID = field(default_factory=uuid4)

    def allowed_for(self, principal: str) -> bool:
        """May this requester cancel a run of ``principal``?"""
        return self.by == principal or "admin" in self.scopes


@runtime_checkable
class CancelChannel(Protocol):
    """A store that carries cancel requests to the process driving a run (PostgreSQL).

    ``Agent.cancel`` sends one when another process holds the run's lease; workers and servers
    that drive runs listen, stop their drive of that run and record the cancellation.
    """

    async def request_cancel(self, request: CancelRequest) -> None:
        """Record ``request`` and tell every process listening (this one included); sending the
        same request again tells them again."""

    def on_cancel_request(self, callback: Callable[[CancelRequest], None]) -> Callable[[], None]:
        """Call ``callback`` for each request from now on; returns the function that stops it."""


class HeldPrincipalLock(Protocol):
    """A principal lock held by a section of writes."""

    async def verify(self) -> None:
        """Raise ``StoreError`` if the lock is no longer held (checked before each effect)."""


@runtime_checkable
class PrincipalLocking(Protocol):
    """A store whose principal locks hold across processes (PostgreSQL).

    ``Agent.principal_lock`` (writes of one principal, one at a time: admission with the daily
    limit's read, execution, settlement) also holds this lock when the store offers it, so the
    guarantee spans every process on the database rather than one.
    """

    def principal_lock(self, actor_id: str) -> AbstractAsyncContextManager[HeldPrincipalLock]:
        """Held while a run writes for ``actor_id``."""


async def existing_run(store: Store, run_id: UUID) -> RunRecord:
    """The run, or ``RunError("not_found")``."""
    run = await store.get_run(run_id)
    if run is None:
        raise RunError("not_found", f"no run {run_id}")
    return run


def follow_poll_seconds(store: Store, default: float = 0.5) -> float:
    """How often a follower of a run should re-read the store when nothing arrives.

    A store whose subscriptions carry other processes' commits (``live_across_processes``,
    PostgreSQL's LISTEN/NOTIFY) needs no polling: a lost listener ends its subscriptions as
    overflowed, so followers re-read anyway; 30 s is only a safety net. Other stores see other
    processes' commits (a CLI resuming a run in the same SQLite file) only by reading.
    """
    return 30.0 if getattr(store, "live_across_processes", False) else default
