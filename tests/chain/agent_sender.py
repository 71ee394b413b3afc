"""A process that makes COUNT payments at once through an agent, for the random-kill test.

``python -m tests.chain.agent_sender sqlite|postgres TARGET CHAIN_JSON KEYSTORE PASSPHRASE_FILE
PREFIX COUNT``: an agent over the chain wallet, its runs and intents in the SQLite file or the
PostgreSQL database TARGET. Prints ``ready``, waits for a line on stdin (every process starts at
once), then drives COUNT runs concurrently, run ``PREFIX-i`` (its id derived from the key, so a
process started again drives the same runs) paying ``recipient(key)`` 5 USDC (the auto tier)
for even i and 60 USDC (the confirm tier: this process approves it, as a person would) for odd
i. A run already completed is left alone; one a killed process left is resumed once its lease
lapsed. Prints ``done``. ``FIDUCIARY_CHAIN_KILL_AFTER=N`` SIGKILLs the process at the N-th point
of a live write it reaches (``sender.killer``). SIGUSR1 writes where every task waits (each
one's chain of awaits) to ``/tmp/agent_sender_PREFIX.tasks``: a stuck run's first question.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from decimal import Decimal
from typing import Any

from fiduciary import Agent, Policy, Redactor, Threshold
from fiduciary.chain.capabilities import chain_capabilities
from fiduciary.chain.config import load_config
from fiduciary.chain.intents import IntentBook, SQLiteIntentBook
from fiduciary.chain.keys import load_keystore
from fiduciary.chain.wallet import ChainWallet
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

from .sender import killer, recipient

PRINCIPAL = "alice"
LEASE_SECONDS = 2.0
POLICY = Policy(
    thresholds={"send": Threshold(auto_below=Decimal(50), confirm_below=Decimal(1000))},
    daily_autonomous_limit_usd=Decimal(100_000),
)


def amount_of(i: int) -> str:
    return "5" if i % 2 == 0 else "60"


def run_id_of(key: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"fiduciary-chain-test:{key}")


async def drive(agent: Agent, key: str) -> None:
    run_id = run_id_of(key)
    record = await agent.store.get_run(run_id)
    if record is None:
        await collect(agent.run(f"pay <{key}>", principal=PRINCIPAL, run_id=run_id))
    while True:
        record = await agent.store.get_run(run_id)
        assert record is not None
        if record.status in ("completed", "failed", "cancelled"):
            return  # the test counts what did not complete
        if record.status == "awaiting_approval":
            for pending in await agent.pending_approvals(run_id=run_id):
                await agent.approve(
                    pending.approval_id, by=PRINCIPAL, confirm_amount=pending.amount_usd
                )
        elif record.lease_until is not None and record.lease_until > agent.clock.now():
            await asyncio.sleep(0.05)  # a killed process's lease must lapse (a condition wait)
            continue
        await collect(agent.resume(run_id))


async def main(backend: str, target: str, chain_json: str, keystore: str, passfile: str,
               prefix: str, count: str) -> None:  # fmt: skip
    book: IntentBook
    store: Any
    if backend == "sqlite":
        book = SQLiteIntentBook(target)
        store = await SQLiteStore.open(target)
    else:
        from fiduciary.chain.intents_postgres import PostgresIntentBook
        from fiduciary.stores.postgres import PostgresStore

        book = await PostgresIntentBook.open(target)
        store = await PostgresStore.open(target)
    signer = load_keystore(keystore, passphrase_file=passfile)
    wallet = await ChainWallet.connect(load_config(chain_json, env={}), signer, book, step=killer())
    keys = [f"{prefix}-{i}" for i in range(int(count))]
    scripts = [
        Script(
            f"<{key}>",
            [
                ToolCalls(
                    [
                        Call(
                            "send_transfer",
                            {"to": recipient(key), "asset": "USDC", "amount": amount_of(i)},
                        )
                    ]
                ),
                Reply("sent"),
            ],
        )
        for i, key in enumerate(keys)
    ]
    agent = Agent(
        model=ScriptedModel(scripts),
        capabilities=chain_capabilities(wallet),
        store=store,
        policy=POLICY,
        authorize=allow_all,
        redactor=Redactor(known_secrets=signer.secrets()),
        lease_seconds=LEASE_SECONDS,
    )

    def dump() -> None:  # SIGUSR1: where every task is (a stuck test's first question)
        with open(f"/tmp/agent_sender_{prefix}.tasks", "w") as out:
            for task in asyncio.all_tasks():
                coro: Any = task.get_coro()
                while coro is not None:  # the awaited chain, innermost last
                    frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
                    if frame is not None:
                        out.write(f"{frame.f_code.co_filename}:{frame.f_lineno} ")
                    coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
                out.write("\n")

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump)
    try:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await asyncio.gather(*(drive(agent, key) for key in keys))
        print("done", flush=True)
    finally:
        await store.close()
        await wallet.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:8]))
