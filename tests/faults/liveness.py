"""The processes of the liveness test: drivers, and the people who submit and approve.

The drivers are the real commands, with this module's agent factory:

    fiduciary serve  --db PATH | --postgres DSN --sweep-seconds S --agent AGENT
    fiduciary worker --postgres DSN --poll-interval S --agent AGENT

with AGENT = tests.faults.liveness:liveness_agent

(``FIDUCIARY_LIVENESS_DIR`` and ``FIDUCIARY_LIVENESS_NAME`` tell the factory where to report
and under which name). The people are one more process, which opens the store itself — as
``fiduciary approvals approve`` does — and is never told anything by the drivers:

    python -m tests.faults.liveness people sqlite PATH DIR RUNS | postgres DSN DIR RUNS

It submits RUNS runs (``Agent.submit``: recorded, driven by nobody here), one every
``SUBMIT_SECONDS``, for ``PEOPLE`` principals in turn, and approves every pending approval it
sees until SIGTERM. Its submissions keep pace with the strikes (``strikes_before``, read from
the ``strikes`` file the parent appends to as it strikes), so that at least ``MIN_STRIKES``
strikes land while runs are still in flight however slow the machine is; a submission waits
for them at most ``PACE_SECONDS`` (the parent strikes on a time window, so it never waits for
the people in turn: the wait only bounds a parent that stopped striking).

Every run reads a balance (slowly: a window in which its driver is mid-run), then pays its own
payee 150 USD (tier ``confirm``: the people approve it), then replies. Effects land in a SQLite
file of their own (``effects.sqlite3`` in DIR), shared by every process: one row per handler
entry, one row per effect (keyed by the idempotency key: a second one would be refused, and
the entries table would show it). ``reads`` in DIR gets a line at each balance read, and
``approved`` one at each approval, so that the parent can strike while runs are in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sqlite3
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from fiduciary import Agent, CallContext, Policy, capability
from fiduciary.capabilities import Capability
from fiduciary.exceptions import FiduciaryError
from fiduciary.stores.base import Store
from fiduciary.testing import ScriptedModel, allow_all

from .cluster import script

PEOPLE = 6  # runs are spread over so many principals (whose writes run one at a time each)
LEASE_SECONDS = 2.0
READ_SECONDS = 0.1
SUBMIT_SECONDS = 0.35
MIN_STRIKES = 8  # strikes the parent makes before the last run is submitted
PACE_SECONDS = 60.0  # at most, a submission waits for the strikes it should follow

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, payee TEXT NOT NULL,
    amount TEXT NOT NULL, driver TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (n INTEGER PRIMARY KEY, key TEXT NOT NULL,
    driver TEXT NOT NULL);
"""


def effects_db(files: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(files / "effects.sqlite3", timeout=60, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(EFFECTS_DDL)
    return conn


def capabilities(files: Path, name: str) -> list[Capability]:
    reads = os.open(files / "reads", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    effects: list[sqlite3.Connection] = []  # opened at the first payment

    @capability(kind="read")
    async def balance() -> dict[str, str]:
        """The available balance."""
        os.write(reads, f"{name}\n".encode())
        await asyncio.sleep(READ_SECONDS)  # an external system that takes its time
        return {"usd": "100000.00"}

    def amount(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(args.amount)

    @capability(kind="execute", operation="send", amount_usd=amount, flags={"irreversible"})
    async def send(payee: str, amount: str, ctx: CallContext) -> dict[str, Any]:
        """Send money to a payee."""
        if not effects:
            effects.append(effects_db(files))
        conn = effects[0]
        conn.execute("INSERT INTO entries (key, driver) VALUES (?, ?)", (ctx.idempotency_key, name))
        applied = conn.execute(
            "INSERT OR IGNORE INTO effects VALUES (?, ?, ?, ?)",
            (ctx.idempotency_key, payee, amount, name),
        ).rowcount
        return {"payee": payee, "amount": amount, "applied": applied == 1}

    return [balance, send]


def liveness_agent(store: Store) -> Agent:
    """The agent factory of every process of the test (``--agent``)."""
    files = Path(os.environ["FIDUCIARY_LIVENESS_DIR"])
    name = os.environ["FIDUCIARY_LIVENESS_NAME"]
    agent = Agent(
        model=ScriptedModel([script()], keep_requests=0),
        capabilities=capabilities(files, name),
        store=store,
        policy=Policy(preset="balanced", daily_autonomous_limit_usd=None),
        authorize=allow_all,
        lease_seconds=LEASE_SECONDS,
    )
    (files / f"owner-{name}").write_text(agent.owner)
    return agent


def strikes_before(i: int, runs: int) -> int:
    """The strikes made before run ``i`` (of ``runs``) is submitted: none for the first few,
    ``MIN_STRIKES`` for the last, evenly in between."""
    return i * MIN_STRIKES // max(runs - 1, 1)


def strikes_made(files: Path) -> int:
    path = files / "strikes"
    return len(path.read_text().splitlines()) if path.exists() else 0


async def people(backend: str, target: str, files: Path, runs: int) -> None:
    """Submit ``runs`` runs, and approve every pending approval, until SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    store: Store
    if backend == "sqlite":
        from fiduciary.stores.sqlite import SQLiteStore

        store = await SQLiteStore.open(Path(target))
    else:
        from fiduciary.stores.postgres import PostgresStore

        store = await PostgresStore.open(target)
    agent = liveness_agent(store)
    submitted = files / "submitted"
    approved = os.open(files / "approved", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def keep_pace(i: int) -> bool:
        """Wait until the strikes run ``i`` should follow were made; False once stopped."""
        deadline = loop.time() + PACE_SECONDS
        while strikes_made(files) < strikes_before(i, runs):
            if loop.time() > deadline:
                logging.getLogger("people").warning("run %d submitted without its strikes", i)
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)
                return False
        return True

    async def submit() -> None:
        for i in range(runs):
            if not await keep_pace(i):
                return
            while True:
                try:
                    await agent.submit(f"pay payee-{i:03d}", principal=f"person-{i % PEOPLE}")
                    break
                except FiduciaryError as exc:  # a refused write did not happen: again
                    logging.getLogger("people").warning("could not submit now: %s", exc)
            submitted.write_text(str(i + 1))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SUBMIT_SECONDS)
                return

    async def approve() -> None:
        while not stop.is_set():
            try:
                pending = await store.list_approvals(status="pending")
                for record in pending:
                    try:
                        await agent.approve(
                            record.approval_id,
                            by=record.principal,
                            confirm_amount=record.amount_usd,
                        )
                        os.write(approved, b"approved\n")
                    except FiduciaryError as exc:  # decided or expired meanwhile, or busy
                        logging.getLogger("people").info("not approved: %s", exc)
            except FiduciaryError as exc:  # the file is locked by a frozen driver: later
                logging.getLogger("people").warning("could not approve now: %s", exc)
            with contextlib.suppress(TimeoutError):  # a person glancing at the queue
                await asyncio.wait_for(stop.wait(), 0.05)

    try:
        await asyncio.gather(submit(), approve())
    finally:
        await store.close()


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    role, backend, target, files, runs = argv[:5]
    if role != "people":
        raise SystemExit(f"unknown role {role}")
    asyncio.run(people(backend, target, Path(files), int(runs)))


if __name__ == "__main__":
    main(sys.argv[1:])
