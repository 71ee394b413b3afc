"""Benchmark: many runs at once in one process, and what suspended runs cost in memory.

(a) ``--runs`` (1,000) runs started at once with ``asyncio.gather`` on a ``SQLiteStore`` in a
    temporary directory, each: one read, one auto-approved write (5 USD), final text, through
    the scripted model. Every run must end ``completed``. Reports wall time and runs/s per
    round. The floor (as in bench/loop.py) is the same runs' handler calls, all at once, plus a
    ``json.dumps`` of a dict per event the runs recorded, with none of fiduciary. Floor and
    fiduciary rounds are interleaved so that machine noise hits both alike.

(b) ``--suspended`` (10,000) runs whose write (500 USD, tier ``confirm``) waits for a person:
    each run's stream ends with the run ``awaiting_approval``. RSS (VmRSS) is read after a
    warm-up (the same work on other runs, so caches and allocator arenas are at their working
    size) and again after all runs suspended and ``gc.collect()``; the aim is a growth of at
    most 5 MB, since "a suspended run holds no memory in the process: it is rows in the store".
    A census of the runtime's objects still alive (drivers, transcripts, events, requests,
    tasks) is printed too. Runs start in concurrent chunks of ``--chunk`` (500).

The model is a ``ScriptedModel`` that does not keep its requests: ``ScriptedModel.requests``
records every request for tests to inspect, which would grow with every run (pass
``--keep-requests`` to measure what that costs).

    python bench/concurrency.py [--runs 1000] [--rounds 3] [--suspended 10000] [--chunk 500]

Ends with one line of JSON: the figures of (a) and (b) and the ratio of (a) to its floor.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import tempfile
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from fiduciary import Agent, CallContext, Policy, capability
from fiduciary._loop import Driver, Transcript
from fiduciary.capabilities import Capability
from fiduciary.events import EventBase
from fiduciary.models.base import ModelRequest
from fiduciary.stores.base import ApprovalRecord, RunRecord
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

MESSAGE = "check and save"
FINAL = "Your balance is 250 USD; I saved the amount you asked for."
AUTO_AMOUNT = "5"  # below the balanced preset's auto_below for save (50): runs on its own
CONFIRM_AMOUNT = "500"  # between auto_below (50) and confirm_below (1000): waits for a person
RSS_BUDGET_MB = 5.0


async def balance_fn(account: str = "main") -> dict[str, str]:
    return {"account": account, "usd": "250.00"}


async def save_fn(amount: str) -> dict[str, str]:
    return {"saved": amount}


def capabilities() -> list[Capability]:
    @capability(kind="read")
    async def balance(account: str = "main") -> dict[str, str]:
        """The balance."""
        return await balance_fn(account)

    def amount(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(args.amount)

    @capability(kind="execute", operation="save", amount_usd=amount)
    async def save(amount: str) -> dict[str, str]:
        """Save money."""
        return await save_fn(amount)

    return [balance, save]


def script(amount: str) -> Script:
    return Script(
        MESSAGE,
        [
            ToolCalls([Call("balance")]),
            ToolCalls([Call("save", {"amount": amount})]),
            Reply(FINAL, chunk_chars=len(FINAL)),
        ],
    )


class QuietScriptedModel(ScriptedModel):
    """A ``ScriptedModel`` that keeps none of its requests."""

    def __init__(self, scripts: list[Script]) -> None:
        super().__init__(scripts, keep_requests=0)


def make_agent(store: SQLiteStore, amount: str, keep_requests: bool = False) -> Agent:
    scripts = [script(amount)]
    return Agent(
        model=ScriptedModel(scripts) if keep_requests else QuietScriptedModel(scripts),
        capabilities=capabilities(),
        store=store,
        policy=Policy(preset="balanced", daily_autonomous_limit_usd=None),
        authorize=allow_all,
        guards=[],
    )


async def one_run(agent: Agent, principal: str) -> tuple[UUID, int]:
    """Drive one run until its stream ends; its id and the number of events it yielded."""
    run_id: UUID | None = None
    count = 0
    async for event in agent.run(MESSAGE, principal=principal):
        run_id = event.run_id
        count += 1
    assert run_id is not None
    return run_id, count


async def fiduciary_round(agent: Agent, n: int, tag: str) -> tuple[float, list[tuple[UUID, int]]]:
    # one principal per run: writes of one principal are serialised by design
    t0 = time.perf_counter()
    done = await asyncio.gather(*(one_run(agent, f"{tag}-{i}") for i in range(n)))
    return time.perf_counter() - t0, done


async def floor_run(events_per_run: int) -> None:
    """A run's handler calls and one json.dumps per event, with no runtime around them."""
    run_id = str(uuid4())
    read = await balance_fn()
    write = await save_fn(AUTO_AMOUNT)
    payloads: list[Any] = [read, write, FINAL]
    records = [
        {
            "run_id": run_id,
            "seq": seq,
            "at": "2026-01-01T00:00:00+00:00",
            "type": "event",
            "data": payloads[seq % len(payloads)],
        }
        for seq in range(1, events_per_run + 1)
    ]
    for record in records:
        json.dumps(record)


async def floor_round(n: int, events_per_run: int) -> float:
    t0 = time.perf_counter()
    await asyncio.gather(*(floor_run(events_per_run) for _ in range(n)))
    return time.perf_counter() - t0


async def statuses(store: SQLiteStore, run_ids: list[UUID]) -> Counter[str]:
    found: Counter[str] = Counter()
    for run_id in run_ids:
        run = await store.get_run(run_id)
        found[run.status if run is not None else "missing"] += 1
    return found


# --- (a) ------------------------------------------------------------------------------------


async def concurrent_runs(directory: Path, runs: int, rounds: int) -> dict[str, Any]:
    store = SQLiteStore(directory / "concurrent.sqlite3")
    agent = make_agent(store, AUTO_AMOUNT)
    _, warm = await fiduciary_round(agent, 20, "warm")  # imports, schema, caches
    per_run = warm[0][1]
    await floor_round(20, per_run)

    floor_t: list[float] = []
    fid_t: list[float] = []
    transactions = 0
    gc.collect()
    for r in range(rounds):
        floor_t.append(await floor_round(runs, per_run))
        tx = store.transactions
        seconds, done = await fiduciary_round(agent, runs, f"round{r}")
        fid_t.append(seconds)
        transactions += store.transactions - tx
        found = await statuses(store, [run_id for run_id, _ in done])
        assert found == Counter({"completed": runs}), f"round {r}: {dict(found)}"
        assert all(count == per_run for _, count in done), "a run yielded unexpected events"
    await store.close()

    total = runs * rounds
    ratio = sum(fid_t) / sum(floor_t)
    print(
        f"(a) {runs} concurrent runs (1 read, 1 auto write, final text; {per_run} events each), "
        f"SQLite, {rounds} interleaved rounds"
    )
    for r, (f, s) in enumerate(zip(floor_t, fid_t, strict=True)):
        print(
            f"  round {r + 1}: floor {f:.3f} s ({runs / f:.0f} runs/s)   fiduciary {s:.2f} s "
            f"({runs / s:.0f} runs/s), all {runs} completed"
        )
    print(
        f"  fiduciary {total / sum(fid_t):.0f} runs/s, {ratio:.0f}x the floor's time "
        f"(floor {total / sum(floor_t):.0f} runs/s)"
    )
    print(
        f"  write transactions (group commits; every write of a run joins one): "
        f"{transactions / rounds:.0f} per round of {runs} runs, "
        f"{total * per_run / max(transactions, 1):.0f} events each on average"
    )
    return {
        "a_runs": runs,
        "a_events_per_run": per_run,
        "a_wall_s": round(min(fid_t), 2),
        "a_runs_per_s": round(total / sum(fid_t)),
        "a_floor_runs_per_s": round(total / sum(floor_t)),
        "a_time_ratio_to_floor": round(ratio, 1),
        "a_write_transactions_per_round": round(transactions / rounds),
        "a_events_per_transaction": round(total * per_run / max(transactions, 1)),
    }


# --- (b) ------------------------------------------------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def census() -> Counter[str]:
    """Objects of the runtime alive now, by kind."""
    kinds: dict[type, str] = {
        Driver: "driver",
        Transcript: "transcript",
        ModelRequest: "model_request",
        ApprovalRecord: "approval",
        RunRecord: "run_record",
        asyncio.Task: "task",
    }
    found: Counter[str] = Counter()
    for obj in gc.get_objects():
        if isinstance(obj, EventBase):
            found["event"] += 1
            continue
        for cls, name in kinds.items():
            if isinstance(obj, cls):
                found[name] += 1
    return found


async def suspend_chunks(agent: Agent, n: int, chunk: int, tag: str) -> list[UUID]:
    run_ids: list[UUID] = []
    for start in range(0, n, chunk):
        width = min(chunk, n - start)
        done = await asyncio.gather(*(one_run(agent, f"{tag}-{start + i}") for i in range(width)))
        run_ids.extend(run_id for run_id, _ in done)
    return run_ids


async def suspended_runs(
    directory: Path, runs: int, chunk: int, keep_requests: bool
) -> dict[str, Any]:
    store = await SQLiteStore.open(directory / "suspended.sqlite3")
    agent = make_agent(store, CONFIRM_AMOUNT, keep_requests)
    # warm-up: the same work on other runs, twice the chunk, so caches and arenas are grown
    warm = await suspend_chunks(agent, 2 * chunk, chunk, "warm")
    found = await statuses(store, warm)
    assert found == Counter({"awaiting_approval": len(warm)}), dict(found)
    del warm, found
    gc.collect()
    objects_before = census()
    before = rss_mb()

    t0 = time.perf_counter()
    run_ids = await suspend_chunks(agent, runs, chunk, "wait")
    seconds = time.perf_counter() - t0
    ids = [str(r) for r in run_ids]
    del run_ids
    gc.collect()
    after = rss_mb()
    objects_after = census()

    found = await statuses(store, [UUID(r) for r in ids])
    assert found == Counter({"awaiting_approval": runs}), dict(found)
    pending = await store.list_approvals(status="pending")
    assert len(pending) == runs + 2 * chunk, len(pending)
    assert all(p.tier == "confirm" for p in pending), "a write was not tier confirm"
    del pending
    await store.close()

    delta = after - before
    within = delta <= RSS_BUDGET_MB
    grown = {k: objects_after[k] - objects_before[k] for k in objects_after | objects_before}
    grown = {k: v for k, v in sorted(grown.items()) if v}
    model = "ScriptedModel (keeps its requests)" if keep_requests else "a non-recording model"
    print(
        f"(b) {runs} runs suspended awaiting approval ({model}), chunks of {chunk}: "
        f"{seconds:.1f} s ({runs / seconds:.0f} runs/s)"
    )
    print(
        f"  RSS {before:.1f} MB after warm-up -> {after:.1f} MB after gc: "
        f"{delta:+.2f} MB ({delta * 1024 * 1024 / runs:.0f} bytes per suspended run); "
        f"{'within' if within else 'OVER'} the {RSS_BUDGET_MB:.0f} MB aim"
    )
    print(f"  runtime objects still alive beyond the warm-up's: {grown or 'none'}")
    return {
        "b_suspended": runs,
        "b_runs_per_s": round(runs / seconds),
        "b_rss_before_mb": round(before, 1),
        "b_rss_delta_mb": round(delta, 2),
        "b_rss_within_5mb": within,
        "b_objects_left": grown,
        "b_keep_requests": keep_requests,
    }


async def main(
    runs: int, rounds: int, suspended: int, chunk: int, keep_requests: bool
) -> dict[str, Any]:
    result: dict[str, Any] = {"bench": "concurrency"}
    with tempfile.TemporaryDirectory() as tmp:
        if runs:
            result.update(await concurrent_runs(Path(tmp), runs, rounds))
        if suspended:
            result.update(await suspended_runs(Path(tmp), suspended, chunk, keep_requests))
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000, help="(a): 0 skips it")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--suspended", type=int, default=10000, help="(b): 0 skips it")
    parser.add_argument("--chunk", type=int, default=500)
    parser.add_argument(
        "--keep-requests", action="store_true", help="(b) with ScriptedModel's request log"
    )
    args = parser.parse_args()
    print(
        json.dumps(
            asyncio.run(
                main(args.runs, args.rounds, args.suspended, args.chunk, args.keep_requests)
            )
        )
    )
