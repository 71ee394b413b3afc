"""Several schedulers on one PostgreSQL database: each tick slot runs once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fiduciary import ManualClock
from tests.postgres_support import open_stores

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


async def test_two_schedulers_on_one_database_tick_each_slot_once() -> None:
    from fiduciary.apps.postgres import PostgresAppTables

    clock, hooks = ManualClock(), Hooks()
    counter = [0]

    async def n() -> int:  # a changing source: every slot asks the model
        counter[0] += 1
        return counter[0]

    hooks.on("pulse", "tick", lambda ctx: {})
    async with open_stores(2) as (one_store, two_store):
        one_tables = await PostgresAppTables.open(one_store.dsn)
        two_tables = await PostgresAppTables.open(two_store.dsn)
        try:
            one = engine(
                APP,
                book=Book(),
                hooks=hooks,
                clock=clock,
                store=one_store,
                tables=one_tables,
                sources={"n": n},
            )
            two = engine(
                APP,
                book=Book(),
                hooks=hooks,
                clock=clock,
                store=two_store,
                tables=two_tables,
                sources={"n": n},
            )
            await one.enable("pulse")
            outcomes: list[str] = []
            for _ in range(5):
                results: Any = await asyncio.gather(one.step(), two.step())
                outcomes += [r.outcome for rs in results for r in rs]
                clock.advance(5)
            assert outcomes.count("ran") == 5
            assert outcomes.count("taken") == 5
            assert hooks.calls[("pulse", "tick")] == 5
            ticks = await one_tables.ticks("pulse", limit=100)
            assert len({t.slot for t in ticks}) == len(ticks) == 5
        finally:
            await one_tables.close()
            await two_tables.close()
