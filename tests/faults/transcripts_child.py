"""One process of the transcript test: a run on SQLite with transcript files, killed inside its
write's handler (``python tests/faults/transcripts_child.py DB DIR``: SIGKILLs itself)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from fiduciary import Agent, Clock, Policy, SystemClock, capability
from fiduciary.models.scripted import Call, Reply, Script, ScriptedModel, ToolCalls
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import allow_all

MESSAGE = "count to three, then pay"


@capability(kind="read")
def tick(n: int) -> dict[str, int]:
    """Count."""
    return {"n": n}


def agent(store: Store, *, die: bool, clock: Clock | None = None) -> Agent:
    @capability(kind="execute", tier="auto")
    def pay() -> dict[str, Any]:
        """Pay (this process dies inside it, after the log before it is committed)."""
        if die:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"paid": True}

    script = Script(
        match=MESSAGE,
        steps=[
            ToolCalls([Call("tick", {"n": 1}), Call("tick", {"n": 2})], text="Counting. " * 8),
            ToolCalls([Call("tick", {"n": 3})], text="And three. " * 8),
            ToolCalls([Call("pay")], text="Now paying."),
            Reply("Done: the payment's outcome was checked."),
        ],
    )
    return Agent(
        model=ScriptedModel([script]),
        capabilities=[tick, pay],
        store=store,
        policy=Policy(preset="balanced"),
        authorize=allow_all,
        clock=clock or SystemClock(),
    )


async def main(db: str, directory: str) -> None:
    store = SQLiteStore(db, transcripts=directory)
    async for _ in agent(store, die=True).run(MESSAGE, principal="alice"):
        pass


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
