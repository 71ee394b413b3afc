"""Benchmark: the cost of tracing a durable run, against the SDK's own floor for its spans.

``bench/loop.py``'s scenario on ``SQLiteStore``, sequential, in three configurations
interleaved batch by batch (A B C C B A ...), so that machine noise hits them alike:

- **untraced**: no tracer (the loop calls a no-op per event);
- **SDK floor**: the least work any tracer that gives OpenTelemetry these spans must do — at
  each drive's end, the spans a traced run makes (the same names, kinds and attribute values,
  taken from one traced run) started and ended through the SDK at once, and nothing else (no
  event read, no record kept);
- **traced**: ``fiduciary.observability.instrument``, spans built from the run's events.

The two traced configurations have a provider, span processor and in-memory exporter each, of
one kind: ``batch`` (production's, and ``tracer_from_env``'s: spans queued, exported from the
SDK's own thread) by default, or ``simple`` (each span exported on the loop's thread as it
ends; the SDK's choice for tests).
``traced_sqlite_ratio`` is traced / untraced; ``sdk_floor_ratio`` floor / untraced; and
``traced_to_sdk_floor`` traced / floor, what fiduciary's own tracing adds above the SDK.

    python bench/traced.py [--runs 500] [--batch 25] [--processor batch|simple]

Ends with one line of JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fiduciary import Agent
from fiduciary.events import Event
from fiduciary.observability import RunIds, instrument
from fiduciary.redaction import Redactor
from fiduciary.stores.base import AuditRecord, RunRecord
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.tracing import DriveTrace
from workload import fiduciary_batch, make_agent

Template = tuple[str, trace.SpanKind, dict[str, Any]]  # a span's name, kind and attributes


class SdkFloor:
    """A ``RunTracer`` that gives the SDK a drive's spans from templates at the drive's end."""

    def __init__(self, tracer: trace.Tracer, spans: Sequence[ReadableSpan]) -> None:
        self._tracer = tracer
        templates: list[Template] = [(s.name, s.kind, dict(s.attributes or {})) for s in spans]
        roots = [t for t, s in zip(templates, spans, strict=True) if s.parent is None]
        assert len(roots) == 1, "one traced run: one root span"
        self._root = roots[0]
        self._children = [t for t in templates if t is not self._root]

    def drive(self, run: RunRecord, *, resumed: bool, model: str, redactor: Redactor) -> DriveTrace:
        return _FloorDrive(self)

    def watch_sse_subscribers(self, count: Callable[[], int]) -> None:
        pass

    def hand_over(self) -> None:
        start_span, now = self._tracer.start_span, time.time_ns()
        name, kind, attributes = self._root
        root = start_span(name, otel_context.Context(), kind, attributes, None, now)
        ctx = trace.set_span_in_context(root)
        for name, kind, attributes in self._children:
            start_span(name, ctx, kind, attributes, None, now).end(now)
        root.end(now)


class _FloorDrive:
    __slots__ = ("_floor",)

    def __init__(self, floor: SdkFloor) -> None:
        self._floor = floor

    def chat_started(self, model: str) -> None:
        pass

    def observe(self, events: Sequence[Event], audit: Sequence[AuditRecord]) -> None:
        pass

    def committed(self, batch: int) -> None:
        pass

    def end(self, error: BaseException | None) -> None:
        self._floor.hand_over()


async def traced_overhead(runs: int, batch: int, processor: str = "batch") -> dict[str, float]:
    """The three configurations interleaved; prints and returns the ratios."""
    kind = {"batch": BatchSpanProcessor, "simple": SimpleSpanProcessor}[processor]
    exporters = {"floor": InMemorySpanExporter(), "traced": InMemorySpanExporter()}
    providers = {}
    for name, exporter in exporters.items():  # one each: a process has one (its own queue)
        providers[name] = TracerProvider(id_generator=RunIds())
        providers[name].add_span_processor(kind(exporter))
    with tempfile.TemporaryDirectory() as tmp:
        stores = {n: SQLiteStore(Path(tmp) / f"{n}.sqlite3") for n in ("plain", "floor", "traced")}
        agents: dict[str, Agent] = {name: make_agent(store) for name, store in stores.items()}
        agents["traced"] = instrument(agents["traced"], tracer_provider=providers["traced"])
        await fiduciary_batch(agents["traced"], 1)
        providers["traced"].force_flush()
        spans = exporters["traced"].get_finished_spans()
        sdk_floor = SdkFloor(providers["floor"].get_tracer("bench.floor"), spans)
        agents["floor"] = agents["floor"].with_options(tracer=sdk_floor)
        for agent in agents.values():  # warm every path before timing
            await fiduciary_batch(agent, 3)
        times = dict.fromkeys(agents, 0.0)
        done = 0
        gc.collect()
        order = list(agents.items())
        while done < runs:
            n = min(batch, runs - done)
            for name, agent in order:
                t0 = time.perf_counter()
                await fiduciary_batch(agent, n)
                times[name] += time.perf_counter() - t0
            order.reverse()  # A B C C B A ...: a drift of the machine weighs on all alike
            for exporter in exporters.values():
                exporter.clear()
            done += n
        for provider in providers.values():
            provider.shutdown()
        for store in stores.values():
            await store.close()
    traced, floor, plain = times["traced"], times["floor"], times["plain"]
    per_run = {name: t / runs * 1e6 for name, t in times.items()}
    print(
        f"traced ({processor} span processor, in-memory exporter, {len(spans)} spans a run):"
        f" {traced / plain:.2f}x the untraced SQLite time; the SDK floor {floor / plain:.2f}x;"
        f" traced {traced / floor:.2f}x the SDK floor"
        f" (µs a run: untraced {per_run['plain']:.0f}, floor {per_run['floor']:.0f},"
        f" traced {per_run['traced']:.0f})"
    )
    return {
        "traced_sqlite_ratio": round(traced / plain, 3),
        "sdk_floor_ratio": round(floor / plain, 3),
        "traced_to_sdk_floor": round(traced / floor, 3),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--processor", choices=("batch", "simple"), default="batch")
    args = parser.parse_args()
    result: dict[str, Any] = {"bench": "traced", "runs": args.runs, "processor": args.processor}
    result |= asyncio.run(traced_overhead(args.runs, args.batch, args.processor))
    print(json.dumps(result))
