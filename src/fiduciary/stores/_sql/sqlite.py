"""Private: the SQLite dialect — ``SQLiteStore``, the embedded default, one file.

The reads and the one-statement writes are the shared core's (``core.SQLStore``); the
statements are in ``sqlite.sql``; this module opens the file, migrates it and writes every
request through its group commit (the requests themselves: ``sqlite_writer``).

Opening
    ``SQLiteStore(path)`` is cheap; the file is opened (created if missing) on first use, or
    eagerly with ``await SQLiteStore.open(path)``. Opening sets WAL mode and foreign keys and
    applies the migrations of ``sql/migrations`` (``NNNN_name.sql``) that ``schema_migrations``
    does not list yet, in order, each in one transaction with its ``schema_migrations`` row.
    A file whose schema is newer than this code is refused with ``StoreError``.

Group commit
    Every write (``create_run``, ``commit``, ``acquire``, ``renew``, ``release``,
    ``decide_approval``, ``ledger_begin``, ``ledger_finish``, ``ledger_retry``) queues a request
    and waits; its rows are encoded once, before it is queued. The first request of an
    event-loop iteration schedules a flush with ``loop.call_soon``; the flush writes every request
    queued by then (at most ``batch_size``; the rest go in the next flush) in ONE transaction, in
    the order they were queued, and a caller's future resolves only after the COMMIT of its
    transaction, with what its call returns (``acquire``'s new record, ``ledger_begin``'s
    existing row, ``decide_approval``'s bool ...). Listeners (``subscribe``) receive a commit's
    events only after that COMMIT, in seq order. ``transactions`` counts the write transactions
    committed, so group commit can be observed. A caller cancelled before the flush has its
    write skipped, except ``release``, ``renew``, ``ledger_finish`` and ``decide_approval``,
    which are written anyway (their effect must not depend on the caller still waiting).

    One failing request fails alone while its batch-mates commit. A batch is first written
    without savepoints: a commit checks its seqs in Python, then advances the run with one
    guarded ``UPDATE runs ... WHERE run_id = ? AND epoch = ? AND last_seq = ?``; when that
    matches no row, nothing was written and the run row says why (``StaleEpochError``,
    ``ConflictError``, ``StoreError``): the request is refused and the transaction goes on.
    ``ledger_begin`` is fenced the same way: it reads the run's epoch in the batch's transaction,
    just before its insert, and is refused (``StaleEpochError``, nothing written) if the epoch
    is no longer the caller's. The events and audit rows of the batch's commits are inserted at
    its end, one ``executemany`` each (no request of a batch reads them). Only if a request
    fails after it wrote (an approval that exists, an unexpected ``sqlite3`` error) is the whole
    transaction rolled back and the batch written again with each request inside its own
    SAVEPOINT, so that the failing one is rolled back alone.

    The SQL runs on the event-loop thread, with no hop to a worker thread: a small WAL
    transaction with ``synchronous=NORMAL`` takes tens of microseconds, less than a thread hop.
    The price is that a write waiting for another process's lock (``busy_timeout_ms``) holds the
    loop; writers from other processes are expected to be rare and short (a person deciding an
    approval from the CLI while a worker idles). Reads never wait in WAL mode.

Checkpoints
    The WAL is copied back into the database file by a thread of the store's own
    (``sqlite_checkpoint.Checkpointer``), not inside a COMMIT on the event-loop thread:
    the store's connection keeps SQLite's automatic checkpoint only as a bound
    (``wal_autocheckpoint`` at 4,000 pages, should the thread fall behind), and the thread,
    woken after every few hundred rows committed, runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a
    connection of its own (it never waits for nor blocks a reader or a writer, of any process;
    ``sqlite3`` releases the GIL while it works). A checkpoint changes nothing committed, and a
    crash in the middle of one is recovered on the next open. ``close`` stops the thread, then
    checkpoints once more on the store's connection before closing it.

Durability: ``synchronous="NORMAL"`` (the default, deliberately) vs ``"FULL"``
    In WAL mode with NORMAL, a commit is written to the WAL file but not fsynced. A process
    crash or ``kill -9`` loses nothing that was committed (the OS holds the writes); an OS crash
    or power loss may lose the last transactions, but never corrupts the database. With FULL
    the WAL is fsynced at every commit, so a commit also survives power loss, at the cost of
    one fsync per transaction. NORMAL is the default because a run appends many small events
    (streamed tokens) and fiduciary's recovery is built for losing a suffix of the log: a lost
    partial turn is retracted and asked again.

    What must not be lost is the record that a non-replayable side effect is about to happen,
    so a batch that holds a ``ledger_begin`` (or a ``ledger_retry``) is always committed with
    FULL (``synchronous`` cannot change inside a transaction: it is set before the batch's BEGIN
    and restored after its COMMIT), and ``ledger_begin`` returns only after that fsync. The
    fsync of the WAL also makes durable everything committed before it and the rest of its
    batch (the WAL is one file, appended in order). Hence, even with NORMAL, a side effect is
    never started while its ledger row or the events that led to it could still vanish in a
    power loss; the ``ledger_begin``s of one event-loop iteration share one fsync.

Global order (``read_global``)
    Each event's insert numbers it: ``events.gseq`` is the table's rowid (``max + 1``; the
    table is kept in commit order, its rows appended at its end, and (run_id, seq) is a unique
    index: migration 0005). The write lock serialises every process's transactions, so numbers
    follow commit order.
    Readers are woken by the commit bell of this process's commits; other processes' are
    found by reading.

Encoding
    Times are ISO-8601 UTC text with microseconds (ordered as text = ordered in time; a naive
    datetime is refused with ``StoreError``); decimals are TEXT read back with ``Decimal()``,
    never floats; events are stored as ``event.model_dump_json()`` and read back with
    ``decode_event``. Other structured values (approval args, ledger results, ...) are JSON:
    values JSON has no type for (Decimal, UUID, datetime, models) are stored as pydantic's JSON
    form and read back as that form (a Decimal becomes a string).

Errors
    Every ``sqlite3`` error is translated at the boundary: a uniqueness violation becomes
    ``ConflictError``, anything else ``StoreError`` (with the ``sqlite3`` error as its cause).

Several processes may open the same file. Each process's listeners see the events committed
by that process only; another process's commits are visible to ``read_events`` and the other
reads at once.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Sequence
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, LiteralString, TypeVar
from uuid import UUID

from ...exceptions import FiduciaryError, StoreError
from .._rules import copy_error, epoch_refusal
from ..base import Broadcaster, BroadcastSubscription, LedgerEntry, RunRecord
from ..transcripts import TranscribingBroadcaster, Transcripts
from .codec import Params
from .core import Append, Named, Reservation, SQLStore, WriteMode
from .migrations import Migration, load_migrations, to_apply
from .sqlite_checkpoint import BOUND_PAGES, Checkpointer
from .sqlite_writer import (
    DIALECT,
    QUERIES,
    Call,
    Commit,
    Create,
    Op,
    Refused,
    rollback_quietly,
    run_isolated,
    run_together,
    translate,
    ts,
)

if TYPE_CHECKING:
    from ..base import Store

__all__ = [
    "MIGRATIONS_DIR",
    "SCHEMA_PATH",
    "SQLiteStore",
    "Synchronous",
    "apply_migrations",
    "split_statements",
]

SQL_DIR = Path(__file__).parent.parent / "sql"
SCHEMA_PATH = SQL_DIR / "schema.sql"
MIGRATIONS_DIR = SQL_DIR / "migrations"

# Created by the migration runner before the first migration; identical to its definition in
# schema.sql (the schema test compares them). Never change it: it is migration zero.
_BOOTSTRAP_SQL = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TEXT NOT NULL
)"""

Synchronous = Literal["NORMAL", "FULL"]
T = TypeVar("T")


# --- migrations ---------------------------------------------------------------------------


def split_statements(script: str) -> list[str]:
    """Split a SQL script into statements (one ends where a line completes it)."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    leftover = "\n".join(
        line for line in buffer.splitlines() if not line.strip().startswith("--")
    ).strip()
    if leftover:
        raise StoreError(f"incomplete SQL statement at the end of a script: {leftover[:80]!r}")
    return statements


def apply_migrations(
    conn: sqlite3.Connection, migrations: Sequence[Migration] | None = None
) -> list[int]:
    """Apply the migrations ``schema_migrations`` does not list, in order; return their versions.

    ``conn`` must be in autocommit mode (``isolation_level=None``). Safe when several processes
    open a fresh file at once: the check is repeated under the write lock.
    """
    if migrations is None:
        migrations = load_migrations(MIGRATIONS_DIR)
    known = {m.version for m in migrations}

    def applied_versions() -> set[int] | None:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
        ).fetchone()
        if exists is None:
            return None
        return {int(v) for (v,) in conn.execute("SELECT version FROM schema_migrations")}

    try:
        if applied_versions() == known:
            return []  # up to date: no write lock taken
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(_BOOTSTRAP_SQL)
            done: list[int] = []
            for migration in to_apply(applied_versions() or set(), migrations):
                for statement in split_statements(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.name, ts(datetime.now(UTC))),
                )
                done.append(migration.version)
            conn.execute("COMMIT")
        except BaseException:
            rollback_quietly(conn)
            raise
    except sqlite3.Error as exc:
        raise translate(exc, "migrating the database") from exc
    return done


# --- the store ----------------------------------------------------------------------------


class SQLiteStore(SQLStore):
    """The ``Store`` contract on one SQLite file (see ``fiduciary.stores.sqlite``)."""

    dialect = DIALECT

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout_ms: int = 5000,
        batch_size: int = 256,
        transcripts: str | os.PathLike[str] | None = None,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if busy_timeout_ms < 0:
            raise ValueError("busy_timeout_ms must not be negative")
        self.path = os.fspath(path)
        self.synchronous: Synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self.batch_size = batch_size
        self.transactions = 0
        """Write transactions committed by this store (a batch of writes counts once)."""
        self._conn: sqlite3.Connection | None = None
        self._checkpointer: Checkpointer | None = None
        self._closed = False
        self._pending: list[Op[Any]] = []
        self._flush_handle: asyncio.Handle | None = None
        # transcripts=DIR: each run's log copied to DIR/<run_id>.jsonl after its commits
        self.transcripts = None if transcripts is None else Transcripts(transcripts, self)
        self._broadcaster = (
            Broadcaster() if self.transcripts is None else TranscribingBroadcaster(self.transcripts)
        )

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout_ms: int = 5000,
        batch_size: int = 256,
        transcripts: str | os.PathLike[str] | None = None,
    ) -> SQLiteStore:
        """Open the file now (create it, migrate it) rather than on first use."""
        store = cls(
            path,
            synchronous=synchronous,
            busy_timeout_ms=busy_timeout_ms,
            batch_size=batch_size,
            transcripts=transcripts,
        )
        store._connection()
        return store

    # --- connection -----------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError("the store is closed")
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise translate(exc, f"opening {self.path}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal" and self.path != ":memory:":
                raise StoreError(f"{self.path}: cannot use WAL mode (journal_mode is {mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
            apply_migrations(conn)
            if str(mode).lower() == "wal":
                # checkpoints on a thread of their own; SQLite's own only as a bound
                conn.execute(f"PRAGMA wal_autocheckpoint = {BOUND_PAGES}")
                self._checkpointer = Checkpointer(self.path, busy_timeout_ms=self.busy_timeout_ms)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise translate(exc, f"opening {self.path}") from exc
            raise
        return conn

    def _read(self, sql: str, params: Params | dict[str, Any] = ()) -> list[Any]:
        conn = self._connection()
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise translate(exc) from exc

    # --- the core's seams (core.SQLStore) --------------------------------------------------
    async def _fetch(self, sql: LiteralString, params: Params | dict[str, Any] = ()) -> list[Any]:
        # on the event-loop thread: a read in WAL mode never waits (see the module docstring)
        return self._read(sql, params)

    async def _write(self, sql: LiteralString, params: Named, mode: WriteMode = "plain") -> int:
        self._connection()

        def apply(conn: sqlite3.Connection) -> int:
            return conn.execute(sql, params).rowcount

        return await self._submit(Call(apply, full_sync=mode == "durable", always=mode == "always"))

    async def _append(self, append: Append) -> LedgerEntry | None:
        self._connection()
        if append.create is not None:
            await self._submit(Create(append))
            return None
        return await self._submit(Commit(append))

    async def _lease(self, params: dict[str, Any]) -> Sequence[Any] | None:
        self._connection()
        select = f"{QUERIES.select_runs} WHERE run_id = :run_id"

        def apply(conn: sqlite3.Connection) -> Sequence[Any] | None:
            if conn.execute(QUERIES.acquire, params).rowcount != 1:
                return None
            row: Sequence[Any] = conn.execute(select, params).fetchone()
            return row

        return await self._submit(Call(apply))

    # --- group commit ---------------------------------------------------------------------
    async def _submit(self, op: Op[T]) -> T:
        """Queue ``op`` for the next flush and wait until its transaction committed."""
        self._pending.append(op)
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)
        return await op.future

    def _flush(self) -> None:
        self._flush_handle = None
        batch = self._pending[: self.batch_size]
        del self._pending[: self.batch_size]
        if self._pending:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)
        if batch:
            self._write_batch(batch)

    def _write_batch(self, batch: list[Op[Any]]) -> None:
        # a cancelled caller's write is skipped (unless it is one that took effect at once
        # before group commit: release, renew, ledger_finish, decide_approval)
        live = [op for op in batch if op.always or not op.future.done()]
        if not live:
            return
        conn = self._conn
        if conn is None:  # closed underneath (cannot happen: requests open the connection)
            self._fail_all(live, StoreError("the store is closed"))
            return
        # synchronous cannot change inside a transaction: decide for the whole batch now
        full_sync = self.synchronous != "FULL" and any(op.full_sync for op in live)
        try:
            if full_sync:
                conn.execute("PRAGMA synchronous = FULL")
            try:
                outcomes = run_together(conn, live)
                if outcomes is None:  # a request failed after writing: isolate each one
                    outcomes = run_isolated(conn, live)
            except BaseException:
                rollback_quietly(conn)
                raise
            finally:
                if full_sync:  # outside the transaction now (committed or rolled back)
                    with suppress(sqlite3.Error):  # if it stays FULL, it is only slower
                        conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        except sqlite3.Error as exc:
            self._fail_all(live, translate(exc, "group commit"))
            return
        except BaseException as exc:
            self._fail_all(live, StoreError(f"group commit interrupted: {exc!r}"))
            raise
        self.transactions += 1
        if self._checkpointer is not None:
            self._checkpointer.committed(conn.total_changes)
        broadcaster = self._broadcaster
        for op, (ok, value) in zip(live, outcomes, strict=True):
            future = op.future
            if ok:
                op.committed(broadcaster)
                if not future.done():
                    future.set_result(value)
            elif not future.done():
                future.set_exception(value)

    @staticmethod
    def _fail_all(ops: list[Op[Any]], error: FiduciaryError) -> None:
        for op in ops:
            if not op.future.done():
                op.future.set_exception(copy_error(error))

    async def runs_to_resume(self, *, now: datetime, limit: int = 100) -> list[RunRecord]:
        # two statements, each on its own index (see runs_to_resume in sqlite.sql)
        params = {"now": ts(now), "limit": limit}
        rows = self._read(QUERIES.runs_to_resume, params) + self._read(QUERIES.runs_expired, params)
        runs = {run.run_id: run for run in map(DIALECT.codec.run_from_row, rows)}
        return sorted(runs.values(), key=lambda r: (r.created_at, str(r.run_id)))[:limit]

    # --- ledger ---------------------------------------------------------------------------
    async def ledger_begin(self, entry: LedgerEntry, *, epoch: int) -> LedgerEntry | None:
        self._connection()
        codec = DIALECT.codec
        params = codec.ledger_row(entry)
        run_key = params[1]

        def apply(conn: sqlite3.Connection) -> LedgerEntry | None:
            # fenced as a commit is, in the same transaction as the insert: a holder whose run
            # was taken over (a new epoch, maybe earlier in this very batch) starts nothing
            row = conn.execute(QUERIES.run_epoch, (run_key,)).fetchone()
            refusal = epoch_refusal(entry.run_id, epoch, None if row is None else int(row[0]))
            if refusal is not None:
                raise Refused(refusal)
            if conn.execute(QUERIES.insert_ledger, params).rowcount == 1:
                return None
            existing = conn.execute(QUERIES.get_ledger, {"key": entry.key}).fetchone()
            return codec.ledger_from_row(existing)

        # full_sync: the row is on disk before the caller starts the side effect
        return await self._submit(Call(apply, full_sync=True))

    # --- spend ----------------------------------------------------------------------------
    async def _reserve(self, r: Reservation) -> bool:
        self._connection()
        spend_params = {"principal": r.principal, "since": r.since}
        insert = (r.key, r.principal, str(r.amount_usd), r.at)

        def apply(conn: sqlite3.Connection) -> bool:
            # inside the batch's BEGIN IMMEDIATE: no other connection writes between the sum
            # and the insert, and earlier requests of this batch are visible
            if conn.execute(QUERIES.has_reservation, (r.key,)).fetchone():
                return True
            spent = self._spent(conn.execute(QUERIES.autonomous_spend, spend_params).fetchall())
            if spent + r.amount_usd > r.limit:
                return False
            conn.execute(QUERIES.insert_reservation, insert)
            return True

        # as durable as the audit rows it stands for (a ledger row's full sync, written next for
        # a write that goes through the ledger, makes it durable too: one WAL, in order)
        return await self._submit(Call(apply))

    # --- live events ----------------------------------------------------------------------
    def subscribe(self, run_id: UUID, *, buffer: int = 1024) -> BroadcastSubscription:
        if self._closed:
            raise StoreError("the store is closed")
        return self._broadcaster.subscribe(run_id, buffer)

    # --- the global order (GlobalEvents; read_global is the core's) -------------------------
    @property
    def commit_generation(self) -> int:
        return self._broadcaster.bell.generation

    async def wait_for_commits(self, *, since: int) -> int:
        """This process's commits ring it; other processes' are seen only by reading."""
        return await self._broadcaster.bell.wait(since)

    async def close(self) -> None:
        """Write the queued writes, end the subscriptions and close the file. Idempotent."""
        if self._closed:
            return
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        while self._pending:
            batch = self._pending[: self.batch_size]
            del self._pending[: self.batch_size]
            self._write_batch(batch)
        if self.transcripts is not None:  # the files caught up while the file is open
            await self.transcripts.close()
        self._closed = True
        self._broadcaster.close_all()
        if self._checkpointer is not None:
            self._checkpointer.stop()  # after the checkpoint it may be running
            self._checkpointer = None
        conn, self._conn = self._conn, None
        if conn is not None:
            # what the thread had not copied yet (closing the file's last connection
            # checkpoints too, but another process may still have it open); if it fails,
            # the WAL keeps it for the next checkpoint
            with suppress(sqlite3.Error):
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            try:
                conn.close()
            except sqlite3.Error as exc:
                raise translate(exc, "closing") from exc


if TYPE_CHECKING:

    def _conforms(store: SQLiteStore) -> Store:
        return store
