"""A process with two Agent objects that pay on one principal's behalf, each on its own store
object over one database (SQLite file or PostgreSQL), for ``test_daily_limit_processes``.

``python -m tests.faults.spender sqlite|postgres TARGET EFFECTS RUNS``: opens the stores, builds
the agents, prints ``ready`` and waits for a line on stdin (so that every process starts at
once), then runs RUNS runs per agent concurrently. Every payment made appends its amount to the
EFFECTS file, one line each, outside any store: what was really paid.
"""

from __future__ import annotations

import asyncio
import os
import sys
from decimal import Decimal
from pathlib import Path

from fiduciary import Agent, CallContext, Policy, Threshold, capability
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls
from tests.agent_support import make_agent

AGENTS = 2
AMOUNT = Decimal("7")  # auto on its own; 14 of them (98) fit the limit of 100
LIMIT = Decimal("100")


def spending_agent(store: Store, effects: Path) -> Agent:
    @capability(kind="execute", operation="send", amount_usd=lambda a, c: Decimal(a.amount))
    async def send(to: str, amount: str, ctx: CallContext) -> dict[str, str]:
        """Send money."""
        await asyncio.sleep(0.01)  # a bank that takes its time: payments overlap
        fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{amount}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return {"to": to}

    script = Script(
        "pay",
        [ToolCalls([Call("send", {"to": "bob", "amount": str(AMOUNT)})]), Reply("done")],
    )
    return make_agent(
        store=store,
        model=ScriptedModel([script]),
        capabilities=[send],
        policy=Policy(
            thresholds={"send": Threshold(auto_below=Decimal(50), confirm_below=Decimal(1000))},
            daily_autonomous_limit_usd=LIMIT,
        ),
    )


async def open_store(backend: str, target: str) -> Store:
    if backend == "sqlite":
        from fiduciary.stores.sqlite import SQLiteStore

        return await SQLiteStore.open(target)
    from fiduciary.stores.postgres import PostgresStore

    return await PostgresStore.open(target)


async def main(backend: str, target: str, effects: Path, runs: int) -> None:
    stores = [await open_store(backend, target) for _ in range(AGENTS)]
    try:
        agents = [spending_agent(store, effects) for store in stores]
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

        async def run(agent: Agent) -> None:
            async for _ in agent.run("pay bob", principal="alice"):
                pass

        await asyncio.gather(*(run(agent) for agent in agents for _ in range(runs)))
    finally:
        for store in stores:
            await store.close()


if __name__ == "__main__":
    backend, target, effects, runs = sys.argv[1:5]
    asyncio.run(main(backend, target, Path(effects), int(runs)))
