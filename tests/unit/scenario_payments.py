"""A payments scenario shared by tests that run it in several processes.

Effects go to their own SQLite file (``effects.sqlite3``) that honours idempotency keys and
counts raw handler entries, so a test can check "at most once" across processes.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

from fiduciary import Agent, CallContext, CapabilityError, Policy, capability
from fiduciary.capabilities import Capability
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

PRINCIPAL = "alice"
MESSAGE = "pay the rent and the plumber"


class EffectTarget:
    """An external system: applies each key once, and counts every attempt."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=10)
        self.conn.executescript(
            "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, payee TEXT, amount TEXT);"
            "CREATE TABLE IF NOT EXISTS entries (n INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT);"
        )

    def enter(self, key: str) -> None:
        self.conn.execute("INSERT INTO entries (key) VALUES (?)", (key,))

    def apply(self, key: str, payee: str, amount: Decimal) -> bool:
        cur = self.conn.execute(
            "INSERT OR IGNORE INTO effects VALUES (?, ?, ?)", (key, payee, str(amount))
        )
        return cur.rowcount == 1

    def effects(self) -> list[tuple[str, str, str]]:
        return list(self.conn.execute("SELECT key, payee, amount FROM effects ORDER BY payee"))

    def entries(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT key FROM entries ORDER BY n")]


def capabilities(target: EffectTarget) -> list[Capability]:
    @capability(kind="read")
    async def balance() -> dict[str, str]:
        """The available balance."""
        return {"usd": "5000.00"}

    def amount(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(args.amount)

    @capability(
        kind="execute",
        operation="send",
        amount_usd=amount,
        flags={"irreversible"},
        modifiable_fields=["amount"],
    )
    async def send(payee: str, amount: str, ctx: CallContext) -> dict[str, Any]:
        """Send money to a payee."""
        target.enter(ctx.idempotency_key)
        if Decimal(amount) <= 0:
            raise CapabilityError("invalid_amount", "amount must be positive")
        applied = target.apply(ctx.idempotency_key, payee, Decimal(amount))
        return {"payee": payee, "amount": amount, "new": applied}

    return [balance, send]


def script() -> Script:
    return Script(
        MESSAGE,
        [
            ToolCalls([Call("balance")]),
            ToolCalls(
                [
                    Call("send", {"payee": "landlord", "amount": "150"}),
                    Call("send", {"payee": "plumber", "amount": "3"}),
                ]
            ),
            Reply(lambda r: f"paid: {json.dumps(r.by_name.get('send'))}"),
        ],
    )


def agent(db: Path, effects: Path) -> Agent:
    return Agent(
        model=ScriptedModel([script()]),
        capabilities=capabilities(EffectTarget(effects)),
        store=SQLiteStore(db),
        policy=Policy(preset="balanced"),
        authorize=allow_all,
    )


async def _start(db: Path, effects: Path) -> str:
    a = agent(db, effects)
    events = await collect(a.run(MESSAGE, principal=PRINCIPAL))
    await a.store.close()
    return str(events[0].run_id)


async def _approve_and_resume(db: Path, effects: Path, run_id: str, amount: str) -> str:
    a = agent(db, effects)
    for record in await a.pending_approvals(run_id=UUID(run_id)):
        await a.approve(record.approval_id, by=PRINCIPAL, edits={"amount": amount})
    events = await collect(a.resume(UUID(run_id)))
    status = (await a.get_run(UUID(run_id))).status
    await a.store.close()
    return json.dumps({"status": status, "last": events[-1].type if events else None})


def main(argv: list[str]) -> None:
    command, db, effects = argv[0], Path(argv[1]), Path(argv[2])
    if command == "start":
        print(asyncio.run(_start(db, effects)))
    elif command == "approve":
        print(asyncio.run(_approve_and_resume(db, effects, argv[3], argv[4])))
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv[1:])
