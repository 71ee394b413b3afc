"""One process of the delegation fault test: a manager delegates to a worker, and maybe dies.

``python tests/faults/delegation_child.py BACKEND DB CALLS NOW MODE``: BACKEND is sqlite or
postgres (DB a file or a DSN); CALLS a file that gets one line per entry into the worker's
``look_up``; NOW the manual clock's time (ISO); MODE ``start`` (start the manager's run),
``start-kill`` (the same, and SIGKILL this process inside the worker's call: the child run in
flight, the parent waiting in its delegate call) or ``resume`` (resume what is left). Prints one
JSON line: the parent's status and final text, its delegate call ends, the runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import datetime
from pathlib import Path
from uuid import UUID

from fiduciary import Agent, ManualClock, capability
from fiduciary.events import RunCompleted, ToolCallEnd
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Results, Script, ScriptedModel, ToolCalls, allow_all

PARENT = UUID("00000000-0000-4000-8000-000000000029")


def main() -> None:
    backend, db, calls, now, mode = sys.argv[1:6]
    asyncio.run(run(backend, db, Path(calls), datetime.fromisoformat(now), mode))


async def run(backend: str, db: str, calls: Path, now: datetime, mode: str) -> None:
    @capability
    def look_up() -> dict[str, str]:
        """The account's balance."""
        with calls.open("a") as out:
            out.write("look_up\n")
        if mode == "start-kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return {"usd": "42.00"}

    def relaying(results: Results) -> str:
        return f"the worker said: {results['delegate']['text']}"

    store: Store
    if backend == "sqlite":
        from fiduciary.stores.sqlite import SQLiteStore

        store = SQLiteStore(db)
    else:
        from fiduciary.stores.postgres import PostgresStore

        store = await PostgresStore.open(db)
    clock = ManualClock(now)
    worker = Agent(
        model=ScriptedModel(
            [Script("balance", [ToolCalls([Call("look_up")]), Reply("it is $42.00")])]
        ),
        capabilities=[look_up],
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    task = {"agent": "worker", "task": "look up the balance"}
    manager = Agent(
        model=ScriptedModel(
            [Script("how much", [ToolCalls([Call("delegate", task)]), Reply(relaying)])]
        ),
        capabilities=[look_up],
        store=store,
        clock=clock,
        authorize=allow_all,
        delegates={"worker": worker},
    )
    if mode.startswith("start"):
        async for _ in manager.run("how much do I have?", principal="alice", run_id=PARENT):
            pass
    else:
        await manager.resume_all()
        await worker.resume_all()  # leaves the child alone: its parent's call resumed it
    events = await store.read_events(PARENT)
    record = await store.get_run(PARENT)
    ends = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "delegate"]
    final = [e.text for e in events if isinstance(e, RunCompleted)]
    runs = await store.list_runs()
    print(
        json.dumps(
            {
                "status": record.status if record else None,
                "final": final,
                "delegate_ends": [e.output for e in ends],
                "runs": sorted(r.status for r in runs),
            }
        )
    )
    await store.close()


if __name__ == "__main__":
    main()
