"""Benchmark: fiduciary on PostgreSQL — runs/s with 1, 2 and 4 worker processes, and durable
appends/s through ``PostgresStore.commit`` against raw ``COPY`` and a raw batched ``INSERT``.

(a) workers: ``--runs`` runs (400) are submitted at once (``fiduciary.worker.submit``) to 1, 2
    and 4 ``run_worker`` processes (``--concurrency`` runs each at a time) sharing one database;
    each run is one read, one auto-approved write (5 USD) and a final text (14 events, 3 model
    turns through the scripted model). Timed from the first submission until every run is
    ``completed`` (checked in the database). Reported: runs/s, and each count's speed-up over
    1 worker (the in-run baseline). Measured twice: with an instant model (what the store and
    the workers' own CPU allow) and with a model that takes ``--model-ms`` (100 ms) before each
    turn, ``--slow-concurrency`` (16) runs per worker — real runs spend their time waiting for
    the model, and that is where adding workers adds throughput.
(b) appends: ``TextDelta`` events of ~200 bytes of JSON, one event per ``commit``, ``--append-runs``
    runs (200) appending ``--events`` (50) each, all runs at once (``asyncio.gather``), as a worker
    driving many runs would. Baselines, interleaved with the store's rounds in the same run, into
    the same ``events`` table (other runs, created beforehand): ``COPY events FROM STDIN`` of rows
    encoded beforehand, and ``INSERT ... SELECT FROM unnest(...)`` of the same rows, each in
    transactions holding as many events as the store's transactions held on average in the same
    round. The raw paths only insert; the store also encodes the events, locks and checks the
    runs rows (epoch, seqs), updates ``runs``, notifies listeners and wakes each caller.

    python bench/postgres.py [--dsn postgresql://postgres@127.0.0.1:5432/test] [--workers 1,2,4]

Every database it uses is created for the run and dropped at the end. Ends with one line of
JSON. Also: ``python bench/postgres.py worker DSN CONCURRENCY`` is the worker process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import psycopg
from psycopg.conninfo import make_conninfo

from fiduciary import Agent, CallContext, Policy, capability
from fiduciary.capabilities import Capability
from fiduciary.events import TextDelta
from fiduciary.models.base import ModelEvent, ModelRequest
from fiduciary.stores.base import RunRecord
from fiduciary.stores.postgres import PostgresStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all
from fiduciary.worker import run_worker, submit

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
PAYLOAD_BYTES = 200
Row = tuple[UUID, int, str, datetime, str]


# --- databases ------------------------------------------------------------------------------


def create_database(dsn: str) -> str:
    name = f"fiduciary_bench_{os.getpid()}_{uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    return name


def drop_database(dsn: str, name: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


# --- (a) workers ----------------------------------------------------------------------------


def capabilities() -> list[Capability]:
    @capability(kind="read")
    async def balance() -> dict[str, str]:
        """The available balance."""
        return {"usd": "5000.00"}

    def amount(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(args.amount)

    @capability(kind="execute", operation="send", amount_usd=amount)
    async def send(payee: str, amount: str, ctx: CallContext) -> dict[str, Any]:
        """Send money to a payee."""
        return {"payee": payee, "amount": amount, "reference": ctx.idempotency_key[-8:]}

    return [balance, send]


class SlowModel(ScriptedModel):
    """The scripted model, answering each turn after ``seconds`` (a provider's latency)."""

    def __init__(self, scripts: list[Script], seconds: float) -> None:
        super().__init__(scripts, keep_requests=0)
        self.seconds = seconds

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        await asyncio.sleep(self.seconds)
        async for event in super().stream(request):
            yield event


def agent(store: PostgresStore, model_seconds: float = 0.0) -> Agent:
    script = Script(
        "pay",
        [
            ToolCalls([Call("balance")]),
            ToolCalls([Call("send", {"payee": "grocer", "amount": "5"})]),
            Reply("Paid the grocer 5 USD.", chunk_chars=6),
        ],
    )
    return Agent(
        model=SlowModel([script], model_seconds),
        capabilities=capabilities(),
        store=store,
        policy=Policy(preset="balanced", daily_autonomous_limit_usd=None),
        authorize=allow_all,
        lease_seconds=10.0,
    )


async def worker_main(dsn: str, concurrency: int, model_seconds: float) -> None:
    store = await PostgresStore.open(dsn, max_connections=32)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    try:
        await run_worker(
            agent(store, model_seconds), stop=stop, poll_interval=1.0, concurrency=concurrency
        )
    finally:
        await store.close()


async def workers_round(
    dsn: str, count: int, runs: int, concurrency: int, model_seconds: float = 0.0
) -> float:
    """runs/s with ``count`` worker processes on a fresh database."""
    name = create_database(dsn)
    db = make_conninfo(dsn, dbname=name)
    server = await PostgresStore.open(db)  # migrates the fresh database
    procs: list[asyncio.subprocess.Process] = []
    try:
        for _ in range(count):
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    __file__,
                    "worker",
                    db,
                    str(concurrency),
                    str(model_seconds),
                    stdout=asyncio.subprocess.PIPE,
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            if await proc.stdout.readline() != b"ready\n":
                raise SystemExit("a worker did not start")
        front = agent(server)
        started = time.perf_counter()
        await asyncio.gather(
            *(submit(front, f"pay the grocer #{i}", principal=f"user-{i}") for i in range(runs))
        )
        async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
            while True:
                cur = await conn.execute(
                    "SELECT count(*) FILTER (WHERE status = 'completed'), "
                    "count(*) FILTER (WHERE status IN ('failed', 'cancelled')) FROM runs"
                )
                row = await cur.fetchone()
                assert row is not None
                if row[1]:
                    raise SystemExit(f"{row[1]} runs failed")
                if row[0] == runs:
                    break
                await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - started
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            await asyncio.wait_for(proc.wait(), 60)
        await server.close()
        drop_database(dsn, name)
    return runs / elapsed


# --- (b) appends ----------------------------------------------------------------------------


def text_for(run_id: UUID, at: datetime) -> str:
    empty = TextDelta(run_id=run_id, seq=100, at=at, text="").model_dump_json()
    return ("streamed model text, token by token. " * 8)[: max(0, PAYLOAD_BYTES - len(empty))]


def build(run_ids: list[UUID], first_seq: int, count: int) -> list[list[TextDelta]]:
    at = datetime.now(UTC)
    text = text_for(run_ids[0], at)
    return [
        [TextDelta(run_id=r, seq=s, at=at, text=text) for s in range(first_seq, first_seq + count)]
        for r in run_ids
    ]


def rows_of(per_run: list[list[TextDelta]]) -> list[Row]:
    """In the store's order: one event of every run, then the next of every run, ..."""
    return [
        (e.run_id, e.seq, e.type, e.at, e.model_dump_json())
        for i in range(len(per_run[0]))
        for e in (events[i] for events in per_run)
    ]


async def store_round(store: PostgresStore, per_run: list[list[TextDelta]]) -> tuple[float, int]:
    """Seconds, and transactions used, for every run appending its events one per commit."""

    async def one(events: list[TextDelta]) -> None:
        for event in events:
            await store.commit(event.run_id, epoch=1, events=[event])

    before = store.transactions
    started = time.perf_counter()
    await asyncio.gather(*(one(events) for events in per_run))
    return time.perf_counter() - started, store.transactions - before


async def copy_round(conn: psycopg.AsyncConnection[Any], rows: list[Row], per_tx: int) -> float:
    started = time.perf_counter()
    for i in range(0, len(rows), per_tx):
        async with conn.transaction():
            cur = conn.cursor()
            async with cur.copy("COPY events (run_id, seq, type, at, payload) FROM STDIN") as cp:
                for row in rows[i : i + per_tx]:
                    await cp.write_row(row)
    return time.perf_counter() - started


async def insert_round(conn: psycopg.AsyncConnection[Any], rows: list[Row], per_tx: int) -> float:
    started = time.perf_counter()
    for i in range(0, len(rows), per_tx):
        chunk = rows[i : i + per_tx]
        async with conn.transaction():
            await conn.execute(
                "INSERT INTO events (run_id, seq, type, at, payload) SELECT run_id, seq, type, "
                "at, payload::json FROM unnest(%b::uuid[], %b::bigint[], %b::text[], "
                "%b::timestamptz[], %b::text[]) AS e(run_id, seq, type, at, payload)",
                [list(column) for column in zip(*chunk, strict=True)],
                binary=True,  # arrays of text in binary: no escaping on the client
            )
    return time.perf_counter() - started


async def appends(dsn: str, runs: int, events: int, rounds: int) -> dict[str, Any]:
    name = create_database(dsn)
    db = make_conninfo(dsn, dbname=name)
    store = await PostgresStore.open(db)
    conn = await psycopg.AsyncConnection.connect(db, autocommit=True)
    try:
        now = datetime.now(UTC)

        async def make_runs() -> list[UUID]:
            # leased, as the runs a worker appends to are (a run nobody leases would also wake
            # the workers at every commit: the runnable trigger)
            ids = [uuid4() for _ in range(runs)]
            until = now + timedelta(hours=1)
            for rid in ids:
                run = RunRecord(rid, "alice", "running", now, now, epoch=1, lease_owner="bench")
                await store.create_run(run.with_(lease_until=until), [])
            return ids

        store_runs, copy_runs, insert_runs = await make_runs(), await make_runs(), await make_runs()
        results: dict[str, list[float]] = {"store": [], "copy": [], "insert": [], "per_tx": []}
        seq = 1
        for _ in range(rounds):
            seconds, transactions = await store_round(store, build(store_runs, seq, events))
            total = runs * events
            per_tx = max(1, round(total / transactions))
            copy_s = await copy_round(conn, rows_of(build(copy_runs, seq, events)), per_tx)
            insert_s = await insert_round(conn, rows_of(build(insert_runs, seq, events)), per_tx)
            results["store"].append(total / seconds)
            results["copy"].append(total / copy_s)
            results["insert"].append(total / insert_s)
            results["per_tx"].append(total / transactions)
            seq += events
        medians = {k: statistics.median(v) for k, v in results.items()}
        return {
            "store_appends_per_s": round(medians["store"]),
            "copy_appends_per_s": round(medians["copy"]),
            "insert_appends_per_s": round(medians["insert"]),
            "store_vs_copy": round(medians["store"] / medians["copy"], 2),
            "store_vs_insert": round(medians["store"] / medians["insert"], 2),
            "events_per_transaction": round(medians["per_tx"], 1),
        }
    finally:
        await conn.close()
        await store.close()
        drop_database(dsn, name)


async def main(args: argparse.Namespace) -> None:
    counts = [int(n) for n in args.workers.split(",")]
    rates: dict[int, float] = {}
    for count in counts:
        rates[count] = await workers_round(args.dsn, count, args.runs, args.concurrency)
        print(
            f"(a) {count} worker(s): {args.runs} runs in {args.runs / rates[count]:.2f} s = "
            f"{rates[count]:.0f} runs/s ({rates[count] / rates[counts[0]]:.2f}x {counts[0]})"
        )
    slow: dict[int, float] = {}
    for count in counts:
        slow[count] = await workers_round(
            args.dsn, count, args.runs, args.slow_concurrency, args.model_ms / 1000
        )
        print(
            f"(a) {count} worker(s), model {args.model_ms} ms/turn, {args.slow_concurrency} runs "
            f"each: {slow[count]:.0f} runs/s ({slow[count] / slow[counts[0]]:.2f}x {counts[0]})"
        )
    result = await appends(args.dsn, args.append_runs, args.events, args.rounds)
    print(
        f"(b) appends, {args.append_runs} runs at once, one event per commit: store "
        f"{result['store_appends_per_s']:,}/s ({result['events_per_transaction']} events per "
        f"transaction); raw COPY {result['copy_appends_per_s']:,}/s; raw INSERT ... unnest "
        f"{result['insert_appends_per_s']:,}/s; store/COPY {result['store_vs_copy']}, "
        f"store/INSERT {result['store_vs_insert']}"
    )
    print(
        json.dumps(
            {
                "bench": "postgres",
                "runs": args.runs,
                "runs_per_s": {str(k): round(v, 1) for k, v in rates.items()},
                "speedup": {str(k): round(v / rates[counts[0]], 2) for k, v in rates.items()},
                "model_ms": args.model_ms,
                "runs_per_s_slow_model": {str(k): round(v, 1) for k, v in slow.items()},
                "speedup_slow_model": {
                    str(k): round(v / slow[counts[0]], 2) for k, v in slow.items()
                },
                **result,
            }
        )
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        asyncio.run(worker_main(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
        raise SystemExit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("FIDUCIARY_BENCH_POSTGRES", DEFAULT_DSN))
    parser.add_argument("--workers", default="1,2,4", help="worker process counts (1,2,4)")
    parser.add_argument("--runs", type=int, default=400, help="runs per worker count (400)")
    parser.add_argument("--concurrency", type=int, default=32, help="runs per worker (32)")
    parser.add_argument("--model-ms", type=int, default=100, help="model latency (100 ms)")
    parser.add_argument(
        "--slow-concurrency", type=int, default=16, help="runs per worker, slow model (16)"
    )
    parser.add_argument("--append-runs", type=int, default=200, help="runs appending (200)")
    parser.add_argument("--events", type=int, default=50, help="events per run per round (50)")
    parser.add_argument("--rounds", type=int, default=5, help="append rounds (5)")
    asyncio.run(main(parser.parse_args()))
