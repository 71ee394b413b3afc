"""The PostgreSQL store: the full ``Store`` contract shared by many processes and machines.

Install with ``pip install 'fiduciary[postgres]'`` (psycopg 3 and psycopg_pool).

Opening
    ``await PostgresStore.open(dsn)`` opens a connection pool, applies the migrations of
    ``sql/postgres/migrations`` that ``schema_migrations`` does not list (each in one
    transaction, under an advisory lock, so processes starting together apply each once) and
    starts the listener connection (LISTEN/NOTIFY, below). ``PostgresStore(dsn)`` is cheap and
    opens on first use. A database whose schema is newer than this code is refused with
    ``StoreError``. Every connection works in UTC, with ``synchronous_commit = on`` and with
    ``idle_in_transaction_session_timeout`` (``idle_in_transaction_timeout``, 10 s): a process
    frozen inside a transaction would otherwise keep the runs rows it locked, and claims, which
    skip locked rows, could never take its runs over.

Group commit
    ``commit`` and ``create_run`` queue a request and wait. One flusher task writes every
    request queued by the time it runs (at most ``batch_size``) in ONE transaction, with a few
    statements for the whole batch rather than per request: lock the runs rows (``FOR NO KEY
    UPDATE``, in run_id order, so concurrent batches of several processes never deadlock), check
    each request's epoch and seqs in Python against the locked rows — a refused request
    (``StaleEpochError``, ``ConflictError``, ...) fails alone and writes nothing — then insert all
    the events, approvals and audit rows with one ``INSERT ... SELECT FROM unnest(...)`` each,
    update the runs rows with one ``UPDATE ... FROM unnest(...)``, send the notifications, and
    commit (each statement its own round trip: a pipeline would keep a frozen process's locks
    beyond ``idle_in_transaction_session_timeout``, see Opening). If the database
    refuses the batch anyway (a run created concurrently by another process, an approval id
    already used), the batch is rolled back and its requests are written again one per
    transaction, so only the culprit fails. A caller's future resolves, and listeners receive
    its events, only after the COMMIT. While a batch is written the next one accumulates:
    throughput grows with the number of runs committing at once. ``transactions`` counts the
    group-commit transactions.

Fencing
    A lease's epoch is checked under the runs row lock in the same transaction as the append,
    and ``acquire`` / ``claim_runnable`` increment it under the same lock: a worker that was
    paused while another took its run over gets ``StaleEpochError`` on its next commit. So does
    its next ``ledger_begin`` (the statement locks the runs row and checks the epoch before it
    inserts), so it cannot start a side effect either.

Live events across instances: LISTEN/NOTIFY
    Each batch sends ``pg_notify('fiduciary_events', ...)`` naming, per run, the range of seqs it
    committed (folded, at most ~7 KB per notification); PostgreSQL delivers notifications at
    commit, in commit order. One listener connection per store receives them; for runs that have
    subscribers here, a reader reads those committed events back (one query per burst) and hands
    them to the subscribers in seq order. The store's own commits are handed over directly,
    without that round trip, and its own notifications are skipped. So a client connected to one
    server instance follows a run driven by a worker on another machine, without polling. If the
    listener connection is lost, notifications may have been missed: every subscription is then
    ended as ``overflowed`` (the contract's "re-read from your last seq"), and the listener
    reconnects.

Workers
    ``claim_runnable`` takes up to ``limit`` runs that can be driven and that nobody leases
    (``FOR UPDATE SKIP LOCKED``: concurrent workers never wait for each other nor take the same
    run): runs ``running`` without a live lease (new, or left by a dead worker), suspended runs
    with a decision (``runs.wake_at``, set by a trigger when an approval leaves ``pending``, on
    whichever instance it is decided), and suspended runs whose pending approval expired. It
    leases them with a new epoch, as ``acquire`` does. The claim does not clear ``wake_at``:
    the drive's first commit (the run ``running`` again) does, so a worker that dies before it
    leaves the run claimable once the lease lapses. ``runs_to_resume`` lists the same runs
    without leasing them. A trigger notifies
    ``fiduciary_runnable`` whenever a run becomes claimable; ``wait_for_work`` wakes on it.
    ``fiduciary.worker.run_worker`` is the loop that uses both.

Principal locks
    ``principal_lock(actor_id)`` is held while a run writes for its principal (``Agent``
    takes it around admission, execution and settlement): a session-level advisory lock on a
    connection of its own, so one process at a time writes for a principal and the daily
    autonomous limit holds across processes. That connection has ``idle_session_timeout``
    (``lock_idle_seconds``, 10 s) and is kept alive every third of it: a frozen process loses
    its locks after that long instead of stalling the principal everywhere (``_postgres_locks``).

Cancel requests
    ``request_cancel`` records the request in ``cancel_requests`` and sends its id with
    ``pg_notify('fiduciary_cancel', ...)`` (one statement); every store's listener that has
    callbacks registered with ``on_cancel_request`` (a worker, a server's drives) reads the row
    and hands it to them: the process driving that run checks the requester against the run's
    principal, takes the run over from its own drive (a new epoch, never leaving it unleased),
    and records the cancellation. ``Agent.cancel`` sends one when another process holds the
    run's lease, sends it again every second, and waits for the run to end cancelled (or for
    the lease to lapse). A bare NOTIFY names no recorded request and is ignored.

Durability: ``synchronous_commit``
    ``"on"`` (the default): a commit returns once its WAL is flushed on the server. ``"off"``
    applies to the event batches only (``SET LOCAL``): a crash of the database server may lose
    the last few batches (never corrupting anything), a crash of a fiduciary process loses
    nothing committed — as ``SQLiteStore``'s ``NORMAL``. The ledger is always written with
    ``on``, whose WAL flush also makes durable every commit before it, so a side effect never
    starts while the record of it (or the events that led to it) could vanish.

Encoding
    Times are timestamptz (a naive datetime is refused with ``StoreError``), money numeric
    (read back as ``Decimal``), events and other structured values json (not jsonb: the text is
    kept as written). Structured values JSON has no type for (Decimal, UUID, datetime) are
    stored as pydantic's JSON form and read back as that form.

Errors
    Every psycopg error is translated at the boundary: a uniqueness violation becomes
    ``ConflictError``, anything else ``StoreError`` (with the psycopg error as its cause).

The SQL, the row codecs and the migration runner are in ``_postgres_sql``; the listener
connection in ``_postgres_listen``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, LiteralString
from uuid import UUID

try:
    import psycopg
    from psycopg_pool import AsyncConnectionPool
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "fiduciary.stores.postgres needs psycopg 3 and psycopg_pool: "
        "pip install 'fiduciary[postgres]'"
    ) from exc

from .._logs import logger
from ..events import Event, decode_event
from ..exceptions import ConflictError, FiduciaryError, StaleEpochError, StoreError
from ._postgres_listen import Listener
from ._postgres_locks import HeldLock, PrincipalLocks
from ._postgres_sql import (
    _AUTONOMOUS_SPEND,
    _CLAIM,
    _INSERT_APPROVALS,
    _INSERT_AUDIT,
    _INSERT_EVENTS,
    _INSERT_RUNS,
    _LEDGER_BEGIN,
    _NOTIFY,
    _NOTIFY_LIMIT,
    _REQUEST_CANCEL,
    _RUNS_TO_RESUME,
    _UPDATE_RUNS,
    EVENTS_CHANNEL,
    MIGRATIONS_DIR,
    RUNNABLE_CHANNEL,
    SCHEMA_PATH,
    Params,
    SynchronousCommit,
    _approval_from_row,
    _approval_params,
    _as_store_error,
    _audit_from_row,
    _audit_params,
    _columns,
    _configure_types,
    _Conn,
    _event_rows,
    _ledger_from_row,
    _run_from_row,
    _translate,
    _utc,
    _utc_or_none,
    apply_migrations,
    reserve_spend,
)
from ._rows import (
    _APPROVAL_COLUMNS,
    _AUDIT_COLUMNS,
    _LEDGER_COLUMNS,
    _RUN_COLUMNS,
    _copy_error,
    _json,
    _json_or_none,
    _seq_error,
)
from .base import (
    ApprovalRecord,
    ApprovalStatus,
    AuditRecord,
    BroadcastSubscription,
    CancelRequest,
    LedgerEntry,
    LedgerStatus,
    RunRecord,
    RunStatus,
)

if TYPE_CHECKING:
    from .base import CancelChannel, PrincipalLocking, Store

__all__ = [
    "EVENTS_CHANNEL",
    "MIGRATIONS_DIR",
    "RUNNABLE_CHANNEL",
    "SCHEMA_PATH",
    "PostgresStore",
    "apply_migrations",
]

log = logger("fiduciary.stores.postgres")

# --- live events --------------------------------------------------------------------------


# --- the store ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Request:
    """One queued ``commit`` or ``create_run``."""

    run_id: UUID
    epoch: int  # ignored for a create
    events: Sequence[Event]
    event_rows: list[Params]
    status: RunStatus | None
    approvals: list[Params]
    audit: list[Params]
    future: asyncio.Future[None]
    create: Params | None = None  # the runs row of a create_run


@dataclass(slots=True)
class _Plan:
    """The rows of the accepted requests of one batch, and the refusals."""

    accepted: list[_Request] = field(default_factory=list)
    refused: dict[int, FiduciaryError] = field(default_factory=dict)  # id(request) → error
    creates: list[Params] = field(default_factory=list)
    events: list[Params] = field(default_factory=list)
    approvals: list[Params] = field(default_factory=list)
    audit: list[Params] = field(default_factory=list)
    runs: dict[UUID, tuple[int, str | None, datetime | None]] = field(default_factory=dict)
    ranges: dict[UUID, tuple[int, int]] = field(default_factory=dict)


class PostgresStore:
    """The ``Store`` contract on PostgreSQL (see the module docstring)."""

    def __init__(
        self,
        dsn: str,
        *,
        min_connections: int = 1,
        max_connections: int = 10,
        batch_size: int = 512,
        synchronous_commit: SynchronousCommit = "on",
        connect_timeout: float = 10.0,
        idle_in_transaction_timeout: float = 10.0,
        notify: bool = True,
        lock_idle_seconds: float = 10.0,
    ) -> None:
        if synchronous_commit not in ("on", "off"):
            raise ValueError(
                f"synchronous_commit must be 'on' or 'off', not {synchronous_commit!r}"
            )
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if not 1 <= min_connections <= max_connections:
            raise ValueError("need 1 <= min_connections <= max_connections")
        self.dsn = dsn
        self.live_across_processes = notify
        """Subscriptions carry every process's commits (LISTEN/NOTIFY, when every process on
        the database notifies): followers need not poll."""
        self.batch_size = batch_size
        self.synchronous_commit: SynchronousCommit = synchronous_commit
        self.connect_timeout = connect_timeout
        # A process frozen inside a transaction (SIGSTOP, a VM pause) keeps the runs rows it
        # locked; the server ends such a session after this long, so its runs can be taken over.
        idle_ms = max(1, round(idle_in_transaction_timeout * 1000))
        self._options = (
            "-c TimeZone=UTC -c synchronous_commit=on "
            f"-c idle_in_transaction_session_timeout={idle_ms}"
        )
        self.notify = notify
        self.transactions = 0
        """Group-commit transactions committed by this store (a batch counts once)."""
        self.instance = uuid.uuid4().hex[:16]
        """Names this store's notifications, so that it skips its own."""
        self._min = min_connections
        self._max = max_connections
        self._pool: AsyncConnectionPool[_Conn] | None = None
        self._opening: asyncio.Task[None] | None = None
        self._closed = False
        self._pending: list[_Request] = []
        self._flusher: asyncio.Task[None] | None = None
        self._listener = Listener(instance=self.instance, connect=self._connect, fetch=self._fetch)
        self._locks = PrincipalLocks(self._connect, idle_seconds=lock_idle_seconds)

    @classmethod
    async def open(cls, dsn: str, **options: Any) -> PostgresStore:
        """Connect, migrate and start listening now rather than on first use."""
        store = cls(dsn, **options)
        await store._ready()
        return store

    # --- connections ----------------------------------------------------------------------
    async def _ready(self) -> AsyncConnectionPool[_Conn]:
        if self._closed:
            raise StoreError("the store is closed")
        if self._pool is not None:
            return self._pool
        if self._opening is None:
            self._opening = asyncio.create_task(self._open())
        try:
            await asyncio.shield(self._opening)
        except BaseException:
            if self._opening.done():
                self._opening = None  # a later call tries again
            raise
        if self._closed or self._pool is None:
            raise StoreError("the store is closed")
        return self._pool

    async def _connect(self) -> _Conn:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=max(1, round(self.connect_timeout)),
                options=self._options,
            )
        except psycopg.Error as exc:
            raise _translate(exc, "connecting") from exc
        _configure_types(conn)
        return conn

    async def _open(self) -> None:
        conn = await self._connect()
        try:
            await apply_migrations(conn)
        finally:
            await conn.close()

        async def configure(c: _Conn) -> None:
            _configure_types(c)

        pool: AsyncConnectionPool[_Conn] = AsyncConnectionPool(
            self.dsn,
            min_size=self._min,
            max_size=self._max,
            open=False,
            timeout=self.connect_timeout,
            kwargs={
                "autocommit": True,
                "options": self._options,
            },
            configure=configure,
            name=f"fiduciary-{self.instance}",
        )
        try:
            await pool.open(wait=True, timeout=self.connect_timeout)
        except Exception as exc:
            await pool.close()
            raise StoreError(f"cannot open a connection pool to PostgreSQL: {exc}") from exc
        self._listener.start()
        try:
            async with asyncio.timeout(self.connect_timeout):
                await self._listener.listening.wait()
        except TimeoutError:
            await self._listener.halt()
            await pool.close()
            raise StoreError("cannot start listening for notifications") from None
        self._pool = pool

    async def _fetch(self, sql: LiteralString, params: Params | dict[str, Any] = ()) -> list[Any]:
        pool = await self._ready()
        try:
            async with pool.connection() as conn:
                cur = await conn.execute(sql, params)
                return await cur.fetchall()
        except psycopg.Error as exc:  # psycopg_pool.PoolTimeout is one too
            raise _translate(exc) from exc

    async def _rowcount(self, sql: LiteralString, params: Params) -> int:
        pool = await self._ready()
        try:
            async with pool.connection() as conn:
                cur = await conn.execute(sql, params)
                return cur.rowcount
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    # --- group commit ---------------------------------------------------------------------
    async def _submit(self, request: _Request) -> None:
        await self._ready()
        self._pending.append(request)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        await request.future

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch = self._pending[: self.batch_size]
                del self._pending[: self.batch_size]
                live = [r for r in batch if not r.future.done()]  # a cancelled caller's skipped
                if live:
                    await self._write(live)
        finally:
            self._flusher = None

    async def _write(self, batch: list[_Request]) -> None:
        try:
            plan = await self._write_batch(batch)
        except psycopg.OperationalError as exc:
            # the connection is gone: whether the COMMIT happened is unknown, so nothing is
            # retried; the runs resume from whatever the database holds
            self._fail(batch, _translate(exc, "group commit"))
            return
        except psycopg.Error as exc:
            if len(batch) == 1:
                self._fail(batch, _translate(exc, "group commit"))
                return
            log.info("group commit of %d refused (%s); writing one by one", len(batch), exc)
            for request in batch:
                await self._write([request])
            return
        except BaseException as exc:
            self._fail(batch, _as_store_error(exc))
            if not isinstance(exc, Exception):
                raise
            return
        self.transactions += 1
        for request in batch:
            refusal = plan.refused.get(id(request))
            if refusal is not None:
                if not request.future.done():
                    request.future.set_exception(refusal)
                continue
            self._listener.fanout.publish(request.run_id, request.events)
            if not request.future.done():
                request.future.set_result(None)

    @staticmethod
    def _fail(batch: Iterable[_Request], error: FiduciaryError) -> None:
        for request in batch:
            if not request.future.done():
                request.future.set_exception(_copy_error(error))

    async def _write_batch(self, batch: list[_Request]) -> _Plan:
        pool = self._pool
        if pool is None:
            raise StoreError("the store is closed")
        run_ids = list({r.run_id for r in batch})
        approval_ids = [a[0] for r in batch for a in r.approvals]
        async with pool.connection() as conn, conn.transaction():
            if self.synchronous_commit == "off":
                await conn.execute("SET LOCAL synchronous_commit = off")
            # No pipeline mode here: until its sync, a pipeline keeps the session "active",
            # holding the row locks, beyond idle_in_transaction_session_timeout's reach, if
            # this process freezes. Statement by statement, the session is idle in transaction.
            locked = await conn.execute(
                "SELECT run_id, epoch, last_seq FROM runs WHERE run_id = ANY(%b::uuid[]) "
                "ORDER BY run_id FOR NO KEY UPDATE",
                (run_ids,),
                binary=True,
            )
            rows = await locked.fetchall()
            used: set[UUID] = set()
            if approval_ids:
                taken = await conn.execute(
                    "SELECT approval_id FROM approvals WHERE approval_id = ANY(%b::uuid[])",
                    (approval_ids,),
                    binary=True,
                )
                used = {row[0] for row in await taken.fetchall()}
            plan = self._plan(batch, {row[0]: (int(row[1]), int(row[2])) for row in rows}, used)
            await self._apply(conn, plan)
        return plan

    def _plan(
        self, batch: list[_Request], state: dict[UUID, tuple[int, int]], used: set[UUID]
    ) -> _Plan:
        """Check each request in order against the locked rows (and those before it)."""
        plan = _Plan()
        for r in batch:
            error = self._check(r, state, used)
            if error is not None:
                plan.refused[id(r)] = error
                continue
            plan.accepted.append(r)
            if r.create is not None:
                epoch, last = int(r.create[6]), 0
                plan.creates.append(r.create)
            else:
                epoch, last = state[r.run_id]
            new_last = last + len(r.events)
            state[r.run_id] = (epoch, new_last)
            used.update(a[0] for a in r.approvals)
            plan.events.extend(r.event_rows)
            plan.approvals.extend(r.approvals)
            plan.audit.extend(r.audit)
            if r.events:
                first = plan.ranges.get(r.run_id, (last + 1, 0))[0]
                plan.ranges[r.run_id] = (first, new_last)
            if r.create is None and (r.events or r.status is not None):
                _, status, updated = plan.runs.get(r.run_id, (0, None, None))
                plan.runs[r.run_id] = (
                    new_last,
                    r.status if r.status is not None else status,
                    r.events[-1].at if r.events else updated,
                )
        return plan

    @staticmethod
    def _check(
        r: _Request, state: dict[UUID, tuple[int, int]], used: set[UUID]
    ) -> FiduciaryError | None:
        if r.create is not None:
            if r.run_id in state:
                return ConflictError(f"run {r.run_id} already exists")
            return _seq_error(r.run_id, 0, r.events)
        current = state.get(r.run_id)
        if current is None:
            return StoreError(f"run {r.run_id} does not exist")
        epoch, last_seq = current
        if epoch != r.epoch:
            return StaleEpochError(f"run {r.run_id}: epoch {r.epoch} is stale (now {epoch})")
        seq_error = _seq_error(r.run_id, last_seq, r.events)
        if seq_error is not None:
            return seq_error
        for approval in r.approvals:
            if approval[0] in used:
                return ConflictError(f"approval {approval[0]} already exists")
        ids = [a[0] for a in r.approvals]
        if len(set(ids)) != len(ids):
            return ConflictError("the same approval twice in one commit")
        return None

    async def _apply(self, conn: _Conn, plan: _Plan) -> None:
        if plan.creates:
            await conn.execute(_INSERT_RUNS, _columns(plan.creates, 11), binary=True)
        if plan.events:
            await conn.execute(_INSERT_EVENTS, _columns(plan.events, 5), binary=True)
        if plan.approvals:
            await conn.execute(_INSERT_APPROVALS, _columns(plan.approvals, 20), binary=True)
        if plan.audit:
            await conn.execute(_INSERT_AUDIT, _columns(plan.audit, 13), binary=True)
        runs = plan.runs
        if runs:
            ids = list(runs)
            await conn.execute(
                _UPDATE_RUNS,
                (
                    ids,
                    [runs[i][0] for i in ids],
                    [runs[i][1] for i in ids],
                    [runs[i][2] for i in ids],
                ),
                binary=True,
            )
        if self.notify and plan.ranges:
            await conn.execute(_NOTIFY, (self._notifications(plan.ranges),), binary=True)

    def _notifications(self, ranges: dict[UUID, tuple[int, int]]) -> list[str]:
        payloads: list[str] = []
        parts: list[str] = []
        size = len(self.instance)
        for run_id, (first, last) in ranges.items():
            part = f"{run_id}:{first}:{last}"
            if parts and size + len(part) + 1 > _NOTIFY_LIMIT:
                payloads.append(" ".join([self.instance, *parts]))
                parts, size = [], len(self.instance)
            parts.append(part)
            size += len(part) + 1
        if parts:
            payloads.append(" ".join([self.instance, *parts]))
        return payloads

    # --- runs -----------------------------------------------------------------------------
    async def create_run(self, run: RunRecord, events: Sequence[Event] = ()) -> None:
        if self._closed:
            raise StoreError("the store is closed")
        row: Params = (
            run.run_id,
            run.principal,
            run.status,
            _utc(run.created_at),
            _utc(run.updated_at),
            len(events),
            run.epoch,
            run.lease_owner,
            _utc_or_none(run.lease_until),
            run.title,
            _json(list(run.scopes)),
        )
        request = _Request(
            run_id=run.run_id,
            epoch=run.epoch,
            events=tuple(events),
            event_rows=_event_rows(events),
            status=None,
            approvals=[],
            audit=[],
            future=asyncio.get_running_loop().create_future(),
            create=row,
        )
        await self._submit(request)

    async def get_run(self, run_id: UUID) -> RunRecord | None:
        rows = await self._fetch(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s", (run_id,))
        return _run_from_row(rows[0]) if rows else None

    async def list_runs(
        self,
        *,
        principal: str | None = None,
        status: RunStatus | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        # only the filters asked for, so that each query can use its index
        where = _where(("principal", principal), ("status", status))
        rows = await self._fetch(
            f"SELECT {_RUN_COLUMNS} FROM runs {where} "
            "ORDER BY created_at DESC, run_id DESC LIMIT %(limit)s",
            {"principal": principal, "status": status, "limit": limit},
        )
        return [_run_from_row(row) for row in rows]

    async def commit(
        self,
        run_id: UUID,
        *,
        epoch: int,
        events: Sequence[Event] = (),
        status: RunStatus | None = None,
        approvals: Sequence[ApprovalRecord] = (),
        audit: Sequence[AuditRecord] = (),
    ) -> None:
        if self._closed:
            raise StoreError("the store is closed")
        request = _Request(
            run_id=run_id,
            epoch=epoch,
            events=tuple(events),
            event_rows=_event_rows(events),
            status=status,
            approvals=[_approval_params(a) for a in approvals],
            audit=[_audit_params(a) for a in audit],
            future=asyncio.get_running_loop().create_future(),
        )
        await self._submit(request)

    async def read_events(
        self, run_id: UUID, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        rows = await self._fetch(
            "SELECT payload FROM events WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s",
            (run_id, after_seq, limit),
        )
        try:
            return [decode_event(payload) for (payload,) in rows]
        except ValueError as exc:  # pydantic.ValidationError is a ValueError
            raise StoreError(f"run {run_id}: a stored event cannot be decoded: {exc}") from exc

    async def acquire(
        self, run_id: UUID, *, owner: str, now: datetime, ttl_seconds: float
    ) -> RunRecord | None:
        rows = await self._fetch(
            "UPDATE runs SET lease_owner = %(owner)s, lease_until = %(until)s, "
            "epoch = epoch + 1 WHERE run_id = %(run_id)s AND (lease_owner IS NULL "
            "OR lease_until IS NULL OR lease_until <= %(now)s OR lease_owner = %(owner)s) "
            f"RETURNING {_RUN_COLUMNS}",
            {
                "owner": owner,
                "until": _utc(now) + timedelta(seconds=ttl_seconds),
                "run_id": run_id,
                "now": now,
            },
        )
        return _run_from_row(rows[0]) if rows else None

    async def renew(self, run_id: UUID, *, epoch: int, now: datetime, ttl_seconds: float) -> bool:
        count = await self._rowcount(
            "UPDATE runs SET lease_until = %s "
            "WHERE run_id = %s AND epoch = %s AND lease_owner IS NOT NULL",
            (_utc(now) + timedelta(seconds=ttl_seconds), run_id, epoch),
        )
        return count == 1

    async def release(self, run_id: UUID, *, epoch: int) -> None:
        await self._rowcount(
            "UPDATE runs SET lease_owner = NULL, lease_until = NULL "
            "WHERE run_id = %s AND epoch = %s",
            (run_id, epoch),
        )

    async def runs_to_resume(self, *, now: datetime, limit: int = 100) -> list[RunRecord]:
        rows = await self._fetch(_RUNS_TO_RESUME, {"now": _utc(now), "limit": limit})
        return [_run_from_row(row) for row in rows]

    # --- workers --------------------------------------------------------------------------
    async def claim_runnable(
        self,
        *,
        owner: str,
        now: datetime,
        ttl_seconds: float,
        limit: int = 1,
        exclude: Collection[UUID] = (),
    ) -> list[RunRecord]:
        """Lease up to ``limit`` runs that can be driven now and that nobody leases.

        Claimable: ``running`` with no live lease (new, or its worker died); suspended with a
        decision no drive has taken up yet (``wake_at``); suspended with a pending
        approval that expired. Each claimed run gets a new epoch, as with ``acquire``. Rows
        another worker is claiming at the same moment are skipped, not waited for. Oldest
        runs first. ``exclude``: runs the caller is driving itself (if their lease lapsed
        because it was slow, claiming them again would fence its own drive and drive them
        twice; another worker may take them over, which fences it properly).
        """
        if limit < 1:
            return []
        rows = await self._fetch(
            _CLAIM,
            {
                "now": _utc(now),
                "limit": limit,
                "owner": owner,
                "until": now + timedelta(seconds=ttl_seconds),
                "exclude": list(exclude),
            },
        )
        runs = [_run_from_row(row) for row in rows]
        runs.sort(key=lambda r: (r.created_at, str(r.run_id)))
        return runs

    async def mark_runnable(self, run_id: UUID) -> bool:
        """Ask the workers to continue a suspended or running run (e.g. a message was added).

        Returns False if the run does not exist or is finished. Workers are notified when the
        run is not leased; if it is, its holder's release wakes them.
        """
        count = await self._rowcount(
            "UPDATE runs SET wake_at = COALESCE(wake_at, now()) WHERE run_id = %s "
            "AND status IN ('running', 'awaiting_approval', 'awaiting_client_result')",
            (run_id,),
        )
        return count == 1

    @property
    def work_generation(self) -> int:
        """Increases whenever workers are told that a run may be claimable."""
        return self._listener.work_generation

    async def wait_for_work(self, *, since: int) -> int:
        """Wait until ``work_generation`` passes ``since``; return it. Bound it with a timeout:
        a run also becomes claimable when a lease or an approval lapses, which nobody notifies.
        """
        await self._ready()
        return await self._listener.wait_for_work(since)

    # --- approvals ------------------------------------------------------------------------
    # --- principal locks (PrincipalLocking) ------------------------------------------------
    def principal_lock(self, actor_id: str) -> contextlib.AbstractAsyncContextManager[HeldLock]:
        """Held while a run writes for ``actor_id``: one such section at a time, across every
        process on the database (see the module docstring, Principal locks)."""
        return self._locks.hold(actor_id)

    # --- cancel requests (CancelChannel) ---------------------------------------------------
    async def request_cancel(self, request: CancelRequest) -> None:
        await self._fetch(
            _REQUEST_CANCEL,
            {
                "request_id": request.request_id,
                "run_id": request.run_id,
                "by": request.by,
                "scopes": list(request.scopes),
                "reason": request.reason[:500],
            },
        )

    def on_cancel_request(self, callback: Callable[[CancelRequest], None]) -> Callable[[], None]:
        callbacks = self._listener.cancel_callbacks
        callbacks.append(callback)

        def stop() -> None:
            with contextlib.suppress(ValueError):
                callbacks.remove(callback)

        return stop

    async def get_approval(self, approval_id: UUID) -> ApprovalRecord | None:
        rows = await self._fetch(
            f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE approval_id = %s", (approval_id,)
        )
        return _approval_from_row(rows[0]) if rows else None

    async def list_approvals(
        self,
        *,
        principal: str | None = None,
        run_id: UUID | None = None,
        status: ApprovalStatus | None = None,
    ) -> list[ApprovalRecord]:
        where = _where(("principal", principal), ("run_id", run_id), ("status", status))
        rows = await self._fetch(
            f"SELECT {_APPROVAL_COLUMNS} FROM approvals {where} ORDER BY created_at, approval_id",
            {"principal": principal, "run_id": run_id, "status": status},
        )
        return [_approval_from_row(row) for row in rows]

    async def decide_approval(
        self, approval: ApprovalRecord, *, expected_status: ApprovalStatus = "pending"
    ) -> bool:
        p = _approval_params(approval)
        count = await self._rowcount(
            "UPDATE approvals SET run_id = %s, tool_use_id = %s, principal = %s, "
            "capability = %s, args = %s::json, args_digest = %s, tier = %s, amount_usd = %s, "
            "modifiable_fields = %s::text[], executor = %s, status = %s, created_at = %s, "
            "expires_at = %s, decided_by = %s, decided_at = %s, reason = %s, "
            "approved_args = %s::json, approved_digest = %s, client_result = %s::json "
            "WHERE approval_id = %s AND status = %s",
            (*p[1:9], list(approval.modifiable_fields), *p[10:], p[0], expected_status),
        )
        return count == 1

    # --- ledger ---------------------------------------------------------------------------
    async def ledger_begin(self, entry: LedgerEntry, *, epoch: int) -> LedgerEntry | None:
        # one statement: the epoch is checked under the runs row lock, with the insert (see
        # _LEDGER_BEGIN); synchronous_commit is on for every connection: the row is flushed
        rows = await self._fetch(
            _LEDGER_BEGIN,
            {
                "run_id": entry.run_id,
                "epoch": epoch,
                "key": entry.key,
                "tool_use_id": entry.tool_use_id,
                "capability": entry.capability,
                "status": entry.status,
                "started_at": _utc(entry.started_at),
                "finished_at": _utc_or_none(entry.finished_at),
                "result": _json_or_none(entry.result),
                "error": entry.error,
            },
        )
        current, inserted = rows[0]
        if current is None:
            raise StoreError(f"run {entry.run_id} does not exist")
        if int(current) != epoch:
            raise StaleEpochError(f"run {entry.run_id}: epoch {epoch} is stale (now {current})")
        if inserted:
            return None
        # a new statement, so a new snapshot: it sees the row that made the insert a no-op
        existing = await self.ledger_get(entry.key)
        if existing is None:
            raise StoreError(f"ledger entry {entry.key!r} conflicted but cannot be read")
        return existing

    async def ledger_finish(
        self,
        key: str,
        *,
        status: LedgerStatus,
        at: datetime,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        count = await self._rowcount(
            "UPDATE ledger SET status = %s, finished_at = %s, result = %s::json, error = %s "
            "WHERE key = %s",
            (status, _utc(at), _json_or_none(result), error, key),
        )
        if count != 1:
            raise StoreError(f"no ledger entry {key!r}")

    async def ledger_retry(self, key: str, *, at: datetime) -> bool:
        count = await self._rowcount(
            "UPDATE ledger SET status = 'started', started_at = %s, finished_at = NULL, "
            "result = NULL, error = NULL WHERE key = %s AND status = 'failed'",
            (_utc(at), key),
        )
        return count == 1

    async def ledger_get(self, key: str) -> LedgerEntry | None:
        rows = await self._fetch(f"SELECT {_LEDGER_COLUMNS} FROM ledger WHERE key = %s", (key,))
        return _ledger_from_row(rows[0]) if rows else None

    # --- audit and spend ------------------------------------------------------------------
    async def audit_records(self, run_id: UUID) -> list[AuditRecord]:
        rows = await self._fetch(
            f"SELECT {_AUDIT_COLUMNS} FROM audit WHERE run_id = %s ORDER BY id", (run_id,)
        )
        return [_audit_from_row(row) for row in rows]

    async def autonomous_spend(self, principal: str, *, since: datetime) -> Decimal:
        rows = await self._fetch(_AUTONOMOUS_SPEND, {"principal": principal, "since": _utc(since)})
        total: Decimal = rows[0][0]
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
        pool = await self._ready()
        try:
            async with pool.connection() as conn:
                return await reserve_spend(
                    conn,
                    principal=principal,
                    amount_usd=amount_usd,
                    limit=limit,
                    since=_utc(since),
                    key=key,
                    at=_utc(at),
                )
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    async def release_autonomous(self, key: str) -> None:
        await self._rowcount("DELETE FROM spend_reservations WHERE key = %s", (key,))

    # --- live events ----------------------------------------------------------------------
    def subscribe(self, run_id: UUID, *, buffer: int = 1024) -> BroadcastSubscription:
        """Committed events of a run, from this process and from every other one.

        On a store not opened yet, opening starts now and the subscription ends at once as
        ``overflowed`` when listening begins (its listener re-reads, then subscribes again):
        events committed before listening began could otherwise be missed.
        """
        if self._closed:
            raise StoreError("the store is closed")
        sub = self._listener.fanout.subscribe(run_id, buffer)
        if not self._listener.listening.is_set():
            if self._opening is None:
                self._opening = asyncio.get_running_loop().create_task(self._open())
            self._opening.add_done_callback(lambda _: sub.interrupt())
        return sub

    async def close(self) -> None:
        """Write the queued commits, end the subscriptions, close the connections. Idempotent."""
        if self._closed:
            return
        if self._flusher is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._flusher)
        if self._pending:
            pending, self._pending = self._pending, []
            await self._write(pending)
        self._closed = True
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
            with contextlib.suppress(BaseException):
                await self._opening
        await self._listener.close()
        await self._locks.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


def _where(*filters: tuple[LiteralString, object]) -> str:
    """``WHERE column = %(column)s AND ...`` for the filters that are not None (fixed names)."""
    wanted = [f"{column} = %({column})s" for column, value in filters if value is not None]
    return f"WHERE {' AND '.join(wanted)}" if wanted else ""


if TYPE_CHECKING:

    def _conforms(store: PostgresStore) -> Store:
        return store

    def _carries_cancels(store: PostgresStore) -> CancelChannel:
        return store

    def _locks_principals(store: PostgresStore) -> PrincipalLocking:
        return store
