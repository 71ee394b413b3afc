"""Agents for the fail-closed and redaction tests, and a second process that uses them.

``python -m tests.unit.server.second_process drive DB EFFECTS`` drives one run of the agent
that has no ``authorize`` callback over the SQLite file DB, then prints its run id: every
effect a handler has appends a line to the EFFECTS file, outside any store.

``python -m tests.unit.server.second_process read DB`` prints, as one JSON document, all that
the store in DB holds for every run: events, audit rows, ledger rows and approvals.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import asdict
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python

from fiduciary import Agent, CallContext, Redactor, capability
from fiduciary.capabilities import Capability
from fiduciary.events import encode_event
from fiduciary.stores.base import RecordQuery, Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

UNGUARDED = "do everything"  # the message of the run that calls a capability of each kind

CANARIES = (
    "sk-live-CANARY0123456789abcdefghij",
    "CANARYPASSWORD99",
    "CANARYSIGNATURE77",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ.c2lnbmF0dXJlQ0FOQVJZ",
    "held-secret-CANARY-4242",  # no known shape: only the agent's known_secrets catch it
)
CHARGE = "charge my card"  # the message of the run whose outputs hold the canaries


def _effect(effects: Path, line: str) -> None:
    fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def unguarded_agent(store: Store, effects: Path) -> Agent:
    """An agent whose host configured no ``authorize``: its propose, approve and execute
    capabilities must never run; its read does."""

    @capability(kind="read")
    async def balance() -> dict[str, str]:
        """The balance, in USD."""
        return {"usd": "250.00"}

    @capability(kind="propose", operation="send", amount_usd=lambda a, c: Decimal(a.amount))
    async def propose_transfer(to: str, amount: str) -> dict[str, str]:
        """Draft a transfer for the person to review."""
        _effect(effects, f"propose_transfer {to} {amount}")
        return {"draft": "d-1"}

    @capability(kind="approve")
    async def approve_transfer(draft: str) -> dict[str, str]:
        """Approve a drafted transfer."""
        _effect(effects, f"approve_transfer {draft}")
        return {"approved": draft}

    @capability(kind="execute", operation="send", amount_usd=lambda a, c: Decimal(a.amount))
    async def send(to: str, amount: str, ctx: CallContext) -> dict[str, str]:
        """Send USD."""
        _effect(effects, f"send {to} {amount}")
        return {"sent": amount}

    script = Script(
        UNGUARDED,
        [
            ToolCalls(
                [
                    Call("balance"),
                    Call("propose_transfer", {"to": "bob", "amount": "1"}),
                    Call("approve_transfer", {"draft": "d-1"}),
                    Call("send", {"to": "bob", "amount": "1"}),
                ]
            ),
            Reply("I could not do it."),
        ],
    )
    return Agent(
        model=ScriptedModel([script]),
        capabilities=[balance, propose_transfer, approve_transfer, send],
        store=store,
    )


@capability(kind="read")
async def card_details() -> dict[str, Any]:
    """The card on file, as a careless backend returns it."""
    return {
        "holder": "Alice",
        "api_key": CANARIES[0],
        "statement_url": f"https://alice:{CANARIES[1]}@bank.example/s.pdf?X-Amz-Signature={CANARIES[2]}",
    }


def secret_outputs_agent(store: Store) -> Agent:
    """An agent whose capabilities return secrets: a read, and a write (tier confirm) whose
    result, kept in the ledger, holds them too."""

    @capability(kind="execute", tier="confirm")
    async def charge_card(amount: str) -> dict[str, Any]:
        """Charge the card on file."""
        return {
            "charged": amount,
            "receipt": f"Authorization: Bearer {CANARIES[3]}",
            "gateway_note": f"settled with {CANARIES[4]}",
        }

    script = Script(
        CHARGE,
        [
            ToolCalls([Call("card_details")]),
            ToolCalls([Call("charge_card", {"amount": "12.00"})]),
            Reply("Charged."),
        ],
    )
    caps: list[Capability] = [card_details, charge_card]
    return Agent(
        model=ScriptedModel([script]),
        capabilities=caps,
        store=store,
        authorize=allow_all,
        redactor=Redactor(known_secrets=[CANARIES[4]]),
    )


async def _drive(db: Path, effects: Path) -> None:
    store = await SQLiteStore.open(db)
    try:
        agent = unguarded_agent(store, effects)
        run_id = None
        async for event in agent.run(UNGUARDED, principal="alice"):
            run_id = event.run_id
        print(run_id, flush=True)
    finally:
        await store.close()


async def _read(db: Path) -> None:
    store = await SQLiteStore.open(db)
    try:
        runs = await store.list_runs(limit=1000)
        everything: dict[str, Any] = {
            "events": [
                encode_event(e) for run in runs for e in await store.read_events(run.run_id)
            ],
            "audit": [asdict(a) for a in await store.find_audit(RecordQuery(limit=1000))],
            "ledger": [asdict(r) for r in await store.find_ledger(RecordQuery(limit=1000))],
            "approvals": [asdict(a) for a in await store.list_approvals()],
        }
        print(json.dumps(to_jsonable_python(everything)), flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    if sys.argv[1] == "drive":
        asyncio.run(_drive(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        asyncio.run(_read(Path(sys.argv[2])))
