"""Benchmark: the apps scheduler with many enabled apps.

1. 1,000 apps on the sniper tier whose context never changes: after the first slot (every app
   asks the model once), each slot only reads the sources, hashes the context and records the
   tick as unchanged. Figure: the scheduler's CPU per slot (``time.process_time``) and the share
   of ticks skipped by the hash; baseline: the floor of that work done directly in the same
   process (building and hashing the same 1,000 contexts), interleaved.
2. The same apps with a context that changes every slot: every tick is a run (a scripted model
   call answering ``{}``). Figure: ticks/s; baseline: the same number of bare ``Agent.run``
   calls of that scripted model in the same process.

    python bench/ticks.py [--apps 1000] [--slots 5] [--store memory|sqlite]

Ends with one line of JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from fiduciary import Agent, ManualClock
from fiduciary.apps import AppEngine, MemoryAppTables, SQLiteAppTables, parse_manifest
from fiduciary.apps.tables import AppTables
from fiduciary.capabilities import canonical_json, capability
from fiduciary.stores.base import Store
from fiduciary.stores.memory import MemoryStore
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Reply, Script, ScriptedModel, allow_all


@capability
def balance() -> dict[str, str]:
    """The balance."""
    return {"usd": "100"}


def manifest_text(i: int) -> str:
    return (
        f"---\nid: app{i}\nhooks: [tick]\ntier: sniper\ncapabilities: [balance]\n"
        "sources: [price]\nconfig: {approve: false}\n---\nWatch.\n"
    )


def model() -> ScriptedModel:
    return ScriptedModel([Script(match="[app ", steps=[Reply("{}")])], keep_requests=1)


async def build(
    n: int, store: Store, tables: AppTables, clock: ManualClock, price: list[int]
) -> AppEngine:
    async def source() -> int:
        return price[0]

    manifests = [
        parse_manifest(manifest_text(i), capabilities={"balance": None}, sources=["price"])
        for i in range(n)
    ]
    engine = AppEngine(
        model=model(),
        capabilities=[balance],
        store=store,
        tables=tables,
        principal="alice",
        manifests=manifests,
        authorize=allow_all,
        clock=clock,
        sources={"price": source},
        guards=[],
    )
    for m in manifests:
        await engine.enable(m.id)
    return engine


def floor(n: int, price: int) -> float:
    """The direct cost of knowing that nothing changed: build and hash each context."""
    started = time.process_time()
    for i in range(n):
        context = {
            "sources": {"price": price},
            "state": {},
            "config": {"approve": False},
            "permissions": [],
            "budget": {"limits": {}, "spent": {}, "remaining": {}},
            "app": i,
        }
        hashlib.sha256(canonical_json(context).encode()).hexdigest()
    return time.process_time() - started


async def bench(n: int, slots: int, kind: str) -> dict[str, Any]:
    tmp = tempfile.TemporaryDirectory()
    path = Path(tmp.name) / "ticks.sqlite3"
    store: Store = SQLiteStore(path) if kind == "sqlite" else MemoryStore()
    tables: AppTables = SQLiteAppTables(path) if kind == "sqlite" else MemoryAppTables()
    clock, price = ManualClock(), [1]
    engine = await build(n, store, tables, clock, price)
    await engine.step()  # the first slot: every app asks the model once
    unchanged_cpu, floor_cpu, skipped, total = 0.0, 0.0, 0, 0
    for _ in range(slots):
        clock.advance(5)
        started = time.process_time()
        results = await engine.step()
        unchanged_cpu += time.process_time() - started
        floor_cpu += floor(n, price[0])
        skipped += sum(1 for r in results if r.outcome == "unchanged")
        total += len(results)
    bare = Agent(
        model=model(),
        capabilities=[balance],
        store=store,
        authorize=allow_all,
        guards=[],
        clock=clock,
    )
    changed_wall, bare_wall, ticks = 0.0, 0.0, 0
    for _ in range(slots):  # a slot of changed ticks, then as many bare runs: interleaved
        clock.advance(5)
        price[0] += 1
        started = time.perf_counter()
        results = await engine.step()
        changed_wall += time.perf_counter() - started
        ran = sum(1 for r in results if r.outcome == "ran")
        ticks += ran
        started = time.perf_counter()
        for _ in range(ran):
            async for _ in bare.run("[app bare] hook tick\n", principal="alice"):
                pass
        bare_wall += time.perf_counter() - started
    await store.close()
    if isinstance(tables, SQLiteAppTables):
        tables.close()
    tmp.cleanup()
    per_slot_ms = unchanged_cpu / slots * 1000
    floor_ms = floor_cpu / slots * 1000
    return {
        "store": kind,
        "apps": n,
        "unchanged_cpu_ms_per_slot": round(per_slot_ms, 1),
        "unchanged_floor_ms_per_slot": round(floor_ms, 2),
        "unchanged_ratio_to_floor": round(per_slot_ms / floor_ms, 1) if floor_ms else None,
        "skipped_by_hash_share": round(skipped / total, 4) if total else None,
        "changed_ticks_per_s": round(ticks / changed_wall, 1),
        "bare_runs_per_s": round(ticks / bare_wall, 1),
        "changed_ratio_to_bare_runs": round((ticks / changed_wall) / (ticks / bare_wall), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--apps", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=5)
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    args = parser.parse_args()
    result = asyncio.run(bench(args.apps, args.slots, args.store))
    print(
        f"{result['apps']} apps, {result['store']}: unchanged context "
        f"{result['unchanged_cpu_ms_per_slot']} ms CPU per slot "
        f"({result['unchanged_ratio_to_floor']}x the floor), "
        f"{result['skipped_by_hash_share']:.1%} skipped by the hash; changed context "
        f"{result['changed_ticks_per_s']} ticks/s "
        f"({result['changed_ratio_to_bare_runs']}x bare runs)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
