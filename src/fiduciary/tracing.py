"""The tracing seam of the loop: what a drive tells a tracer, and the tracer that does nothing.

The loop calls a ``RunTracer`` (``Runtime.tracer``) once per drive of a run and hands the
``DriveTrace`` it returns each event as it is emitted, the audit rows beside them, the start
of each model call and the size of each group commit. The default does nothing and costs a
method call; ``fiduciary.observability`` implements it with OpenTelemetry. The core never
imports that package, except ``tracer_from_env``, which loads it by name only when the
standard ``OTEL_*`` environment variables ask for an exporter.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from .exceptions import ConfigurationError

if TYPE_CHECKING:
    from .events import Event
    from .redaction import Redactor
    from .stores.base import AuditRecord, RunRecord

__all__ = ["NO_DRIVE", "NO_TRACER", "DriveTrace", "RunTracer", "tracer_from_env"]


class DriveTrace(Protocol):
    """What one drive of one run reports while it runs."""

    def chat_started(self, model: str) -> None:
        """A model call is about to be made."""

    def observe(self, events: Sequence[Event], audit: Sequence[AuditRecord]) -> None:
        """Events were emitted (not yet committed), with the audit rows of their verdicts."""

    def committed(self, batch: int) -> None:
        """A group commit of ``batch`` events succeeded."""

    def end(self, error: BaseException | None) -> None:
        """The drive is over (``error``: what stopped it, if anything did)."""


class RunTracer(Protocol):
    """Opens a ``DriveTrace`` per drive; ``resumed``: the run's log held events already."""

    def drive(
        self, run: RunRecord, *, resumed: bool, model: str, redactor: Redactor
    ) -> DriveTrace: ...

    def watch_sse_subscribers(self, count: Callable[[], int]) -> None:
        """The server's live-event hub: ``count`` tells how many streams are open."""


class _NoDrive:
    __slots__ = ()

    def chat_started(self, model: str) -> None:
        pass

    def observe(self, events: Sequence[Event], audit: Sequence[AuditRecord]) -> None:
        pass

    def committed(self, batch: int) -> None:
        pass

    def end(self, error: BaseException | None) -> None:
        pass


NO_DRIVE: DriveTrace = _NoDrive()


class _NoTracer:
    __slots__ = ()

    def drive(self, run: RunRecord, *, resumed: bool, model: str, redactor: Redactor) -> DriveTrace:
        return NO_DRIVE

    def watch_sse_subscribers(self, count: Callable[[], int]) -> None:
        pass


NO_TRACER: RunTracer = _NoTracer()

_ASKING = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def tracer_from_env(environ: Mapping[str, str] | None = None) -> RunTracer:
    """``NO_TRACER`` unless an OTLP endpoint or a traces exporter is configured the standard
    way (and ``OTEL_SDK_DISABLED`` is not true); then the OpenTelemetry tracer of
    ``fiduciary.observability`` (which needs the ``observability`` extra)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return NO_TRACER
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none" or (not exporter and not any(env.get(k) for k in _ASKING)):
        return NO_TRACER
    try:
        observability = importlib.import_module("fiduciary.observability.otel")
        tracer: RunTracer = observability.tracer_from_env()
    except ImportError:
        asked = next((k for k in _ASKING if env.get(k)), "OTEL_TRACES_EXPORTER")
        raise ConfigurationError(
            f"{asked} is set: tracing needs the 'observability' extra: "
            "pip install 'fiduciary[observability]' (or unset it)"
        ) from None
    return tracer
