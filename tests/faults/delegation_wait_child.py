"""One process of the durable-wait delegation tests: a manager delegates a payment to a worker.

``python tests/faults/delegation_wait_child.py BACKEND DB EFFECTS NOW FLAVOR MODE``:

- BACKEND sqlite or postgres (DB a file or a DSN); EFFECTS a file that gets one line per entry
  into the worker's ``pay`` (its idempotency key), written with ``os.write`` (it survives a
  SIGKILL); NOW the manual clock's time (ISO: a later process's clock is past the leases of a
  killed one).
- FLAVOR ``auto`` (the payment runs without a person) or ``confirm`` (it waits for one: the
  child suspends ``awaiting_approval``, its parent ``awaiting_child``).
- MODE ``start`` (start the manager's run), ``approve`` (approve the child's pending payment,
  then sweep, as a person's decision in another process would), ``sweep`` (resume every run
  that can move until none is left), ``finish`` (approve the payment if it is still pending,
  then sweep); a mode may end with ``:kill:N:WHERE`` (WHERE ``before``
  or ``after``): SIGKILL this process at its N-th store write.

Prints one JSON line: the parent's status and final text, its delegate calls' ends, the runs'
statuses, the payment's entries, the ledger's rows, the store writes this process made.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, cast
from uuid import UUID

from fiduciary import Agent, CallContext, ManualClock, Policy, capability
from fiduciary.delegation import child_run_id
from fiduciary.events import RunCompleted, ToolCallEnd
from fiduciary.stores.base import RecordQuery, Store
from fiduciary.testing import Call, Reply, Results, Script, ScriptedModel, ToolCalls, allow_all
from tests.faults.harness import Counters, FaultyStore, Kill

PARENT = UUID("00000000-0000-4000-8000-000000000291")
CHILD = child_run_id(PARENT, "toolu_000_0")
AMOUNT = {"auto": "3", "confirm": "900"}  # within the balanced preset's autonomy, or beyond


def main() -> None:
    backend, db, effects, now, flavor, mode = sys.argv[1:7]
    asyncio.run(run(backend, db, Path(effects), datetime.fromisoformat(now), flavor, mode))


def kill_of(mode: str) -> tuple[str, Kill | None]:
    name, _, rest = mode.partition(":kill:")
    if not rest:
        return name, None
    n, where = rest.split(":")
    return name, Kill(0, "before_write" if where == "before" else "after_write", int(n))


async def open_store(backend: str, db: str) -> Store:
    if backend == "sqlite":
        from fiduciary.stores.sqlite import SQLiteStore

        return SQLiteStore(db)
    from fiduciary.stores.postgres import PostgresStore

    return await PostgresStore.open(db)


async def run(backend: str, db: str, effects: Path, now: datetime, flavor: str, mode: str) -> None:
    name, kill = kill_of(mode)
    counters = Counters()
    inner = await open_store(backend, db)
    store = cast(Store, FaultyStore(inner, kill, counters))

    @capability
    def look_up() -> dict[str, str]:
        """The invoice's amount."""
        return {"usd": AMOUNT[flavor]}

    @capability(kind="execute", operation="pay", amount_usd=lambda args, ctx: Decimal(args.usd))
    def pay(usd: str, ctx: CallContext) -> dict[str, str]:
        """Pay the invoice."""
        fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{ctx.idempotency_key}\n".encode())
        finally:
            os.close(fd)
        return {"paid": usd}

    def paid(results: Results) -> str:
        if "pay" in results:
            return f"paid ${results['pay']['paid']}"
        return f"the payment did not go through: {results.errors.get('pay', '')}"

    def relaying(results: Results) -> str:
        return f"the worker said: {results['delegate']['text']}"

    clock = ManualClock(now)
    options: dict[str, Any] = {
        "store": store,
        "clock": clock,
        "authorize": allow_all,
        "policy": Policy(preset="balanced", daily_autonomous_limit_usd=None),
    }
    worker = Agent(
        model=ScriptedModel(
            [
                Script(
                    "invoice",
                    [
                        ToolCalls([Call("look_up")]),
                        ToolCalls([Call("pay", {"usd": AMOUNT[flavor]})]),
                        Reply(paid),
                    ],
                )
            ]
        ),
        capabilities=[look_up, pay],
        **options,
    )
    task = {"agent": "worker", "task": "pay the invoice"}
    manager = Agent(
        model=ScriptedModel(
            [Script("settle", [ToolCalls([Call("delegate", task)]), Reply(relaying)])]
        ),
        capabilities=[look_up, pay],
        delegates={"worker": worker},
        **options,
    )
    if name == "start":
        async for _ in manager.run("settle my invoice", principal="alice", run_id=PARENT):
            pass
    elif name in ("approve", "finish"):
        for pending in await manager.pending_approvals(run_id=CHILD):
            amount = pending.amount_usd
            await worker.approve(pending.approval_id, by="alice", confirm_amount=amount)
    if name != "start":
        for _ in range(10):  # each pass drives what the last one left movable
            if not await manager.resume_all():
                break
    await report(inner, effects, counters)


async def report(store: Store, effects: Path, counters: Counters) -> None:
    events = await store.read_events(PARENT)
    record = await store.get_run(PARENT)
    ends = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "delegate"]
    final = [e.text for e in events if isinstance(e, RunCompleted)]
    child = await store.read_events(CHILD) if await store.get_run(CHILD) else []
    pays = [e for e in child if isinstance(e, ToolCallEnd) and e.name == "pay"]
    ledger = await store.find_ledger(RecordQuery(limit=100))
    runs = await store.list_runs()
    entered = await asyncio.to_thread(lambda: effects.read_text() if effects.exists() else "")
    print(
        json.dumps(
            {
                "status": record.status if record else None,
                "lease_owner": record.lease_owner if record else None,
                "final": final,
                "delegate_ends": [json.loads(e.output) for e in ends],
                "delegate_recovery": [e.recovery for e in ends],
                "pay_recovery": [e.recovery for e in pays],
                "runs": sorted(r.status for r in runs),
                "effects": entered.split(),
                "ledger": sorted(row.entry.status for row in ledger),
                "writes": counters.writes,
            }
        )
    )
    await store.close()


if __name__ == "__main__":
    main()
