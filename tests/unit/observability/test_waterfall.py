"""``waterfall``: a run's trace built from its log has the shape of the OpenTelemetry spans the
same run exports (same spans, names, parents, kinds, tiers and outcomes), plus the time an
approval waited for a person; no argument or result reaches it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from fiduciary.observability import TraceView, waterfall
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import collect

from .scenario_traced import CANARY, MESSAGE, PRINCIPAL, as_json, traced_agent

_SHAPE = ("fiduciary.tool.kind", "fiduciary.tool.tier", "fiduciary.tool.outcome")


def shape(name: str, parent: str | None, attributes: dict[str, Any]) -> tuple[Any, ...]:
    return (name, parent, *(attributes.get(k) for k in _SHAPE))


async def traced_run(tmp_path: Path, *, approve: bool) -> tuple[TraceView, list[dict[str, Any]]]:
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    try:
        agent, exporter = traced_agent(store, capture_content=False)
        run_id = (await collect(agent.run(MESSAGE, principal=PRINCIPAL)))[0].run_id
        if approve:
            (pending,) = await agent.pending_approvals(principal=PRINCIPAL)
            await agent.approve(pending.approval_id, by=PRINCIPAL)
            await collect(agent.resume(run_id))
        view = waterfall(await store.read_events(run_id), await store.audit_records(run_id))
        return view, [as_json(s) for s in exporter.get_finished_spans()]
    finally:
        await store.close()


async def test_the_waterfall_has_the_spans_opentelemetry_receives(tmp_path: Path) -> None:
    view, exported = await traced_run(tmp_path, approve=True)

    names = {s["span_id"]: s["name"] for s in exported}
    otel: Counter[tuple[Any, ...]] = Counter()
    for s in exported:
        parent = names.get(s["parent_id"])
        if s["name"] == "invoke_agent fiduciary":
            # a resumed drive is the first's child in OpenTelemetry (one trace); here a sibling
            parent = None
        otel[shape(s["name"], parent, s["attributes"])] += 1
    ours = {s.span_id: s.name for s in view.spans}
    mine = Counter(
        shape(s.name, ours.get(s.parent_id or ""), s.attributes)
        for s in view.spans
        if s.kind != "approval"
    )
    assert otel[("invoke_agent fiduciary", None, None, None, None)] == 2
    assert mine == otel


async def test_the_time_waiting_for_a_person_is_a_span(tmp_path: Path) -> None:
    view, _ = await traced_run(tmp_path, approve=True)
    (waited,) = [s for s in view.spans if s.kind == "approval"]
    first, second = [s for s in view.spans if s.kind == "agent"]

    assert waited.name == "await_approval send"
    assert waited.parent_id is None
    assert waited.start == first.end
    assert waited.end is not None
    assert waited.end <= second.start
    assert waited.attributes["fiduciary.approval.tier"] == "confirm"
    assert waited.attributes["fiduciary.approval.decision"] == "approved"
    assert (
        first.attributes["fiduciary.run.status"],
        second.attributes["fiduciary.run.status"],
    ) == (
        "awaiting_approval",
        "completed",
    )
    sends = [s for s in view.spans if s.name == "execute_tool send"]
    assert [s.attributes["fiduciary.tool.outcome"] for s in sends] == ["pending", "ok"]
    assert [e.name for e in sends[1].events] == ["decision"]


async def test_an_approval_still_waiting_is_open(tmp_path: Path) -> None:
    view, _ = await traced_run(tmp_path, approve=False)
    (waiting,) = [s for s in view.spans if s.kind == "approval"]
    assert waiting.end is None
    assert waiting.status == "open"
    (drive,) = [s for s in view.spans if s.kind == "agent"]
    assert drive.end == waiting.start
    (refused,) = [s for s in view.spans if s.name == "execute_tool wipe_disk"]
    assert refused.status == "error"
    assert refused.attributes["fiduciary.tool.outcome"] == "rejected:not_allowed"


async def test_no_argument_nor_result_reaches_the_waterfall(tmp_path: Path) -> None:
    view, _ = await traced_run(tmp_path, approve=True)
    text = view.model_dump_json()
    assert CANARY not in text
    assert "bob" not in text  # the send's argument
    assert json.loads(text)["run_id"] == view.run_id


def test_an_empty_log_is_an_empty_trace() -> None:
    assert waterfall([]).spans == []
