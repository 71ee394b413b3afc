"""What a server mounts beside its own API: apps, one inbox for every channel, attention.

``Features`` is handed to ``create_app(features=...)``; it adds routes and background work, and
nothing else of the server changes:

- **apps** (``AppEngine``): ``/apps`` (``fiduciary.apps.http``), authenticated with the server's
  API keys (the engine's principal, or an ``admin`` key); the engine steps every
  ``tick_seconds`` in the background from start-up to shutdown (with several processes on
  PostgreSQL each tick slot runs once: the apps' tables decide).
- **one inbox** (``fiduciary.channels.Inbox``; the engine's own when apps are served): the
  console's ``POST /apps/{id}/messages``, and ``POST /hooks/{channel}`` for a channel given a
  target (``hook_targets``: channel name → app id), land in it — one rate limit (10 / 60 s per
  app), serial per app. A channel without a target keeps the API's behaviour (a run).
- **attention**: the decision feed as SSE at ``GET /attention/decisions`` (an API key;
  ``Last-Event-ID`` resumes), signed deliveries at ``POST /attention/hooks/{name}``, and the
  watcher running in the background.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from .._logs import logger
from ..agent import Agent
from ..capabilities import Principal
from ..exceptions import ConfigurationError, RunError
from ..stores.base import Store
from .operations import OPERATIONS
from .pipeline import _authenticate, endpoint
from .problems import PROBLEMS, ProblemError, from_core_error, problem_response
from .state import Server

if TYPE_CHECKING:
    from ..apps.engine import AppEngine
    from ..attention.record import AttentionRecord
    from ..attention.sources import Webhooks
    from ..attention.watch import Attention
    from ..channels.inbox import Inbox
    from .settings import AppsSettings

__all__ = ["AppsSettings", "AttentionFeature", "Features", "open_features"]

log = logger("fiduciary.server")

Closer = Callable[[], Awaitable[None]]
_CHANNEL_CODES = {"invalid": "invalid_request", "unknown_target": "unknown_channel"}


@dataclass(slots=True)
class AttentionFeature:
    """The attention layer a server serves: its record (the feed), the watcher, and the
    webhook source with the channels that may sign deliveries into it."""

    record: AttentionRecord
    watcher: Attention | None = None
    webhooks: Webhooks | None = None
    channels: Sequence[Any] = ()


@dataclass(slots=True)
class Features:
    apps: AppEngine | None = None
    inbox: Inbox | None = None
    hook_targets: Mapping[str, str] = field(default_factory=dict)
    attention: AttentionFeature | None = None
    tick_seconds: float = 1.0
    heartbeat_seconds: float = 15.0
    closers: list[Closer] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.inbox is None and self.apps is not None:
            self.inbox = self.apps.inbox
        if self.hook_targets and self.inbox is None:
            raise ValueError("hook targets need an inbox (or apps)")
        for channel, target in self.hook_targets.items():
            if self.inbox is not None and target not in self.inbox:
                raise ValueError(f"channel {channel}: no target {target!r} (an app's id)")

    # --- routes ------------------------------------------------------------------------------
    def routes(self, server: Server) -> list[BaseRoute]:
        """Routes to mount before the API's own (``/hooks/{channel}`` is answered here first)."""
        routes: list[BaseRoute] = []
        if self.hook_targets:
            routes.append(self._hooks_route(server))
        if self.apps is not None:
            from ..apps.http import apps_routes
            from .sse import AppEmitFeed

            async def authenticate(request: Request) -> Principal:
                try:
                    key = await _authenticate(server, request)
                except ProblemError as exc:
                    raise RunError("unauthenticated", exc.detail) from None
                return Principal(key.principal, key.scopes)

            routes.append(Mount("/apps", routes=apps_routes(self.apps, authenticate)))
            # the general approvals routes decide the engine's approvals too (its agent's)
            from .app_approvals import AppApprovals

            server.other_deciders.append(AppApprovals(self.apps))
            # the apps' emits join GET /events, live (for the apps' principal and admins)
            server.global_streams.app_emits = AppEmitFeed(
                self.apps.channels, self.apps.principal.actor_id
            )
        if self.attention is not None:
            routes += self._attention_routes(server)
        return routes

    def _hooks_route(self, server: Server) -> Route:
        """``POST /hooks/{channel}``: into the inbox for a channel with a target, else the API's
        own handler (a run)."""
        from ..channels.inbox import ChannelError, RateLimitError
        from ..channels.webhook import SignedMessages

        [hook_op] = [op for op in OPERATIONS if op.operation_id == "inboundHook"]
        fallback = endpoint(server, hook_op)
        assert self.inbox is not None
        signed = SignedMessages(
            self.inbox,
            channels=list(server.channels.values()),
            targets=self.hook_targets,
            verifier=server.verifier,
        )

        async def hook(request: Request) -> Response:
            name = str(request.path_params["channel"])
            if name not in self.hook_targets:
                return await fallback(request)
            body = await request.body()
            try:
                reply = await signed.receive(name, request.headers, body)
            except RateLimitError as exc:
                retry = str(max(1, math.ceil(exc.retry_after)))
                return problem_response("rate_limited", exc.message, headers={"retry-after": retry})
            except ChannelError as exc:
                code = _CHANNEL_CODES.get(exc.code, exc.code)
                return problem_response(
                    code if code in PROBLEMS else "invalid_request", exc.message
                )
            except RunError as exc:  # the app refused it (not enabled, no message hook)
                return from_core_error(exc).response()
            pending = [str(p.approval_id) for p in reply.pending]
            return JSONResponse({"reply": reply.text, "pending": pending})

        return Route("/hooks/{channel}", hook, methods=["POST"], name="inboundHookInbox")

    def _attention_routes(self, server: Server) -> list[BaseRoute]:
        from ..attention.feed import decision_feed_route
        from ..attention.sources import webhook_route

        assert self.attention is not None
        wake = None if self.attention.watcher is None else self.attention.watcher.decided
        feed = decision_feed_route(
            self.attention.record, wake=wake, heartbeat=self.heartbeat_seconds
        )
        stream = feed.endpoint

        async def decisions(request: Request) -> Response:
            try:
                await _authenticate(server, request)
            except ProblemError as refused:
                return refused.response()
            response: Response = await stream(request)
            return response

        routes: list[BaseRoute] = [
            Route("/attention/decisions", decisions, methods=["GET"], name="attentionDecisions")
        ]
        if self.attention.webhooks is not None:
            routes.append(
                webhook_route(
                    self.attention.webhooks,
                    self.attention.channels,
                    clock=server.agent.clock,
                )
            )
        return routes

    # --- background work ---------------------------------------------------------------------
    async def start(self) -> None:
        """Start the apps (``autoStart`` and message apps) and their ticks, and the watcher."""
        if self.apps is not None:
            self._tasks.append(asyncio.create_task(self._tick(self.apps), name="fiduciary-apps"))
        if self.attention is not None and self.attention.watcher is not None:
            watcher = self.attention.watcher
            self._tasks.append(asyncio.create_task(self._watch(watcher), name="fiduciary-attn"))

    async def _tick(self, engine: AppEngine) -> None:
        try:
            await engine.start()
        except Exception:  # an app that cannot start must not stop the others, nor the server
            log.exception("apps: starting the apps failed")
        while True:
            try:
                await engine.run_forever(every=self.tick_seconds)
            except Exception:
                log.exception("apps: a scheduler step failed; going on")
                await asyncio.sleep(self.tick_seconds)

    async def _watch(self, watcher: Attention) -> None:
        try:
            await watcher.run()
        except Exception:
            log.exception("attention: the watcher stopped")

    async def stop(self) -> None:
        """Stop the ticks and the watcher (a tick cut short resumes from the store), then close
        what was opened for them."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(BaseException):
                await task
        self._tasks.clear()
        for close in reversed(self.closers):
            try:
                await close()
            except Exception:
                log.exception("closing a feature failed")
        self.closers.clear()


# --- set-up from the command line and the TOML file ------------------------------------------


async def open_features(
    store: Store,
    agent: Agent,
    *,
    apps: AppsSettings | None = None,
    hook_targets: Mapping[str, str] | None = None,
    attention: Path | None = None,
    channels: Sequence[Any] = (),
    heartbeat_seconds: float = 15.0,
) -> Features | None:
    """The features ``serve`` was asked for (None: none); ``ConfigurationError`` when one
    cannot be set up. What they open is closed by ``Features.stop``."""
    if apps is None and attention is None and not hook_targets:
        return None
    features = Features(heartbeat_seconds=heartbeat_seconds)
    try:
        if apps is not None:
            from ..apps.served import open_apps
            from ..cli._common import apps_engine

            served = await open_apps(
                store, principal=apps.principal, folder=apps.dir, factory=apps_engine(apps.engine)
            )
            features.closers.append(served.close)
            features.apps = served.engine
            features.inbox = served.engine.inbox
            features.tick_seconds = apps.tick_seconds
        if hook_targets:
            if features.apps is None:
                raise ConfigurationError("a channel's target is an app: serve apps (--apps)")
            acts_for = {c.name: c.principal for c in channels}
            for channel, target in hook_targets.items():
                if target not in features.apps.inbox:
                    raise ConfigurationError(
                        f"channel {channel}: target {target!r} is not an app with a message hook"
                    )
                principal = acts_for.get(channel, features.apps.principal.actor_id)
                if principal != features.apps.principal.actor_id:
                    raise ConfigurationError(
                        f"channel {channel} acts for {principal}, but the apps act for "
                        f"{features.apps.principal.actor_id}"
                    )
            features.hook_targets = dict(hook_targets)
        if attention is not None:
            features.attention = await _open_attention(store, agent, attention, channels, features)
    except BaseException:
        await features.stop()
        raise
    return features


async def _open_attention(
    store: Store, agent: Agent, path: Path, channels: Sequence[Any], features: Features
) -> AttentionFeature:
    from ..attention.cli import load_judge
    from ..attention.config import load_config
    from ..attention.record import AttentionRecord
    from ..attention.sources import FiduciaryEvents, Webhooks
    from ..attention.watch import Attention, Source
    from ..wallet.watch import WalletWatch

    config = load_config(path)
    dsn = getattr(store, "dsn", None)
    if isinstance(dsn, str):
        record = await AttentionRecord.postgres(dsn)
    else:
        config.db.parent.mkdir(parents=True, exist_ok=True)
        record = AttentionRecord(str(config.db))
    features.closers.append(record.close)
    webhooks = Webhooks(clock=agent.clock)
    sources: list[Source] = [webhooks]
    for name, options in config.sources.items():
        if name == "fiduciary":
            sources.append(FiduciaryEvents(store, every=float(options.get("every", 5))))
        elif name == "file":
            from ..attention.events_file import EventsFile

            sources.append(EventsFile(options["path"], every=float(options.get("every", 5))))
        else:
            from ..wallet.wallet import PaperWallet

            wallet = PaperWallet(options["path"])

            async def close_wallet(wallet: PaperWallet = wallet) -> None:
                wallet.close()

            features.closers.append(close_wallet)
            principals = list(options.get("principals", []))
            every = float(options.get("every", 60))
            sources.append(WalletWatch(wallet, principals, every=every))

    async def notify(decision: Any, message: str) -> None:
        log.warning("attention: %s", message)

    watcher = Attention(
        judge=load_judge(config),
        record=record,
        routes=config.routes,
        sources=sources,
        agent=agent,
        notify=notify,
        predicates=config.predicates,
        window_size=config.window_size,
        clock=agent.clock,
    )
    return AttentionFeature(record, watcher, webhooks, channels=list(channels))
