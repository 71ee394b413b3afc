"""The handlers of time travel: replay a run, fork it, diff two runs (``fiduciary.observability``).

A replay or a fork is recorded and driven to its next stop within the request (a replay never
executes a write; a fork's writes pass the gates like any run's), then answered as the new run.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, JsonValue, StringConstraints
from starlette.responses import Response

from ..exceptions import ConfigurationError
from ..observability.diff import diff
from ..observability.fork import Decide, fork
from ..observability.replay import replay
from . import auth
from .pipeline import Call, json_response
from .problems import ProblemError
from .schemas import RunOut
from .state import Server

__all__ = ["DiffOut", "ForkBody", "ReplayBody", "diff_runs", "fork_run", "replay_run"]

_SEQ = Field(ge=1, le=2**53)


class ReplayBody(BaseModel):
    """Replay a run: its reads answer from its recording, its writes are never executed."""

    model_config = {"extra": "forbid"}

    model: Annotated[str, StringConstraints(min_length=1, max_length=300)] | None = Field(
        default=None, description="A model name to replay with (default: the server agent's)."
    )
    upto: Annotated[int, _SEQ] | None = Field(
        default=None, description="Replay the person's messages up to this seq only."
    )


class ForkBody(BaseModel):
    """Fork a run at a seq; optionally decide the approval pending there another way."""

    model_config = {"extra": "forbid"}

    at_seq: Annotated[int, _SEQ]
    decide: Literal["approve", "deny", "edit"] | None = None
    edits: dict[str, JsonValue] | None = Field(
        default=None, description="With decide=edit: the new values of modifiable fields."
    )
    reason: Annotated[str, StringConstraints(max_length=500)] = ""


class DiffOut(BaseModel):
    """Where two runs diverge (``first_divergence`` null: they do not), and the rendered text."""

    a: str
    b: str
    same: bool
    first_divergence: dict[str, Any] | None
    differing_calls: list[dict[str, Any]]
    calls_a: list[dict[str, Any] | None]
    calls_b: list[dict[str, Any] | None]
    tiers_a: list[list[str | None]]
    tiers_b: list[list[str | None]]
    final_a: str | None
    final_b: str | None
    status_a: str
    status_b: str
    text: str


async def replay_run(server: Server, call: Call) -> Response:
    run = await server.visible_run(call.caller, call.path("run_id"))
    body = call.body_as(ReplayBody)
    server.limit(call.caller.principal)
    model = None
    if body.model is not None and body.model != server.agent.model.name:
        from ..models.registry import resolve_model

        try:
            model = resolve_model(body.model)
        except ConfigurationError as exc:
            raise ProblemError("invalid_request", str(exc)) from None
    rid = await replay(server.agent, run.run_id, model=model, upto=body.upto)
    return json_response(RunOut.of(await server.agent.get_run(rid)), status=201)


async def fork_run(server: Server, call: Call) -> Response:
    run = await server.visible_run(call.caller, call.path("run_id"))
    body = call.body_as(ForkBody)
    decide: Decide | None = None
    if body.decide is not None:
        if not (call.caller.is_admin or auth.APPROVALS_DECIDE in call.caller.scopes):
            raise ProblemError("insufficient_scope", "deciding needs the approvals:decide scope")
        if body.decide == "edit":
            if not body.edits:
                raise ProblemError("invalid_request", "decide=edit needs edits")
            decide = body.edits
        else:
            decide = body.decide
    elif body.edits is not None:
        raise ProblemError("invalid_request", "edits go with decide=edit")
    server.limit(call.caller.principal)
    rid = await fork(
        server.agent,
        run.run_id,
        body.at_seq,
        decide=decide,
        by=server.decider(call.caller),
        reason=body.reason,
    )
    return json_response(RunOut.of(await server.agent.get_run(rid)), status=201)


async def diff_runs(server: Server, call: Call) -> Response:
    a = await server.visible_run(call.caller, call.path("run_id"))
    b = await server.visible_run(call.caller, call.path("other_id"))
    from ..observability.diff import render_diff

    found = await diff(server.agent.store, a.run_id, b.run_id)
    return json_response(DiffOut(**found.to_json(), text=render_diff(found)))
