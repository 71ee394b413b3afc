"""One process of the apps fault test: tick an app whose intent buys, and maybe die.

``python tests/faults/apps_child.py BACKEND DB EFFECTS CALLS NOW KILL``: BACKEND is sqlite or
postgres (DB a file or a DSN); EFFECTS an SQLite file where each buy is one row keyed by its
idempotency key; CALLS a file that gets one line per tick-hook model call; NOW the manual
clock's time (ISO); KILL ``before_effect``, ``after_effect`` or ``none``: where this process
SIGKILLs itself inside the buy.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from fiduciary import CallContext, ManualClock, capability
from fiduciary.apps import AppEngine, parse_manifest
from fiduciary.apps.tables import AppTables
from fiduciary.stores.base import Store
from fiduciary.testing import Reply, Results, Script, ScriptedModel, allow_all

APP = """---
id: dca
hooks: [tick]
tier: slow
capabilities: [buy]
permissions: [swap]
config: {approve: false}
---
Buy.
"""


def main() -> None:
    backend, db, effects, calls, now, kill = sys.argv[1:7]
    asyncio.run(run(backend, db, Path(effects), Path(calls), datetime.fromisoformat(now), kill))


async def run(backend: str, db: str, effects: Path, calls: Path, now: datetime, kill: str) -> None:
    def usd(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(str(args.usd))

    @capability(kind="execute", operation="swap", amount_usd=usd)
    def buy(asset: str, usd: Decimal, ctx: CallContext) -> dict[str, str]:
        """Buy."""
        if kill == "before_effect":
            os.kill(os.getpid(), signal.SIGKILL)
        with sqlite3.connect(effects) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS buys (key TEXT PRIMARY KEY, n INTEGER)")
            conn.execute(
                "INSERT INTO buys VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET n = n + 1",
                (ctx.idempotency_key,),
            )
        if kill == "after_effect":
            os.kill(os.getpid(), signal.SIGKILL)
        return {"bought": asset}

    def answer(results: Results) -> str:
        with calls.open("a") as out:
            out.write("tick\n")
        action = {"capability": "buy", "args": {"asset": "ETH", "usd": "5"}}
        return json.dumps({"intents": [{"summary": "buy", "action": action}]})

    model = ScriptedModel([Script(match="[app dca] hook tick", steps=[Reply(answer)])])
    store: Store
    tables: AppTables
    if backend == "sqlite":
        from fiduciary.apps import SQLiteAppTables
        from fiduciary.stores.sqlite import SQLiteStore

        store, tables = SQLiteStore(db), SQLiteAppTables(db)
    else:
        from fiduciary.apps.postgres import PostgresAppTables
        from fiduciary.stores.postgres import PostgresStore

        store, tables = await PostgresStore.open(db), await PostgresAppTables.open(db)
    manifest = parse_manifest(APP, capabilities={"buy": "swap"})
    engine = AppEngine(
        model=model,
        capabilities=[buy],
        store=store,
        tables=tables,
        principal="alice",
        manifests=[manifest],
        authorize=allow_all,
        clock=ManualClock(now),
        guards=[],
    )
    await engine.enable("dca")
    # a tick is an outside event: its buy runs on its own only within the budget a person
    # approved when enabling the app (its permissions)
    for approval in await engine.pending("dca"):
        await engine.approve(approval.approval_id, by="alice")
    await engine.enable("dca")
    results = await engine.step()
    print(json.dumps([[r.slot, r.outcome, r.detail] for r in results]), flush=True)
    await store.close()


if __name__ == "__main__":
    main()
