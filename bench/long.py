"""Benchmark: long conversations and memory.

(a) the loop: a ``--turns`` (500) turn conversation, one user message a turn, each answered by
    a read (``balance``, a result of ~1,000 characters) and a reply, through an ``Agent`` with
    a small ``context_window`` (8,000 tokens) on ``MemoryStore`` and on ``SQLiteStore``. The
    model is deterministic and its usage reports the request's estimated size, as a provider's
    count would. Reported: the median wall time of turns 450-500 against turns 1-50
    (``growth``: no quadratic cost when near 1), and the most tokens any request was sent
    against the window.
(b) recall: ``--records`` memory records (100,000) of one principal among others, realistic
    wallet notes; ``--queries`` (300) recalls of 5 records for wallet questions, through
    ``SQLiteMemory`` and ``PostgresMemory``. Reported: p50 / p99 latency, against the same
    full-text query sent raw (sqlite3 / psycopg, no fiduciary around it) interleaved in the same
    run: ``ratio_to_raw``.

    python bench/long.py [--turns 500] [--records 100000] [--queries 300] [--dsn postgresql://...]

Ends with one line of JSON. PostgreSQL is skipped (and said so) when it cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

from fiduciary import Agent, capability
from fiduciary.memory import SQLiteMemory
from fiduciary.memory.base import query_terms
from fiduciary.models.base import (
    ModelEvent,
    ModelRequest,
    StreamStop,
    StreamTextDelta,
    StreamToolCall,
    StreamUsage,
    ToolResultsMessage,
)
from fiduciary.models.pricing import estimate_input_tokens
from fiduciary.stores.base import Store
from fiduciary.stores.memory import MemoryStore
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import allow_all

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
PRINCIPAL = "ann"
NAMES = ["Alice", "Bob", "Carol", "Dan", "Erin", "the landlord", "the plumber", "Mum", "the gym"]
THINGS = ["rent", "dinner", "tickets", "groceries", "a loan", "the car", "school fees", "a gift"]
ASSETS = ["USDC", "ETH", "BTC", "EURC"]
TEMPLATES = [
    "Paid {name} {amount} {asset} for {thing}",
    "advice: keep at least {amount} {asset} in savings before paying for {thing}",
    "{name} sent {amount} {asset} back for {thing}",
    "Asked whether {thing} can be paid in {asset}; said the fee is {fee} USD",
    "fact: paid {name} {count} times this year, {amount} {asset} in total",
    "advice: do not borrow against {asset} for {thing}; the health factor was {hf}",
]
QUESTIONS = [
    "how much did I pay {name}?",
    "what did you advise about {thing}?",
    "can I pay {thing} in {asset}?",
    "did {name} send anything back?",
    "should I borrow against my {asset}?",
]


# --- (a) the loop ------------------------------------------------------------------------------

WINDOW = 8_000


class Reader:
    """Each user message: read ``balance`` for another account, then reply. Its usage is the
    request's estimated size; it records the largest it was sent."""

    name = "reader:bench"

    def __init__(self) -> None:
        self.turn = 0
        self.largest = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        size = estimate_input_tokens(request)
        self.largest = max(self.largest, size)
        if isinstance(request.messages[-1], ToolResultsMessage):
            yield StreamTextDelta(f"Your balance on account {self.turn} is as shown above.")
            stop = "end_turn"
        else:
            self.turn += 1
            yield StreamToolCall(f"c{self.turn}", "balance", json.dumps({"account": self.turn}))
            stop = "tool_use"
        yield StreamUsage(input_tokens=size, output_tokens=12)
        yield StreamStop(stop)

    async def complete_json(self, system: str, prompt: str, schema: dict[str, Any]) -> Any:
        return {"summary": f"Earlier: {prompt.count('User:')} balance questions, all answered."}


@capability(kind="read")
async def balance(account: int) -> dict[str, Any]:
    """An account's balance and its recent history."""
    history = [{"day": d, "usd": f"{(account * 37 + d * 11) % 1000}.{d:02d}"} for d in range(20)]
    return {"account": account, "history": history}


async def conversation(store: Store, turns: int) -> dict[str, Any]:
    model = Reader()
    agent = Agent(
        model=model,
        capabilities=[balance],
        store=store,
        authorize=allow_all,
        guards=[],
        context_window=WINDOW,
    )
    times: list[float] = []
    cpu: list[float] = []
    compactions = 0
    run_id = None
    for turn in range(1, turns + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        async for event in agent.run(
            f"What is the balance of account {turn}?", principal="ann", run_id=run_id
        ):
            run_id = event.run_id
            compactions += event.type == "compaction" and getattr(event, "phase", "") == "end"
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    await store.close()
    last = slice(449, 500) if turns >= 500 else slice(-50, None)
    head, tail = statistics.median(times[:50]), statistics.median(times[last])
    cpu_head, cpu_tail = statistics.median(cpu[:50]), statistics.median(cpu[last])
    return {
        "turn_first50_ms": round(head * 1000, 2),
        "turn_last50_ms": round(tail * 1000, 2),
        "growth": round(tail / head, 2),
        "cpu_growth": round(cpu_tail / cpu_head, 2),
        "max_tokens_sent": model.largest,
        "window": WINDOW,
        "compactions": compactions,
    }


async def loop_bench(turns: int) -> dict[str, Any]:
    result: dict[str, Any] = {"turns": turns}
    with tempfile.TemporaryDirectory() as tmp:
        for name, store in (
            ("memory", MemoryStore()),
            ("sqlite", SQLiteStore(Path(tmp) / "runs.sqlite3")),
        ):
            got = await conversation(store, turns)
            print(
                f"loop on {name}: turns 1-50 {got['turn_first50_ms']:.2f} ms, turns 450-500"
                f" {got['turn_last50_ms']:.2f} ms (x{got['growth']};"
                f" CPU x{got['cpu_growth']}); at most"
                f" {got['max_tokens_sent']} tokens sent of a {WINDOW} window;"
                f" {got['compactions']} compactions"
            )
            result |= {f"loop_{name}_{k}": v for k, v in got.items()}
    return result


# --- (b) recall ----------------------------------------------------------------------------------


def text(rng: random.Random, template: str) -> str:
    return template.format(
        name=rng.choice(NAMES),
        thing=rng.choice(THINGS),
        asset=rng.choice(ASSETS),
        amount=rng.randint(5, 2_000),
        fee=rng.randint(1, 9),
        count=rng.randint(2, 20),
        hf=f"{rng.uniform(1.05, 3):.2f}",
    )


def rows(count: int, seed: int = 7) -> list[tuple[str, str, str, str, str]]:
    rng = random.Random(seed)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    out = []
    for i in range(count):
        principal = PRINCIPAL if i % 2 == 0 else f"other-{i % 97}"
        at = (start + timedelta(minutes=i)).isoformat()
        kind = "advice" if i % 3 == 0 else "note"
        out.append((str(uuid4()), principal, kind, text(rng, rng.choice(TEMPLATES)), at))
    return out


def questions(count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [text(rng, rng.choice(QUESTIONS)) for _ in range(count)]


def quantiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100)
    return statistics.median(samples), cuts[98]


async def sqlite_recall(records: int, asked: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory.sqlite3"
        memory = SQLiteMemory(path)
        await memory.remember("warm up", namespace="nobody")  # creates the schema
        conn = sqlite3.connect(path, isolation_level=None)
        t0 = time.perf_counter()
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO memory_records (record_id, namespace, kind, text, at)"
            " VALUES (?, ?, ?, ?, ?)",
            rows(records),
        )
        conn.execute("COMMIT")
        loaded = time.perf_counter() - t0
        ours: list[float] = []
        raw: list[float] = []
        for question in asked:  # interleaved: machine noise hits both alike
            t1 = time.perf_counter()
            await memory.recall(question, namespace=PRINCIPAL, top_k=5)
            t2 = time.perf_counter()
            match = " OR ".join(f'"{t}"' for t in query_terms(question))
            conn.execute(
                "SELECT r.record_id, r.kind, r.text, r.at FROM memory_fts"
                " JOIN memory_records r ON r.seq = memory_fts.rowid"
                " WHERE memory_fts MATCH ? AND r.namespace = ?"
                " ORDER BY bm25(memory_fts) LIMIT 5",
                (match, PRINCIPAL),
            ).fetchall()
            t3 = time.perf_counter()
            ours.append(t2 - t1)
            raw.append(t3 - t2)
        conn.close()
        await memory.close()
    return report("sqlite", ours, raw, loaded)


async def postgres_recall(records: int, asked: list[str], dsn: str) -> dict[str, Any] | None:
    try:
        import psycopg
        from psycopg.conninfo import make_conninfo

        from fiduciary.memory.postgres import PostgresMemory
    except ImportError:
        print("postgres: skipped (pip install 'fiduciary[postgres]')")
        return None
    name = f"fiduciary_bench_long_{uuid4().hex[:8]}"
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE DATABASE "{name}"'.encode())
    except psycopg.Error as exc:
        print(f"postgres: skipped ({str(exc).strip()})")
        return None
    target = make_conninfo(dsn, dbname=name)
    try:
        memory = PostgresMemory(target)
        await memory.remember("warm up", namespace="nobody")
        with psycopg.connect(target, autocommit=True) as conn:
            t0 = time.perf_counter()
            with conn.cursor().copy(
                "COPY memory_records (record_id, namespace, kind, text, at) FROM STDIN"
            ) as copy:
                for row in rows(records):
                    copy.write_row(row)
            conn.execute("ANALYZE memory_records")
            loaded = time.perf_counter() - t0
            ours: list[float] = []
            raw: list[float] = []
            for question in asked:
                t1 = time.perf_counter()
                await memory.recall(question, namespace=PRINCIPAL, top_k=5)
                t2 = time.perf_counter()
                conn.execute(
                    "SELECT record_id, kind, text, at FROM memory_records,"
                    " to_tsquery('english', %s) q WHERE namespace = %s AND tsv @@ q"
                    " ORDER BY ts_rank_cd(tsv, q) DESC, at DESC LIMIT 5",
                    (" | ".join(query_terms(question)), PRINCIPAL),
                ).fetchall()
                t3 = time.perf_counter()
                ours.append(t2 - t1)
                raw.append(t3 - t2)
        await memory.close()
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
    return report("postgres", ours, raw, loaded)


def report(name: str, ours: list[float], raw: list[float], loaded: float) -> dict[str, Any]:
    p50, p99 = quantiles(ours)
    raw50, raw99 = quantiles(raw)
    print(
        f"{name}: recall p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"
        f"  (raw query p50 {raw50 * 1000:.2f} ms, p99 {raw99 * 1000:.2f} ms;"
        f" ratio {p50 / raw50:.2f}x at p50; loaded in {loaded:.1f} s)"
    )
    return {
        f"{name}_recall_p50_ms": round(p50 * 1000, 3),
        f"{name}_recall_p99_ms": round(p99 * 1000, 3),
        f"{name}_raw_p50_ms": round(raw50 * 1000, 3),
        f"{name}_ratio_to_raw": round(p50 / raw50, 2),
    }


async def main(turns: int, records: int, queries: int, dsn: str) -> dict[str, Any]:
    asked = questions(queries)
    result: dict[str, Any] = {"bench": "long", "records": records, "queries": queries}
    if turns:
        result |= await loop_bench(turns)
    print(f"recall: {records} records (half of them one principal's), {queries} questions")
    result |= await sqlite_recall(records, asked)
    pg = await postgres_recall(records, asked, dsn)
    if pg is not None:
        result |= pg
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=500, help="0: skip the loop part")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.turns, args.records, args.queries, args.dsn))))
