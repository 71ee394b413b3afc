"""Tracing chosen from the environment, by the entry points that compose an agent.

An ``Agent`` is made with a tracer that does nothing (``fiduciary.tracing.NO_TRACER``); the
core never reads ``OTEL_*`` nor loads this package. Each entry point — ``fiduciary serve``,
``worker``, ``mcp``, ``telegram``, ``attention run``, the CLI's own agents and the sync API —
calls ``trace_from_env(agent)``, which gives an untraced agent the OpenTelemetry tracer when
the standard ``OTEL_*`` variables ask for an exporter. Importing this module needs no
OpenTelemetry; ``.otel`` is imported only then.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..exceptions import ConfigurationError
from ..tracing import NO_TRACER, RunTracer

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["trace_from_env", "tracer_from_env"]

_ASKING = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def tracer_from_env(environ: Mapping[str, str] | None = None) -> RunTracer:
    """``NO_TRACER`` unless an OTLP endpoint or a traces exporter is configured the standard
    way (and ``OTEL_SDK_DISABLED`` is not true); then the process's OpenTelemetry tracer
    exporting over OTLP (which needs the ``observability`` extra: a ``ConfigurationError``
    naming it otherwise)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return NO_TRACER
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none" or (not exporter and not any(env.get(k) for k in _ASKING)):
        return NO_TRACER
    try:
        from . import otel

        tracer: RunTracer = otel.otlp_tracer()
    except ImportError:
        asked = next((k for k in _ASKING if env.get(k)), "OTEL_TRACES_EXPORTER")
        raise ConfigurationError(
            f"{asked} is set: tracing needs the 'observability' extra: "
            "pip install 'fiduciary[observability]' (or unset it)"
        ) from None
    return tracer


def trace_from_env(agent: Agent, environ: Mapping[str, str] | None = None) -> Agent:
    """``agent`` with ``tracer_from_env()`` (``agent.with_options(tracer=...)``), unless it
    already has a tracer of its own (``instrument(agent)``, or an entry point's earlier call)
    or the environment asks for none: then ``agent`` itself."""
    if agent.tracer is not NO_TRACER:
        return agent
    tracer = tracer_from_env(environ)
    return agent if tracer is NO_TRACER else agent.with_options(tracer=tracer)
