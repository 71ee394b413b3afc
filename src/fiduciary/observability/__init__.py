"""Observability: OpenTelemetry spans and metrics, and time travel over recorded runs."""

from .diff import RunDiff, diff, render_diff
from .fork import fork
from .replay import replay

__all__ = ["RunDiff", "diff", "fork", "render_diff", "replay"]
