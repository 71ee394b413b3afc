"""Benchmark: long conversations and memory.

(a) the loop: a 500-turn conversation, one user message a turn, each answered by a read
    (``balance``, a result of ~1,000 characters) and a reply, through an ``Agent`` with a small
    ``context_window`` (8,000 tokens), on ``MemoryStore`` and on ``SQLiteStore``. The model is
    deterministic and its usage reports the request's estimated size, as a provider's count
    would; the time it spends counting (the provider's work) is left out of a turn's.
    A conversation runs to turn 449 alone; then its turns 450-500 alternate with turns 1-51 of
    a fresh conversation on a fresh store, so that a noisy machine slows both alike. Reported,
    over ``--repetitions`` (3) such pairs: the median CPU time (``time.process_time``) and wall
    time of a turn of 1-50 and of 450-500, and their ratio (``cpu_growth``, ``growth``: the
    median over the pairs of turns run back to back; the aim is at most 1.3, no growth with
    the history; the CPU ratio is the steady one on a shared machine), and the most tokens any
    request carried against the window.
(b) recall: ``--records`` memory records (100,000) of one principal among others, realistic
    wallet notes; ``--queries`` (100) recalls of 5 records for wallet questions, through
    ``SQLiteMemory`` and ``PostgresMemory``. Reported: p50 / p99 latency, and the p50 against
    the same full-text query sent raw (sqlite3 / psycopg, no fiduciary around it) after every
    other recall in the same run: ``ratio_to_raw``.

    python bench/long.py [--repetitions 3] [--records 100000] [--queries 100] [--dsn ...]

``--repetitions 0`` or ``--records 0`` skips a part. Ends with one line of JSON. PostgreSQL is
skipped (and said so) when it cannot be reached.
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
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from fiduciary import Agent, capability
from fiduciary.events import Compaction
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
HEAD = range(1, 51)  # the turns compared: 1-50 ...
TAIL = range(450, 501)  # ... against 450-500


class Reader:
    """Each user message: read ``balance`` for another account, then reply. Its usage is the
    request's estimated size, as a provider's count would be; it records the largest it was
    sent, and the time it spent counting (the provider's work, left out of the loop's)."""

    name = "reader:bench"

    def __init__(self) -> None:
        self.turn = 0
        self.largest = 0
        self.counting_wall = 0.0
        self.counting_cpu = 0.0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        t0, c0 = time.perf_counter(), time.process_time()
        size = estimate_input_tokens(request)
        self.counting_wall += time.perf_counter() - t0
        self.counting_cpu += time.process_time() - c0
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


class Conversation:
    """One run on its own store, one user message at a time; each message's wall and CPU time,
    less the model's counting."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.model = Reader()
        self.agent = Agent(
            model=self.model,
            capabilities=[balance],
            store=store,
            authorize=allow_all,
            guards=[],
            context_window=WINDOW,
        )
        self.run_id: UUID | None = None
        self.turns = 0
        self.compactions = 0
        self.wall: dict[int, float] = {}
        self.cpu: dict[int, float] = {}

    async def turn(self) -> None:
        self.turns += 1
        model = self.model
        counted = model.counting_wall, model.counting_cpu
        t0, c0 = time.perf_counter(), time.process_time()
        async for event in self.agent.run(
            f"What is the balance of account {self.turns}?", principal=PRINCIPAL, run_id=self.run_id
        ):
            self.run_id = event.run_id
            if isinstance(event, Compaction) and event.phase == "end":
                self.compactions += 1
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        self.wall[self.turns] = wall - (model.counting_wall - counted[0])
        self.cpu[self.turns] = cpu - (model.counting_cpu - counted[1])


async def one_repetition(make_store: Callable[[], Store]) -> tuple[Conversation, Conversation]:
    """A conversation to turn 449 alone; then its turns 450-500 alternate with turns 1-51 of
    a fresh one on a fresh store, so that a noisy neighbour hits both alike."""
    old, new = Conversation(make_store()), Conversation(make_store())
    while old.turns < TAIL.start - 1:
        await old.turn()
    for k in range(len(TAIL)):
        pair = (old, new) if k % 2 == 0 else (new, old)
        for conversation in pair:
            await conversation.turn()
    await old.store.close()
    await new.store.close()
    return old, new


def growth(runs: list[tuple[Conversation, Conversation]], clock: str) -> tuple[float, list[float]]:
    """The median over every pair of turns run back to back (turn 1+i of the fresh conversation,
    450+i of the old) of the later's time over the earlier's, all runs pooled; and the same
    for each run."""

    def ratios(old: Conversation, new: Conversation) -> list[float]:
        tail, head = getattr(old, clock), getattr(new, clock)
        return [tail[t] / head[h] for h, t in zip(HEAD, TAIL, strict=False)]

    each = [statistics.median(ratios(old, new)) for old, new in runs]
    pooled = statistics.median(r for old, new in runs for r in ratios(old, new))
    return pooled, each


async def loop_bench(repetitions: int) -> dict[str, Any]:
    result: dict[str, Any] = {"turns": TAIL.stop - 1, "window": WINDOW, "repetitions": repetitions}
    with tempfile.TemporaryDirectory() as tmp:
        made = iter(range(1_000_000))

        def sqlite() -> Store:
            return SQLiteStore(Path(tmp) / f"runs-{next(made)}.sqlite3")

        for name, make_store in (("memory", MemoryStore), ("sqlite", sqlite)):
            runs = [await one_repetition(make_store) for _ in range(repetitions)]

            cpu, cpu_each = growth(runs, "cpu")
            wall, wall_each = growth(runs, "wall")
            largest = max(old.model.largest for old, _ in runs)
            got = {
                "turn_first50_ms": median_ms([new.wall for _, new in runs], HEAD),
                "turn_last50_ms": median_ms([old.wall for old, _ in runs], TAIL),
                "cpu_first50_ms": median_ms([new.cpu for _, new in runs], HEAD),
                "cpu_last50_ms": median_ms([old.cpu for old, _ in runs], TAIL),
                "cpu_growth": round(cpu, 2),
                "cpu_growth_each": [round(r, 2) for r in cpu_each],
                "growth": round(wall, 2),
                "growth_each": [round(r, 2) for r in wall_each],
                "max_tokens_sent": largest,
                "under_window": largest < WINDOW,
                "compactions": runs[0][0].compactions,
            }
            print(
                f"loop on {name}: a turn of 1-50 {got['cpu_first50_ms']:.2f} ms CPU"
                f" ({got['turn_first50_ms']:.2f} ms wall), of 450-500"
                f" {got['cpu_last50_ms']:.2f} ms CPU ({got['turn_last50_ms']:.2f} ms wall);"
                f" growth CPU x{cpu:.2f} ({_each(cpu_each)}), wall x{wall:.2f}"
                f" ({_each(wall_each)}); at most {largest} tokens sent of a {WINDOW} window;"
                f" {got['compactions']} compactions in 500 turns"
            )
            result |= {f"loop_{name}_{k}": v for k, v in got.items()}
    return result


def median_ms(times: list[dict[int, float]], turns: range) -> float:
    """The median time of ``turns``, every run's pooled, in milliseconds."""
    return round(statistics.median(t[n] for t in times for n in turns) * 1000, 3)


def _each(ratios: list[float]) -> str:
    return "runs: " + ", ".join(f"{r:.2f}" for r in ratios)


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


@cache  # the same rows for both backends
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
        # the raw query after every other recall: machine noise hits both alike
        for i, question in enumerate(asked):
            t1 = time.perf_counter()
            await memory.recall(question, namespace=PRINCIPAL, top_k=5)
            t2 = time.perf_counter()
            ours.append(t2 - t1)
            if i % 2:
                continue
            match = " OR ".join(f'"{t}"' for t in query_terms(question))
            conn.execute(
                "SELECT r.record_id, r.kind, r.text, r.at FROM memory_fts"
                " JOIN memory_records r ON r.seq = memory_fts.rowid"
                " WHERE memory_fts MATCH ? AND r.namespace = ?"
                " ORDER BY bm25(memory_fts) LIMIT 5",
                (match, PRINCIPAL),
            ).fetchall()
            raw.append(time.perf_counter() - t2)
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
            for i, question in enumerate(asked):
                t1 = time.perf_counter()
                await memory.recall(question, namespace=PRINCIPAL, top_k=5)
                t2 = time.perf_counter()
                ours.append(t2 - t1)
                if i % 2:
                    continue
                conn.execute(
                    "SELECT record_id, kind, text, at FROM memory_records,"
                    " to_tsquery('english', %s) q WHERE namespace = %s AND tsv @@ q"
                    " ORDER BY ts_rank_cd(tsv, q) DESC, at DESC LIMIT 5",
                    (" | ".join(query_terms(question)), PRINCIPAL),
                ).fetchall()
                raw.append(time.perf_counter() - t2)
        await memory.close()
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
    return report("postgres", ours, raw, loaded)


def report(name: str, ours: list[float], raw: list[float], loaded: float) -> dict[str, Any]:
    """``raw``: the raw query of every other question, compared with our recall of the same."""
    p50, p99 = quantiles(ours)
    raw50 = statistics.median(raw)
    ratio = statistics.median(ours[::2]) / raw50
    print(
        f"{name}: recall p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"
        f"  (raw query p50 {raw50 * 1000:.2f} ms; ratio {ratio:.2f}x at p50;"
        f" loaded in {loaded:.1f} s)"
    )
    return {
        f"{name}_recall_p50_ms": round(p50 * 1000, 3),
        f"{name}_recall_p99_ms": round(p99 * 1000, 3),
        f"{name}_raw_p50_ms": round(raw50 * 1000, 3),
        f"{name}_ratio_to_raw": round(ratio, 2),
    }


async def main(repetitions: int, records: int, queries: int, dsn: str) -> dict[str, Any]:
    asked = questions(queries)
    result: dict[str, Any] = {"bench": "long", "records": records, "queries": queries}
    if repetitions:
        result |= await loop_bench(repetitions)
    if not records:
        return result
    print(f"recall: {records} records (half of them one principal's), {queries} questions")
    result |= await sqlite_recall(records, asked)
    pg = await postgres_recall(records, asked, dsn)
    if pg is not None:
        result |= pg
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--repetitions", type=int, default=3, help="of the loop's 500 turns; 0: skip the loop"
    )
    parser.add_argument("--records", type=int, default=100_000, help="0: skip recall")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.repetitions, args.records, args.queries, args.dsn))))
