"""One process of the refresh test: a write whose refresh read SIGKILLs this process once the
read's ``tool_call_start`` is committed (``python tests/faults/refresh_child.py DB``)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any
from uuid import UUID

from fiduciary import Agent, CallContext, Clock, Policy, SystemClock, capability
from fiduciary.events import ToolCallStart
from fiduciary.models.scripted import Call, Reply, Script, ScriptedModel, ToolCalls
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import allow_all

MESSAGE = "pay, then tell me the balance"


def agent(store: Store, *, die: bool, clock: Clock | None = None) -> Agent:
    async def refresh_committed(run_id: UUID) -> bool:
        events = await store.read_events(run_id)
        return any(isinstance(e, ToolCallStart) and e.refresh_of for e in events)

    @capability(kind="read")
    async def balance(ctx: CallContext) -> dict[str, str]:
        """The balance."""
        if die:  # wait for the refresh's start to be committed, then die before its end
            seen = store.commit_generation
            while not await refresh_committed(ctx.run_id):
                seen = await store.wait_for_commits(since=seen)
            os.kill(os.getpid(), signal.SIGKILL)
        return {"usd": "80.00"}

    @capability(kind="execute", tier="auto", refresh=["balance"])
    def pay() -> dict[str, Any]:
        """Pay 20 USD."""
        return {"paid": "20.00"}

    script = Script(
        match=MESSAGE,
        steps=[ToolCalls([Call("pay")]), Reply("Paid; the balance is 80 USD.")],
    )
    return Agent(
        model=ScriptedModel([script]),
        capabilities=[balance, pay],
        store=store,
        policy=Policy(preset="balanced"),
        authorize=allow_all,
        clock=clock or SystemClock(),
    )


async def main(db: str) -> None:
    store = SQLiteStore(db)
    async for _ in agent(store, die=True).run(MESSAGE, principal="alice"):
        pass


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
