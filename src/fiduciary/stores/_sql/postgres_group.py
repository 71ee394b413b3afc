"""Private: PostgreSQL's group commit — the queued appends of concurrent runs written in one
transaction per batch (see ``postgres``'s "Group commit" for the promise; the checks and the
statements are ``postgres_writer``'s)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool

from ..._logs import logger
from ...exceptions import FiduciaryError, StoreError
from .._rules import copy_error
from .postgres_listen import Listener
from .postgres_writer import (
    QUERIES,
    Conn,
    Request,
    SynchronousCommit,
    as_store_error,
    notifications,
    plan,
    translate,
    write_plan,
)

__all__ = ["GroupCommit"]

log = logger("fiduciary.stores.postgres")


class GroupCommit:
    """One flusher task at a time writes every request queued by then (at most
    ``batch_size``) in one transaction; a refused batch is written again one by one."""

    def __init__(
        self,
        *,
        pool: Callable[[], AsyncConnectionPool[Conn] | None],
        listener: Listener,
        instance: str,
        batch_size: int,
        synchronous_commit: SynchronousCommit,
        notify: bool,
        committed: Callable[[UUID], None] | None = None,
    ) -> None:
        self._pool = pool
        self._committed = committed  # told of each run whose events a batch committed
        self._listener = listener
        self.instance = instance
        self.batch_size = batch_size
        self.synchronous_commit: SynchronousCommit = synchronous_commit
        self.notify = notify
        self.transactions = 0
        self.pending: list[Request] = []
        self.flusher: asyncio.Task[None] | None = None

    async def submit(self, request: Request) -> None:
        """Queue ``request`` and wait until its batch committed (or refused it)."""
        self.pending.append(request)
        if self.flusher is None:
            self.flusher = asyncio.create_task(self._flush())
        await request.future

    async def drain(self) -> None:
        """Let the flusher finish, then write what is still queued (closing)."""
        if self.flusher is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(self.flusher)
        if self.pending:
            pending, self.pending = self.pending, []
            await self.write_all(pending)

    async def _flush(self) -> None:
        try:
            while self.pending:
                batch = self.pending[: self.batch_size]
                del self.pending[: self.batch_size]
                live = [r for r in batch if not r.future.done()]  # a cancelled caller's skipped
                if live:
                    await self.write_all(live)
        finally:
            self.flusher = None

    async def write_all(self, batch: list[Request]) -> None:
        try:
            plan = await self._write_batch(batch)
        except psycopg.OperationalError as exc:
            # the connection is gone: whether the COMMIT happened is unknown, so nothing is
            # retried; the runs resume from whatever the database holds
            self._fail(batch, translate(exc, "group commit"))
            return
        except psycopg.Error as exc:
            if len(batch) == 1:
                self._fail(batch, translate(exc, "group commit"))
                return
            log.info("group commit of %d refused (%s); writing one by one", len(batch), exc)
            for request in batch:
                await self.write_all([request])
            return
        except BaseException as exc:
            self._fail(batch, as_store_error(exc))
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
            self._listener.fanout.publish(request.append.run_id, request.append.events)
            if self._committed is not None and request.append.events:
                self._committed(request.append.run_id)
            if not request.future.done():
                request.future.set_result(None)

    @staticmethod
    def _fail(batch: Iterable[Request], error: FiduciaryError) -> None:
        for request in batch:
            if not request.future.done():
                request.future.set_exception(copy_error(error))

    async def _write_batch(self, batch: list[Request]) -> Any:
        pool = self._pool()
        if pool is None:
            raise StoreError("the store is closed")
        run_ids = list({r.append.run_id for r in batch})
        approval_ids = [a[0] for r in batch for a in r.append.approvals]
        async with pool.connection() as conn, conn.transaction():
            if self.synchronous_commit == "off":
                await conn.execute("SET LOCAL synchronous_commit = off")
            # No pipeline mode here: until its sync, a pipeline keeps the session "active",
            # holding the row locks, beyond idle_in_transaction_session_timeout's reach, if
            # this process freezes. Statement by statement, the session is idle in transaction.
            locked = await conn.execute(QUERIES.lock_runs, (run_ids,), binary=True)
            rows = await locked.fetchall()
            used: set[UUID] = set()
            if approval_ids:
                taken = await conn.execute(QUERIES.approvals_taken, (approval_ids,), binary=True)
                used = {row[0] for row in await taken.fetchall()}
            checked = plan(batch, {row[0]: (int(row[1]), int(row[2])) for row in rows}, used)
            notified = notifications(self.instance, checked.ranges) if self.notify else []
            await write_plan(conn, checked, notified)
        return checked
