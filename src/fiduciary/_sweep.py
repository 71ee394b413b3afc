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

from ._logs import logger
from .exceptions import FiduciaryError
from .stores.base import RunRecord

__all__ = ["SWEEP_SECONDS", "sweep_forever"]

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
