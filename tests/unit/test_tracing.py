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
    import fiduciary.observability.otel as observability

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


def test_time_travel_and_the_server_import_without_opentelemetry() -> None:
    """``fiduciary.observability`` (replay, fork, diff) and the server need no OpenTelemetry:
    only ``instrument`` and friends import it, on first use."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'opentelemetry' or name.startswith('opentelemetry.'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from fiduciary.observability import diff, fork, replay\n"
        "import fiduciary.server.app\n"
        "try:\n"
        "    from fiduciary.observability import instrument\n"
        "except ImportError as exc:\n"
        "    assert 'observability' in str(exc), exc\n"
        "else:\n"
        "    raise SystemExit('instrument imported without OpenTelemetry')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
