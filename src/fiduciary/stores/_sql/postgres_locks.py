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
``idle_seconds``. A section learns that its lock was lost (that, or a network failure) before
its next effect: ``HeldLock.verify`` (a ``SELECT 1`` on the lock's connection) raises
``StoreError``, and the drive stops there, resumable. Taking and giving back a lock survive the
cancellation of the section (the statement is shielded; a lock taken by a cancelled attempt is
given back at once), so a cancelled run never leaves its principal locked.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, LiteralString

import psycopg

from ..._logs import logger
from ...exceptions import StoreError
from .postgres_writer import Conn, translate

log = logger("fiduciary.stores.postgres")


def principal_key(actor_id: str) -> int:
    """The advisory-lock key of a principal: the same in every process (a signed bigint)."""
    digest = hashlib.sha256(b"fiduciary:principal:" + actor_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class HeldLock:
    """A principal lock held by a section; ``verify`` proves it is still held."""

    __slots__ = ("_generation", "_locks")

    def __init__(self, locks: PrincipalLocks, generation: int) -> None:
        self._locks = locks
        self._generation = generation

    async def verify(self) -> None:
        """Raise ``StoreError`` if the lock was lost (its connection ended: a stall longer than
        ``idle_seconds``, a network failure), so that no effect starts without it."""
        await self._locks.verify(self._generation)


class PrincipalLocks:
    """Advisory locks of one store, on a connection of their own."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[Conn]],
        *,
        idle_seconds: float = 10.0,
        max_wait_step: float = 0.005,
    ) -> None:
        self._connect = connect
        self.idle_seconds = idle_seconds
        self._max_step = max_wait_step
        self._conn: Conn | None = None
        self._generation = 0  # which connection a held lock was taken on
        self._io = asyncio.Lock()  # one statement at a time on the connection
        self._local: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()
        self._background: set[asyncio.Task[Any]] = set()
        self._keepalive: asyncio.Task[None] | None = None
        self._closed = False

    @contextlib.asynccontextmanager
    async def hold(self, actor_id: str) -> AsyncIterator[HeldLock]:
        key = principal_key(actor_id)
        local = self._local.get(key)
        if local is None:
            local = asyncio.Lock()
            self._local[key] = local
        async with local:  # one holder per key in this process (session locks are reentrant)
            generation = await self._acquire(key)
            try:
                yield HeldLock(self, generation)
            finally:
                # shielded: a section cancelled while it gives the lock back still gives it back
                await asyncio.shield(self._spawn(self._release(key, generation)))

    def _spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _acquire(self, key: int) -> int:
        step = 0.001
        while True:
            attempt = self._spawn(self._try_lock(key))
            try:
                generation: int | None = await asyncio.shield(attempt)
            except asyncio.CancelledError:
                # the statement goes on: if it takes the lock, give it back at once
                attempt.add_done_callback(lambda done: self._give_back(done, key))
                raise
            if generation is not None:
                return generation
            await asyncio.sleep(step)  # another process writes for this principal
            step = min(step * 2, self._max_step)

    def _give_back(self, attempt: asyncio.Task[int | None], key: int) -> None:
        if attempt.cancelled() or attempt.exception() is not None:
            return
        generation = attempt.result()
        if generation is not None:
            self._spawn(self._release(key, generation))

    async def _try_lock(self, key: int) -> int | None:
        """The connection's generation if the lock was taken, None if another session holds it.
        A connection found dead is replaced once (its locks are gone with it)."""
        async with self._io:
            for retry in (True, False):
                conn = await self._connection()
                try:
                    cursor = await self._statement(conn, "SELECT pg_try_advisory_lock(%s)", key)
                    row = await cursor.fetchone()
                except TimeoutError as exc:
                    raise StoreError("taking a principal lock timed out") from exc
                except psycopg.Error as exc:
                    if retry and isinstance(exc, psycopg.OperationalError):
                        continue
                    raise translate(exc, "taking a principal lock") from exc
                return self._generation if row is not None and row[0] else None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _release(self, key: int, generation: int) -> None:
        async with self._io:
            conn = self._conn
            if conn is None or generation != self._generation:
                return  # that connection is gone, and its locks with it
            with contextlib.suppress(psycopg.Error, TimeoutError):
                await self._statement(conn, "SELECT pg_advisory_unlock(%s)", key)

    async def verify(self, generation: int) -> None:
        async with self._io:
            conn = self._conn
            if conn is None or generation != self._generation:
                raise StoreError("the principal lock was lost (its connection ended)")
            try:
                await self._statement(conn, "SELECT 1")
            except (psycopg.Error, TimeoutError) as exc:
                raise StoreError(f"the principal lock was lost: {exc!r}") from exc

    async def _statement(
        self, conn: Conn, sql: LiteralString, *params: object
    ) -> psycopg.AsyncCursor[Any]:
        """One statement on the lock connection (``_io`` held), bounded by ``idle_seconds`` (a
        network that hangs); if it fails, the connection is given up (and its locks with it)."""
        try:
            async with asyncio.timeout(self.idle_seconds):
                return await conn.execute(sql, params)
        except (psycopg.Error, TimeoutError) as exc:
            await self._lost(exc)
            raise

    async def _connection(self) -> Conn:
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
                "idle_session_timeout is not available (%s): a frozen process keeps its "
                "principal locks until its connection drops",
                exc,
            )
        self._conn = conn
        self._generation += 1
        if self._keepalive is None or self._keepalive.done():
            self._keepalive = asyncio.create_task(self._keep_alive(), name="fiduciary-pg-locks")
        return conn

    async def _lost(self, exc: BaseException) -> None:
        conn, self._conn = self._conn, None
        self._generation += 1  # sections that held a lock on it fail their next verify
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
                    await self._statement(conn, "SELECT 1")
                except (psycopg.Error, TimeoutError):
                    return

    async def close(self) -> None:
        self._closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(BaseException):
                await self._keepalive
        await asyncio.gather(*self._background, return_exceptions=True)
        async with self._io:
            conn, self._conn = self._conn, None
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
