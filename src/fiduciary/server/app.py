"""The HTTP application: ``create_app(agent, keys=...)`` builds it from an ``Agent``.

Every endpoint is one ``Operation`` in ``OPERATIONS`` (``operations.py``: route, scope, body and
query models, answers, handler); the same table routes requests (through ``pipeline.py``) and
builds the OpenAPI document served at ``/openapi.json``. Every request is answered with JSON, an
event stream, or a problem (``problems.py``); an unexpected exception is logged and answered
``internal_error``, with no traceback (``boundary.py``). The web console is served at ``/``
(``pages.py``), interactive API docs at ``/docs`` (``apidocs.py``). The state behind it all is
a ``Server`` (``state.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Route

from .._agent.delegated import runs_to_resume
from .._agent.sweep import SWEEP_SECONDS, sweep_forever
from .._version import __version__
from ..agent import Agent
from ..exceptions import ConfigurationError
from ..observability.environment import trace_from_env
from ..stores.base import RunRecord
from .apidocs import docs_routes
from .auth import KeyStore
from .boundary import Boundary, http_exception
from .features import Features
from .openapi import build_openapi
from .operations import OPERATIONS
from .pages import page_routes
from .pipeline import endpoint
from .ratelimit import RateLimit
from .state import BalancesHook, Server
from .ui_stream import UIChat
from .webhooks import InboundChannel, Notifier

__all__ = ["OPERATIONS", "BalancesHook", "Features", "Server", "create_app"]


def create_app(
    agent: Agent,
    *,
    keys: KeyStore,
    balances: BalancesHook | None = None,
    rate_limit: RateLimit | None = None,
    channels: Sequence[InboundChannel] = (),
    notifier: Notifier | None = None,
    heartbeat_seconds: float = 15.0,
    subscriber_buffer: int = 1000,
    poll_seconds: float | None = None,
    max_body_bytes: int = 64 * 1024,
    coalesce_seconds: float = 0.01,
    resume_on_start: bool = True,
    drive: bool = True,
    sweep_seconds: float = SWEEP_SECONDS,
    features: Features | None = None,
    public_url: str | None = None,
    allowed_origins: Sequence[str] = (),
) -> Starlette:
    """The ASGI app serving ``agent``: the API, live events, webhooks and the console.

    ``app.state.server`` is the ``Server`` behind it. While it runs (with a lifespan), every
    ``sweep_seconds`` from start-up on, the runs that can make progress and that nobody drives
    are resumed in the background (``resume_on_start=False``: never): runs left ``running`` by
    a process that died or froze past its lease, runs whose store failed, runs whose approval
    was decided in another process. On shutdown, drives stop (runs resume from the store later)
    and streams close.

    ``drive=False`` (PostgreSQL, with ``fiduciary worker`` processes): this process drives no
    run. A new run or message is recorded for the workers (``Agent.submit``), a decision only
    makes the run claimable again, and nothing is resumed on startup; the API, the approvals
    and the live events (LISTEN/NOTIFY) work as when driving, whichever process drives the run.

    ``features`` (``features.py``): apps, one inbox for every channel, attention — their routes
    are mounted first, their background work runs while the app does.

    ``public_url``: where links to the console point (behind a proxy); else the address each
    request reached. ``allowed_origins``: browser origins besides the server's own that may use
    ``/mcp`` (``fiduciary.mcp.origins``).

    An entry point: an agent without a tracer of its own is traced as the ``OTEL_*``
    variables ask (``fiduciary.observability.trace_from_env``).
    """
    if sweep_seconds <= 0:
        raise ConfigurationError("sweep_seconds must be positive")
    server = Server(
        trace_from_env(agent),
        keys=keys,
        balances=balances,
        rate_limit=rate_limit,
        channels=channels,
        notifier=notifier,
        heartbeat_seconds=heartbeat_seconds,
        subscriber_buffer=subscriber_buffer,
        poll_seconds=poll_seconds,
        max_body_bytes=max_body_bytes,
        coalesce_seconds=coalesce_seconds,
        drive=drive,
    )
    openapi = build_openapi(
        OPERATIONS,
        title="fiduciary",
        version=__version__,
        description="Runs, live events, approvals and webhooks of a fiduciary agent.",
    )
    routes = [] if features is None else features.routes(server)
    routes += [
        Route(op.path, endpoint(server, op), methods=[op.method], name=op.operation_id)
        for op in OPERATIONS
    ]
    routes += page_routes(openapi)
    routes += docs_routes()
    chat = UIChat(agent, keys=keys, max_body_bytes=max(max_body_bytes, 256 * 1024))
    routes.append(chat.route("/api/chat"))  # the Vercel AI SDK's useChat endpoint
    with suppress(ImportError):  # the agent's capabilities over MCP at /mcp (the mcp extra)
        from ..mcp.server import mcp_route

        routes.append(
            mcp_route(agent, keys, public_url=public_url, allowed_origins=allowed_origins)
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        resumer = (
            asyncio.create_task(_keep_runs_moving(server, sweep_seconds))
            if resume_on_start and drive
            else None
        )
        if features is not None:
            await features.start()
        try:
            yield
        finally:
            if features is not None:
                await features.stop()
            if resumer is not None:
                resumer.cancel()
                with suppress(BaseException):
                    await resumer
            await chat.aclose()
            await server.close()

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_exception},
    )
    app.add_middleware(Boundary)
    app.state.server = server
    app.state.chat = chat
    return app


async def _keep_runs_moving(server: Server, every: float) -> None:
    """The sweep (``fiduciary._agent.sweep``): resume what can make progress, unless driven here."""
    agent = server.agent

    async def find() -> list[RunRecord]:
        # (and the runs waiting for a delegated run that has ended: fiduciary.delegation)
        return await runs_to_resume(agent.store, agent.clock)

    def start(run: RunRecord) -> None:
        if not server.drives.is_driving(run.run_id) and not agent.leaves_alone(run.run_id):
            server.resume(run.run_id, run.principal)

    await sweep_forever(find, start, every=every)
