"""The sweep: every few seconds, find the runs that can make progress and that nobody drives.

A run can make progress when it is ``running`` with no live lease (its process died, froze past
its lease, or its store failed), or suspended with a decision no drive has taken up (an
approval decided or expired, a client's result reported — in any process), or suspended with a
pending approval that has expired. ``Store.runs_to_resume`` lists them; the sweep hands each to
``start`` (which drives it, unless this process drives it already). A run whose lease is live is
never listed: the lease is the fence, and only a lapsed one may be taken over.

Resuming at start-up only is not enough: a process restarted before its old leases lapse finds
nothing then, and a decision made by another process (``fiduciary approvals approve`` on a
SQLite file) tells nobody. With the sweep, such a run is driven again within its lease time plus
one sweep period (plus the time a drive takes to start).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from uuid import UUID

from .._logs import logger
from ..exceptions import FiduciaryError, StoreError, StoreUnavailableError
from ..stores.base import RunRecord

__all__ = ["SWEEP_SECONDS", "keep_moving", "resume_once", "sweep_forever"]

SWEEP_SECONDS = 5.0
"""The default period of the sweep (``Agent.keep_runs_moving``, ``fiduciary serve``)."""

log = logger("fiduciary.sweep")


async def sweep_forever(
    find: Callable[[], Awaitable[list[RunRecord]]],
    start: Callable[[RunRecord], None],
    *,
    every: float,
) -> None:
    """Call ``start`` for every run ``find`` lists, now and every ``every`` seconds, until
    cancelled. A failing store is logged and tried again at the next sweep."""
    while True:
        try:
            runs = await find()
        except FiduciaryError as exc:
            log.warning("could not list the runs to resume (%s); trying again", exc)
        else:
            for run in runs:
                start(run)
        await asyncio.sleep(every)


async def resume_once(
    find: Callable[[], Awaitable[list[RunRecord]]],
    resume: Callable[[UUID], Awaitable[bool]],
) -> list[UUID]:
    """One pass (``Agent.resume_all``): ``resume`` every run ``find`` lists, concurrently; the
    ids of those it drove. ``StoreUnavailableError`` when the store failed, listing the runs or
    resuming some of them (``resume`` raising ``StoreError``): "nothing to do" and "nothing
    could be done" must not look the same to the caller."""
    try:
        runs = await find()
    except StoreError as exc:
        raise StoreUnavailableError(f"the runs to resume could not be listed: {exc}") from exc
    done: list[UUID] = []
    failed: list[UUID] = []

    async def one(run_id: UUID) -> None:
        try:
            if await resume(run_id):
                done.append(run_id)
        except StoreError:
            failed.append(run_id)

    await asyncio.gather(*(one(r.run_id) for r in runs))
    if failed:
        raise StoreUnavailableError(
            f"the store failed for {len(failed)} of {len(runs)} runs to resume; they are left "
            "for a later attempt",
            resumed=tuple(done),
            failed=tuple(failed),
        )
    return done


async def keep_moving(
    find: Callable[[], Awaitable[list[RunRecord]]],
    resume: Callable[[UUID], Awaitable[bool]],
    leaves_alone: Callable[[UUID], bool],
    *,
    every: float,
) -> None:
    """``Agent.keep_runs_moving``: drive each run ``find`` lists in a task of its own (unless
    one drives it already, or the agent ``leaves_alone`` it), every ``every`` seconds, until
    cancelled; then the drives started here stop, releasing their leases."""
    drives: dict[UUID, asyncio.Task[None]] = {}

    async def drive(run_id: UUID) -> None:
        try:
            await resume(run_id)
        except Exception:  # never the sweep's end: the run is tried again later
            log.exception("run %s: resuming it failed", run_id)

    def start(run: RunRecord) -> None:
        if run.run_id in drives or leaves_alone(run.run_id):
            return
        task = asyncio.create_task(drive(run.run_id))
        drives[run.run_id] = task
        task.add_done_callback(lambda _: drives.pop(run.run_id, None))

    try:
        await sweep_forever(find, start, every=every)
    finally:
        for task in list(drives.values()):
            task.cancel()
        await asyncio.gather(*drives.values(), return_exceptions=True)
