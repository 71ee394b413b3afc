"""The global event bus: every run's committed events as one live stream of what happens.

Runs are mapped onto three kinds of events (``_map``): ``run_status`` (a run started, waits for
a person, completed, failed, was cancelled), ``text`` (the model's text) and ``tool_call`` (a
capability call started, succeeded, failed, was denied, approved or reported, with its kind
and tier). Each is named by its position in the store's global order (``GlobalEvents``), so a
reader that stops resumes after the last position it received, without a gap or a repeat.

``follow(store, after=..., principal=..., statuses=..., types=...)`` reads the stored events
after a position, then each commit's as the store rings its bell; the server's ``GET /events``
is it over server-sent events, filtered by the caller's principal.
"""

from __future__ import annotations

from ._follow import follow
from ._map import (
    BUS_ADAPTER,
    BUS_TYPES,
    BusEvent,
    BusType,
    RunStatusChanged,
    TextAppended,
    ToolCallPhase,
    bus_event,
    run_event_types,
)

__all__ = [
    "BUS_ADAPTER",
    "BUS_TYPES",
    "BusEvent",
    "BusType",
    "RunStatusChanged",
    "TextAppended",
    "ToolCallPhase",
    "bus_event",
    "follow",
    "run_event_types",
]
