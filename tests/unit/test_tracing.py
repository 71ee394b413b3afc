"""The loop's tracing seam: off unless the standard OTEL_* variables ask, and then the
OpenTelemetry tracer of fiduciary.observability; the core never imports OpenTelemetry itself."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fiduciary.tracing import NO_TRACER, tracer_from_env


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"OTEL_SERVICE_NAME": "payments"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
    ],
)
def test_tracing_is_off_unless_an_exporter_is_configured(environ: dict[str, str]) -> None:
    assert tracer_from_env(environ) is NO_TRACER


def test_an_otlp_endpoint_turns_the_opentelemetry_tracer_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fiduciary.observability as observability

    made = observability.OtelTracer()  # the global (no-op) providers: nothing is exported
    monkeypatch.setattr(observability, "tracer_from_env", lambda: made)
    assert tracer_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}) is made


def test_a_run_without_tracing_never_imports_opentelemetry() -> None:
    code = (
        "import asyncio, sys\n"
        "from fiduciary import Agent\n"
        "from fiduciary.testing import Reply, Script, ScriptedModel, collect\n"
        "agent = Agent(model=ScriptedModel([Script('hi', [Reply('hello')])]), capabilities=[])\n"
        "asyncio.run(collect(agent.run('hi', principal='alice')))\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, check=True)
    assert done.stdout.strip() == "[]"
