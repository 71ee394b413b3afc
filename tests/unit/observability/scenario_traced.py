"""A traced run shared by the span tests, and the second process that approves and resumes it.

``python -m tests.unit.observability.scenario_traced DB`` approves the run waiting in the SQLite
file ``DB``, resumes it with tracing on (an in-memory exporter), and prints its spans as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fiduciary import Agent, CallContext, Policy, capability
from fiduciary.capabilities import Capability
from fiduciary.observability import RunIds, instrument
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

CANARY = "sk-live-CANARY0123456789abcdefghij"
PRINCIPAL = "alice"
MESSAGE = f"note it, then pay bob; my key is {CANARY}"

SCRIPT = Script(
    "pay",
    [
        ToolCalls([Call("balance"), Call("note", {"text": f"token {CANARY}"})]),
        ToolCalls([Call("wipe_disk")]),
        ToolCalls([Call("send", {"to": "bob", "amount": "25", "memo": f"key={CANARY}"})]),
        Reply("paid bob"),
    ],
)


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """The data points a metric reader holds, by metric name."""
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[metric.name] = list(metric.data.data_points)
    return points


def capabilities() -> list[Capability]:
    @capability(kind="read")
    async def balance() -> dict[str, str]:
        """The balance."""
        return {"usd": "100.00", "api_key": CANARY}

    @capability(kind="execute", tier="auto")
    async def note(text: str) -> dict[str, str]:
        """Write a note."""
        return {"ok": "yes"}

    def amount(args: Any, ctx: CallContext) -> Decimal:
        return Decimal(args.amount)

    @capability(kind="execute", operation="send", amount_usd=amount, tier="confirm")
    async def send(to: str, amount: str, memo: str, ctx: CallContext) -> dict[str, str]:
        """Send money."""
        return {"to": to, "sent": amount}

    return [balance, note, send]


def traced_agent(store: Store, *, capture_content: bool) -> tuple[Agent, InMemorySpanExporter]:
    agent = Agent(
        model=ScriptedModel([SCRIPT]),
        capabilities=capabilities(),
        store=store,
        policy=Policy(),
        authorize=allow_all,
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=RunIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return instrument(agent, tracer_provider=provider, capture_content=capture_content), exporter


def as_json(span: ReadableSpan) -> dict[str, Any]:
    context, parent = span.get_span_context(), span.parent
    assert context is not None
    return {
        "name": span.name,
        "trace_id": context.trace_id,
        "span_id": context.span_id,
        "parent_id": parent.span_id if parent is not None else None,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "links": [
            {"span_id": link.context.span_id, "attributes": dict(link.attributes or {})}
            for link in span.links
        ],
        "error": not span.status.is_ok,
    }


async def approve_and_resume(db: Path) -> list[dict[str, Any]]:
    store = SQLiteStore(db)
    try:
        agent, exporter = traced_agent(store, capture_content=True)
        (pending,) = await agent.pending_approvals(principal=PRINCIPAL)
        await agent.approve(pending.approval_id, by=PRINCIPAL)
        await collect(agent.resume(pending.run_id))
        return [as_json(s) for s in exporter.get_finished_spans()]
    finally:
        await store.close()


if __name__ == "__main__":
    spans = asyncio.run(approve_and_resume(Path(sys.argv[1])))
    print(json.dumps(spans, default=str))
