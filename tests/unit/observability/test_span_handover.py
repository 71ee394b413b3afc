"""Spans are recorded while a drive runs and handed to the SDK in bursts: a long drive's spans
reach the exporter before it ends, all under its one root; a failed drive's root and open model
call end with an error status."""

from __future__ import annotations

from collections.abc import AsyncIterator

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from fiduciary import Agent, capability
from fiduciary.capabilities import Capability
from fiduciary.events import RunCompleted, RunFailed
from fiduciary.models.base import ModelEvent, ModelRequest
from fiduciary.observability import RunIds, instrument
from fiduciary.stores.memory import MemoryStore
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all

READS = 40  # 40 model calls and 40 capability calls: past one burst of 64 finished spans


def capabilities() -> list[Capability]:
    @capability(kind="read")
    async def balance() -> dict[str, str]:
        """The balance."""
        return {"usd": "100.00"}

    return [balance]


class Watching(ScriptedModel):
    """A scripted model that counts, as each model call starts, the spans exported so far."""

    def __init__(self, script: Script, exporter: InMemorySpanExporter) -> None:
        super().__init__([script])
        self.exporter = exporter
        self.exported: list[int] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.exported.append(len(self.exporter.get_finished_spans()))
        async for event in super().stream(request):
            yield event


def traced(script: Script, *, max_turns: int) -> tuple[Agent, Watching, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    model = Watching(script, exporter)
    agent = Agent(
        model=model,
        capabilities=capabilities(),
        store=MemoryStore(),
        authorize=allow_all,
        max_turns=max_turns,
        max_tool_calls=READS + 1,
    )
    provider = TracerProvider(id_generator=RunIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return instrument(agent, tracer_provider=provider), model, exporter


async def test_a_long_drive_hands_its_spans_over_before_it_ends() -> None:
    steps = [ToolCalls([Call("balance")]) for _ in range(READS)]
    agent, model, exporter = traced(Script("check", [*steps, Reply("done")]), max_turns=READS + 1)
    events = [event async for event in agent.run("check", principal="alice")]
    assert isinstance(events[-1], RunCompleted)
    spans = exporter.get_finished_spans()
    # nothing while the first 32 calls ran; by the last model call, one burst of 64
    assert model.exported[:32] == [0] * 32
    assert model.exported[-1] == 64
    assert len(spans) == 2 * READS + 2
    (root,) = [s for s in spans if s.name == "invoke_agent fiduciary"]
    assert root.attributes is not None
    assert root.attributes["fiduciary.run.status"] == "completed"
    children = [s for s in spans if s is not root]
    assert len([s for s in children if s.name == "chat scripted"]) == READS + 1
    assert len([s for s in children if s.name == "execute_tool balance"]) == READS
    root_context = root.get_span_context()
    assert root_context is not None
    for span in children:
        assert span.parent is not None
        assert span.parent.span_id == root_context.span_id
        assert span.start_time is not None
        assert span.end_time is not None
        assert root.start_time is not None
        assert root.end_time is not None
        # the recorded times: inside the drive, in order
        assert root.start_time <= span.start_time <= span.end_time <= root.end_time


async def test_a_failed_drive_ends_its_spans_with_an_error() -> None:
    steps = [ToolCalls([Call("balance")]) for _ in range(3)]
    agent, _, exporter = traced(Script("check", [*steps, Reply("done")]), max_turns=2)
    events = [event async for event in agent.run("check", principal="alice")]
    (failed,) = [e for e in events if isinstance(e, RunFailed)]
    assert failed.reason == "max_turns"
    spans = exporter.get_finished_spans()
    (root,) = [s for s in spans if s.name == "invoke_agent fiduciary"]
    assert root.attributes is not None
    assert root.attributes["fiduciary.run.status"] == "failed"
    assert root.attributes["fiduciary.run.failure"] == "max_turns"
    assert root.status.status_code is StatusCode.ERROR
    assert root.status.description == "max_turns"
    tools = [s for s in spans if s.name == "execute_tool balance"]
    assert len(tools) == 2
    assert all(s.status.status_code is StatusCode.UNSET for s in tools)
