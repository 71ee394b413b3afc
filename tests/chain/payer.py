"""A process that pays once on chain through fiduciary, for the fault tests.

``python -m tests.chain.payer start|resume CHAIN_JSON KEYSTORE PASSPHRASE_FILE DB RUN_ID TO``:
``start`` runs an agent whose scripted model sends 5 USDC to TO (auto tier) as run RUN_ID (or
``PAYER_AMOUNT``: 100 waits for a person, and the process approves it itself, then resumes);
``resume`` waits for the run's lease to lapse and resumes it. Both print the run's final
status and the send's result as one JSON line. ``FIDUCIARY_CHAIN_KILL_AT=point`` SIGKILLs the
process at that point of the live write ("signed", "committed", "broadcast", "receipt",
"done"), as the tests/faults harness kills at its points.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from decimal import Decimal
from uuid import UUID

from fiduciary import Agent, Policy, Redactor, Threshold
from fiduciary.chain.capabilities import chain_capabilities
from fiduciary.chain.config import load_config
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.keys import load_keystore
from fiduciary.chain.wallet import ChainWallet
from fiduciary.events import ToolCallEnd
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all
from tests.waiting import eventually

KILL_ENV = "FIDUCIARY_CHAIN_KILL_AT"
PRINCIPAL = "alice"
AMOUNT = os.environ.get("PAYER_AMOUNT", "5")  # 5: the auto tier; 100: a person approves
LEASE_SECONDS = 1.0


def kill_at(point: str) -> None:
    if os.environ.get(KILL_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


async def main(mode: str, chain_json: str, keystore: str, passfile: str, db: str, run: str,
               to: str) -> None:  # fmt: skip
    run_id = UUID(run)
    signer = load_keystore(keystore, passphrase_file=passfile)
    wallet = await ChainWallet.connect(
        load_config(chain_json, env={}), signer, SQLiteIntentBook(db), step=kill_at
    )
    store = await SQLiteStore.open(db)
    try:
        script = Script(
            "pay",
            [
                ToolCalls([Call("send_transfer", {"to": to, "asset": "USDC", "amount": AMOUNT})]),
                Reply("sent"),
            ],
        )
        agent = Agent(
            model=ScriptedModel([script]),
            capabilities=chain_capabilities(wallet),
            store=store,
            policy=Policy(
                thresholds={"send": Threshold(auto_below=Decimal(50), confirm_below=Decimal(1000))}
            ),
            authorize=allow_all,
            redactor=Redactor(known_secrets=signer.secrets()),
            lease_seconds=LEASE_SECONDS,
        )
        ends: list[ToolCallEnd] = []
        if mode == "start":
            async for event in agent.run("pay bob", principal=PRINCIPAL, run_id=run_id):
                if isinstance(event, ToolCallEnd) and event.name == "send_transfer":
                    ends.append(event)
            for pending in await agent.pending_approvals(run_id=run_id):  # the confirm tier
                await agent.approve(
                    pending.approval_id, by=PRINCIPAL, confirm_amount=pending.amount_usd
                )
                async for event in agent.resume(run_id):
                    if isinstance(event, ToolCallEnd) and event.name == "send_transfer":
                        ends.append(event)
        else:

            async def lapsed() -> bool:
                until = (await agent.get_run(run_id)).lease_until
                return until is None or until <= agent.clock.now()

            # a lease left by a killed process must lapse first
            await eventually(lapsed, what="the killed process's lease to lapse", timeout=120)
            async for event in agent.resume(run_id):
                if isinstance(event, ToolCallEnd) and event.name == "send_transfer":
                    ends.append(event)
        final = await agent.get_run(run_id)
        print(
            json.dumps(
                {
                    "status": final.status,
                    "ends": [
                        {"output": e.output, "is_error": e.is_error, "recovery": e.recovery}
                        for e in ends
                    ],
                }
            ),
            flush=True,
        )
    finally:
        await store.close()
        await wallet.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:8]))
