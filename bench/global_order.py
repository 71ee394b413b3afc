"""Benchmark: the cost of the global order of events (``GlobalEvents``, ``GET /events``).

(a) SQLite, ``bench/loop.py``'s scenario (two reads in parallel, one auto write, final text):
    ``SQLiteStore`` as it is (each event's insert numbers it: ``gseq`` is the rowid of a table
    in commit order, migration 0005) against the same store with the events table of before
    migration 0004 (``WITHOUT ROWID``, keyed by (run_id, seq), no numbering) — the baseline —
    interleaved batch by batch (ABBA), one run at a time and ``--concurrency`` at once.
(b) PostgreSQL, with ``--postgres DSN``: ``bench/postgres.py``'s appends (one event per
    ``commit``, ``--append-runs`` runs at once) into a database with the ``xid`` and ``gseq``
    columns and their two indexes, against one where they were dropped, interleaved by round.

    python bench/global_order.py [--runs 600] [--postgres postgresql://postgres@127.0.0.1/test]

Ends with one line of JSON: the time ratios (with / without; (b): appends/s ratio).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import workload  # bench/workload.py: the scenario of bench/loop.py
from fiduciary import Agent
from fiduciary.stores._sql import sqlite_writer
from fiduciary.stores.sqlite import SQLiteStore

WITH = sqlite_writer.QUERIES
WITHOUT = dataclasses.replace(
    WITH, insert_event="INSERT INTO events (run_id, seq, type, at, payload) VALUES (?, ?, ?, ?, ?)"
)
# the events table of before migration 0004 (0001_initial.sql): no global order
EVENTS_BEFORE_0004 = """
DROP TABLE events;
CREATE TABLE events (
    run_id  TEXT NOT NULL REFERENCES runs (run_id),
    seq     INTEGER NOT NULL CHECK (seq >= 1),
    type    TEXT NOT NULL,
    at      TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
"""


async def timed(agent: Agent, queries: Any, n: int, concurrency: int) -> float:
    # the writer reads its statements from the module at each batch: swapped for this one
    sqlite_writer.QUERIES = queries
    try:
        started = time.perf_counter()
        await workload.fiduciary_batch(agent, n, concurrency)
        return time.perf_counter() - started
    finally:
        sqlite_writer.QUERIES = WITH


async def sqlite_cost(runs: int, batch: int, concurrency: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        plain = await SQLiteStore.open(Path(tmp) / "without.sqlite3")
        plain._connection().executescript(EVENTS_BEFORE_0004)
        numbered = await SQLiteStore.open(Path(tmp) / "with.sqlite3")
        without, with_ = workload.make_agent(plain), workload.make_agent(numbered)
        await timed(without, WITHOUT, 5, 1)
        await timed(with_, WITH, 5, 1)
        out: dict[str, float] = {}
        for label, width in (("sequential", 1), (f"concurrent{concurrency}", concurrency)):
            times = {"with": 0.0, "without": 0.0}
            done, i = 0, 0
            gc.collect()
            while done < runs:
                n = min(max(batch, width), runs - done)
                order = [("without", without, WITHOUT), ("with", with_, WITH)]
                for name, agent, queries in order if i % 2 == 0 else order[::-1]:
                    times[name] += await timed(agent, queries, n, width)
                done, i = done + n, i + 1
            ratio = times["with"] / times["without"]
            print(
                f"SQLite {label}: without the numbering {runs / times['without']:.0f} runs/s, "
                f"with it {runs / times['with']:.0f} runs/s: {ratio:.3f}x the time"
            )
            out[f"sqlite_{label}_ratio"] = round(ratio, 3)
        (count, numbered_count) = (
            numbered._connection().execute("SELECT count(*), count(gseq) FROM events").fetchone()
        )
        assert count == numbered_count, "every event is numbered"
        print(f"  {count} events numbered")
        await plain.close()
        await numbered.close()
    return out


async def postgres_cost(dsn: str, runs: int, events: int, rounds: int) -> dict[str, float]:
    import psycopg
    from psycopg.conninfo import make_conninfo

    import postgres as pgb  # bench/postgres.py
    from fiduciary.stores.base import RunRecord
    from fiduciary.stores.postgres import PostgresStore

    made: dict[str, tuple[str, PostgresStore, list[UUID]]] = {}
    try:
        for label in ("with", "without"):
            name = pgb.create_database(dsn)
            db = make_conninfo(dsn, dbname=name)
            store = await PostgresStore.open(db)
            made[label] = (name, store, [])
            if label == "without":
                conn = await psycopg.AsyncConnection.connect(db, autocommit=True)
                await conn.execute(
                    "DROP INDEX events_global; DROP INDEX events_by_gseq; "
                    "ALTER TABLE events DROP COLUMN gseq, DROP COLUMN xid"
                )
                await conn.close()
            now = datetime.now(UTC)
            for _ in range(runs):
                run = RunRecord(uuid4(), "alice", "running", now, now, epoch=1, lease_owner="b")
                await store.create_run(run.with_(lease_until=now + timedelta(hours=1)), [])
                made[label][2].append(run.run_id)
        rates: dict[str, list[float]] = {"with": [], "without": []}
        seq = 1
        for i in range(rounds):
            for label in ("with", "without") if i % 2 == 0 else ("without", "with"):
                _, store, ids = made[label]
                seconds, _ = await pgb.store_round(store, pgb.build(ids, seq, events))
                rates[label].append(runs * events / seconds)
            seq += events
    finally:
        for name, store, _ in made.values():
            await store.close()
            pgb.drop_database(dsn, name)
    with_, without = statistics.median(rates["with"]), statistics.median(rates["without"])
    spread = min(rates["without"] + rates["with"]), max(rates["without"] + rates["with"])
    print(
        f"PostgreSQL appends: with the columns {with_:.0f}/s, without {without:.0f}/s "
        f"(medians; rounds from {spread[0]:.0f} to {spread[1]:.0f}/s): {with_ / without:.3f}x"
    )
    return {"postgres_appends_ratio": round(with_ / without, 3)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"bench": "global_order", "runs": args.runs}
    result |= await sqlite_cost(args.runs, args.batch, args.concurrency)
    if args.postgres:
        result |= await postgres_cost(args.postgres, args.append_runs, args.events, args.rounds)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--postgres", default=None, help="a DSN: measure (b) there too")
    parser.add_argument("--append-runs", type=int, default=200)
    parser.add_argument("--events", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=8)
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
