"""Benchmark: the cost of the loop against a floor measured in the same process.

Scenario: two reads in parallel, one auto-approved write, final text — through the scripted
model, on the in-memory and the SQLite store. The floor does the same work with none of
fiduciary: the same handler functions awaited directly (reads with ``gather``) plus a
``json.dumps`` of a dict per event the run would record. Floor and fiduciary batches are
interleaved so that machine noise hits both alike.

    python bench/loop.py [--runs 500] [--batch 25]

Ends with one line of JSON: runs/s per store and the ratio of each to the floor's runs/s.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import uuid4

from fiduciary import Agent, CallContext, Policy, capability
from fiduciary.capabilities import Capability
from fiduciary.stores.base import Store
from fiduciary.stores.memory import MemoryStore
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

MESSAGE = "check and save"
FINAL = "Your balance is 250 USD and the rate is 1.08; I saved 5 USD."


async def balance_fn(account: str = "main") -> dict[str, str]:
    return {"account": account, "usd": "250.00"}


async def rate_fn(currency: str = "EUR") -> dict[str, str]:
    return {"currency": currency, "usd": "1.08"}


async def save_fn(amount: str) -> dict[str, str]:
    return {"saved": amount}


def capabilities() -> list[Capability]:
    @capability(kind="read")
    async def balance(account: str = "main") -> dict[str, str]:
        """The balance."""
        return await balance_fn(account)

    @capability(kind="read")
    async def rate(currency: str = "EUR") -> dict[str, str]:
        """An exchange rate."""
        return await rate_fn(currency)

    def amount(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(args.amount)

    @capability(kind="execute", operation="save", amount_usd=amount)
    async def save(amount: str) -> dict[str, str]:
        """Save money."""
        return await save_fn(amount)

    return [balance, rate, save]


def script() -> Script:
    return Script(
        MESSAGE,
        [
            ToolCalls([Call("balance"), Call("rate")]),
            ToolCalls([Call("save", {"amount": "5"})]),
            Reply(FINAL, chunk_chars=len(FINAL)),
        ],
    )


def make_agent(store: Store) -> Agent:
    return Agent(
        model=ScriptedModel([script()]),
        capabilities=capabilities(),
        store=store,
        policy=Policy(daily_autonomous_limit_usd=None),
        authorize=allow_all,
        guards=[],
    )


async def fiduciary_batch(agent: Agent, n: int, concurrency: int = 1) -> int:
    async def one(principal: str) -> int:
        count = 0
        async for _event in agent.run(MESSAGE, principal=principal):
            count += 1
        return count

    events = 0
    for start in range(0, n, concurrency):
        # one principal per concurrent run: writes of one principal are serialised by design
        width = min(concurrency, n - start)
        counts = await asyncio.gather(*(one(f"bench-{i}") for i in range(width)))
        events += sum(counts)
    return events


async def floor_batch(n: int, events_per_run: int, concurrency: int = 1) -> None:
    """The same handler calls and one json.dumps per event, with no runtime around them."""
    for start in range(0, n, concurrency):
        width = min(concurrency, n - start)
        await asyncio.gather(*(floor_run(events_per_run) for _ in range(width)))


async def floor_run(events_per_run: int) -> None:
    run_id = str(uuid4())
    records: list[dict[str, Any]] = []
    reads = await asyncio.gather(balance_fn(), rate_fn())
    write = await save_fn("5")
    payloads: list[Any] = [*reads, write, FINAL]
    for seq in range(1, events_per_run + 1):
        records.append(
            {
                "run_id": run_id,
                "seq": seq,
                "at": "2026-01-01T00:00:00+00:00",
                "type": "event",
                "data": payloads[seq % len(payloads)],
            }
        )
    for record in records:
        json.dumps(record)


async def measure(
    runs: int, batch: int, concurrency: int, memory_agent: Agent, sqlite_agent: Agent, per_run: int
) -> dict[str, float]:
    times = {"floor": 0.0, "memory": 0.0, "sqlite": 0.0}
    done = 0
    gc.collect()
    while done < runs:
        n = min(batch, runs - done)
        t0 = time.perf_counter()
        await floor_batch(n, per_run, concurrency)
        t1 = time.perf_counter()
        await fiduciary_batch(memory_agent, n, concurrency)
        t2 = time.perf_counter()
        await fiduciary_batch(sqlite_agent, n, concurrency)
        t3 = time.perf_counter()
        times["floor"] += t1 - t0
        times["memory"] += t2 - t1
        times["sqlite"] += t3 - t2
        done += n
    return times


async def main(runs: int, batch: int, concurrency: int) -> dict[str, Any]:
    tmp = tempfile.TemporaryDirectory()
    memory_agent = make_agent(MemoryStore())
    sqlite_store = SQLiteStore(Path(tmp.name) / "bench.sqlite3")
    sqlite_agent = make_agent(sqlite_store)
    # warm up every path (imports, schema, caches) before timing
    per_run = await fiduciary_batch(memory_agent, 3) // 3
    await fiduciary_batch(sqlite_agent, 3)
    await floor_batch(3, per_run)
    sequential = await measure(runs, batch, 1, memory_agent, sqlite_agent, per_run)
    concurrent = await measure(
        runs, max(batch, concurrency), concurrency, memory_agent, sqlite_agent, per_run
    )
    await sqlite_store.close()
    tmp.cleanup()
    result: dict[str, Any] = {"bench": "loop", "runs": runs, "events_per_run": per_run}
    print(f"scenario: 2 parallel reads, 1 auto write, final text; {per_run} events per run")
    for label, times in (("sequential", sequential), (f"concurrent{concurrency}", concurrent)):
        rate = {k: runs / v for k, v in times.items()}
        print(f"{label}: floor {rate['floor']:.0f} runs/s")
        result[f"{label}_floor_runs_per_s"] = round(rate["floor"])
        for name in ("memory", "sqlite"):
            ratio = times[name] / times["floor"]
            print(f"  {name:<7} {rate[name]:>7.0f} runs/s  ({ratio:.1f}x the floor's time)")
            result[f"{label}_{name}_runs_per_s"] = round(rate[name])
            result[f"{label}_{name}_time_ratio_to_floor"] = round(ratio, 2)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.runs, args.batch, args.concurrency))))
