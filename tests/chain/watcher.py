"""A payment watcher in a process of its own, for the crash tests.

``python -m tests.chain.watcher CHAIN_JSON DB ADDRESS`` reads once from the saved cursor and
prints what it recorded as one JSON line. ``FIDUCIARY_CHAIN_KILL_AT=read`` SIGKILLs it after the
logs were read and before they are recorded; ``=recorded`` right after the commit.
"""

from __future__ import annotations

import asyncio
import json
import sys

from eth_utils.address import to_checksum_address
from web3 import AsyncHTTPProvider, AsyncWeb3

from fiduciary.chain.config import load_config
from fiduciary.chain.payments import SQLiteReceivables
from fiduciary.chain.watch import PaymentWatcher
from tests.chain.payer import kill_at


async def main(chain_json: str, db: str, address: str) -> None:
    config = load_config(chain_json, env={})
    book = SQLiteReceivables(
        db,
        chain_id=config.chain_id,
        token=to_checksum_address(config.token),
        recipient=to_checksum_address(address),
        decimals=config.token_decimals,
    )
    w3 = AsyncWeb3(AsyncHTTPProvider(config.rpc_url))
    try:
        found = await PaymentWatcher(w3, config, book, step=kill_at).poll()
    finally:
        await w3.provider.disconnect()
    print(json.dumps([[f.outcome, f.reference, f.tx_hash] for f in found]), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
