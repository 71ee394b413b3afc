"""A process that pays an x402 API from the chain wallet through fiduciary, for the crash test.

``python -m tests.chain.api_buyer start|resume CHAIN_JSON KEYSTORE PASSPHRASE_FILE DB RUN_ID URL
PAY_TO``: ``start`` runs an agent whose scripted model calls ``pay_api`` for 2 USDC (the auto
tier of the balanced preset) as run RUN_ID; ``resume`` waits for the run's lease to lapse and
resumes it. Both print the run's final status and the ``pay_api`` results as one JSON line.
The test SIGKILLs ``start`` while it waits for the API's answer (signed, sent, not answered).
"""

from __future__ import annotations

import asyncio
import json
import sys
from uuid import UUID

from fiduciary import Policy, Redactor
from fiduciary.chain.api_payments import ChainApiPayer
from fiduciary.chain.config import load_config
from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.keys import load_keystore
from fiduciary.chain.wallet import ChainWallet
from fiduciary.events import ToolCallEnd
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ToolCalls
from fiduciary.wallet.machine_payments import pay_api_capabilities
from tests.agent_support import make_agent
from tests.waiting import eventually

LEASE_SECONDS = 1.0


async def main(mode: str, chain_json: str, keystore: str, passfile: str, db: str, run: str,
               url: str, pay_to: str) -> None:  # fmt: skip
    run_id = UUID(run)
    signer = load_keystore(keystore, passphrase_file=passfile)
    wallet = await ChainWallet.connect(
        load_config(chain_json, env={}), signer, SQLiteIntentBook(db)
    )
    store = await SQLiteStore.open(db)
    try:
        args = {"url": url, "asset": "USDC", "amount": "2", "pay_to": pay_to}
        agent = make_agent(
            None,
            store,
            None,
            Script("buy", [ToolCalls([Call("pay_api", args)]), Reply("bought")]),
            capabilities=pay_api_capabilities(ChainApiPayer(wallet)),
            policy=Policy(preset="balanced"),
            redactor=Redactor(known_secrets=signer.secrets()),
            lease_seconds=LEASE_SECONDS,
        )
        ends: list[ToolCallEnd] = []
        if mode == "start":
            print("started", flush=True)
            async for event in agent.run("buy the forecast", principal="alice", run_id=run_id):
                if isinstance(event, ToolCallEnd):
                    ends.append(event)
        else:

            async def lapsed() -> bool:
                until = (await agent.get_run(run_id)).lease_until
                return until is None or until <= agent.clock.now()

            # a lease left by a killed process must lapse first
            await eventually(lapsed, what="the killed process's lease to lapse", timeout=120)
            async for event in agent.resume(run_id):
                if isinstance(event, ToolCallEnd):
                    ends.append(event)
        final = await agent.get_run(run_id)
        shown = [{"output": e.output, "is_error": e.is_error, "recovery": e.recovery} for e in ends]
        print(json.dumps({"status": final.status, "ends": shown}), flush=True)
    finally:
        await store.close()
        await wallet.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:9]))
