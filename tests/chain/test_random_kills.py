"""Random SIGKILLs while 2 processes send at once from one account (intents in one SQLite file,
or PostgreSQL), each killed process started again with the same calls until all are done;
counted on chain: every call's transfer landed exactly once, no nonce was used twice or
wasted, nothing is left in flight."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time

import pytest

from fiduciary.chain.intents import SQLiteIntentBook

from .anvil import ROOT
from .conftest import ChainSetup
from .onchain import nonce_of, token_balance, transfers
from .sender import KILL_AFTER, recipient

pytestmark = pytest.mark.slow

PROCESSES = 2
EACH = 25
POINTS_PER_SEND = 5
MAX_KILLS = 3  # per process; then it runs to the end
DEPLOYMENT_TXS = 3
DEADLINE = 240.0


def test_random_kills_during_concurrent_sends_end_in_one_transfer_per_call(
    chain: ChainSetup, backend: tuple[str, str]
) -> None:
    kind, target = backend
    seed = int(os.environ.get("CHAIN_KILL_SEED", random.randrange(10**6)))
    rng = random.Random(seed)
    kills = {n: 0 for n in range(PROCESSES)}

    def start(n: int) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if k != KILL_AFTER}
        if kills[n] < MAX_KILLS:
            env[KILL_AFTER] = str(rng.randint(1, POINTS_PER_SEND * EACH))
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.chain.sender", kind, target, str(chain.config_path),
             str(chain.keystore), str(chain.passphrase_file), f"p{n}", str(EACH)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=ROOT, env=env,
        )  # fmt: skip
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        child.stdin.write("go\n")
        child.stdin.flush()
        return child

    running = {n: start(n) for n in range(PROCESSES)}
    deadline = time.monotonic() + DEADLINE
    try:
        while running:  # each killed process is started again at once (its nonces may gate others)
            assert time.monotonic() < deadline, f"not done within {DEADLINE:g}s (seed {seed})"
            for n, child in list(running.items()):
                try:
                    code = child.wait(timeout=0.05)
                except subprocess.TimeoutExpired:
                    continue
                _, err = child.communicate()
                if code == -9:
                    kills[n] += 1
                    running[n] = start(n)
                    continue
                assert code == 0, f"seed {seed}: {err[-2000:]}"
                del running[n]
    finally:
        for child in running.values():
            child.kill()
            child.wait()

    owner = chain.signer().address
    total = PROCESSES * EACH
    keys = [f"p{n}-{i}" for n in range(PROCESSES) for i in range(EACH)]
    landed = [token_balance(chain.url, chain.config.token, recipient(k)) for k in keys]
    figures: dict[str, int | str] = {
        "backend": kind, "seed": seed, "kills": sum(kills.values()), "calls": total,
        "transfers_on_chain": len(transfers(chain.url, chain.config.token, owner)),
        "double": sum(1 for x in landed if x > 1), "missing": sum(1 for x in landed if x == 0),
        "sender_nonce": nonce_of(chain.url, owner),
    }  # fmt: skip
    print(json.dumps(figures))
    assert all(k >= 1 for k in kills.values())  # every process was killed at least once
    assert all(x == 1 for x in landed), figures  # 0 double transfers, 0 missing
    assert figures["transfers_on_chain"] == total
    assert figures["sender_nonce"] == DEPLOYMENT_TXS + total  # 0 collisions, 0 nonces wasted
    if kind == "sqlite":
        intents = asyncio.run(SQLiteIntentBook(target).by_sender(chain.config.chain_id, owner))
        assert len(intents) == total
        assert {i.status for i in intents} == {"mined"}  # nothing left in flight
