"""The metric instruments over a real SDK meter: attribute sets are made once and reused, so
the same key must keep adding to the same point, and distinct keys must stay apart."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import uuid4

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from fiduciary.events import Usage, UsageDraft, stamp
from fiduciary.observability import _metrics
from fiduciary.observability._metrics import Metrics

from .scenario_traced import metric_points


def usage(model: str, tokens_in: int, tokens_out: int, cost: str | None) -> Usage:
    draft = UsageDraft(
        model=model,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cost_usd=None if cost is None else Decimal(cost),
    )
    event = stamp(draft, uuid4(), 3, datetime(2026, 12, 3, tzinfo=UTC))
    assert isinstance(event, Usage)
    return event


def test_repeated_keys_add_to_one_point_and_distinct_keys_stay_apart() -> None:
    reader = InMemoryMetricReader()
    metrics = Metrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    for _ in range(3):
        metrics.tool_call("ok", "auto", "read")
    metrics.tool_call("rejected:not_allowed", None, None)
    metrics.tool_call("rejected:unknown_tool", None, None)
    metrics.usage(usage("m-1", 10, 2, "0.5"), "openai")
    metrics.usage(usage("m-1", 5, 1, "0.25"), "openai")
    metrics.usage(usage("m-2", 7, 3, None), "anthropic")

    found = metric_points(reader)
    keys = ("fiduciary.tool.outcome", "fiduciary.tool.tier", "fiduciary.tool.kind")
    calls = {
        tuple(dict(p.attributes)[k] for k in keys): p.value for p in found["fiduciary.tool_calls"]
    }
    # the reason after "rejected:" is the span's, not a metric dimension: two calls, one point
    assert calls == {("ok", "auto", "read"): 3, ("rejected", "none", "unknown"): 2}
    tokens = {
        (
            dict(p.attributes)["gen_ai.response.model"],
            dict(p.attributes)["gen_ai.token.type"],
        ): p.sum
        for p in found["gen_ai.client.token.usage"]
    }
    assert tokens == {
        ("m-1", "input"): 15,
        ("m-1", "output"): 3,
        ("m-2", "input"): 7,
        ("m-2", "output"): 3,
    }
    (cost,) = found["fiduciary.model.cost"]  # m-2 has no known price: no cost point
    assert dict(cost.attributes) == {
        "gen_ai.provider.name": "openai",
        "gen_ai.response.model": "m-1",
    }
    assert cost.value == 0.75


def test_attribute_sets_kept_are_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(_metrics, "_KEPT", 4)
    reader = InMemoryMetricReader()
    metrics = Metrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    for i in range(10):  # model names a provider reports are open-ended
        metrics.usage(usage(f"m-{i}", 1, 1, None), "openai")
        assert len(metrics._usage_sets) <= 4
    metrics.usage(usage("m-9", 1, 1, None), "openai")
    models = {
        dict(p.attributes)["gen_ai.response.model"]: p.sum
        for p in metric_points(reader)["gen_ai.client.token.usage"]
        if dict(p.attributes)["gen_ai.token.type"] == "input"
    }
    assert models == {f"m-{i}": 1 for i in range(9)} | {"m-9": 2}
