"""A delegated run's trace is its own, linked to its parent's run trace."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fiduciary import Agent, ManualClock, capability
from fiduciary.delegation import child_run_id
from fiduciary.events import RunStarted
from fiduciary.observability import instrument
from fiduciary.observability._ids import RunIds, root_context
from fiduciary.testing import (
    Call,
    MemoryStore,
    Reply,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
    collect,
)

from .scenario_traced import as_json


@capability
def get_balance() -> dict[str, str]:
    """The balance."""
    return {"usd": "42.00"}


async def test_the_childs_drive_links_to_the_parents_trace() -> None:
    store = MemoryStore()
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=RunIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    options: dict[str, Any] = {"store": store, "clock": ManualClock(), "authorize": allow_all}
    worker = Agent(
        model=ScriptedModel([Script("balance", [Reply("it is $42.00")])]),
        capabilities=[get_balance],
        **options,
    )
    worker = instrument(worker, tracer_provider=provider)  # (a traced agent: another one)
    task = {"agent": "worker", "task": "the balance"}
    manager = Agent(
        model=ScriptedModel(
            [Script("how much", [ToolCalls([Call("delegate", task)]), Reply("ok")])]
        ),
        capabilities=[get_balance],
        delegates={"worker": worker},
        **options,
    )
    manager = instrument(manager, tracer_provider=provider)
    events = await collect(manager.run("how much?", principal="alice"))
    parent = events[0]
    assert isinstance(parent, RunStarted)
    child = child_run_id(parent.run_id, "toolu_000_0")
    roots = {
        s["trace_id"]: s
        for s in map(as_json, exporter.get_finished_spans())
        if s["name"] == "invoke_agent fiduciary"
    }
    parent_root, child_root = roots[parent.run_id.int], roots[child.int]
    assert parent_root["links"] == []
    assert child_root["links"] == [
        {
            "span_id": root_context(parent.run_id).span_id,
            "attributes": {"fiduciary.link": "delegated_by"},
        }
    ]
    assert child_root["attributes"]["fiduciary.run.parent_id"] == str(parent.run_id)
