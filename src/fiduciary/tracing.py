"""The tracing seam of the loop: what a drive tells a tracer, and the tracer that does nothing.

The loop calls a ``RunTracer`` (``Runtime.tracer``) once per drive of a run and hands the
``DriveTrace`` it returns each event as it is emitted, the audit rows beside them, the start
of each model call and the size of each group commit. The default does nothing and costs a
method call; ``fiduciary.observability`` implements it with OpenTelemetry. The core never
imports that package nor reads ``OTEL_*``: an ``Agent`` starts with ``NO_TRACER``, and the
entry points (the server, the worker, the CLI, the sync API) hand it the tracer the
environment asks for (``fiduciary.observability.trace_from_env``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .events import Event
    from .redaction import Redactor
    from .stores.base import AuditRecord, RunRecord

__all__ = ["NO_DRIVE", "NO_TRACER", "DriveTrace", "RunTracer"]


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
