"""The spans of a traced run: their tree, their attributes, a resume in a second process
continuing the run's trace, and no secret in any attribute."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fiduciary.events import PendingAction
from fiduciary.observability import instrument
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import collect

from .scenario_traced import CANARY, MESSAGE, PRINCIPAL, as_json, metric_points, traced_agent

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]


def everything(spans: list[dict[str, Any]]) -> str:
    """Every attribute, event attribute and link attribute of every span, as one text."""
    parts: list[Any] = []
    for span in spans:
        parts.append(span["attributes"])
        parts.extend(e["attributes"] for e in span["events"])
        parts.extend(link["attributes"] for link in span["links"])
    return json.dumps(parts, default=str)


async def first_process(db: Path, *, capture_content: bool) -> list[dict[str, Any]]:
    store = SQLiteStore(db)
    try:
        agent, exporter = traced_agent(store, capture_content=capture_content)
        events = await collect(agent.run(MESSAGE, principal=PRINCIPAL))
        assert any(isinstance(e, PendingAction) for e in events)
        return [as_json(s) for s in exporter.get_finished_spans()]
    finally:
        await store.close()


def second_process(db: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.unit.observability.scenario_traced", str(db)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
        check=True,
    )
    spans: list[dict[str, Any]] = json.loads(done.stdout)
    return spans


def by_name(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == name]


async def test_a_run_suspended_and_resumed_in_another_process_is_one_trace(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.sqlite3"
    first = await first_process(db, capture_content=False)
    (agent_span,) = by_name(first, "invoke_agent fiduciary")
    attrs = agent_span["attributes"]
    assert agent_span["parent_id"] is None
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["fiduciary.run.status"] == "awaiting_approval"
    run_id = attrs["gen_ai.conversation.id"]
    assert agent_span["trace_id"] == int(run_id.replace("-", ""), 16)  # the run's own trace

    # three model calls: reads + auto write, the refused call, the write asking approval
    chats = by_name(first, "chat scripted")
    assert len(chats) == 3
    for chat in chats:
        assert chat["parent_id"] == agent_span["span_id"]
        assert chat["attributes"]["gen_ai.operation.name"] == "chat"
        assert chat["attributes"]["gen_ai.request.model"] == "scripted"
        assert chat["attributes"]["gen_ai.usage.input_tokens"] >= 0
        assert list(chat["attributes"]["gen_ai.response.finish_reasons"]) == ["tool_use"]
    (balance,) = by_name(first, "execute_tool balance")
    assert balance["attributes"]["fiduciary.tool.kind"] == "read"
    assert balance["attributes"]["fiduciary.tool.outcome"] == "ok"
    (note,) = by_name(first, "execute_tool note")
    assert note["attributes"]["fiduciary.tool.tier"] == "auto"
    assert note["attributes"]["fiduciary.tool.outcome"] == "ok"
    (wipe,) = by_name(first, "execute_tool wipe_disk")
    assert wipe["attributes"]["fiduciary.tool.outcome"] == "rejected:not_allowed"
    assert wipe["error"]
    (asked,) = by_name(first, "execute_tool send")
    assert asked["attributes"]["fiduciary.tool.outcome"] == "pending"
    assert asked["attributes"]["fiduciary.tool.tier"] == "confirm"
    assert [e["name"] for e in asked["events"]] == ["fiduciary.pending_action"]
    for tool in (balance, note, wipe, asked):
        assert tool["parent_id"] == agent_span["span_id"]
        assert tool["trace_id"] == agent_span["trace_id"]
    assert "gen_ai.tool.call.arguments" not in everything(first)  # content capture is off

    second = second_process(db)
    (resumed,) = by_name(second, "invoke_agent fiduciary")
    assert resumed["trace_id"] == agent_span["trace_id"]
    assert resumed["parent_id"] == agent_span["span_id"]
    assert resumed["links"] == [
        {"span_id": agent_span["span_id"], "attributes": {"fiduciary.link": "resumes"}}
    ]
    assert resumed["attributes"]["fiduciary.run.resumed"] is True
    assert resumed["attributes"]["fiduciary.run.status"] == "completed"
    (sent,) = by_name(second, "execute_tool send")
    assert sent["parent_id"] == resumed["span_id"]
    assert sent["attributes"]["fiduciary.tool.outcome"] == "ok"
    assert sent["attributes"]["fiduciary.tool.tier"] == "confirm"
    (decision,) = sent["events"]
    assert decision["name"] == "fiduciary.decision"
    assert decision["attributes"]["fiduciary.approval.decision"] == "approved"
    (last_chat,) = by_name(second, "chat scripted")
    assert list(last_chat["attributes"]["gen_ai.response.finish_reasons"]) == ["end_turn"]

    # the second process captured content: redacted, the canary nowhere
    assert "bob" in sent["attributes"]["gen_ai.tool.call.result"]
    for spans in (first, second):
        assert CANARY not in everything(spans)


async def test_content_capture_redacts_every_attribute(tmp_path: Path) -> None:
    spans = await first_process(tmp_path / "runs.sqlite3", capture_content=True)
    (note,) = by_name(spans, "execute_tool note")
    assert "token" in note["attributes"]["gen_ai.tool.call.arguments"]
    assert CANARY not in everything(spans)


async def test_metrics_count_tool_calls_by_outcome_and_tier(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    try:
        agent, _ = traced_agent(store, capture_content=False)
        reader = InMemoryMetricReader()
        agent = instrument(agent, meter_provider=MeterProvider(metric_readers=[reader]))
        await collect(agent.run(MESSAGE, principal=PRINCIPAL))
    finally:
        await store.close()
    points = metric_points(reader)
    keys = ("fiduciary.tool.outcome", "fiduciary.tool.tier", "fiduciary.tool.kind")
    calls = {
        tuple(dict(p.attributes)[k] for k in keys): p.value for p in points["fiduciary.tool_calls"]
    }
    assert calls == {
        ("ok", "auto", "read"): 1,
        ("ok", "auto", "execute"): 1,
        ("rejected", "none", "unknown"): 1,  # not on the whitelist: refused before any tier
        ("pending", "confirm", "execute"): 1,
    }
    (waiting,) = points["fiduciary.approvals.waiting"]
    assert waiting.value == 1
    (runs,) = points["fiduciary.runs"]
    assert dict(runs.attributes) == {"fiduciary.run.status": "awaiting_approval"}
    assert points["fiduciary.store.commit.batch_size"][0].count >= 1
    assert {
        dict(p.attributes)["gen_ai.token.type"] for p in points["gen_ai.client.token.usage"]
    } == {
        "input",
        "output",
    }


async def test_a_provider_whose_ids_fiduciary_cannot_choose_still_gives_one_trace_per_run(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    try:
        agent, _ = traced_agent(store, capture_content=False)
        exporter = InMemorySpanExporter()
        provider = TracerProvider()  # random ids
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        agent = instrument(agent, tracer_provider=provider)
        events = await collect(agent.run(MESSAGE, principal=PRINCIPAL))
    finally:
        await store.close()
    spans = [as_json(s) for s in exporter.get_finished_spans()]
    (agent_span,) = by_name(spans, "invoke_agent fiduciary")
    assert agent_span["trace_id"] == events[0].run_id.int
    assert agent_span["parent_id"] is not None  # the run's derived root: the same for every drive
    assert {s["trace_id"] for s in spans} == {events[0].run_id.int}
