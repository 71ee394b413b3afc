"""The handlers about the caller and its channels: ``/me``, ``/balances``, ``/hooks/{channel}``."""

from __future__ import annotations

import inspect

from starlette.responses import Response

from ..capabilities import Principal
from ..events import Origin
from .pipeline import Call, json_response, parse_json, validate
from .problems import ProblemError
from .runs import accepted
from .schemas import Balances, BalancesOut, HookBody, WhoAmI
from .state import Server
from .webhooks import SignatureError

__all__ = ["balances", "hook", "who_am_i"]


async def who_am_i(server: Server, call: Call) -> Response:
    key = call.caller
    return json_response(
        WhoAmI(principal=key.principal, scopes=sorted(key.scopes), key_id=key.key_id)
    )


async def balances(server: Server, call: Call) -> Response:
    if server.balances_hook is None:
        raise ProblemError("not_available", "no wallet is loaded on this server")
    result = server.balances_hook(call.caller.principal)
    if inspect.isawaitable(result):
        result = await result
    found = result if isinstance(result, Balances) else Balances(balances=dict(result))
    out = BalancesOut(
        principal=call.caller.principal,
        balances=found.balances,
        usd=found.usd,
        total_usd=found.total_usd,
    )
    return json_response(out)


async def hook(server: Server, call: Call) -> Response:
    """An inbound message: the signature is checked before the body is even parsed."""
    channel = server.channels.get(call.path("channel"))
    if channel is None:
        raise ProblemError("unknown_channel", "no such channel")
    try:
        server.verifier.verify(channel.secret, call.request.headers, call.raw)
    except SignatureError as exc:
        raise ProblemError(exc.code, exc.message) from exc
    body = validate(HookBody, parse_json(call.raw))
    server.limit(channel.principal)
    principal = Principal(channel.principal)
    # a signed message is not the principal in person: its writes wait for a person
    origin = Origin(source=f"webhook:{channel.name}")
    if body.run_id is None:
        return accepted(*await server.start(body.text, principal, origin=origin))
    run = await server.agent.store.get_run(body.run_id)
    if run is None or run.principal != channel.principal:
        raise ProblemError("not_found", f"no run {body.run_id}")
    return accepted(*await server.say(run, body.text, principal, origin=origin))
