"""OpenTelemetry traces and metrics of fiduciary's runs (the ``observability`` extra).

Reached as ``fiduciary.observability.instrument`` / ``tracer_from_env`` (imported on first use,
so that time travel works without OpenTelemetry installed).

``instrument(agent)`` returns the agent traced by an ``OtelTracer``; the entry points trace an
agent as the standard ``OTEL_*`` variables ask (``trace_from_env``). Each drive of
a run is an ``invoke_agent`` span in the run's own trace (its id is the run id), with ``chat``
and ``execute_tool`` children; see docs/observability.md. Content capture is off unless
``capture_content`` or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, and what
it captures is redacted first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib.metadata import version
from typing import TYPE_CHECKING

try:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.trace import TracerProvider
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "fiduciary.observability needs OpenTelemetry: pip install 'fiduciary[observability]'"
    ) from exc

from ..redaction import Redactor
from ..stores.base import RunRecord
from ..tracing import DriveTrace
from ._ids import RunIds
from ._metrics import Metrics
from ._spans import DriveSpans

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["OtelTracer", "RunIds", "instrument", "otlp_tracer"]

_CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


class OtelTracer:
    """A ``RunTracer`` over OpenTelemetry providers (the global ones unless given)."""

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        capture_content: bool | None = None,
    ) -> None:
        release = version("fiduciary")
        self._tracer = trace.get_tracer("fiduciary", release, tracer_provider=tracer_provider)
        self.metrics = Metrics(
            metrics.get_meter("fiduciary", release, meter_provider=meter_provider)
        )
        provider = tracer_provider or trace.get_tracer_provider()
        # the first drive's span takes the run's ids only where the provider lets us choose
        self._owns_ids = isinstance(getattr(provider, "id_generator", None), RunIds)
        if capture_content is None:
            capture_content = os.environ.get(_CAPTURE, "").strip().lower() == "true"
        self.capture_content = capture_content

    def drive(self, run: RunRecord, *, resumed: bool, model: str, redactor: Redactor) -> DriveTrace:
        return DriveSpans(
            self._tracer,
            self.metrics,
            run,
            resumed=resumed,
            model=model,
            redactor=redactor,
            capture_content=self.capture_content,
            owns_ids=self._owns_ids,
        )

    def watch_sse_subscribers(self, count: Callable[[], int]) -> None:
        self.metrics.watch_sse_subscribers(count)


def instrument(
    agent: Agent,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    capture_content: bool | None = None,
) -> Agent:
    """``agent`` traced (with the global providers unless given): another agent, sharing the
    rest (``agent.with_options``); its ``tracer`` is the ``OtelTracer``."""
    tracer = OtelTracer(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        capture_content=capture_content,
    )
    return agent.with_options(tracer=tracer)


_from_env: OtelTracer | None = None


def otlp_tracer() -> OtelTracer:
    """The process's tracer exporting over OTLP as the ``OTEL_*`` variables say (endpoint,
    headers, service name, resource attributes); made once, providers set globally."""
    global _from_env
    if _from_env is None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create(
            {"service.name": os.environ.get("OTEL_SERVICE_NAME", "fiduciary")}
        )
        tracer_provider = TracerProvider(resource=resource, id_generator=RunIds())
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        meter_provider = MeterProvider(
            resource=resource, metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())]
        )
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
        _from_env = OtelTracer(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return _from_env
