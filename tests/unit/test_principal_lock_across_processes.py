"""One principal's writes, one at a time across processes (PostgreSQL): the daily autonomous
limit holds when several workers run that principal's runs at once.

Each "process" is an Agent on its own ``PostgresStore`` (its own pool and lock connection).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from fiduciary import Agent, CallContext, Policy, Threshold, capability
from fiduciary.capabilities import Capability
from fiduciary.events import PendingAction
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls
from tests.agent_support import make_agent
from tests.postgres_support import open_stores, require_driver

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

require_driver()
from fiduciary.stores.postgres import PostgresStore  # noqa: E402

PROCESSES = 4
AMOUNT = Decimal("40")  # auto on its own; the limit of 100 allows two of them a day
LIMIT = Decimal("100")


class Payments:
    def __init__(self) -> None:
        self.inside = 0
        self.most_inside = 0
        self.sent: list[Decimal] = []

    def capabilities(self) -> list[Capability]:
        @capability(kind="execute", operation="send", amount_usd=lambda a, c: Decimal(a.amount))
        async def send(to: str, amount: str, ctx: CallContext) -> dict[str, str]:
            """Send money."""
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            await asyncio.sleep(0.2)  # a bank that takes its time: the sections would overlap
            self.sent.append(Decimal(amount))
            self.inside -= 1
            return {"to": to}

        return [send]


def spending_agent(store: Any, payments: Payments) -> Agent:
    script = Script(
        "pay",
        [ToolCalls([Call("send", {"to": "bob", "amount": str(AMOUNT)})]), Reply("done")],
    )
    return make_agent(
        store=store,
        model=ScriptedModel([script]),
        capabilities=payments.capabilities(),
        policy=Policy(
            thresholds={"send": Threshold(auto_below=Decimal(50), confirm_below=Decimal(1000))},
            daily_autonomous_limit_usd=LIMIT,
        ),
    )


@pytest.fixture
async def stores() -> AsyncIterator[list[PostgresStore]]:
    async with open_stores(PROCESSES) as opened:
        yield opened


async def test_the_daily_limit_holds_across_processes(stores: list[PostgresStore]) -> None:
    payments = Payments()
    agents = [spending_agent(store, payments) for store in stores]

    async def run(agent: Agent) -> list[Any]:
        return [event async for event in agent.run("pay bob", principal="alice")]

    logs = await asyncio.gather(*(run(agent) for agent in agents))

    assert sum(payments.sent) <= LIMIT
    assert payments.sent == [AMOUNT, AMOUNT]
    assert payments.most_inside == 1  # one of alice's writes at a time, whatever the process
    waiting = [log for log in logs if isinstance(log[-1], PendingAction)]
    assert len(waiting) == PROCESSES - 2  # the rest wait for a person
    spent = await stores[0].autonomous_spend("alice", since=Policy.day_start(agents[0].clock.now()))
    assert spent == 2 * AMOUNT


async def test_other_principals_are_not_held_up(stores: list[PostgresStore]) -> None:
    payments = Payments()
    agents = [spending_agent(store, payments) for store in stores]

    async def run(agent: Agent, who: str) -> None:
        async for _ in agent.run("pay bob", principal=who):
            pass

    await asyncio.gather(*(run(agent, f"user-{i}") for i, agent in enumerate(agents)))

    assert payments.sent == [AMOUNT] * PROCESSES
    assert payments.most_inside > 1  # different principals' writes ran at the same time


async def test_a_stalled_process_loses_its_principal_locks(postgres_dsn: str) -> None:
    """A frozen holder must not stall the principal everywhere: PostgreSQL ends its lock session
    after ``lock_idle_seconds`` without keep-alive, and another process takes the lock."""
    import time

    dsn = postgres_dsn
    stalled = await PostgresStore.open(dsn, lock_idle_seconds=0.5)
    other = await PostgresStore.open(dsn)
    try:
        async with stalled.principal_lock("alice"):
            with pytest.raises(TimeoutError):  # held: the other process waits
                async with asyncio.timeout(0.3), other.principal_lock("alice"):
                    pass
            # the fault itself, not a wait: the whole process freezes past lock_idle_seconds
            time.sleep(1.5)  # noqa: ASYNC251 - (no keep-alive is sent while it is frozen)
            async with asyncio.timeout(10), other.principal_lock("alice"):
                pass
        # the stalled store reconnects for its next section
        async with asyncio.timeout(10), stalled.principal_lock("alice"):
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.3), other.principal_lock("alice"):
                    pass
    finally:
        await stalled.close()
        await other.close()


async def test_the_daily_limit_holds_for_concurrent_runs_of_one_process(tmp_path: Any) -> None:
    """The same guarantee in one process, on SQLite: a write's spend is committed before the
    next run of the principal reads the day's spend."""
    from fiduciary.stores.sqlite import SQLiteStore

    store = await SQLiteStore.open(tmp_path / "runs.sqlite3")
    payments = Payments()
    agent = spending_agent(store, payments)
    try:

        async def run() -> None:
            async for _ in agent.run("pay bob", principal="alice"):
                pass

        await asyncio.gather(*(run() for _ in range(PROCESSES)))
    finally:
        await store.close()
    assert payments.sent == [AMOUNT, AMOUNT]


async def test_cancelled_sections_never_leave_a_principal_locked(postgres_dsn: str) -> None:
    """A section cancelled while it takes, holds or gives back its lock gives it back: another
    process always gets it afterwards."""
    import random

    chance = random.Random(7)
    dsn = postgres_dsn
    mine, theirs = await PostgresStore.open(dsn), await PostgresStore.open(dsn)
    try:
        for _ in range(200):

            async def section() -> None:
                async with mine.principal_lock("alice"):
                    await asyncio.sleep(0.002)  # the section's work: a window to cancel it in

            task = asyncio.create_task(section())
            # not a wait: the cancel lands at a random point of taking, holding or giving back
            await asyncio.sleep(chance.uniform(0, 0.003))
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            async with asyncio.timeout(5), theirs.principal_lock("alice"):
                pass
    finally:
        await mine.close()
        await theirs.close()


async def test_a_section_learns_that_its_lock_was_lost(postgres_dsn: str) -> None:
    """If the database ends the lock's session (a stall past lock_idle_seconds, a network
    failure), the section's next check fails, so no effect starts without the lock."""
    from fiduciary.exceptions import StoreError

    dsn = postgres_dsn
    store = await PostgresStore.open(dsn)
    try:
        async with store.principal_lock("alice") as held:
            await held.verify()
            (pid,) = (
                await store._fetch(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
                    # this test's database only: other databases of the server hold theirs
                    " AND database = (SELECT oid FROM pg_database"
                    " WHERE datname = current_database())"
                )
            )[0]
            await store._fetch("SELECT pg_terminate_backend(%s)", (pid,))
            with pytest.raises(StoreError, match="principal lock was lost"):
                await held.verify()
        async with asyncio.timeout(5), store.principal_lock("alice") as again:
            await again.verify()  # a new connection, a new lock
    finally:
        await store.close()
