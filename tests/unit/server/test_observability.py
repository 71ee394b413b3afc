"""A traced agent's server reports its open SSE streams as a gauge."""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from fiduciary import Agent
from fiduciary.observability import instrument
from fiduciary.server import Server
from fiduciary.stores.base import Store
from fiduciary.tracing import NO_TRACER

from .conftest import AppFactory, Keys, bearer, client_for, settle, start_run
from .sse_client import blocks


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


async def opened(streams: AsyncExitStack, client: httpx.AsyncClient, url: str, key: str) -> None:
    """Open a stream and read its opening ``retry:`` block: subscribed from here on."""
    response = await streams.enter_async_context(client.stream("GET", url, headers=bearer(key)))
    assert response.status_code == 200, url
    async for block in blocks(response):
        assert block.message is not None, block.raw
        assert block.message.id is None, block.raw
        return
    raise AssertionError(f"{url} ended before it opened")


async def test_the_server_reports_its_sse_subscribers(
    agent: Agent, make_app: AppFactory, keys: Keys, store: Store
) -> None:
    reader = InMemoryMetricReader()
    traced = instrument(agent, meter_provider=MeterProvider(metric_readers=[reader]))
    app = make_app(agent=traced)
    server: Server = app.state.server
    assert gauge(reader) == [0]
    async with client_for(app) as client:
        run_id = await start_run(client, keys.alice, "send 500")  # waits for a person
        await settle(server)
        run = await store.get_run(run_id)
        assert run is not None
        assert run.status == "awaiting_approval"
        with anyio.fail_after(30):
            async with AsyncExitStack() as streams:
                # two followers of one run and one of the global stream: real subscribers
                await opened(streams, client, f"/runs/{run_id}/events", keys.alice)
                await opened(streams, client, f"/runs/{run_id}/events", keys.alice)
                assert gauge(reader) == [2]
                await opened(streams, client, "/events", keys.alice)
                assert gauge(reader) == [3]
            assert gauge(reader) == [0]  # each closed stream left


async def test_create_app_traces_its_agent_as_the_environment_asks(
    agent: Agent, make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``create_app`` is an entry point (an ASGI deployment makes no other call): an agent
    without a tracer of its own gets the one the ``OTEL_*`` variables ask for."""
    import fiduciary.observability.otel as otel

    made = otel.OtelTracer()  # the global (no-op) providers: nothing is exported
    monkeypatch.setattr(otel, "otlp_tracer", lambda: made)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    assert agent.tracer is NO_TRACER
    server: Server = make_app().state.server
    assert server.agent.tracer is made
    assert agent.tracer is NO_TRACER  # the agent given is not changed: the server's is another
