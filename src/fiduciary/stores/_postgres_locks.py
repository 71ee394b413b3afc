"""Private: ``PostgresStore``'s principal locks — one writer per principal across processes.

A run writes for its principal (admits, executes, settles approvals) inside
``Agent.principal_lock``; on PostgreSQL that section also holds a session-level advisory lock
whose 64-bit key is taken from the principal's sha256, so two processes never write for one
principal at once and the daily autonomous limit, read and then spent inside the section,
holds across processes. The locks of a store live on one connection of their own (not the
pool's: a section commits through the pool while it holds its lock, and must never wait for a
connection that another section holds). Taking a lock is ``pg_try_advisory_lock``, retried
with a short backoff while another process holds it; so one connection serves every principal.

A process that freezes (SIGSTOP, a paused VM) while it holds a lock must not stall that
principal everywhere: the connection has ``idle_session_timeout`` and is kept alive every
third of it, so PostgreSQL ends the session of a frozen process, and with it its locks, after
``idle_seconds``. A section whose connection was lost (that, or a network failure) goes on
without the lock, as a process frozen inside it would on waking: its run's next append or
ledger row is then refused if another worker took the run over (fencing).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg

from ..exceptions import StoreError
from ._postgres_sql import _Conn, _translate

log = logging.getLogger("fiduciary.stores.postgres")


def principal_key(actor_id: str) -> int:
    """The advisory-lock key of a principal: the same in every process (a signed bigint)."""
    digest = hashlib.sha256(b"fiduciary:principal:" + actor_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PrincipalLocks:
    """Advisory locks of one store, on a connection of their own."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[_Conn]],
        *,
        idle_seconds: float = 10.0,
        max_wait_step: float = 0.02,
    ) -> None:
        self._connect = connect
        self.idle_seconds = idle_seconds
        self._max_step = max_wait_step
        self._conn: _Conn | None = None
        self._generation = 0  # which connection a held lock was taken on
        self._io = asyncio.Lock()  # one statement at a time on the connection
        self._local: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()
        self._keepalive: asyncio.Task[None] | None = None
        self._closed = False

    @contextlib.asynccontextmanager
    async def hold(self, actor_id: str) -> AsyncIterator[None]:
        key = principal_key(actor_id)
        local = self._local.get(key)
        if local is None:
            local = asyncio.Lock()
            self._local[key] = local
        async with local:  # one holder per key in this process (session locks are reentrant)
            generation = await self._acquire(key)
            try:
                yield
            finally:
                await self._release(key, generation)

    async def _acquire(self, key: int) -> int:
        step = 0.002
        while True:
            async with self._io:
                conn = await self._connection()
                try:
                    cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                    row = await cursor.fetchone()
                except psycopg.Error as exc:
                    await self._lost(exc)
                    raise _translate(exc, "taking a principal lock") from exc
                if row is not None and row[0]:
                    return self._generation
            await asyncio.sleep(step)  # another process writes for this principal
            step = min(step * 2, self._max_step)

    async def _release(self, key: int, generation: int) -> None:
        async with self._io:
            conn = self._conn
            if conn is None or generation != self._generation:
                return  # that connection is gone, and its locks with it
            try:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            except psycopg.Error as exc:
                await self._lost(exc)

    async def _connection(self) -> _Conn:
        if self._closed:
            raise StoreError("the store is closed")
        if self._conn is not None and not self._conn.closed:
            return self._conn
        conn = await self._connect()
        milliseconds = max(1, round(self.idle_seconds * 1000))
        try:
            await conn.execute(f"SET idle_session_timeout = {milliseconds}")
        except psycopg.Error as exc:  # PostgreSQL before 14: no timeout, frozen holders stall
            log.warning(
                "idle_session_timeout is not available (%s): a frozen process keeps "
                "its principal locks until its connection drops",
                exc,
            )
        self._conn = conn
        self._generation += 1
        if self._keepalive is None or self._keepalive.done():
            self._keepalive = asyncio.create_task(self._keep_alive(), name="fiduciary-pg-locks")
        return conn

    async def _lost(self, exc: BaseException) -> None:
        conn, self._conn = self._conn, None
        log.warning("lost the principal-lock connection (%s): the locks it held are released", exc)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def _keep_alive(self) -> None:
        """``SELECT 1`` every third of ``idle_seconds``: only a stalled process goes idle."""
        while not self._closed:
            await asyncio.sleep(self.idle_seconds / 3)
            async with self._io:
                conn = self._conn
                if conn is None:
                    return  # reconnecting starts another keep-alive
                try:
                    await conn.execute("SELECT 1")
                except psycopg.Error as exc:
                    await self._lost(exc)
                    return

    async def close(self) -> None:
        self._closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(BaseException):
                await self._keepalive
        async with self._io:
            conn, self._conn = self._conn, None
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
