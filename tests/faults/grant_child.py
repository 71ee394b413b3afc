"""One process of the grant-request tests: an app's message hook asks for a scoped grant
(``request_grant``), then saves within it; and the engine those tests build.

``python -m tests.faults.grant_child PHASE DB EFFECTS [ID]``: DB is the runs' SQLite file
(the apps' tables share it); EFFECTS an SQLite file where each executed save is one row keyed
by its idempotency key (counted at the executor). PHASE:

- ``start``: enable the app, send the message; once its run waits for the grant's approval,
  print ``WAITING <run_id> <approval_id>`` and wait on stdin (the test SIGKILLs it there);
- ``approve ID``: approve the approval ``ID`` (as alice), and print ``APPROVED``;
- ``resume ID``: continue the message run ``ID``; print what it answered, as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

from fiduciary import CallContext, Capability, ManualClock, capability
from fiduciary.apps import AppEngine, parse_manifest
from fiduciary.apps.tables import AppTables
from fiduciary.models.scripted import Step
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Results, Script, ScriptedModel, ToolCalls, allow_all

APP = """---
id: sweeper
hooks: [message]
tier: active
capabilities: [balance, save, send]
permissions: [save]
---
Sweep idle USDC to savings when asked.
"""

NOW = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)  # every process's clock: the grant stays live
GRANT = {"operations": ["save"], "limit_usd": "100", "ttl_seconds": 120, "reason": "sweep"}


def said(results: Results) -> str:
    """The hook's answer: what the saves and the grant request came to."""
    saved = results.get("save")
    refused = results.errors.get("request_grant")
    text = f"saved {saved['saved']}" if saved else f"no grant: {refused}"
    return json.dumps({"reply": text})


# ask for a grant, then save $60 within it, then answer
STEPS: list[Step] = [
    ToolCalls([Call("request_grant", GRANT)]),
    ToolCalls([Call("save", {"usd": "60"})]),
    Reply(said),
]


def capabilities(effects: Path) -> list[Capability]:
    def usd(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(str(args.usd))

    @capability
    def balance() -> dict[str, str]:
        """The balance."""
        return {"usdc": "1000"}

    @capability(kind="execute", operation="save", amount_usd=usd)
    def save(usd: Decimal, ctx: CallContext) -> dict[str, str]:
        """Move USD to savings."""
        with sqlite3.connect(effects) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS saves (key TEXT PRIMARY KEY, n INTEGER)")
            conn.execute(
                "INSERT INTO saves VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET n = n + 1",
                (ctx.idempotency_key,),
            )
        return {"saved": str(usd)}

    @capability(kind="execute", operation="send", amount_usd=usd)
    def send(to: str, usd: Decimal) -> dict[str, str]:
        """Send USD."""
        return {"sent": str(usd)}

    return [balance, save, send]


def saves(effects: Path) -> list[int]:
    """How often each save ran (one entry per idempotency key)."""
    if not effects.exists():
        return []
    with sqlite3.connect(effects) as conn:
        # the file exists from the save's connect on, the table only once its CREATE commits
        made = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'saves'").fetchone()
        if made is None:
            return []
        return [n for (n,) in conn.execute("SELECT n FROM saves ORDER BY key")]


def build(
    store: Store,
    tables: AppTables,
    effects: Path,
    steps: Sequence[Step] = STEPS,
    before: Sequence[Script] = (),
) -> AppEngine:
    """The engine; ``before``: scripts tried first (matched on the message's text)."""
    caps = capabilities(effects)
    default = Script(match="[app sweeper] hook message", steps=list(steps))
    model = ScriptedModel([*before, default])
    manifest = parse_manifest(APP, capabilities={c.name: c.operation for c in caps})
    return AppEngine(
        model=model,
        capabilities=caps,
        store=store,
        tables=tables,
        principal="alice",
        manifests=[manifest],
        authorize=allow_all,
        clock=ManualClock(NOW),
        guards=[],
    )


async def enabled(engine: AppEngine) -> None:
    await engine.enable("sweeper")
    for approval in await engine.pending("sweeper"):
        await engine.approve(approval.approval_id, by="alice")
    await engine.enable("sweeper")


async def main(phase: str, db: str, effects: Path, arg: str | None) -> None:
    from fiduciary.apps import SQLiteAppTables
    from fiduciary.stores.sqlite import SQLiteStore

    store = SQLiteStore(db)
    engine = build(store, SQLiteAppTables(db), effects)
    try:
        if phase == "start":
            await enabled(engine)
            sent = await engine.message("sweeper", "sweep the idle USDC")
            [approval] = await engine.pending("sweeper")
            print(f"WAITING {sent.run_id} {approval.approval_id}", flush=True)
            sys.stdin.readline()  # wait here: the test kills this process while it waits
        elif phase == "approve":
            assert arg is not None
            await engine.approve(UUID(arg), by="alice")
            print("APPROVED", flush=True)
        elif phase == "resume":
            assert arg is not None
            reply = await engine.resume_message("sweeper", UUID(arg))
            pending = [a.capability for a in await engine.pending("sweeper")]
            answer = {"reply": reply.reply, "waiting": reply.waiting, "pending": pending}
            print(json.dumps(answer), flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    phase, db, effects = sys.argv[1:4]
    asyncio.run(main(phase, db, Path(effects), sys.argv[4] if len(sys.argv) > 4 else None))
