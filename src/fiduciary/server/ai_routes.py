"""The handlers of ``GET /ai/status`` and ``PUT /ai/default`` (the rules are in ``ai.py``)."""

from __future__ import annotations

from starlette.responses import Response

from .ai import DefaultBody
from .pipeline import Call, json_response
from .problems import ProblemError
from .state import Server

__all__ = ["ai_status", "set_default"]


async def ai_status(server: Server, call: Call) -> Response:
    return json_response(await server.models.status())


async def set_default(server: Server, call: Call) -> Response:
    if not server.drive:
        raise ProblemError(
            "not_available",
            "this server drives no run (--no-drive): the workers' own agents choose the model",
        )
    body = call.body_as(DefaultBody)
    try:
        await server.models.change(body.model_string(), by=call.caller.principal)
    except ValueError as exc:  # nothing was changed
        raise ProblemError("invalid_request", str(exc)) from None
    return json_response(await server.models.status())
