"""Private: the PostgreSQL dialect — ``PostgresStore``, shared by many processes and machines.

The reads and the one-statement writes are the shared core's (``core.SQLStore``); the
statements are in ``postgres.sql``; the batch checks and writes in ``postgres_writer``.

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

Global order (``read_global``)
    Each event row records its transaction id (``xid``) and an identity number (``gseq``),
    by column defaults; the order is ``(xid, gseq)`` and a reader reads only rows older than
    every transaction in progress, so a late commit is never skipped (migration 0004 says
    why). The notifications ring the commit bell; a read held back by an older transaction
    rings it again a little later (``postgres_listen``).

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
    its locks after that long instead of stalling the principal everywhere (``postgres_locks``).

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

The listener connection is in ``postgres_listen``, the principal locks in ``postgres_locks``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, LiteralString
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool

from ..._logs import logger
from ...exceptions import StoreError
from .._rules import epoch_refusal
from ..base import BroadcastSubscription, CancelRequest, LedgerEntry, RunRecord
from ..transcripts import Transcripts
from .codec import Params
from .core import Append, Named, Reservation, SQLStore, WriteMode
from .migrations import Migration, load_migrations, to_apply
from .postgres_group import GroupCommit
from .postgres_listen import Listener
from .postgres_locks import HeldLock, PrincipalLocks
from .postgres_writer import (
    DIALECT,
    QUERIES,
    Conn,
    Request,
    SynchronousCommit,
    configure_types,
    spend_lock_key,
    translate,
    utc,
)

if TYPE_CHECKING:
    from ..base import CancelChannel, PrincipalLocking, Store

__all__ = ["MIGRATIONS_DIR", "SCHEMA_PATH", "PostgresStore", "apply_migrations"]

log = logger("fiduciary.stores.postgres")

SQL_DIR = Path(__file__).parent.parent / "sql" / "postgres"
SCHEMA_PATH = SQL_DIR / "schema.sql"
MIGRATIONS_DIR = SQL_DIR / "migrations"

# Created by the migration runner before the first migration; identical to its definition in
# schema.sql (the schema test compares the catalogs). Never change it: it is migration zero.
_BOOTSTRAP_SQL = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL
)"""
# pg_advisory_xact_lock key of the migration runner ("fiduciar" in ASCII).
_MIGRATION_LOCK = 0x6669647563696172
_LEDGER_FIELDS = (
    "key",
    "run_id",
    "tool_use_id",
    "capability",
    "status",
    "started_at",
    "finished_at",
    "result",
    "error",
)


async def apply_migrations(conn: Conn, migrations: Sequence[Migration] | None = None) -> list[int]:
    """Apply the migrations ``schema_migrations`` does not list, in order; return their versions.

    ``conn`` must be in autocommit mode. Safe when several processes open a fresh database at
    once: the check is repeated under a transaction-level advisory lock.
    """
    if migrations is None:
        migrations = load_migrations(MIGRATIONS_DIR)
    known = {m.version for m in migrations}

    async def applied_versions() -> set[int] | None:
        cur = await conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL")
        row = await cur.fetchone()
        if row is None or not row[0]:
            return None
        cur = await conn.execute("SELECT version FROM schema_migrations")
        return {int(v) for (v,) in await cur.fetchall()}

    try:
        if await applied_versions() == known:
            return []  # up to date: no lock taken
        done: list[int] = []
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            await conn.execute(_BOOTSTRAP_SQL)
            for migration in to_apply(await applied_versions() or set(), migrations):
                # no parameters: the simple query protocol runs the whole script
                await conn.execute(migration.sql)  # the package's own files, never user input
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, %s)",
                    (migration.version, migration.name, datetime.now(UTC)),
                )
                done.append(migration.version)
    except psycopg.Error as exc:
        raise translate(exc, "migrating the database") from exc
    return done


class PostgresStore(SQLStore):
    """The ``Store`` contract on PostgreSQL (see ``fiduciary.stores.postgres``)."""

    dialect = DIALECT

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
        transcripts: str | os.PathLike[str] | None = None,
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
        self.instance = uuid.uuid4().hex[:16]
        """Names this store's notifications, so that it skips its own."""
        self._min = min_connections
        self._max = max_connections
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._opening: asyncio.Task[None] | None = None
        self._closed = False
        self._listener = Listener(instance=self.instance, connect=self._connect, fetch=self._fetch)
        self._group = GroupCommit(
            pool=lambda: self._pool,
            listener=self._listener,
            instance=self.instance,
            batch_size=batch_size,
            synchronous_commit=synchronous_commit,
            notify=notify,
            committed=self._committed,
        )
        self._locks = PrincipalLocks(self._connect, idle_seconds=lock_idle_seconds)
        # transcripts=DIR: the log of each run this process commits to, copied to
        # DIR/<run_id>.jsonl after its commits (other processes' commits are theirs to copy)
        self.transcripts = None if transcripts is None else Transcripts(transcripts, self)

    def _committed(self, run_id: uuid.UUID) -> None:
        """After a commit of ``run_id``'s events (the group commit's callback)."""
        if self.transcripts is not None:
            self.transcripts.committed(run_id)

    @property
    def transactions(self) -> int:
        """Group-commit transactions committed by this store (a batch counts once)."""
        return self._group.transactions

    @classmethod
    async def open(cls, dsn: str, **options: Any) -> PostgresStore:
        """Connect, migrate and start listening now rather than on first use."""
        store = cls(dsn, **options)
        await store._ready()
        return store

    # --- connections ----------------------------------------------------------------------
    async def _ready(self) -> AsyncConnectionPool[Conn]:
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

    async def _connect(self) -> Conn:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=max(1, round(self.connect_timeout)),
                options=self._options,
            )
        except psycopg.Error as exc:
            raise translate(exc, "connecting") from exc
        configure_types(conn)
        return conn

    async def _open(self) -> None:
        conn = await self._connect()
        try:
            await apply_migrations(conn)
        finally:
            await conn.close()

        async def configure(c: Conn) -> None:
            configure_types(c)

        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
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
            raise translate(exc) from exc

    async def _rowcount(self, sql: LiteralString, params: Params | dict[str, Any]) -> int:
        pool = await self._ready()
        try:
            async with pool.connection() as conn:
                cur = await conn.execute(sql, params)
                return cur.rowcount
        except psycopg.Error as exc:
            raise translate(exc) from exc

    # --- the core's seams (core.SQLStore) --------------------------------------------------
    async def _write(self, sql: LiteralString, params: Named, mode: WriteMode = "plain") -> int:
        # every connection commits with synchronous_commit = on: each write is durable, and
        # it is one statement the server finishes even if its caller is cancelled
        return await self._rowcount(sql, params)

    async def _append(self, append: Append) -> LedgerEntry | None:
        if self._closed:
            raise StoreError("the store is closed")
        await self._ready()
        await self._group.submit(Request(append, asyncio.get_running_loop().create_future()))
        if append.release:  # after the batch committed it (its rows are planned per kind)
            await self.release(append.run_id, epoch=append.epoch)
        if append.ledger is not None:  # after the events that led to it (its own statement)
            return await self.ledger_begin(append.ledger, epoch=append.epoch)
        return None

    async def _lease(self, params: dict[str, Any]) -> Sequence[Any] | None:
        rows = await self._fetch(QUERIES.acquire, params)
        return rows[0] if rows else None

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
            QUERIES.claim,
            {
                "now": utc(now),
                "limit": limit,
                "owner": owner,
                "until": now + timedelta(seconds=ttl_seconds),
                "exclude": list(exclude),
            },
        )
        runs = [DIALECT.codec.run_from_row(row) for row in rows]
        runs.sort(key=lambda r: (r.created_at, str(r.run_id)))
        return runs

    async def mark_runnable(self, run_id: UUID) -> bool:
        """Ask the workers to continue a suspended or running run (e.g. a message was added).

        Returns False if the run does not exist or is finished. Workers are notified when the
        run is not leased; if it is, its holder's release wakes them.
        """
        count = await self._rowcount(QUERIES.mark_runnable, (run_id,))
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

    # --- principal locks (PrincipalLocking) ------------------------------------------------
    def principal_lock(self, actor_id: str) -> contextlib.AbstractAsyncContextManager[HeldLock]:
        """Held while a run writes for ``actor_id``: one such section at a time, across every
        process on the database (see the module docstring, Principal locks)."""
        return self._locks.hold(actor_id)

    # --- cancel requests (CancelChannel) ---------------------------------------------------
    async def request_cancel(self, request: CancelRequest) -> None:
        await self._fetch(
            QUERIES.request_cancel,
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

    # --- ledger ---------------------------------------------------------------------------
    async def ledger_begin(self, entry: LedgerEntry, *, epoch: int) -> LedgerEntry | None:
        # one statement: the epoch is checked under the runs row lock, with the insert (see
        # _LEDGER_BEGIN); synchronous_commit is on for every connection: the row is flushed
        row = DIALECT.codec.ledger_row(entry)
        params = dict(zip(_LEDGER_FIELDS, row, strict=True))
        params["epoch"] = epoch
        rows = await self._fetch(QUERIES.ledger_begin, params)
        current, inserted = rows[0]
        refusal = epoch_refusal(entry.run_id, epoch, None if current is None else int(current))
        if refusal is not None:
            raise refusal
        if inserted:
            return None
        # a new statement, so a new snapshot: it sees the row that made the insert a no-op
        existing = await self.ledger_get(entry.key)
        if existing is None:
            raise StoreError(f"ledger entry {entry.key!r} conflicted but cannot be read")
        return existing

    async def _reserve(self, r: Reservation) -> bool:
        """On one connection, in one transaction: the principal's reservations are serialised
        by an advisory lock; each statement after it reads a new snapshot (READ COMMITTED), so
        it sees every reservation committed before the lock was granted."""
        pool = await self._ready()
        try:
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(QUERIES.spend_lock, (spend_lock_key(r.principal),))
                cur = await conn.execute(QUERIES.has_reservation, (r.key,))
                if await cur.fetchone() is not None:
                    return True
                cur = await conn.execute(
                    QUERIES.autonomous_spend, {"principal": r.principal, "since": r.since}
                )
                if self._spent(await cur.fetchall()) + r.amount_usd > r.limit:
                    return False
                await conn.execute(
                    QUERIES.insert_reservation, (r.key, r.principal, r.amount_usd, r.at)
                )
                return True
        except psycopg.Error as exc:
            raise translate(exc) from exc

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

    # --- the global order (GlobalEvents; read_global is the core's) -------------------------
    def _held_back(self) -> None:
        self._listener.recheck_soon()

    @property
    def commit_generation(self) -> int:
        return self._listener.fanout.bell.generation

    async def wait_for_commits(self, *, since: int) -> int:
        """Every process's commits ring it (LISTEN/NOTIFY), and a held-back read again soon."""
        await self._ready()
        return await self._listener.fanout.bell.wait(since)

    async def close(self) -> None:
        """Write the queued commits, end the subscriptions, close the connections. Idempotent."""
        if self._closed:
            return
        await self._group.drain()
        if self.transcripts is not None:  # the files caught up while the pool is open
            await self.transcripts.close()
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


if TYPE_CHECKING:

    def _conforms(store: PostgresStore) -> Store:
        return store

    def _carries_cancels(store: PostgresStore) -> CancelChannel:
        return store

    def _locks_principals(store: PostgresStore) -> PrincipalLocking:
        return store
