"""The handler of ``GET /events``: the global stream of the caller's runs (SSE, resumable), and
the live emits of the apps the server serves (``app_emit``, for their principal's keys).

A key sees the events of its principal's runs only (an ``admin`` key: everyone's), filtered by
the runs' current status and by the kind of event; ``id:`` is the event's position in the
store's global order, and ``Last-Event-ID`` (or ``?after=``) resumes after it.
"""

from __future__ import annotations

from typing import get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.responses import Response

from ..bus import BUS_TYPES, BusType
from ..stores.base import RunStatus
from .pipeline import Call
from .problems import ProblemError
from .schemas import MAX_SEQ
from .sse import SSEResponse
from .state import Server

__all__ = ["GlobalEventsQuery", "global_events"]

_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
APP_EMIT = "app_emit"  # not a run's: an app's emit (fiduciary.apps.live), when apps are served
_TYPES: tuple[str, ...] = (*BUS_TYPES, APP_EMIT)
_LIST = r"^[a-z_]+(,[a-z_]+)*$"


def _names(text: str | None, known: tuple[str, ...], what: str) -> str | None:
    if text is None:
        return None
    unknown = sorted(set(text.split(",")) - set(known))
    if unknown:
        raise ValueError(f"unknown {what} {', '.join(unknown)}: choose among {', '.join(known)}")
    return text


class GlobalEventsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    after: int = Field(
        default=0, ge=0, le=MAX_SEQ, description="Send the events after this position (an id)."
    )
    follow: bool = Field(default=True, description="Keep the stream open for new events.")
    status: str | None = Field(
        default=None,
        max_length=200,
        pattern=_LIST,
        description="Only runs whose status is now one of these, comma-separated: "
        + ", ".join(_STATUSES)
        + ".",
    )
    type: str | None = Field(
        default=None,
        max_length=100,
        pattern=_LIST,
        description="Only these kinds of events, comma-separated: "
        + ", ".join(_TYPES)
        + " (app_emit: what the served apps emit, live only, without an id).",
    )

    @field_validator("status")
    @classmethod
    def _known_statuses(cls, text: str | None) -> str | None:
        return _names(text, _STATUSES, "status")

    @field_validator("type")
    @classmethod
    def _known_types(cls, text: str | None) -> str | None:
        return _names(text, _TYPES, "type")

    def statuses(self) -> frozenset[RunStatus] | None:
        if self.status is None:
            return None
        return frozenset(s for s in _STATUSES if s in self.status.split(","))

    def types(self) -> frozenset[BusType] | None:
        if self.type is None:
            return None
        return frozenset(t for t in BUS_TYPES if t in self.type.split(","))

    def app_emits(self) -> bool:
        return self.type is None or APP_EMIT in self.type.split(",")


async def global_events(server: Server, call: Call) -> Response:
    query = call.query_as(GlobalEventsQuery)
    after = query.after
    header = call.request.headers.get("last-event-id")
    if header is not None and header.strip():
        text = header.strip()
        if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) > MAX_SEQ:
            raise ProblemError(
                "invalid_last_event_id", "Last-Event-ID must be an event's id (an integer)"
            )
        after = int(text)
    key = call.caller
    body = server.global_streams.stream(
        after,
        principal=None if key.is_admin else key.principal,
        statuses=query.statuses(),
        types=query.types(),
        follow=query.follow,
        app_emits=query.app_emits(),
    )
    return SSEResponse(body)
