"""``fiduciary worker --apps``: two workers' apps engines on one PostgreSQL database, each
stepping in the background beside its runs — each tick slot runs once."""

from __future__ import annotations

from functools import partial

import pytest

from fiduciary import ManualClock
from fiduciary.apps import AppEngine, AppTables
from fiduciary.cli.app import _ticking
from fiduciary.stores.base import Store
from tests.postgres_support import open_stores
from tests.waiting import eventually

from .support import Book, Hooks, engine

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

APP = """---
id: pulse
hooks: [tick]
tier: sniper
capabilities: [balance]
sources: [n]
---
Pulse.
"""

CLOCK = ManualClock()
HOOKS = Hooks()
HOOKS.on("pulse", "tick", lambda ctx: {})
MADE: list[AppEngine] = []
READS = [0]  # the source's readings, shared by both workers' engines


def factory(store: Store, tables: AppTables, principal: str) -> AppEngine:
    """The apps factory the workers name (``--apps-engine``): a source that changes at every
    read, whichever engine reads it (one counter for both: with one each, the second engine's
    first reading equals the first's and its slot is rightly 'unchanged'), so every slot asks
    the model."""

    async def n() -> int:
        READS[0] += 1
        return READS[0]

    made = engine(
        APP, book=Book(), hooks=HOOKS, clock=CLOCK, store=store, tables=tables, sources={"n": n}
    )
    MADE.append(made)
    return made


async def done(eng: AppEngine, slot: str) -> bool:
    tick = await eng.tables.get_tick("pulse", slot)
    return tick is not None and tick.status == "done"


async def test_two_workers_tick_each_slot_once() -> None:
    spec = f"{__name__}:factory"
    async with open_stores(2) as (one, two), _ticking(one, None, spec, "alice", 0.01):
        await MADE[-1].enable("pulse")
        async with _ticking(two, None, spec, "alice", 0.01):
            first = MADE[-2]
            for _ in range(3):
                slot = first.slot_of(first.manifest("pulse"), CLOCK.now())
                # the tables are PostgreSQL's: no event to wait on, so look again
                await eventually(partial(done, first, slot), what="the slot ticked", interval=0.01)
                CLOCK.advance(5)
            ticks = await first.tables.ticks("pulse", limit=100)
    assert [t.outcome for t in ticks].count("ran") >= 3
    # one row per slot, and the model asked once per row: no slot ran in both workers
    assert len({t.slot for t in ticks}) == len(ticks)
    assert HOOKS.calls[("pulse", "tick")] == len(ticks)
