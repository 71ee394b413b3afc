"""The handlers of ``/runs``: start, list, read, continue, follow (SSE) and cancel a run."""

from __future__ import annotations

from uuid import UUID

from starlette.responses import Response

from ..capabilities import Principal
from ..outputs import recorded_output
from .pipeline import Call, json_response
from .problems import ProblemError
from .schemas import (
    MAX_SEQ,
    CreateRunBody,
    EventsQuery,
    ListRunsQuery,
    MessageBody,
    RunAccepted,
    RunList,
    RunOut,
)
from .sse import SSEResponse
from .state import Server

__all__ = [
    "accepted",
    "cancel_run",
    "create_run",
    "events",
    "get_run",
    "list_runs",
    "post_message",
]


def accepted(run_id: UUID, first_seq: int) -> Response:
    """202 for a run started or continued: where it is and where to follow it."""
    url = f"/runs/{run_id}/events?after={first_seq - 1}"
    return json_response(
        RunAccepted(run_id=run_id, first_seq=first_seq, events_url=url),
        status=202,
        headers={"location": f"/runs/{run_id}"},
    )


async def create_run(server: Server, call: Call) -> Response:
    body = call.body_as(CreateRunBody)
    server.limit(call.caller.principal)
    return accepted(
        *await server.start(
            body.message,
            call.principal,
            capabilities=body.capabilities,
            plan_first=body.plan_first,
        )
    )


async def list_runs(server: Server, call: Call) -> Response:
    query = call.query_as(ListRunsQuery)
    key = call.caller
    runs = await server.agent.store.list_runs(
        principal=None if key.is_admin else key.principal,
        status=query.status,
        limit=query.limit,
    )
    # a completed run's typed answer is its last event: one read of one row each
    store = server.agent.store
    return json_response(
        RunList(runs=[RunOut.of(r, await recorded_output(store, r)) for r in runs])
    )


async def get_run(server: Server, call: Call) -> Response:
    run = await server.visible_run(call.caller, call.path("run_id"))
    output = await recorded_output(server.agent.store, run)  # a typed answer, if any
    return json_response(RunOut.of(run, output))


async def post_message(server: Server, call: Call) -> Response:
    run = await server.visible_run(call.caller, call.path("run_id"))
    body = call.body_as(MessageBody)
    server.limit(call.caller.principal)
    principal = Principal(run.principal, call.caller.scopes)
    return accepted(*await server.say(run, body.message, principal))


async def events(server: Server, call: Call) -> Response:
    run = await server.visible_run(call.caller, call.path("run_id"))
    query = call.query_as(EventsQuery)
    after = query.after
    header = call.request.headers.get("last-event-id")
    if header is not None and header.strip():
        text = header.strip()
        if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) > MAX_SEQ:
            raise ProblemError("invalid_last_event_id", "Last-Event-ID must be a seq (an integer)")
        after = int(text)
    body = server.hub.stream(run.run_id, after, last_seq=run.last_seq, follow=query.follow)
    return SSEResponse(body)


async def cancel_run(server: Server, call: Call) -> Response:
    run = await server.visible_run(call.caller, call.path("run_id"))
    if run.status in ("completed", "failed", "cancelled"):
        raise ProblemError("run_state", f"the run is already {run.status}")
    record = await server.drives.cancel(run.run_id, server.decider(call.caller))
    return json_response(RunOut.of(record))
