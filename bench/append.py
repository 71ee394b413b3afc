"""Benchmark: durable appends/s through ``SQLiteStore.commit`` against raw ``sqlite3``.

Scenario: ``TextDelta`` events whose stored JSON is ~200 bytes, appended one event per
``commit`` as the loop appends streamed text.

- concurrent: ``--runs`` runs (200) each append ``--events`` events one after another, all
  runs at once (``asyncio.gather``), as a server driving many runs would; group commit puts
  the commits issued in one event-loop tick into one transaction.
- sequential: one run appends events one after another (each commit awaited, so each is its
  own transaction).

The baseline is raw ``sqlite3`` on a second file created with fiduciary's schema (by
``SQLiteStore``) and the same settings (WAL, ``synchronous=NORMAL``, foreign keys on):
``BEGIN; executemany INSERT INTO events ...; COMMIT`` of rows already encoded, in transactions
holding as many events as the store's transactions held on average in the same round (one for
the sequential case). Store and raw rounds are interleaved so that machine noise hits both
alike; events are built before each timed round (their JSON encoding is the store's work and
is timed; the raw rows are encoded beforehand).

    python bench/append.py [--runs 200] [--events 50] [--rounds 6] [--seq-events 1500]

Ends with one line of JSON: appends/s of the store and of raw sqlite3, their ratio
(store / raw; the aim is >= 0.5) and the store's average events per transaction.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sqlite3
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from fiduciary.events import TextDelta
from fiduciary.stores.base import RunRecord
from fiduciary.stores.sqlite import SQLiteStore

PAYLOAD_BYTES = 200
INSERT = "INSERT INTO events (run_id, seq, type, at, payload) VALUES (?, ?, ?, ?, ?)"
Row = tuple[str, int, str, str, str]


def text_for(run_id: UUID, at: datetime) -> str:
    """Delta text that makes the stored JSON of an event ~``PAYLOAD_BYTES`` long."""
    empty = TextDelta(run_id=run_id, seq=100, at=at, text="").model_dump_json()
    return ("streamed model text, token by token. " * 8)[: max(0, PAYLOAD_BYTES - len(empty))]


def build(run_ids: list[UUID], first_seq: int, count: int, text: str) -> list[list[TextDelta]]:
    """``count`` events per run, seqs from ``first_seq``."""
    at = datetime.now(UTC)
    return [
        [
            TextDelta(run_id=rid, seq=seq, at=at, text=text)
            for seq in range(first_seq, first_seq + count)
        ]
        for rid in run_ids
    ]


def rows_of(per_run: list[list[TextDelta]]) -> list[Row]:
    """The events' rows in the order the store writes them: one event of every run, then the
    next one of every run, ..."""
    rows: list[Row] = []
    for i in range(len(per_run[0])):
        for events in per_run:
            e = events[i]
            rows.append(
                (
                    str(e.run_id),
                    e.seq,
                    e.type,
                    e.at.isoformat(timespec="microseconds"),
                    e.model_dump_json(),
                )
            )
    return rows


async def create_runs(store: SQLiteStore, n: int) -> list[UUID]:
    now = datetime.now(UTC)
    ids = [uuid4() for _ in range(n)]
    await asyncio.gather(
        *(
            store.create_run(
                RunRecord(
                    run_id=rid,
                    principal=f"bench-{i}",
                    status="running",
                    created_at=now,
                    updated_at=now,
                    epoch=1,
                )
            )
            for i, rid in enumerate(ids)
        )
    )
    return ids


async def store_round(store: SQLiteStore, per_run: list[list[TextDelta]]) -> tuple[float, int]:
    """Every run appends its events one commit at a time, all runs at once.
    Returns (seconds, transactions)."""

    async def one(events: list[TextDelta]) -> None:
        for event in events:
            await store.commit(event.run_id, epoch=1, events=(event,))

    tx = store.transactions
    t0 = time.perf_counter()
    await asyncio.gather(*(one(events) for events in per_run))
    return time.perf_counter() - t0, store.transactions - tx


def raw_round(conn: sqlite3.Connection, rows: list[Row], batch: int) -> float:
    t0 = time.perf_counter()
    for start in range(0, len(rows), batch):
        conn.execute("BEGIN")
        conn.executemany(INSERT, rows[start : start + batch])
        conn.execute("COMMIT")
    return time.perf_counter() - t0


def raw_connection(path: Path) -> sqlite3.Connection:
    """A plain connection with the store's settings."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


async def main(runs: int, events: int, rounds: int, seq_events: int) -> dict[str, Any]:
    tmp = tempfile.TemporaryDirectory()
    store = await SQLiteStore.open(Path(tmp.name) / "store.sqlite3")
    # the raw file gets fiduciary's schema and its runs rows (foreign keys) through the store
    raw_path = Path(tmp.name) / "raw.sqlite3"
    maker = await SQLiteStore.open(raw_path)
    raw_ids = await create_runs(maker, runs)
    raw_single = (await create_runs(maker, 1))[0]
    await maker.close()
    conn = raw_connection(raw_path)

    ids = await create_runs(store, runs)
    single = (await create_runs(store, 1))[0]
    text = text_for(ids[0], datetime.now(UTC))

    # warm up both paths (statement caches, first pages) before timing
    await store_round(store, build(ids, 1, 2, text))
    raw_round(conn, rows_of(build(raw_ids, 1, 2, text)), runs)
    for event in build([single], 1, 20, text)[0]:
        await store.commit(single, epoch=1, events=(event,))
    raw_round(conn, rows_of(build([raw_single], 1, 20, text)), 1)
    seq, single_seq = 3, 21  # the next seq of the concurrent runs, of the single run

    t = {"store": 0.0, "raw": 0.0, "store_seq": 0.0, "raw_seq": 0.0}
    transactions = 0
    sizes: list[int] = []
    total = 0
    seq_total = 0
    payload_bytes = 0
    gc.collect()
    for _ in range(rounds):
        per_run = build(ids, seq, events, text)
        raw_rows = rows_of(build(raw_ids, seq, events, text))
        payload_bytes = sum(len(r[4]) for r in raw_rows) // len(raw_rows)
        seconds, tx = await store_round(store, per_run)
        batch = max(1, round(len(raw_rows) / tx))
        t["store"] += seconds
        t["raw"] += raw_round(conn, raw_rows, batch)
        transactions += tx
        sizes.append(batch)
        total += len(raw_rows)

        one_run = build([single], single_seq, seq_events, text)[0]
        one_raw = rows_of(build([raw_single], single_seq, seq_events, text))
        tx0 = store.transactions
        t0 = time.perf_counter()
        for event in one_run:
            await store.commit(single, epoch=1, events=(event,))
        t["store_seq"] += time.perf_counter() - t0
        assert store.transactions - tx0 == seq_events, "sequential commits were batched"
        t["raw_seq"] += raw_round(conn, one_raw, 1)
        seq_total += seq_events
        seq += events
        single_seq += seq_events
        del per_run, raw_rows, one_run, one_raw

    assert len(await store.read_events(ids[-1])) == seq - 1, "events went missing"
    assert len(await store.read_events(single)) == single_seq - 1, "events went missing"
    await store.close()
    conn.close()
    tmp.cleanup()

    rate = {
        "store": total / t["store"],
        "raw": total / t["raw"],
        "store_seq": seq_total / t["store_seq"],
        "raw_seq": seq_total / t["raw_seq"],
    }
    avg_batch = total / transactions
    ratio = rate["store"] / rate["raw"]
    ratio_seq = rate["store_seq"] / rate["raw_seq"]
    print(
        f"events: TextDelta, {payload_bytes} bytes of JSON each; "
        f"{rounds} interleaved rounds (store, raw, store, raw ...)"
    )
    print(
        f"concurrent ({runs} runs x {events} events per round, one event per commit): "
        f"{total} appends"
    )
    print(
        f"  store {rate['store']:>9.0f} appends/s   average {avg_batch:.1f} events per "
        f"transaction ({transactions} transactions)"
    )
    print(
        f"  raw   {rate['raw']:>9.0f} appends/s   executemany in transactions of "
        f"{min(sizes)}-{max(sizes)} events"
    )
    verdict = "meets" if ratio >= 0.5 else "MISSES"
    print(f"  store/raw {ratio:.3f} ({verdict} the aim of >= 0.5)")
    print(f"sequential (one run, each commit awaited): {seq_total} appends")
    print(f"  store {rate['store_seq']:>9.0f} appends/s   one transaction per event")
    print(f"  raw   {rate['raw_seq']:>9.0f} appends/s   one transaction per event")
    print(f"  store/raw {ratio_seq:.3f}")
    return {
        "bench": "append",
        "payload_bytes": payload_bytes,
        "runs": runs,
        "events_per_run": events * rounds,
        "concurrent_store_appends_per_s": round(rate["store"]),
        "concurrent_raw_appends_per_s": round(rate["raw"]),
        "concurrent_ratio_store_to_raw": round(ratio, 3),
        "avg_events_per_transaction": round(avg_batch, 1),
        "sequential_store_appends_per_s": round(rate["store_seq"]),
        "sequential_raw_appends_per_s": round(rate["raw_seq"]),
        "sequential_ratio_store_to_raw": round(ratio_seq, 3),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--events", type=int, default=50, help="events per run per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seq-events", type=int, default=1500, help="per round, one run")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.runs, args.events, args.rounds, args.seq_events))))
