"""Two processes send from one account at once, their intents in one database (a SQLite file,
or PostgreSQL): nonces are reserved in the database, so no nonce is signed twice; counted on
chain, every transfer landed exactly once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from decimal import Decimal

import pytest

from fiduciary.chain.intents import SQLiteIntentBook

from .anvil import ROOT
from .conftest import ChainSetup
from .onchain import nonce_of, token_balance, transfers

pytestmark = pytest.mark.slow

PROCESSES = 2
EACH = 10
DEPLOYMENT_TXS = 3


def test_two_processes_sending_at_once_never_sign_one_nonce_twice(
    chain: ChainSetup, backend: tuple[str, str]
) -> None:
    kind, target = backend
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.chain.sender",
                kind,
                target,
                str(chain.config_path),
                str(chain.keystore),
                str(chain.passphrase_file),
                f"p{n}",
                str(EACH),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for n in range(PROCESSES)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.strip() == "ready", line + (child.stderr.read() if child.stderr else "")
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate(timeout=120) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    nonces = sorted(n for r in results for n in r["nonces"])
    owner = chain.signer().address
    total = PROCESSES * EACH
    print(json.dumps({"backend": kind, "sent": total, "on_chain": len(transfers(
        chain.url, chain.config.token, owner)), "nonces_unique": len(set(nonces))}))  # fmt: skip
    assert nonces == list(range(DEPLOYMENT_TXS, DEPLOYMENT_TXS + total))  # 0 collisions
    assert len(transfers(chain.url, chain.config.token, owner)) == total
    assert nonce_of(chain.url, owner) == DEPLOYMENT_TXS + total
    for r in results:
        for person in r["to"]:
            assert token_balance(chain.url, chain.config.token, person) == Decimal(1)
    if kind == "sqlite":
        book = SQLiteIntentBook(target)
        intents = asyncio.run(book.by_sender(chain.config.chain_id, owner))
        assert len(intents) == total
        assert {i.status for i in intents} == {"mined"}
