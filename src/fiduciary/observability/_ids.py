"""One trace per run, whichever process drives it: the trace id is the run id's 128 bits,
and the first drive's ``invoke_agent`` span takes an id derived from the run id too, so a
later drive (a resume a day later, in another process) is its child — nothing is stored.

The derived span id is handed to the SDK's span-id generator through a context variable
while that one span starts; any other span gets a random id as usual.
"""

from __future__ import annotations

import contextvars
import hashlib
from uuid import UUID

from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

__all__ = ["RunIds", "forced", "root_context", "root_parent", "run_trace_id", "unforce"]

# (trace id, span id) of the next root span started in this context
_forced: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "fiduciary_forced_ids", default=None
)


def run_trace_id(run_id: UUID) -> int:
    return run_id.int or 1


def root_span_id(run_id: UUID) -> int:
    digest = hashlib.sha256(b"fiduciary.invoke_agent:" + run_id.bytes).digest()
    return int.from_bytes(digest[:8], "big") or 1


def root_context(run_id: UUID) -> SpanContext:
    """The span context of the run's first drive, as a remote parent for the later ones."""
    return SpanContext(
        trace_id=run_trace_id(run_id),
        span_id=root_span_id(run_id),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def root_parent(run_id: UUID) -> NonRecordingSpan:
    return NonRecordingSpan(root_context(run_id))


class RunIds(IdGenerator):
    """Random ids, except the ids of the one root span a first drive asks for (``forced``)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        forced = _forced.get()
        if forced is not None:
            _forced.set(None)
            return forced[1]
        return self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        forced = _forced.get()
        return forced[0] if forced is not None else self._random.generate_trace_id()


def forced(run_id: UUID) -> contextvars.Token[tuple[int, int] | None]:
    """The next root span started in this context takes the run's ids (``RunIds``)."""
    return _forced.set((run_trace_id(run_id), root_span_id(run_id)))


def unforce(token: contextvars.Token[tuple[int, int] | None]) -> None:
    _forced.reset(token)
