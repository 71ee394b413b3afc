"""Random SIGKILLs during 100 concurrent payments through agents, counted on chain: 2 processes
sharing PostgreSQL (50 runs each), and 1 process on a SQLite file (100 runs). Each run pays one
recipient of its own: 5 USDC (the auto tier) or 60 USDC (the confirm tier: approved by the
process, as a person would, before anything is signed). A killed process is started again at
once and drives the same runs (its own resume after the lease lapses). Counted on the chain and
in the store: 0 double transfers, 0 missing, 0 transfers without the approval the tier required,
0 stranded runs, 0 nonce collisions (the sender's nonce advanced by exactly the number of
transfers, each intent's nonce used once). The figures are printed as one JSON line
(docs/durability.md quotes them); ``CHAIN_KILL_SEED`` replays a seed."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from decimal import Decimal
from typing import Any

import pytest

from fiduciary.chain.intents import IntentBook, SQLiteIntentBook
from fiduciary.events import ToolCallEnd

from .agent_sender import amount_of, run_id_of
from .anvil import ROOT
from .conftest import ChainSetup
from .onchain import nonce_of, token_balance, transfers
from .sender import KILL_AFTER, recipient

CALLS = 100
POINTS_PER_SEND = 5
MAX_KILLS = 3  # per process; then it runs to the end
DEPLOYMENT_TXS = 3
DEADLINE = 240.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(DEADLINE + 60)]


@pytest.fixture(params=[("postgres", 2), ("sqlite", 1)], ids=["postgres-2", "sqlite-1"])
def setup(request: pytest.FixtureRequest, chain_rich: ChainSetup) -> tuple[str, str, int]:
    kind, processes = request.param
    target = str(chain_rich.db) if kind == "sqlite" else request.getfixturevalue("postgres_dsn")
    return kind, target, processes


def test_random_kills_during_100_concurrent_payments_through_agents(
    chain_rich: ChainSetup, setup: tuple[str, str, int]
) -> None:
    chain = chain_rich
    kind, target, processes = setup
    each = CALLS // processes
    seed = int(os.environ.get("CHAIN_KILL_SEED", random.randrange(10**6)))
    rng = random.Random(seed)
    kills = {n: 0 for n in range(processes)}
    started = time.monotonic()
    print(f"CHAIN_KILL_SEED={seed}", flush=True)  # to replay a failure

    def start(n: int) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if k != KILL_AFTER}
        if kills[n] < MAX_KILLS:
            env[KILL_AFTER] = str(rng.randint(1, POINTS_PER_SEND * each))
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.chain.agent_sender", kind, target,
             str(chain.config_path), str(chain.keystore), str(chain.passphrase_file), f"p{n}",
             str(each)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=ROOT, env=env,
        )  # fmt: skip
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        child.stdin.write("go\n")
        child.stdin.flush()
        return child

    running = {n: start(n) for n in range(processes)}
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
    seconds = time.monotonic() - started

    owner = chain.signer().address
    keys = [(f"p{n}-{i}", i) for n in range(processes) for i in range(each)]
    landed = {k: token_balance(chain.url, chain.config.token, recipient(k)) for k, _ in keys}
    asked = {k: Decimal(amount_of(i)) for k, i in keys}
    runs, approved, errors = asyncio.run(_store_facts(kind, target, [k for k, _ in keys]))
    intents = asyncio.run(_intents(kind, target).by_sender(chain.config.chain_id, owner))
    nonces = [i.nonce for i in intents if i.nonce is not None]
    figures: dict[str, Any] = {
        "backend": kind, "processes": processes, "seed": seed, "kills": sum(kills.values()),
        "calls": len(keys), "seconds": round(seconds, 1),
        "transfers_on_chain": len(transfers(chain.url, chain.config.token, owner)),
        "double": sum(1 for k, _ in keys if landed[k] > asked[k]),
        "missing": sum(1 for k, _ in keys if landed[k] == 0),
        "without_approval": sum(
            1 for k, _ in keys if asked[k] >= 50 and landed[k] > 0 and k not in approved
        ),
        "stranded": sum(1 for k, _ in keys if runs.get(k) != "completed"),
        "told_error": len(errors),
        "nonce_collisions": len(nonces) - len(set(nonces)),
        "sender_nonce_advanced": nonce_of(chain.url, owner) - DEPLOYMENT_TXS,
    }  # fmt: skip
    print(json.dumps(figures))
    assert all(k >= 1 for k in kills.values()), figures  # every process was killed at least once
    assert all(landed[k] == asked[k] for k, _ in keys), figures  # 0 double, 0 missing
    assert figures["transfers_on_chain"] == CALLS, figures
    assert figures["without_approval"] == 0, figures
    assert figures["stranded"] == 0, figures
    assert errors == {}, errors  # every send told its receipt: no timeout, no outcome unknown
    assert figures["nonce_collisions"] == 0, figures
    assert figures["sender_nonce_advanced"] == CALLS, figures  # no nonce used twice or wasted
    assert len(intents) == CALLS
    assert {i.status for i in intents} == {"mined"}  # nothing left in flight


def _intents(kind: str, target: str) -> IntentBook:
    if kind == "sqlite":
        return SQLiteIntentBook(target)
    from fiduciary.chain.intents_postgres import PostgresIntentBook

    return PostgresIntentBook(target)


async def _store_facts(
    kind: str, target: str, keys: list[str]
) -> tuple[dict[str, str], set[str], dict[str, str]]:
    """Each run's status, the runs whose send a person approved, the sends told an error."""
    if kind == "sqlite":
        from fiduciary.stores.sqlite import SQLiteStore

        store: Any = await SQLiteStore.open(target)
    else:
        from fiduciary.stores.postgres import PostgresStore

        store = await PostgresStore.open(target)
    try:
        runs: dict[str, str] = {}
        approved: set[str] = set()
        errors: dict[str, str] = {}
        for key in keys:
            for event in await store.read_events(run_id_of(key)):
                if isinstance(event, ToolCallEnd) and event.is_error:
                    errors[key] = event.output[:300]
            record = await store.get_run(run_id_of(key))
            runs[key] = "absent" if record is None else record.status
            decided = await store.list_approvals(run_id=run_id_of(key))
            if any(a.status == "approved" for a in decided):
                approved.add(key)
        return runs, approved, errors
    finally:
        await store.close()
