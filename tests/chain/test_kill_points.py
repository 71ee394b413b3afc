"""SIGKILL at each point of a live write, then a new process resumes the run: counted on the
chain itself (Transfer logs, balances, the sender's nonce), exactly one transfer, no nonce
used twice, and the run completed (not stranded)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from decimal import Decimal
from typing import Any
from uuid import uuid4

import pytest
from eth_account import Account

from fiduciary.chain.intents import SQLiteIntentBook

from .anvil import ROOT
from .conftest import ChainSetup
from .onchain import nonce_of, token_balance, transfers

pytestmark = pytest.mark.slow

POINTS = ("signed", "committed", "broadcast", "receipt", "done")
DEPLOYMENT_TXS = 3  # the stablecoin, the vault, the mint


def _payer(
    mode: str, chain: ChainSetup, run_id: str, to: str, kill: str | None, amount: str = "5"
) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "FIDUCIARY_CHAIN_KILL_AT"}
    env["PAYER_AMOUNT"] = amount
    if kill is not None:
        env["FIDUCIARY_CHAIN_KILL_AT"] = kill
    args = [mode, str(chain.config_path), str(chain.keystore), str(chain.passphrase_file),
            str(chain.db), run_id, to]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "tests.chain.payer", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("point", POINTS)
async def test_a_kill_at_each_point_of_a_live_write_ends_in_one_transfer_on_chain(
    chain: ChainSetup, point: str
) -> None:
    bob = str(Account.from_key(secrets.token_bytes(32)).address)
    owner = chain.signer().address
    run_id = str(uuid4())

    code, out = _payer("start", chain, run_id, bob, kill=point)
    assert code == -signal.SIGKILL, out
    code, out = _payer("resume", chain, run_id, bob, kill=None)
    assert code == 0, out
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])

    sent = transfers(chain.url, chain.config.token, owner)
    intents = await SQLiteIntentBook(chain.db).by_sender(chain.config.chain_id, owner)
    nonces = [i.nonce for i in intents]
    figures = {
        "point": point,
        "transfers_on_chain": len(sent),
        "recipient_usdc": str(token_balance(chain.url, chain.config.token, bob)),
        "sender_nonce": nonce_of(chain.url, owner),
        "intents": len(intents),
        "run": result["status"],
        "recovery": [e["recovery"] for e in result["ends"]],
    }
    print(json.dumps(figures))
    assert len(sent) == 1  # 0 double transfers
    assert token_balance(chain.url, chain.config.token, bob) == Decimal(5)
    assert nonce_of(chain.url, owner) == DEPLOYMENT_TXS + 1  # one transaction, nothing else
    assert len(nonces) == len(set(nonces)) == 1  # 0 nonce collisions, 0 intents left over
    assert intents[0].status == "mined"
    assert sent[0]["transactionHash"] == intents[0].tx_hash  # the committed bytes were mined
    assert result["status"] == "completed"  # 0 stranded runs
    assert [e["is_error"] for e in result["ends"]] == [False]
    assert [e["recovery"] for e in result["ends"]] == ["replayed"]  # back to its handler
    receipt = json.loads(result["ends"][0]["output"].split("\n\n")[0])
    assert receipt["tx_hash"] == intents[0].tx_hash
    # killed before the commit: nothing was recorded, the resumed call signs afresh; after it,
    # the resumed call settles from the intent, and only an unbroadcast one sends the bytes again
    assert receipt["replayed"] is (point != "signed")
    assert receipt["rebroadcast"] is (point == "committed")


@pytest.mark.parametrize("point", ["committed", "receipt"])
async def test_a_kill_during_an_approved_live_write_ends_in_one_transfer_on_chain(
    chain: ChainSetup, point: str
) -> None:
    bob = str(Account.from_key(secrets.token_bytes(32)).address)
    owner = chain.signer().address
    run_id = str(uuid4())
    code, out = _payer("start", chain, run_id, bob, kill=point, amount="100")
    assert code == -signal.SIGKILL, out
    code, out = _payer("resume", chain, run_id, bob, kill=None, amount="100")
    assert code == 0, out
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert len(transfers(chain.url, chain.config.token, owner)) == 1
    assert token_balance(chain.url, chain.config.token, bob) == Decimal(100)
    assert nonce_of(chain.url, owner) == DEPLOYMENT_TXS + 1
    assert result["status"] == "completed"
    assert [e["is_error"] for e in result["ends"]] == [False]
    receipt = json.loads(result["ends"][0]["output"].split("\n\n")[0])
    assert receipt["replayed"] is True
    assert receipt["rebroadcast"] is (point == "committed")
