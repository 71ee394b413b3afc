"""The handler of ``GET /runs/{run_id}/trace``: a run's trace as a waterfall of spans, built
from its events and audit rows (``fiduciary.observability.waterfall``), for the console's
trace view. Names, ids, counts, tiers and outcomes only: never arguments nor results."""

from __future__ import annotations

from starlette.responses import Response

from ..observability.waterfall import TraceView, waterfall
from .pipeline import Call, json_response
from .state import Server

__all__ = ["TraceView", "run_trace"]


async def run_trace(server: Server, call: Call) -> Response:
    run = await server.visible_run(call.caller, call.path("run_id"))
    store = server.agent.store
    events = await store.read_events(run.run_id)
    return json_response(waterfall(events, await store.audit_records(run.run_id)))
