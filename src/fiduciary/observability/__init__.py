"""Observability: OpenTelemetry spans and metrics (the ``observability`` extra), time travel
over recorded runs (replay, fork, diff) and a run's trace as a waterfall built from its log
(``waterfall``: the console's trace view); these need no extra.

``instrument``, ``OtelTracer`` and ``RunIds`` live in ``.otel`` and are imported on first use,
so importing this package never needs OpenTelemetry. ``tracer_from_env`` and ``trace_from_env``
(``.environment``) are how the entry points turn tracing on when the ``OTEL_*`` variables ask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .diff import RunDiff, diff, render_diff
from .environment import trace_from_env, tracer_from_env
from .fork import fork
from .replay import replay
from .waterfall import TraceView, waterfall

if TYPE_CHECKING:
    from .otel import OtelTracer, RunIds, instrument

__all__ = [
    "OtelTracer",
    "RunDiff",
    "RunIds",
    "TraceView",
    "diff",
    "fork",
    "instrument",
    "render_diff",
    "replay",
    "trace_from_env",
    "tracer_from_env",
    "waterfall",
]

_OTEL = frozenset({"OtelTracer", "RunIds", "instrument"})


def __getattr__(name: str) -> Any:
    if name in _OTEL:
        from . import otel

        return getattr(otel, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
