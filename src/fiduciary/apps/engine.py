"""``AppEngine``: apps that tick on their own — their lifecycle, their messages, their decisions.

Enabling an app that declares permissions or limits (or runs live) first asks a person, through
``app_enable``: a pending action showing exactly what it will be allowed. Then its state is
restored, ``init`` runs, and it ticks on its tier. Disabling runs ``shutdown`` and persists the
state.

The engine composes three concepts, each a module: ``scheduling`` (ticks and slots: each slot
run once across processes, skipped when unchanged or busy, the error policies), ``hooks`` (a
hook invocation as a run, and the agents of an app's runs) and ``state`` (an app's record,
written through on every hook answer, on disable and on error, read back at each tick start;
its counters and log). Intents (``intents``) run on hooks and state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

from ..agent import Agent
from ..capabilities import Capability, Principal, principal_of
from ..channels.inbox import ChannelError, Inbox, RateLimitError, Reply
from ..clock import Clock, SystemClock
from ..events import Origin
from ..exceptions import ConfigurationError, RunError
from ..gates import Authorize
from ..guards import Guard
from ..models.base import Model
from ..policy import Policy
from ..stores.base import ApprovalRecord, Store
from ..tracing import RunTracer
from . import runs
from .hooks import DrivenElsewhereError, Hooks
from .intents import message_origin
from .live import AppChannels
from .manifest import TIER_SECONDS, Manifest
from .scheduling import Scheduler, Source, TickResult
from .state import AppState
from .tables import AppRecord, AppTables, MemoryAppTables

__all__ = [
    "MAX_ERRORS",
    "AppEngine",
    "DrivenElsewhereError",
    "MessageReply",
    "Source",
    "TickResult",
]

MAX_ERRORS = 3  # consecutive errored ticks before an app pauses
MESSAGES_PER_WINDOW = 10  # messages per app per MESSAGE_WINDOW, from every channel together
MESSAGE_WINDOW = timedelta(seconds=60)
COOLDOWN_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class MessageReply:
    """What the message hook answered (``reply`` None while the run waits for a person)."""

    app_id: str
    run_id: UUID
    reply: str | None
    waiting: bool = False


@dataclass(frozen=True, slots=True)
class AppReply(Reply):
    """What an app's message hook answers the inbox: its text, the actions it waits for, the
    hook's run, and the reply as the hook gave it (None while waiting)."""

    run_id: UUID | None = None
    reply: str | None = None
    waiting: bool = False


class AppEngine:
    """Runs apps: every hook invocation and every intent is a fiduciary run in ``store``."""

    def __init__(
        self,
        *,
        model: Model,
        capabilities: Iterable[Capability],
        store: Store,
        principal: Principal | str,
        manifests: Iterable[Manifest] = (),
        tables: AppTables | None = None,
        policy: Policy | None = None,
        guards: Sequence[Guard] | None = None,
        authorize: Authorize | None = None,
        clock: Clock | None = None,
        sources: Mapping[str, Source] | None = None,
        positions: Source | None = None,
        tiers: Mapping[str, float] | None = None,
        live_capabilities: Iterable[Capability] | None = None,
        max_errors: int = MAX_ERRORS,
        cooldown_seconds: float = COOLDOWN_SECONDS,
        lease_seconds: float = 30.0,
        inbox: Inbox | None = None,
        context_window: int | None = None,
    ) -> None:
        self.store = store
        self.principal = principal_of(principal)
        self.policy = policy or Policy()
        self.clock: Clock = clock or SystemClock()
        self.state = AppState(tables if tables is not None else MemoryAppTables(), self.clock)
        self.hooks = Hooks(
            model=model,
            paper={c.name: c for c in capabilities},
            live=None if live_capabilities is None else {c.name: c for c in live_capabilities},
            store=store,
            principal=self.principal,
            state=self.state,
            policy=self.policy,
            guards=guards,
            authorize=authorize,
            clock=self.clock,
            lease_seconds=lease_seconds,
            context_window=context_window,
        )
        self.scheduler = Scheduler(
            hooks=self.hooks,
            state=self.state,
            sources=dict(sources or {}),
            positions=positions,
            tiers=dict(TIER_SECONDS if tiers is None else tiers),
            max_errors=max_errors,
            cooldown=timedelta(seconds=cooldown_seconds),
            lease_seconds=lease_seconds,
            owner=uuid4().hex[:12],
        )
        # every channel's way in to the message hooks: one rate limit and one lock per app
        self.inbox = inbox or Inbox(
            limit=MESSAGES_PER_WINDOW,
            window_seconds=MESSAGE_WINDOW.total_seconds(),
            clock=self.clock,
        )
        self.manifests: dict[str, Manifest] = {}
        for manifest in manifests:
            self.add(manifest)

    # --- what the parts hold, named as before the split --------------------------------------
    @property
    def tables(self) -> AppTables:
        return self.state.tables

    @property
    def channels(self) -> AppChannels:
        """The live app channels: every app's emits, as they happen (``live.py``)."""
        return self.state.channels

    @property
    def sources(self) -> dict[str, Source]:
        return self.scheduler.sources

    @property
    def tiers(self) -> dict[str, float]:
        return self.scheduler.tiers

    @property
    def paper(self) -> dict[str, Capability]:
        return self.hooks.paper

    @property
    def live(self) -> dict[str, Capability] | None:
        return self.hooks.live

    @live.setter
    def live(self, capabilities: dict[str, Capability] | None) -> None:
        self.hooks.live = capabilities

    @property
    def tracer(self) -> RunTracer:
        return self.hooks.tracer

    @tracer.setter
    def tracer(self, tracer: RunTracer) -> None:
        self.hooks.tracer = tracer  # the hooks' agents': set where the apps are served

    # --- apps ------------------------------------------------------------------------------
    def add(self, manifest: Manifest) -> None:
        if manifest.tier not in self.tiers:
            raise ConfigurationError(f"{manifest.path}: tier: unknown tier {manifest.tier!r}")
        self.manifests[manifest.id] = manifest
        if "message" in manifest.hooks:
            self._register(manifest.id)

    def manifest(self, app_id: str) -> Manifest:
        found = self.manifests.get(app_id)
        if found is None:
            raise RunError("not_found", f"no app named {app_id!r}")
        return found

    async def record(self, app_id: str) -> AppRecord:
        """The app's record as stored (its counters included): read fresh each time."""
        return await self.state.record(app_id)

    async def count(self, app_id: str, name: str, by: int = 1) -> None:
        """Add to one of the app's counters (atomically: concurrent steps lose nothing)."""
        await self.state.count(app_id, name, by)

    async def note(self, app_id: str, kind: str, **detail: Any) -> None:
        await self.state.note(app_id, kind, **detail)

    async def set_state(self, app_id: str, state: dict[str, Any]) -> None:
        """Replace an app's state (an edit between ticks: the next tick reads it)."""
        await self.state.set_state(app_id, state)

    # --- agents ----------------------------------------------------------------------------
    def hook_agent(self, manifest: Manifest, hook: str, record: AppRecord | None) -> Agent:
        """The agent of one hook invocation (``Hooks.hook_agent``)."""
        return self.hooks.hook_agent(manifest, hook, record)

    async def plan_agent(
        self,
        manifest: Manifest,
        record: AppRecord | None,
        *,
        batch: bool = False,
        per_action: bool = False,
    ) -> Agent:
        """The agent of an intent run (``Hooks.plan_agent``)."""
        return await self.hooks.plan_agent(manifest, record, batch=batch, per_action=per_action)

    # --- decisions -------------------------------------------------------------------------
    def decider(self) -> Agent:
        """An agent that may decide any approval the apps engine asked for."""
        return self.hooks.decider()

    async def pending(self, app_id: str | None = None) -> list[ApprovalRecord]:
        """The approvals waiting for a person (an app's, when named: by its runs' titles)."""
        found = await self.decider().pending_approvals(principal=self.principal)
        if app_id is None:
            return found
        mine: list[ApprovalRecord] = []
        for approval in found:
            run = await self.store.get_run(approval.run_id)
            if run is not None and (f"[app {app_id}]" in run.title or run.title.endswith(app_id)):
                mine.append(approval)
        return mine

    async def approve(
        self, approval_id: UUID, *, by: Principal | str, confirm_amount: Decimal | None = None
    ) -> ApprovalRecord:
        return await self.decider().approve(approval_id, by=by, confirm_amount=confirm_amount)

    async def deny(
        self, approval_id: UUID, *, by: Principal | str, reason: str = ""
    ) -> ApprovalRecord:
        return await self.decider().deny(approval_id, by=by, reason=reason)

    # --- enable / disable ------------------------------------------------------------------
    async def enable(self, app_id: str) -> AppRecord:
        """Enable an app, or continue enabling it. An app that needs approval gets a pending
        action (``app_enable``) first; call ``enable`` again (or let the scheduler's ``step``
        do it) once it is decided. Then: state restored, ``init``, ticking."""
        manifest = self.manifest(app_id)
        record = await self.record(app_id)
        if record.enabled:
            return record
        attempt = str(record.counters.get("enables", 0))
        if manifest.config.mode == "live" and self.live is None:
            raise RunError("forbidden", f"app {app_id} is live, and no live backend is registered")
        if manifest.needs_approval:
            run_id = runs.step_id(app_id, "enable", attempt)
            if record.enable_run is None:
                record = replace(record, enable_run=str(run_id))
                await self.state.save(record)
            gate = {
                "name": "app_enable",
                "args": {
                    "app_id": app_id,
                    "mode": manifest.config.mode,
                    "capabilities": list(manifest.capabilities),
                    "permissions": list(manifest.permissions),
                    "limits_usd": {k: str(v) for k, v in manifest.limits.items()},
                },
            }
            agent = await self.plan_agent(manifest, None)
            message = runs.plan_message(f"[app {app_id}] enable", gate=gate, calls=[])
            run = await runs.drive(agent, run_id, message, self.principal)
            if run is None or run.status != "completed":
                return await self.record(app_id)
            found, _ = await runs.outcomes(agent, run_id)
            record = await self.record(app_id)
            if not any(o.tool_use_id == "gate" and o.status == "executed" for o in found):
                await self.note(app_id, "enable_refused", run=str(run_id))
                await self.count(app_id, "enables")
                record = replace(record, enable_run=None)
                await self.state.save(record)
                return record
        else:
            record = replace(record, approved_mode=manifest.config.mode)
        return await self._start(manifest, replace(record, enable_run=None), attempt)

    async def start(self) -> list[AppRecord]:
        """What a server does at start: enable every app with ``autoStart`` or a message hook
        (one that needs a person's approval stays disabled, its card pending, until then)."""
        started: list[AppRecord] = []
        for app_id, manifest in sorted(self.manifests.items()):
            if manifest.auto_start or "message" in manifest.hooks:
                started.append(await self.enable(app_id))
        return started

    async def _start(self, manifest: Manifest, record: AppRecord, attempt: str) -> AppRecord:
        if "init" in manifest.hooks:
            answer = await self.hooks.run(
                manifest, record, "init", runs.step_id(manifest.id, "init", attempt)
            )
            if answer is None:
                return record
            record = await self.state.apply(manifest, record, answer)
        record = replace(
            record, enabled=True, last_hash=None, consecutive_errors=0, paused_until=None
        )
        await self.count(manifest.id, "enables")
        await self.state.save(record)
        await self.note(manifest.id, "enabled", mode=record.approved_mode)
        return record

    async def disable(self, app_id: str) -> AppRecord:
        """``shutdown`` (if declared), persist the state, and stop ticking."""
        manifest = self.manifest(app_id)
        record = await self.record(app_id)
        if not record.enabled:
            return record
        if "shutdown" in manifest.hooks:
            attempt = str(record.counters.get("disables", 0))
            rid = runs.step_id(app_id, "shutdown", attempt)
            answer = await self.hooks.run(manifest, record, "shutdown", rid)
            if answer is not None:
                record = await self.state.apply(manifest, record, answer)
        record = replace(record, enabled=False, last_hash=None, approved_mode=None)
        await self.count(app_id, "disables")
        await self.state.save(record)
        await self.note(app_id, "disabled")
        return record

    # --- messages --------------------------------------------------------------------------
    async def message(
        self,
        app_id: str,
        text: str,
        *,
        principal: Principal | str | None = None,
        channel: str = "api",
    ) -> MessageReply:
        """One message to an app. Every channel (console, webhook, Telegram) comes through
        ``self.inbox`` — this method delivers there too: one rate limit per app (10 per 60 s),
        serial per app, parallel across apps. The message hook is a run that may use the app's
        capabilities directly, through the gates."""
        manifest = self.manifest(app_id)
        if "message" not in manifest.hooks:
            raise RunError("invalid", f"app {app_id} has no message hook")
        try:
            reply = await self.inbox.deliver(
                app_id, principal=principal or self.principal, text=text, channel=channel
            )
        except RateLimitError:
            raise RunError(
                "busy", f"app {app_id} takes at most 10 messages a minute; try later"
            ) from None
        except ChannelError as exc:
            raise RunError("invalid", exc.message) from None
        assert isinstance(reply, AppReply)
        assert reply.run_id is not None
        return MessageReply(app_id, reply.run_id, reply.reply, waiting=reply.waiting)

    async def resume_message(self, app_id: str, run_id: UUID) -> MessageReply:
        """Continue a message whose run waited for a person (a write's approval, a grant it
        asked for), once it is decided — in this process or any other: the run resumes from
        its log. An app that keeps sessions continues it with its next message instead."""
        manifest = self.manifest(app_id)
        if "message" not in manifest.hooks or manifest.session:
            raise RunError("invalid", f"app {app_id} has no message run to resume by id")
        record = await self.record(app_id)
        if not record.enabled:
            raise RunError("state", f"app {app_id} is not enabled")
        run = await self.store.get_run(run_id)
        if run is None or f"[app {app_id}] hook message" not in run.title:
            raise RunError("unknown", f"no message run {run_id} of app {app_id}")
        fresh = await self.hooks.unfinished(run_id)
        answer = await self.hooks.run(manifest, record, "message", run_id, {})
        if answer is None:
            return MessageReply(app_id, run_id, None, waiting=True)
        if fresh:
            await self.state.apply(manifest, record, answer)
        said = answer.get("reply")
        return MessageReply(app_id, run_id, None if said is None else str(said))

    def _register(self, app_id: str) -> None:
        """The app as an inbox target (once: a manifest may be replaced)."""
        if app_id in self.inbox:
            return

        async def target(principal: Principal, text: str, channel: str) -> Reply:
            origin = message_origin(self.policy, self.manifest(app_id), channel)
            return await self._message_hook(app_id, text, origin)

        self.inbox.add(app_id, target)

    async def _message_hook(self, app_id: str, text: str, origin: Origin | None = None) -> AppReply:
        manifest = self.manifest(app_id)
        if "message" not in manifest.hooks:
            raise RunError("invalid", f"app {app_id} has no message hook")
        record = await self.record(app_id)
        if not record.enabled:
            raise RunError("state", f"app {app_id} is not enabled")
        context = {"message": text, "appId": app_id, **self.state.context(manifest, record)}
        turn = uuid4()
        rid = self.hooks.run_of(manifest, "message", record, turn)  # its session's, if kept
        answer = await self.hooks.run(manifest, record, "message", turn, context, origin)
        if answer is None:
            pending = await self.decider().pending_approvals(run_id=rid)
            return AppReply("", tuple(pending), run_id=rid, waiting=True)
        await self.state.apply(manifest, record, answer)
        said = answer.get("reply")
        text_out = None if said is None else str(said)
        return AppReply(text_out or "", run_id=rid, reply=text_out)

    # --- ticks (scheduling.py) ---------------------------------------------------------------
    def slot_of(self, manifest: Manifest, now: datetime) -> str:
        """The scheduled slot ``now`` falls in, on the app's tier."""
        return self.scheduler.slot_of(manifest, now)

    async def tick(self, app_id: str, slot: str | None = None) -> TickResult:
        """Run one tick of an app (the current slot unless given), once across processes."""
        return await self.scheduler.tick(self.manifest(app_id), slot)

    async def resume_ticks(self) -> list[TickResult]:
        """Continue every tick waiting for a person, and every tick left running by a process
        that has not touched it for ``lease_seconds`` (it died: its runs resume from their
        logs, each step at most once)."""
        return await self.scheduler.resume_ticks(self.manifests)

    async def step(self) -> list[TickResult]:
        """One pass of the scheduler: continue enables and waiting ticks, then tick every
        enabled app whose current slot has not run (in parallel across apps)."""
        for record in await self.tables.list_apps():
            if record.enable_run is not None and record.app_id in self.manifests:
                await self.enable(record.app_id)
        results = await self.resume_ticks()
        results.extend(await self.scheduler.due(self.manifests))
        return results

    async def run_forever(self, *, every: float = 1.0) -> None:
        """Step every ``every`` seconds until cancelled (``serve`` and ``worker`` run this)."""
        while True:
            await self.step()
            await asyncio.sleep(every)  # the period between steps, not a wait for a condition
