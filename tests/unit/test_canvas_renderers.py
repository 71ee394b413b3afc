"""Every renderer of a run's events takes a ``canvas`` and a ``pending_input`` (reserved: no
engine emits it yet) in its stride: a real run's log that holds both (the pending_input spliced
in) and the contract's log of every event type are replayed through each, and none fails; those
that show events say something of both."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console

from fiduciary._loop.transcript import Transcript
from fiduciary._sync import RunResult
from fiduciary.bus._map import bus_event
from fiduciary.canvas import render_canvas
from fiduciary.capabilities import Principal
from fiduciary.channels.agent_chat import collect as chat_reply
from fiduciary.cli.terminal import Renderer, describe
from fiduciary.events import (
    Canvas,
    Event,
    PendingInput,
    decode_event,
    encode_sse,
    parse_sse,
)
from fiduciary.mcp.bridge import outcome_of
from fiduciary.observability import diff, render_diff, waterfall
from fiduciary.observability.otel import OtelTracer
from fiduciary.redaction import Redactor
from fiduciary.server.ui_stream import UIMessageStream, encode_part
from fiduciary.stores.base import GlobalEvent
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, MemoryStore, Reply, Script, ScriptedModel, ToolCalls, collect
from tests.agent_support import make_agent
from tests.contract.builders import every_event, make_run

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
CHART = {
    "title": "Spending by month",
    "kind": "bar_chart",
    "labels": ["January", "February"],
    "series": [{"name": "Rent", "values": ["1250.10", "980"]}],
}
ASKED = "Which account should receive the refund?"


async def canvas_run() -> list[Event]:
    """A real run that shows a canvas, with a pending_input spliced in after it (the seqs
    renumbered): what a log will hold once an engine emits one."""
    script = Script("show", [ToolCalls([Call("render_canvas", CHART)]), Reply("Shown.")])
    agent = make_agent(model=ScriptedModel([script]), capabilities=[render_canvas])
    events = await collect(agent.run("show", principal="alice"))
    at = next(i for i, e in enumerate(events) if isinstance(e, Canvas)) + 1
    asked = PendingInput(
        run_id=events[0].run_id,
        seq=at + 1,
        at=events[at - 1].at,
        input_id="in_1",
        input_schema={"type": "object", "properties": {"iban": {"type": "string"}}},
        prompt=ASKED,
    )
    later = [e.model_copy(update={"seq": e.seq + 1}) for e in events[at:]]
    return [*events[:at], asked, *later]


def contract_log() -> list[Event]:
    return every_event(uuid4())


Renderer_ = Callable[[list[Event]], Awaitable[str]]


async def terminal_lines(events: list[Event]) -> str:
    return "\n".join(describe(e) for e in events)


async def terminal_renderer(events: list[Event]) -> str:
    out = Console(file=io.StringIO(), width=100, color_system=None)
    render = Renderer(out)
    for event in events:
        render(event)
    render.flush()
    file = out.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


async def ui_stream(events: list[Event]) -> str:
    stream = UIMessageStream()
    parts = stream.start(events[0].run_id)
    for event in events:
        parts += stream.feed(event)
    parts += stream.finish("stop")
    return b"".join(encode_part(p) for p in parts).decode()


async def sse_wire(events: list[Event]) -> str:
    text = "".join(encode_sse(e) for e in events)
    back = [decode_event(m.data) for m in parse_sse(text)]
    assert back == events
    return text


async def transcript_fold(events: list[Event]) -> str:
    folded = Transcript()
    for event in events:
        folded.apply(event)
    assert folded.last_seq == events[-1].seq
    return ""  # the model is told nothing of either


async def bus(events: list[Event]) -> str:
    mapped = [bus_event(GlobalEvent(i, "alice", "completed", e)) for i, e in enumerate(events)]
    kinds = {e.type: m for e, m in zip(events, mapped, strict=True)}
    assert kinds.get("canvas") is None
    assert kinds.get("pending_input") is None
    return ""


async def trace_waterfall(events: list[Event]) -> str:
    return json.dumps(waterfall(events).model_dump(mode="json"))


async def run_diff(events: list[Event]) -> str:
    store = MemoryStore()
    runs = []
    for _ in range(2):
        run = make_run(run_id=uuid4(), principal="alice", status="completed")
        await store.create_run(run, [e.model_copy(update={"run_id": run.run_id}) for e in events])
        runs.append(run.run_id)
    return render_diff(await diff(store, runs[0], runs[1]))


async def otel_spans(events: list[Event]) -> str:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = OtelTracer(tracer_provider=provider, capture_content=True)
    run = make_run(run_id=events[0].run_id, principal="alice", status="running")
    drive = tracer.drive(run, resumed=False, model="scripted", redactor=Redactor())
    drive.observe(events, [])
    drive.end(None)
    return "\n".join(s.to_json() for s in exporter.get_finished_spans())


async def mcp_bridge(events: list[Event]) -> str:
    run_id = events[0].run_id
    done = outcome_of(events, run_id, console_url="http://127.0.0.1:8000/", principal=ALICE)
    return json.dumps(done.structured(), default=str)


async def chat_channel(events: list[Event]) -> str:  # what Telegram and the webhook reply
    async def stream() -> AsyncIterator[Event]:
        for event in events:
            yield event

    reply = await chat_reply(make_agent(), events[0].run_id, stream())
    return reply.text


async def sync_result(events: list[Event]) -> str:
    return RunResult(events[0].run_id, "completed", tuple(events), ()).text


ALICE = Principal("alice")
RENDERERS: dict[str, Renderer_] = {
    "cli describe": terminal_lines,
    "cli renderer": terminal_renderer,
    "ui message stream": ui_stream,
    "sse": sse_wire,
    "transcript fold": transcript_fold,
    "bus": bus,
    "waterfall": trace_waterfall,
    "runs diff": run_diff,
    "otel spans": otel_spans,
    "mcp bridge": mcp_bridge,
    "chat channels": chat_channel,
    "run_sync result": sync_result,
}
SHOWN = {"cli describe", "cli renderer", "ui message stream", "sse", "chat channels"}


@pytest.mark.parametrize("log", [canvas_run, contract_log], ids=["real run", "every type"])
@pytest.mark.parametrize("name", RENDERERS)
async def test_each_renderer_takes_a_canvas_and_a_pending_input(
    name: str, log: Callable[[], Any]
) -> None:
    made = log()
    events: list[Event] = await made if isinstance(made, Awaitable) else made
    assert {"canvas", "pending_input"} <= {e.type for e in events}
    out = await RENDERERS[name](events)
    if name in SHOWN:
        assert "in_1" in out or "in_01" in out or ASKED in out
        assert "Spending by month" in out or "Rent paid, by month" in out


async def test_the_ui_stream_carries_both_as_data_parts() -> None:
    events = await canvas_run()
    parts = [json.loads(m.data) for m in parse_sse(await ui_stream(events))]
    (canvas,) = [p for p in parts if p["type"] == "data-canvas"]
    assert canvas["data"]["title"] == "Spending by month"
    assert canvas["data"]["html"].startswith("<!doctype html>")
    (asked,) = [p for p in parts if p["type"] == "data-pending-input"]
    assert asked["data"] == {
        "inputId": "in_1",
        "schema": {"type": "object", "properties": {"iban": {"type": "string"}}},
        "prompt": ASKED,
    }


async def test_the_cli_prints_a_stored_log_with_both(tmp_path: Path) -> None:
    """From outside: ``fiduciary runs events`` and ``runs show`` in a process of their own."""
    db = tmp_path / "runs.sqlite3"
    events = await canvas_run()
    store = SQLiteStore(db)
    try:
        run = make_run(run_id=events[0].run_id, principal="alice", status="completed")
        await store.create_run(run, events)
    finally:
        await store.close()
    for command in (["events"], ["show", "--last", "20"]):
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "fiduciary", "runs", *command, str(run.run_id), "--db", str(db)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=50,
            check=False,
            env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0, done.stderr
        assert "Spending by month" in done.stdout
        assert "in_1" in done.stdout
