"""Private: cancelling a run, here or in the process that drives it (``Agent.cancel``), and
taking a run over from a drive of this agent (``Agent.taken_over``).

A run is cancelled under the principal's lock and the run's lease, by its ``Driver``. When
another process holds the lease, a store that carries cancel requests (``CancelChannel``:
PostgreSQL) asks that process to do it, and this waits for the run to end; a holder that died
lets its lease lapse, and the run is then cancelled here. Every wait is bounded by a deadline.

The functions receive a ``Cancelling``, the few things of the agent they use, not the agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from uuid import UUID

from .._loop import Driver, Transcript
from ..capabilities import Principal, principal_of
from ..clock import Clock
from ..exceptions import RunError
from ..redaction import Redactor
from ..stores.base import IDLE, CancelChannel, CancelRequest, RunRecord, Store, existing_run

__all__ = ["Cancelling", "cancel", "taken_over"]


@dataclass(frozen=True, slots=True)
class Cancelling:
    """What cancelling a run needs of its agent."""

    store: Store
    clock: Clock
    redactor: Redactor
    owner: str  # the agent's lease owner
    lease_seconds: float
    principal_lock: Callable[[str], AbstractAsyncContextManager[object]]
    lease: Callable[[UUID], Awaitable[tuple[RunRecord, Transcript]]]  # ``busy`` if held
    replay: Callable[[RunRecord], Awaitable[Transcript]]  # of a run leased already
    driver: Callable[[RunRecord, Transcript], Driver]  # a drive of a leased run


async def cancel(
    ctx: Cancelling,
    run_id: UUID,
    *,
    by: Principal | str,
    reason: str = "",
    wait_seconds: float | None = None,
    claimed: RunRecord | None = None,
) -> RunRecord:
    """``Agent.cancel``: stop a run for good, here or through the process that drives it."""
    existing = await existing_run(ctx.store, run_id)
    who = principal_of(by)
    if existing.principal != who.actor_id and "admin" not in who.scopes:
        raise RunError("forbidden", "this run belongs to another principal")
    if existing.status in IDLE:
        raise RunError("state", f"the run is already {existing.status}")
    reason = ctx.redactor.redact_text(reason)[:500]
    wait = ctx.lease_seconds + 1 if wait_seconds is None else max(wait_seconds, 0.0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    elsewhere = claimed is None and existing.lease_owner != ctx.owner and _lease_live(ctx, existing)
    if elsewhere and isinstance(ctx.store, CancelChannel) and wait > 0:
        # driven by another process: ask it at once (waiting here for the principal's lock
        # first would only delay the request)
        return await _cancel_elsewhere(ctx, ctx.store, existing, who, reason, deadline)
    try:  # the attempt here has at least a second for its own round trips
        here = max(deadline, loop.time() + 1.0)
        return await _cancel_here(ctx, existing, who, reason, here, claimed)
    except RunError as exc:
        if exc.code != "busy" or claimed is not None:
            raise
        if not isinstance(ctx.store, CancelChannel) or loop.time() >= deadline:
            raise  # nothing is asked of another process that the caller will not wait for
        channel = ctx.store
    return await _cancel_elsewhere(ctx, channel, existing, who, reason, deadline)


def _lease_live(ctx: Cancelling, run: RunRecord) -> bool:
    """Someone holds the run's lease now (this agent included)."""
    return (
        run.lease_owner is not None
        and run.lease_until is not None
        and run.lease_until > ctx.clock.now()
    )


@asynccontextmanager
async def taken_over(ctx: Cancelling, run_id: UUID) -> AsyncIterator[RunRecord | None]:
    """``Agent.taken_over``: the run under a new epoch in this agent's name, or None."""
    taken = await ctx.store.acquire(
        run_id, owner=ctx.owner, now=ctx.clock.now(), ttl_seconds=ctx.lease_seconds
    )
    if taken is None:
        yield None
        return
    try:
        async with _lease_kept(ctx, taken):
            yield taken
    except BaseException:
        with suppress(Exception):
            await asyncio.shield(ctx.store.release(run_id, epoch=taken.epoch))
        raise


@asynccontextmanager
async def _lease_kept(ctx: Cancelling, run: RunRecord) -> AsyncIterator[None]:
    """Keep a lease this agent holds (``run``'s epoch) renewed until the block ends."""

    async def renew() -> None:
        while True:
            await asyncio.sleep(ctx.lease_seconds / 3)
            ok = await ctx.store.renew(
                run.run_id,
                epoch=run.epoch,
                now=ctx.clock.now(),
                ttl_seconds=ctx.lease_seconds,
            )
            if not ok:
                return

    task = asyncio.create_task(renew(), name=f"fiduciary-lease-{run.run_id}")
    try:
        yield
    finally:
        task.cancel()
        with suppress(BaseException):
            await task


async def _cancel_here(
    ctx: Cancelling,
    run: RunRecord,
    who: Principal,
    reason: str,
    deadline: float,
    claimed: RunRecord | None = None,
) -> RunRecord:
    """Record the cancellation here: the principal's lock first (so that no lease waits for
    it unrenewed), then the run's lease (or ``claimed``). ``busy`` if either is held
    elsewhere past ``deadline``."""
    async with AsyncExitStack() as stack:
        try:
            async with asyncio.timeout_at(deadline):
                await stack.enter_async_context(ctx.principal_lock(run.principal))
        except TimeoutError:
            raise RunError("busy", "the run's principal is writing elsewhere; retry") from None
        if claimed is not None:
            leased, transcript = claimed, await ctx.replay(claimed)
        else:
            leased, transcript = await ctx.lease(run.run_id)
        try:
            if leased.status in IDLE:
                raise RunError("state", f"the run is already {leased.status}")
            driver = ctx.driver(leased, transcript)
            async with _lease_kept(ctx, leased):
                await driver.cancel(by=who.actor_id, reason=reason)
        finally:
            with suppress(Exception):
                await ctx.store.release(run.run_id, epoch=leased.epoch)
    return await existing_run(ctx.store, run.run_id)


async def _cancel_elsewhere(
    ctx: Cancelling,
    channel: CancelChannel,
    run: RunRecord,
    who: Principal,
    reason: str,
    deadline: float,
) -> RunRecord:
    """Ask the process holding the lease to cancel the run (every second, so that a lost
    notification or a drive still starting does not matter); wait for the run to end."""
    request = CancelRequest(
        run_id=run.run_id, by=who.actor_id, scopes=tuple(sorted(who.scopes)), reason=reason
    )
    loop = asyncio.get_running_loop()
    send_at = loop.time()
    while True:
        if loop.time() >= send_at:
            await channel.request_cancel(request)
            send_at = loop.time() + 1.0
        await asyncio.sleep(0.05)
        current = await existing_run(ctx.store, run.run_id)
        if current.status == "cancelled":
            return current
        if current.status in IDLE:
            raise RunError("state", f"the run is already {current.status}")
        if not _lease_live(ctx, current):  # nobody drives it now: cancel it here
            try:
                return await _cancel_here(ctx, current, who, reason, deadline)
            except RunError as exc:
                if exc.code != "busy":
                    raise
        if loop.time() >= deadline:
            raise RunError(
                "busy",
                "the run is driven by another process, which did not stop it in time; retry",
            )
