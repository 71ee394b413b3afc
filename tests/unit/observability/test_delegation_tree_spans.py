"""Two levels down: each delegated run's trace links to its own parent's (the sub-worker's to
the worker's, the worker's to the manager's), never skipping a level."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fiduciary import Agent, ManualClock
from fiduciary.delegation import child_run_id
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
from tests.run_tree_scenario import get_balance

from .scenario_traced import as_json


async def test_each_level_links_to_its_own_parents_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=RunIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    options: dict[str, Any] = {
        "store": MemoryStore(),
        "clock": ManualClock(),
        "authorize": allow_all,
        "capabilities": [get_balance],
    }

    def agent(script: Script, **more: Any) -> Agent:
        made = Agent(model=ScriptedModel([script]), **options, **more)
        return instrument(made, tracer_provider=provider)

    sub = agent(Script("read", [ToolCalls([Call("get_balance")]), Reply("$42")]))
    ask_sub = {"agent": "sub", "task": "read the balance"}
    worker = agent(
        Script("check", [ToolCalls([Call("delegate", ask_sub)]), Reply("$42")]),
        delegates={"sub": sub},
    )
    ask_worker = {"agent": "worker", "task": "check the balance"}
    manager = agent(
        Script("how much", [ToolCalls([Call("delegate", ask_worker)]), Reply("ok")]),
        delegates={"worker": worker},
    )
    events = await collect(manager.run("how much?", principal="alice"))
    top = events[0].run_id
    middle = child_run_id(top, "toolu_000_0")
    low = child_run_id(middle, "toolu_000_0")
    roots = {
        s["trace_id"]: s
        for s in map(as_json, exporter.get_finished_spans())
        if s["name"] == "invoke_agent fiduciary"
    }
    assert set(roots) >= {top.int, middle.int, low.int}  # a trace of its own each
    assert roots[top.int]["links"] == []
    for child, parent in ((middle, top), (low, middle)):
        root = roots[child.int]
        assert root["links"] == [
            {
                "span_id": root_context(parent).span_id,
                "attributes": {"fiduciary.link": "delegated_by"},
            }
        ]
        assert root["attributes"]["fiduciary.run.parent_id"] == str(parent)
