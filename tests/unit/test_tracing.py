"""The loop's tracing seam: an Agent starts untraced; the entry points turn the OpenTelemetry
tracer of fiduciary.observability on when the standard OTEL_* variables ask; the core never
reads them, nor imports OpenTelemetry or the observability package."""

from __future__ import annotations

import subprocess
import sys
from uuid import UUID

import pytest

from fiduciary import Agent, run_sync
from fiduciary.observability.environment import trace_from_env, tracer_from_env
from fiduciary.redaction import Redactor
from fiduciary.stores.base import RunRecord
from fiduciary.testing import Reply, Script, ScriptedModel
from fiduciary.tracing import NO_DRIVE, NO_TRACER, DriveTrace


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
    monkeypatch.setattr(observability, "otlp_tracer", lambda: made)
    assert tracer_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}) is made


def test_an_agent_made_with_an_otlp_endpoint_set_stays_untraced_and_loads_no_feature() -> None:
    """The core composes nothing: the entry points do (``trace_from_env``)."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'opentelemetry' or name.startswith('opentelemetry.'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from fiduciary import Agent\n"
        "from fiduciary.testing import ScriptedModel\n"
        "from fiduciary.tracing import NO_TRACER\n"
        "agent = Agent(model=ScriptedModel([]), capabilities=[])\n"
        "assert agent.tracer is NO_TRACER\n"
        "print(sorted(m for m in sys.modules if m.startswith('fiduciary.observability')))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_entry_point_keeps_a_tracer_the_agent_already_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fiduciary.observability.otel as observability

    mine = observability.OtelTracer()
    agent = Agent(model=ScriptedModel([]), capabilities=[]).with_options(tracer=mine)
    monkeypatch.setattr(observability, "otlp_tracer", observability.OtelTracer)
    assert trace_from_env(agent, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}) is agent
    assert agent.tracer is mine
    untraced = Agent(model=ScriptedModel([]), capabilities=[])
    assert trace_from_env(untraced, {}).tracer is NO_TRACER


def test_the_sync_api_turns_tracing_on_as_the_environment_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fiduciary.observability.otel as observability

    made = observability.OtelTracer()  # the global (no-op) providers: nothing is exported
    drives: list[UUID] = []

    def drive(run: RunRecord, *, resumed: bool, model: str, redactor: Redactor) -> DriveTrace:
        drives.append(run.run_id)
        return NO_DRIVE

    monkeypatch.setattr(made, "drive", drive)
    monkeypatch.setattr(observability, "otlp_tracer", lambda: made)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    agent = Agent(model=ScriptedModel([Script("hi", [Reply("hello")])]), capabilities=[])
    assert agent.tracer is NO_TRACER
    result = run_sync(agent, "hi", principal="alice")
    assert result.status == "completed"
    assert drives == [result.run_id]  # the run was traced; the agent given is unchanged
    assert agent.tracer is NO_TRACER


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
