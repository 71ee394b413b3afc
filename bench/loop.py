"""Benchmark: the cost of the loop against two floors measured in the same process.

Scenario: two reads in parallel, one auto-approved write, final text — through the scripted
model, on the in-memory and the SQLite store. Two floors do the same work with none of
fiduciary, and all four are interleaved batch by batch so that machine noise hits them alike:

- the **bare floor**: the same handler functions awaited directly (reads with ``gather``) plus a
  ``json.dumps`` of a dict per event the run would record — what any in-memory design must do;
- the **durable floor**: the least work any durable design must do for the same run — a
  minimal asyncio loop that appends the same events (same count, same JSON bytes: they are
  templates taken from a real run) as rows of a SQLite WAL file, one commit per model turn at
  ``synchronous=NORMAL``, plus one ``synchronous=FULL`` commit of a ledger row before the write's
  effect (4 transactions per run: the ledger row's "done" joins the next turn's commit).

MemoryStore is compared with the bare floor, SQLiteStore with the durable floor
(``ratio_to_durable_floor``). ``transactions_per_run`` is the SQLite store's write transactions
per sequential run (the durable floor needs 4). Last, the traced configuration
(``bench/traced.py``): the SQLite run with OpenTelemetry on, against it untraced and against
the SDK's own floor for the same spans.

    python bench/loop.py [--runs 500] [--batch 25] [--concurrency 50]

Ends with one line of JSON: runs/s per configuration and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

from fiduciary import Agent
from fiduciary.stores.memory import MemoryStore
from fiduciary.stores.sqlite import SQLiteStore
from workload import FINAL, MESSAGE, balance_fn, fiduciary_batch, make_agent, rate_fn, save_fn


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


class DurableFloor:
    """The least a durable design must do for the scenario: append its events, fsync the intent.

    ``turns`` are the event templates of one real run (dicts without run_id/seq/at), cut where
    the run's model turns end; each floor run copies them, stamps its run id, seq and time,
    encodes each with ``json.dumps`` and inserts them, one transaction per model turn at
    NORMAL; before the write's effect one FULL transaction records the ledger's intent, and
    its "done" joins the next turn's commit: 4 transactions.
    """

    def __init__(self, path: Path, turns: list[list[dict[str, Any]]]) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute(
            "CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, at TEXT NOT NULL,"
            " type TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (run_id, seq))"
        )
        self.conn.execute(
            "CREATE TABLE ledger (key TEXT PRIMARY KEY, run_id TEXT NOT NULL,"
            " state TEXT NOT NULL, result TEXT)"
        )
        self.turns = turns

    def _append(
        self,
        run_id: str,
        first_seq: int,
        templates: list[dict[str, Any]],
        ledger_done: tuple[str, str] | None = None,
    ) -> int:
        at = "2026-01-01T00:00:00+00:00"
        rows = []
        for offset, template in enumerate(templates):
            seq = first_seq + offset
            row = {**template, "run_id": run_id, "seq": seq, "at": at}
            rows.append((run_id, seq, at, template["type"], json.dumps(row)))
        self.conn.execute("BEGIN")
        if ledger_done is not None:  # the write's end, in the next turn's commit
            self.conn.execute(
                "UPDATE ledger SET state = 'done', result = ? WHERE key = ?", ledger_done
            )
        self.conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", rows)
        self.conn.execute("COMMIT")
        return first_seq + len(templates)

    async def run(self) -> None:
        run_id = str(uuid4())
        first, second, third = self.turns
        seq = self._append(run_id, 1, first)  # model turn 1: two reads proposed
        await asyncio.gather(balance_fn(), rate_fn())
        seq = self._append(run_id, seq, second)  # their results, model turn 2: the write proposed
        key = f"{run_id}:save"
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("BEGIN")
        self.conn.execute("INSERT INTO ledger VALUES (?, ?, 'started', NULL)", (key, run_id))
        self.conn.execute("COMMIT")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        result = await save_fn("5")
        # its result and the ledger's "done", model turn 3: the final text
        self._append(run_id, seq, third, ledger_done=(json.dumps(result), key))

    async def batch(self, n: int, concurrency: int = 1) -> None:
        for start in range(0, n, concurrency):
            width = min(concurrency, n - start)
            await asyncio.gather(*(self.run() for _ in range(width)))

    def close(self) -> None:
        self.conn.close()


async def event_templates(agent: Agent) -> list[list[dict[str, Any]]]:
    """One real run's events as dicts, cut into the three model turns' appends of the floor."""
    events = [event async for event in agent.run(MESSAGE, principal="templates")]
    templates = [
        {k: v for k, v in e.model_dump(mode="json").items() if k not in ("run_id", "seq", "at")}
        for e in events
    ]
    # cut after the first turn's turn_complete and after the second's: the floor's commits
    ends = [i + 1 for i, e in enumerate(events) if e.type == "turn_complete"]
    if len(ends) != 3:
        raise RuntimeError(f"the scenario should have 3 model turns, not {len(ends)}")
    return [templates[: ends[0]], templates[ends[0] : ends[1]], templates[ends[1] :]]


async def measure(
    runs: int,
    batch: int,
    concurrency: int,
    memory_agent: Agent,
    sqlite_agent: Agent,
    durable: DurableFloor,
    per_run: int,
) -> dict[str, float]:
    times = {"floor": 0.0, "durable_floor": 0.0, "memory": 0.0, "sqlite": 0.0}
    done = 0
    gc.collect()
    while done < runs:
        n = min(batch, runs - done)
        t0 = time.perf_counter()
        await floor_batch(n, per_run, concurrency)
        t1 = time.perf_counter()
        await durable.batch(n, concurrency)
        t2 = time.perf_counter()
        await fiduciary_batch(memory_agent, n, concurrency)
        t3 = time.perf_counter()
        await fiduciary_batch(sqlite_agent, n, concurrency)
        t4 = time.perf_counter()
        times["floor"] += t1 - t0
        times["durable_floor"] += t2 - t1
        times["memory"] += t3 - t2
        times["sqlite"] += t4 - t3
        done += n
    return times


async def main(runs: int, batch: int, concurrency: int) -> dict[str, Any]:
    tmp = tempfile.TemporaryDirectory()
    memory_agent = make_agent(MemoryStore())
    sqlite_store = SQLiteStore(Path(tmp.name) / "bench.sqlite3")
    sqlite_agent = make_agent(sqlite_store)
    durable = DurableFloor(Path(tmp.name) / "floor.sqlite3", await event_templates(memory_agent))
    # warm up every path (imports, schema, caches) before timing
    per_run = await fiduciary_batch(memory_agent, 3) // 3
    await fiduciary_batch(sqlite_agent, 3)
    await floor_batch(3, per_run)
    await durable.batch(3)
    before = sqlite_store.transactions
    sequential = await measure(runs, batch, 1, memory_agent, sqlite_agent, durable, per_run)
    transactions_per_run = (sqlite_store.transactions - before) / runs
    concurrent = await measure(
        runs, max(batch, concurrency), concurrency, memory_agent, sqlite_agent, durable, per_run
    )
    await sqlite_store.close()
    durable.close()
    tmp.cleanup()
    result: dict[str, Any] = {"bench": "loop", "runs": runs, "events_per_run": per_run}
    print(f"scenario: 2 parallel reads, 1 auto write, final text; {per_run} events per run")
    print(f"SQLite write transactions per sequential run: {transactions_per_run:g} (floor: 4)")
    result["transactions_per_run"] = round(transactions_per_run, 2)
    for label, times in (("sequential", sequential), (f"concurrent{concurrency}", concurrent)):
        rate = {k: runs / v for k, v in times.items()}
        print(
            f"{label}: bare floor {rate['floor']:.0f} runs/s,"
            f" durable floor {rate['durable_floor']:.0f} runs/s"
        )
        result[f"{label}_floor_runs_per_s"] = round(rate["floor"])
        result[f"{label}_durable_floor_runs_per_s"] = round(rate["durable_floor"])
        for name, base in (("memory", "floor"), ("sqlite", "durable_floor")):
            ratio = times[name] / times[base]
            bare = times[name] / times["floor"]
            versus = f"{bare:.1f}x the bare floor's time"
            if base == "durable_floor":
                versus = f"{ratio:.1f}x the durable floor's time, {bare:.0f}x the bare floor's"
            print(f"  {name:<7} {rate[name]:>7.0f} runs/s  ({versus})")
            result[f"{label}_{name}_runs_per_s"] = round(rate[name])
            result[f"{label}_{name}_time_ratio_to_floor"] = round(bare, 2)
        ratio = times["sqlite"] / times["durable_floor"]
        result[f"{label}_sqlite_ratio_to_durable_floor"] = round(ratio, 2)
    result["ratio_to_durable_floor"] = result["sequential_sqlite_ratio_to_durable_floor"]
    from traced import traced_overhead  # bench/traced.py: the traced configuration

    result.update(await traced_overhead(runs, batch))
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.runs, args.batch, args.concurrency))))
