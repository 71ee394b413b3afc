"""A process that sends COUNT transfers at once from one account, for the concurrency test.

``python -m tests.chain.sender sqlite|postgres TARGET CHAIN_JSON KEYSTORE PASSPHRASE_FILE PREFIX
COUNT``: connects its wallet (intents in the SQLite file or PostgreSQL database TARGET), prints
``ready``, waits for a line on stdin (so that every process starts at once), then sends 1 USDC
to each of COUNT addresses concurrently (keys PREFIX-0 … PREFIX-COUNT-1; the address of each key
derived from it, so that a process started again sends the same calls) and prints the nonces it
used as one JSON line. ``FIDUCIARY_CHAIN_KILL_AFTER=N`` SIGKILLs the process at the N-th point
of a live write it reaches (any send, any point).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sys
from collections.abc import Callable
from decimal import Decimal

from eth_account import Account

from fiduciary.chain.config import load_config
from fiduciary.chain.intents import IntentBook, SQLiteIntentBook
from fiduciary.chain.keys import load_keystore
from fiduciary.chain.wallet import ChainWallet

KILL_AFTER = "FIDUCIARY_CHAIN_KILL_AFTER"


def recipient(key: str) -> str:
    return str(Account.from_key(hashlib.sha256(key.encode()).digest()).address)


def killer() -> Callable[[str], None]:
    limit = int(os.environ.get(KILL_AFTER, "0"))
    reached = 0

    def step(point: str) -> None:
        nonlocal reached
        reached += 1
        if limit and reached >= limit:
            os.kill(os.getpid(), signal.SIGKILL)

    return step


async def main(backend: str, target: str, chain_json: str, keystore: str, passfile: str,
               prefix: str, count: str) -> None:  # fmt: skip
    book: IntentBook
    if backend == "sqlite":
        book = SQLiteIntentBook(target)
    else:
        from fiduciary.chain.intents_postgres import PostgresIntentBook

        book = await PostgresIntentBook.open(target)
    signer = load_keystore(keystore, passphrase_file=passfile)
    wallet = await ChainWallet.connect(load_config(chain_json, env={}), signer, book, step=killer())
    try:
        people = [recipient(f"{prefix}-{i}") for i in range(int(count))]
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        receipts = await asyncio.gather(
            *(wallet.send(f"{prefix}-{i}", p, "USDC", Decimal(1)) for i, p in enumerate(people))
        )
        print(json.dumps({"nonces": [r.nonce for r in receipts], "to": people}), flush=True)
    finally:
        await wallet.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:8]))
