"""The processes of a fiduciary deployment on one PostgreSQL, for the multi-process test.

The servers and workers are the real commands, with this module's agent factory:

    fiduciary serve  --postgres DSN --no-drive --agent tests.faults.cluster:cluster_agent
    fiduciary worker --postgres DSN --agent tests.faults.cluster:cluster_agent

(``FIDUCIARY_CLUSTER_DIR`` and ``FIDUCIARY_CLUSTER_NAME`` tell the factory where to report and
under which name). The people are this module's two HTTP clients:

    python -m tests.faults.cluster client  URL_A URL_B KEY DIR RUNS   start runs on A, follow them
    python -m tests.faults.cluster approve URL_B KEY                  approve on B until SIGTERM

Every run pays one payee 150 USD (tier ``confirm``: a person approves it on server B) after a
slow read. Effects land in tables of the same database that honour idempotency keys and record
every handler entry. Files in DIR tell the parent what happened:
- ``owner-NAME``: the worker's lease owner;
- ``reads-NAME``: a line each time the worker enters the slow read (to stop it at that moment);
- ``stale-NAME``: a line each time one of its drives stopped because its lease had been taken
  over (a stale epoch); ``ended-NAME``: because the database had ended its session;
- ``seen.json``: every event the client received live over SSE, per run: from server A, or for
  every fifth run from A up to its first tool call, then from server B (``Last-Event-ID``).
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

import httpx
import psycopg

from fiduciary import Agent, CallContext, Policy, capability
from fiduciary.capabilities import Capability
from fiduciary.events import decode_event, parse_sse
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

PRINCIPAL = "alice"
READ_SECONDS = 0.4  # the slow read: a window in which a worker is mid-run
SEND_SECONDS = 0.05
SWITCH_EVERY = 5  # every fifth run is followed on A, then resumed on B

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


class Effects:
    """The payee's side: a table of its own in the same database, one connection, opened lazily
    (a server process never executes anything, so never connects)."""

    def __init__(self, dsn: str, name: str) -> None:
        self.dsn, self.name = dsn, name
        self.lock = asyncio.Lock()
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def send(self, key: str, payee: str, amount: str) -> bool:
        async with self.lock:
            if self.conn is None:
                self.conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
            await self.conn.execute(
                "INSERT INTO cluster_entries (key, worker) VALUES (%s, %s)", (key, self.name)
            )
            await asyncio.sleep(SEND_SECONDS)  # a payment in flight: the window a kill lands in
            cur = await self.conn.execute(
                "INSERT INTO cluster_effects VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (key, payee, amount, self.name),
            )
            return cur.rowcount == 1


def capabilities(effects: Effects, files: Path) -> list[Capability]:
    reads = os.open(files / f"reads-{effects.name}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

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
        applied = await effects.send(ctx.idempotency_key, payee, amount)
        return {"payee": payee, "amount": amount, "applied": applied}

    return [balance, send]


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


def cluster_agent(store: Store) -> Agent:
    """The agent factory of every server and worker process of the test (``--agent``)."""
    files = Path(os.environ["FIDUCIARY_CLUSTER_DIR"])
    name = os.environ["FIDUCIARY_CLUSTER_NAME"]
    logging.getLogger("fiduciary.loop").addHandler(RefusalRecorder(files, name))
    agent = Agent(
        model=ScriptedModel([script()], keep_requests=0),
        capabilities=capabilities(Effects(getattr(store, "dsn", ""), name), files),
        store=store,
        policy=Policy(preset="balanced", daily_autonomous_limit_usd=None),
        authorize=allow_all,
        lease_seconds=1.0,
    )
    (files / f"owner-{name}").write_text(agent.owner)
    return agent


# --- the people: HTTP clients of the two servers ----------------------------------------------


async def follow(
    client: httpx.AsyncClient, url: str, key: str, run_id: str, after: int, stop_at: str | None
) -> list[str]:
    """The events of a run after ``after``, as received, until ``run_completed`` (or the first
    event of type ``stop_at``, after which the client hangs up)."""
    seen: list[str] = []
    headers = {"authorization": f"Bearer {key}", "last-event-id": str(after)}
    async with client.stream("GET", f"{url}/runs/{run_id}/events", headers=headers) as response:
        response.raise_for_status()
        buffer = ""
        async for text in response.aiter_text():
            buffer += text
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                for message in parse_sse(block + "\n\n"):
                    if message.id is None:
                        continue
                    seen.append(message.data)
                    kind = decode_event(message.data).type
                    if kind == "run_completed" or kind == stop_at:
                        return seen
    raise AssertionError(f"run {run_id}: the stream on {url} ended before completion")


async def client(url_a: str, url_b: str, key: str, files: Path, runs: int) -> None:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None), limits=limits) as http:
        auth = {"authorization": f"Bearer {key}"}
        run_ids: list[str] = []
        for i in range(runs):
            response = await http.post(
                f"{url_a}/runs", json={"message": f"pay payee-{i:03d}"}, headers=auth
            )
            response.raise_for_status()
            run_ids.append(response.json()["run_id"])

        async def watch(i: int, run_id: str) -> list[str]:
            if i % SWITCH_EVERY:
                return await follow(http, url_a, key, run_id, 0, None)
            first = await follow(http, url_a, key, run_id, 0, "tool_call_start")
            if decode_event(first[-1]).type == "run_completed":
                return first
            last_seq = decode_event(first[-1]).seq
            return first + await follow(http, url_b, key, run_id, last_seq, None)

        logs = await asyncio.gather(*(watch(i, r) for i, r in enumerate(run_ids)))
    (files / "seen.json").write_text(json.dumps(dict(zip(run_ids, logs, strict=True))))


async def approver(url_b: str, key: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    auth = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=30.0) as http:
        while not stop.is_set():
            listed = await http.get(f"{url_b}/approvals?status=pending", headers=auth)
            listed.raise_for_status()
            pending = listed.json()["approvals"]
            for approval in pending:
                body = {"args_digest": approval["args_digest"]}
                if approval["amount_usd"] is not None:
                    body["confirm_amount"] = approval["amount_usd"]
                decided = await http.post(
                    f"{url_b}/approvals/{approval['approval_id']}/approve", json=body, headers=auth
                )
                if decided.status_code != 409:  # 409: decided meanwhile
                    decided.raise_for_status()
            if not pending:
                # a person looking at the queue every few hundredths of a second
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.05)


def main(argv: list[str]) -> None:
    role = argv[0]
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if role == "client":
        url_a, url_b, key, files, runs = argv[1:6]
        asyncio.run(client(url_a, url_b, key, Path(files), int(runs)))
    elif role == "approve":
        asyncio.run(approver(argv[1], argv[2]))
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main(sys.argv[1:])
