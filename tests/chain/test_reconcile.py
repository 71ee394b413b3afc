"""`fiduciary chain reconcile`, from outside the process: the intents of the account against
the chain; 0 differences after sends through fiduciary, and a transfer made outside it, or one
a reorg undid, is listed."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from decimal import Decimal

import pytest
from eth_account import Account

from fiduciary.chain.intents import SQLiteIntentBook
from fiduciary.chain.wallet import ChainWallet

from .anvil import ROOT, rpc
from .conftest import ChainSetup

pytestmark = pytest.mark.slow


def _reconcile(chain: ChainSetup, address: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "fiduciary", "chain", "reconcile", "--address", address,
         "--config", str(chain.config_path), "--db", str(chain.db)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "FIDUCIARY_CHAIN_RPC"},
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


async def test_reconcile_finds_nothing_after_fiduciary_and_lists_what_differs(
    chain: ChainSetup,
) -> None:
    signer = chain.signer()
    wallet = await ChainWallet.connect(chain.config, signer, SQLiteIntentBook(chain.db))
    try:
        for n in range(3):
            who = str(Account.from_key(secrets.token_bytes(32)).address)
            await wallet.send(f"k{n}", who, "USDC", Decimal(2))
        code, out = _reconcile(chain, signer.address)
        assert code == 0, out
        assert out.strip().endswith(f"0 difference(s) between the intents of {signer.address} "
                                    "and chain 31337")  # fmt: skip

        snapshot = rpc(chain.url, "evm_snapshot")
        undone = await wallet.send("undone", signer.address.lower(), "USDC", Decimal(1))
        rpc(chain.url, "evm_revert", snapshot)
        # a transfer with the same key, outside fiduciary (its own nonce, its own bytes)
        outside = await ChainWallet.connect(
            chain.config, signer, SQLiteIntentBook(chain.db.with_name("outside.db"))
        )
        try:
            made = await outside.send("x", signer.address, "USDC", Decimal(3))
        finally:
            await outside.close()
    finally:
        await wallet.close()
    code, out = _reconcile(chain, signer.address)
    assert code == 1
    assert f"unrecorded_transfer: {made.tx_hash}" in out
    assert f"vanished: {undone.tx_hash}" in out or f"receipt_differs: {undone.tx_hash}" in out
    assert "2 difference(s)" in out
    assert "Traceback" not in out
