"""A traced agent's server reports its open SSE streams as a gauge."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from fiduciary import Agent
from fiduciary.observability import instrument

from .conftest import AppFactory


def gauge(reader: InMemoryMetricReader) -> list[int | float]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "fiduciary.sse.subscribers"
        for point in metric.data.data_points
        if isinstance(point, NumberDataPoint)
    ]


async def test_the_server_reports_its_sse_subscribers(
    agent: Agent, make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = InMemoryMetricReader()
    instrument(agent, meter_provider=MeterProvider(metric_readers=[reader]))
    app = make_app()
    assert gauge(reader) == [0]
    hub = app.state.server.hub
    monkeypatch.setattr(type(hub), "subscriber_count", property(lambda self: 3))
    assert gauge(reader) == [3]
