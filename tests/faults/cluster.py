"""The processes of a fiduciary deployment on one PostgreSQL, for the multi-process test.

    python -m tests.faults.cluster worker  DSN DIR NAME   claim and drive runs until SIGTERM
    python -m tests.faults.cluster submit  DSN DIR RUNS   server A: submit runs, follow them
    python -m tests.faults.cluster approve DSN DIR        server B: approve, until SIGTERM

Every run pays one payee 150 USD (tier ``confirm``: a person approves it on server B) after a
slow read. Effects land in tables of the same database that honour idempotency keys and record
every handler entry. Files in DIR tell the parent what happened:
- ``owner-NAME``: the worker's lease owner;
- ``reads-NAME``: a line each time the worker enters the slow read (to stop it at that moment);
- ``stale-NAME``: a line each time one of its appends was refused because its lease had been
  taken over (a stale epoch); ``ended-NAME``: because the database had ended its session;
- ``seen.json``: every event server A received live, per run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from fiduciary import Agent, CallContext, Policy, capability, encode_event
from fiduciary.capabilities import Capability
from fiduciary.events import RunCompleted
from fiduciary.exceptions import ApprovalError
from fiduciary.stores.postgres import PostgresStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all
from fiduciary.worker import run_worker, submit

PRINCIPAL = "alice"
READ_SECONDS = 0.4  # the slow read: a window in which a worker is mid-run
SEND_SECONDS = 0.05

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS cluster_effects (
    key text PRIMARY KEY, payee text NOT NULL, amount text NOT NULL, worker text NOT NULL);
CREATE TABLE IF NOT EXISTS cluster_entries (
    n bigserial PRIMARY KEY, key text NOT NULL, worker text NOT NULL);
"""


def script() -> Script:
    return Script(
        "pay payee-",
        [
            ToolCalls([Call("balance")], text="Checking the balance."),
            ToolCalls(
                [
                    Call(
                        "send",
                        lambda r: {"payee": r.user_messages[0].split()[-1], "amount": "150"},
                    )
                ]
            ),
            Reply(lambda r: f"Done: {json.dumps(r.get('send'))}", chunk_chars=8),
        ],
    )


def capabilities(
    conn: psycopg.AsyncConnection[Any], lock: asyncio.Lock, name: str, files: Path
) -> list[Capability]:
    reads = os.open(files / f"reads-{name}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @capability(kind="read")
    async def balance() -> dict[str, str]:
        """The available balance."""
        os.write(reads, b"read\n")
        await asyncio.sleep(READ_SECONDS)  # an external system that takes its time
        return {"usd": "100000.00"}

    def amount(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(args.amount)

    @capability(kind="execute", operation="send", amount_usd=amount, flags={"irreversible"})
    async def send(payee: str, amount: str, ctx: CallContext) -> dict[str, Any]:
        """Send money to a payee."""
        async with lock:
            await conn.execute(
                "INSERT INTO cluster_entries (key, worker) VALUES (%s, %s)",
                (ctx.idempotency_key, name),
            )
            await asyncio.sleep(SEND_SECONDS)
            cur = await conn.execute(
                "INSERT INTO cluster_effects VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (ctx.idempotency_key, payee, amount, name),
            )
        return {"payee": payee, "amount": amount, "applied": cur.rowcount == 1}

    return [balance, send]


async def build(dsn: str, files: Path, name: str) -> tuple[Agent, psycopg.AsyncConnection[Any]]:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    store = await PostgresStore.open(dsn)
    agent = Agent(
        model=ScriptedModel([script()], keep_requests=0),
        capabilities=capabilities(conn, asyncio.Lock(), name, files),
        store=store,
        policy=Policy(preset="balanced", daily_autonomous_limit_usd=None),
        authorize=allow_all,
        lease_seconds=1.0,
    )
    return agent, conn


def stop_on_sigterm() -> asyncio.Event:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    return stop


class RefusalRecorder(logging.Handler):
    """Writes a line for each drive stopped because its append was refused: ``stale-NAME`` when
    the lease had been taken over (stale epoch), ``ended-NAME`` when the database had ended the
    session (a frozen transaction, past idle_in_transaction_session_timeout)."""

    def __init__(self, files: Path, name: str) -> None:
        super().__init__()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self.stale = os.open(files / f"stale-{name}", flags, 0o644)
        self.ended = os.open(files / f"ended-{name}", flags, 0o644)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "taken over" in message:
            os.write(self.stale, f"{message}\n".encode())
        elif "the store failed" in message:
            os.write(self.ended, f"{message}\n".encode())


async def worker(dsn: str, files: Path, name: str) -> None:
    logging.getLogger("fiduciary.loop").addHandler(RefusalRecorder(files, name))
    agent, conn = await build(dsn, files, name)
    (files / f"owner-{name}").write_text(agent.owner)
    stop = stop_on_sigterm()
    try:
        await run_worker(agent, stop=stop, poll_interval=0.5, concurrency=16, drain_seconds=5)
    finally:
        await agent.store.close()
        await conn.close()


async def submitter(dsn: str, files: Path, runs: int) -> None:
    agent, conn = await build(dsn, files, "server-a")
    try:
        submitted = [
            await submit(agent, f"pay payee-{i:03d}", principal=PRINCIPAL) for i in range(runs)
        ]

        async def follow(run_id: UUID) -> list[str]:
            seen: list[str] = []
            # poll_seconds: an hour, so the events can only come from LISTEN/NOTIFY
            async for event in agent.events(run_id, poll_seconds=3600):
                seen.append(encode_event(event))
                if isinstance(event, RunCompleted):
                    return seen
            raise AssertionError(f"run {run_id}: the stream ended before completion")

        logs = await asyncio.gather(*(follow(r.run_id) for r in submitted))
        out = {str(r.run_id): log for r, log in zip(submitted, logs, strict=True)}
        (files / "seen.json").write_text(json.dumps(out))
    finally:
        await agent.store.close()
        await conn.close()


async def approver(dsn: str, files: Path) -> None:
    agent, conn = await build(dsn, files, "server-b")
    stop = stop_on_sigterm()
    try:
        while not stop.is_set():
            pending = await agent.list_approvals(status="pending")
            for record in pending:
                with contextlib.suppress(ApprovalError):  # decided meanwhile
                    await agent.approve(record.approval_id, by=PRINCIPAL)
            if not pending:
                # a person looking at the queue every few hundredths of a second
                await asyncio.sleep(0.02)
    finally:
        await agent.store.close()
        await conn.close()


def main(argv: list[str]) -> None:
    role, dsn, files = argv[0], argv[1], Path(argv[2])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if role == "worker":
        asyncio.run(worker(dsn, files, argv[3]))
    elif role == "submit":
        asyncio.run(submitter(dsn, files, int(argv[3])))
    elif role == "approve":
        asyncio.run(approver(dsn, files))
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main(sys.argv[1:])
