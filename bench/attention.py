"""Benchmark: the attention layer's own cost, and what a judge's prompt weighs.

1. Events/s through a source, the record (cursor, seen ring and pending events committed per
   batch, one decision row per event) and a zero-latency judge (``RuleJudge``, route ``drop``),
   on the in-memory record and on a SQLite file, against a bare loop over the same events that
   builds the same judge input and awaits the same judge with nothing around it. Batches of the
   two are interleaved so that machine noise hits both alike.
2. The judge's prompt at a 64-event window of realistic wallet events (the labelled set): the
   tokens (four characters each) of the system prompt plus the rendered window, per judgment
   and per event of the window.

    python bench/attention.py [--events 2000] [--batch 64] [--rounds 3]

Ends with one line of JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import tempfile
import time
from collections import deque
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fiduciary import ManualClock
from fiduciary.attention.actions import RouteAction, offers
from fiduciary.attention.evaluation import read_labelled
from fiduciary.attention.judge import CompleteRequest, llm_judge
from fiduciary.attention.labelled import make
from fiduciary.attention.record import AttentionRecord
from fiduciary.attention.testing import ListSource, RuleJudge
from fiduciary.attention.types import Incoming, JudgeInput, WindowEvent
from fiduciary.attention.watch import Attention
from fiduciary.attention.window import tokens_of

ROUTES = {
    "act": RouteAction(do="run"),
    "notify": RouteAction(do="notify"),
    "drop": RouteAction(do="drop"),
}
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def events(count: int, tag: str) -> list[Incoming]:
    return [
        Incoming(
            id=f"{tag}-{i}",
            source="bench",
            type="payment_received",
            at=T0 + timedelta(seconds=i),
            principal=f"p{i % 8}",
            data={"amount_usd": f"{i % 997}.00", "memo": "rent"},
        )
        for i in range(count)
    ]


async def through_attention(items: list[Incoming], batch: int, record: AttentionRecord) -> float:
    judge = RuleJudge(lambda _: "drop")
    attention = Attention(
        judge=judge,
        record=record,
        routes=ROUTES,
        sources=[ListSource(items, name="bench", size=batch)],
        clock=ManualClock(T0),
    )
    started = time.perf_counter()
    await attention.run()
    elapsed = time.perf_counter() - started
    assert judge.calls == len(items)
    return elapsed


async def bare(items: list[Incoming], batch: int) -> float:
    judge = RuleJudge(lambda _: "drop")
    windows: dict[str, deque[WindowEvent]] = {}
    started = time.perf_counter()
    async for chunk in ListSource(items, name="bench", size=batch).batches(None):
        for event in chunk.events:
            window = windows.setdefault(event.principal or "", deque(maxlen=64))
            window.append(
                WindowEvent(role=event.role, type=event.type, at=event.at, data=event.data)
            )
            await judge(JudgeInput(routes=offers(ROUTES), window=tuple(window)))
    return time.perf_counter() - started


async def prompt_tokens(window_size: int = 64) -> dict[str, Any]:
    seen: list[CompleteRequest] = []

    async def complete(request: CompleteRequest) -> Any:
        seen.append(request)
        return {"route": "drop", "probabilities": {"act": 0.1, "notify": 0.1, "drop": 0.8}}

    labelled = read_labelled(Path(make.__file__).with_name("events.jsonl"))
    window = tuple(item.judge_input.window[-1] for item in labelled[:window_size])
    judge = llm_judge(complete)
    await judge(JudgeInput(routes=offers(ROUTES), window=window))
    request = seen[0]
    system, prompt = tokens_of(request.system), tokens_of(request.prompt)
    return {
        "window_events": len(window),
        "system_tokens": system,
        "schema_tokens": tokens_of(json.dumps(request.schema)),
        "prompt_tokens": system + prompt,
        "prompt_tokens_per_event": round((system + prompt) / len(window), 1),
        "window_tokens_per_event": round(prompt / len(window), 1),
    }


async def main(count: int, batch: int, rounds: int) -> dict[str, Any]:
    totals = {"bare": 0.0, "memory": 0.0, "sqlite": 0.0}
    with tempfile.TemporaryDirectory() as folder:
        for r in range(rounds):
            gc.collect()
            totals["bare"] += await bare(events(count, f"b{r}"), batch)
            gc.collect()
            memory = AttentionRecord()
            totals["memory"] += await through_attention(events(count, f"m{r}"), batch, memory)
            await memory.close()
            gc.collect()
            sqlite = AttentionRecord(str(Path(folder) / f"attention-{r}.sqlite3"))
            totals["sqlite"] += await through_attention(events(count, f"s{r}"), batch, sqlite)
            await sqlite.close()
    rate = {k: count * rounds / v for k, v in totals.items()}
    print(f"{count} events x {rounds} rounds, batches of {batch}, zero-latency judge")
    print(f"  bare loop   {rate['bare']:>9.0f} events/s")
    for name in ("memory", "sqlite"):
        print(
            f"  {name:<10}  {rate[name]:>9.0f} events/s  "
            f"({rate['bare'] / rate[name]:.1f}x the bare loop's time)"
        )
    tokens = await prompt_tokens()
    print(
        f"  judge prompt at a {tokens['window_events']}-event window: {tokens['prompt_tokens']} "
        f"tokens ({tokens['prompt_tokens_per_event']} per event)"
    )
    return {
        "bench": "attention",
        "events": count,
        "rounds": rounds,
        "batch": batch,
        "events_per_s": {k: round(v) for k, v in rate.items()},
        "ratio_to_bare": {k: round(rate["bare"] / rate[k], 2) for k in ("memory", "sqlite")},
        "judge_prompt": tokens,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.events, args.batch, args.rounds))))
