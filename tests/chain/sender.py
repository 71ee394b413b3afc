"""A process that sends COUNT transfers at once from one account, for the concurrency test.

``python -m tests.chain.sender sqlite|postgres TARGET CHAIN_JSON KEYSTORE PASSPHRASE_FILE PREFIX
COUNT``: connects its wallet (intents in the SQLite file or PostgreSQL database TARGET), prints
``ready``, waits for a line on stdin (so that every process starts at once), then sends 1 USDC
to each of COUNT new addresses concurrently (keys PREFIX-0 … PREFIX-COUNT-1) and prints the
nonces it used as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from decimal import Decimal

from eth_account import Account

from fiduciary.chain.config import load_config
from fiduciary.chain.intents import IntentBook, SQLiteIntentBook
from fiduciary.chain.keys import load_keystore
from fiduciary.chain.wallet import ChainWallet


async def main(backend: str, target: str, chain_json: str, keystore: str, passfile: str,
               prefix: str, count: str) -> None:  # fmt: skip
    book: IntentBook
    if backend == "sqlite":
        book = SQLiteIntentBook(target)
    else:
        from fiduciary.chain.intents_postgres import PostgresIntentBook

        book = await PostgresIntentBook.open(target)
    signer = load_keystore(keystore, passphrase_file=passfile)
    wallet = await ChainWallet.connect(load_config(chain_json, env={}), signer, book)
    try:
        people = [str(Account.from_key(secrets.token_bytes(32)).address) for _ in range(int(count))]
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
