"""``AppEngine``: apps that tick on their own — lifecycle, ticks, state, error policies.

Enabling an app that declares permissions or limits (or runs live) first asks a person, through
``app_enable``: a pending action showing exactly what it will be allowed. Then its state is
restored, ``init`` runs, and it ticks on its tier. Disabling runs ``shutdown`` and persists the
state.

A tick has an id derived from the app and its scheduled slot, and a row keyed by both: the first
process to insert the row runs the slot; no other does. Its context (sources, state, config,
permissions, budget) is hashed canonically: unchanged since the last tick → no model call,
recorded as ``unchanged``. A tick of an app whose previous tick is still running or waiting for
a person is recorded as ``busy`` and not run. Each step of a tick is a run with a derived id, so a
tick re-entered (after a crash, or once a person decided) continues where it stopped.

Errors: ``sourceFail`` skip | pause | retry (one more attempt in the same tick), ``executeFail``
skip | pause; ``pause`` pauses the app for ``cooldown_seconds``; any policy pauses it after
``max_errors`` (3) consecutive errored ticks. State is written through on every hook answer
(so more often than every 5 minutes, on disable and on error) and read back at each tick start.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

from ..agent import Agent
from ..capabilities import CallContext, Capability, Principal, canonical_json, principal_of
from ..channels.inbox import ChannelError, Inbox, RateLimitError, Reply
from ..clock import Clock, SystemClock
from ..events import Origin
from ..exceptions import ConfigurationError, RunError
from ..gates import Authorize
from ..guards import Guard
from ..models.base import Model
from ..policy import Policy, Threshold
from ..redaction import Redactor
from ..stores.base import ApprovalRecord, Store
from ..tracing import NO_TRACER, RunTracer
from . import runs
from ._caps import (
    HOOK_TOOL_CALLS,
    bounded,
    engine_capabilities,
    intent_pricer,
    state_capability,
)
from .grants import GrantPolicy, LiveGrant
from .intents import message_origin
from .manifest import TIER_SECONDS, Manifest
from .tables import (
    AppRecord,
    AppTables,
    GrantRecord,
    LogEntry,
    MemoryAppTables,
    TickRecord,
    TickStatus,
)

__all__ = ["MAX_ERRORS", "AppEngine", "MessageReply", "Source", "TickResult"]

Source = Callable[[], Awaitable[Any]]
MAX_ERRORS = 3  # consecutive errored ticks before an app pauses
MESSAGES_PER_WINDOW = 10  # messages per app per MESSAGE_WINDOW, from every channel together
MESSAGE_WINDOW = timedelta(seconds=60)
COOLDOWN_SECONDS = 600.0
TICK_KEYS = frozenset({"reply", "state", "intents", "emit"})
MESSAGE_KEYS = frozenset({"reply", "state", "emit"})


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


@dataclass(frozen=True, slots=True)
class TickResult:
    app_id: str
    slot: str
    outcome: str  # ran | waiting | unchanged | busy | paused | error | taken
    run_id: UUID | None = None
    detail: str = ""


class DrivenElsewhereError(RunError):
    """Another process drives this run (its lease is live): leave the step to it."""

    def __init__(self, run_id: UUID) -> None:
        super().__init__("busy", f"run {run_id} is being driven by another process")
        self.run_id = run_id


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
        tiers: Mapping[str, float] | None = None,
        live_capabilities: Iterable[Capability] | None = None,
        max_errors: int = MAX_ERRORS,
        cooldown_seconds: float = COOLDOWN_SECONDS,
        lease_seconds: float = 30.0,
        inbox: Inbox | None = None,
    ) -> None:
        self.model = model
        self.paper = {c.name: c for c in capabilities}
        self.live = None if live_capabilities is None else {c.name: c for c in live_capabilities}
        self.store = store
        self.tables: AppTables = tables if tables is not None else MemoryAppTables()
        self.principal = principal_of(principal)
        self.policy = policy or Policy()
        self.guards = guards
        self.authorize = authorize
        self.clock: Clock = clock or SystemClock()
        self.tracer: RunTracer = NO_TRACER  # the hooks' agents': set where the apps are served
        self.sources = dict(sources or {})
        self.tiers = dict(TIER_SECONDS if tiers is None else tiers)
        self.max_errors = max_errors
        self.cooldown = timedelta(seconds=cooldown_seconds)
        self.lease_seconds = lease_seconds
        self.redactor = Redactor()  # one for every agent of the engine (they are many)
        self._hook_agents: dict[tuple[str, str, bool], Agent] = {}
        self.owner = uuid4().hex[:12]
        # every channel's way in to the message hooks: one rate limit and one lock per app
        self.inbox = inbox or Inbox(
            limit=MESSAGES_PER_WINDOW,
            window_seconds=MESSAGE_WINDOW.total_seconds(),
            clock=self.clock,
        )
        self.manifests: dict[str, Manifest] = {}
        for manifest in manifests:
            self.add(manifest)
        self._own = engine_capabilities(
            enabled=self._enabled,
            granted=self._granted,
            intent_amount=intent_pricer(lambda: {**self.paper, **(self.live or {})}),
        )
        self._state_cap = state_capability(self._state_of)
        self._running: dict[str, asyncio.Task[TickResult]] = {}

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
        found = await self.tables.get_app(app_id) or AppRecord(app_id)
        return replace(found, counters=await self.tables.counters(app_id))

    async def count(self, app_id: str, name: str, by: int = 1) -> None:
        """Add to one of the app's counters (atomically: concurrent steps lose nothing)."""
        await self.tables.bump(app_id, name, by)

    async def note(self, app_id: str, kind: str, **detail: Any) -> None:
        at = self.clock.now().isoformat()
        await self.tables.log(LogEntry(app_id, at, kind, detail))

    async def set_state(self, app_id: str, state: dict[str, Any]) -> None:
        """Replace an app's state (an edit between ticks: the next tick reads it)."""
        record = await self.record(app_id)
        await self._save(replace(record, state=dict(state)))

    async def _save(self, record: AppRecord) -> None:
        stamped = replace(record, state_saved_at=self.clock.now().isoformat())
        await self.tables.put_app(stamped)

    # --- agents ----------------------------------------------------------------------------
    def _caps(self, manifest: Manifest, record: AppRecord | None) -> dict[str, Capability]:
        live = manifest.config.mode == "live"
        if live and (self.live is None or record is None or record.approved_mode != "live"):
            raise RunError(
                "forbidden",
                f"app {manifest.id} is live, and needs a live backend and an enabling "
                "approval that said live",
            )
        pool = self.live if live and self.live is not None else self.paper
        return {n: pool[n] for n in manifest.capabilities if n in pool}

    def _policy(self, manifest: Manifest, **extra: Any) -> GrantPolicy:
        thresholds = dict(self.policy.thresholds)
        for op, limit in manifest.limits.items():
            base = self.policy.threshold(op) or Threshold(Decimal(0), Decimal(0))
            cap = limit if base.deny_above is None else min(limit, base.deny_above)
            thresholds[op] = Threshold(base.auto_below, base.confirm_below, deny_above=cap)
        return GrantPolicy(
            preset=self.policy.preset,
            thresholds=thresholds,
            daily_autonomous_limit_usd=self.policy.daily_autonomous_limit_usd,
            deny_operations=self.policy.deny_operations,
            approval_ttl_seconds=self.policy.approval_ttl_seconds,
            clock=self.clock,
            **extra,
        )

    def _agent(
        self, model: Model, caps: Iterable[Capability], policy: Policy, *, fast: bool = False
    ) -> Agent:
        agent = Agent(
            redactor=self.redactor,
            model=model,
            capabilities=caps,
            store=self.store,
            policy=policy,
            guards=self.guards,
            authorize=self.authorize,
            clock=self.clock,
            max_tool_calls=HOOK_TOOL_CALLS,
            lease_seconds=self.lease_seconds,
            model_tier="fast" if fast else None,
        )
        return agent.with_options(tracer=self.tracer)

    def hook_agent(self, manifest: Manifest, hook: str, record: AppRecord | None) -> Agent:
        """The agent of one hook invocation: the app's model; reads only, except for the message
        hook, which may use the app's capabilities directly (through the gates). Kept per
        app, kind of hook and backend (a hook agent holds no grant)."""
        pool = self._caps(manifest, record)
        kind = "message" if hook == "message" else "fast" if hook in ("init", "shutdown") else ""
        key = (manifest.id, kind, manifest.config.mode == "live")
        cached = self._hook_agents.get(key)
        if cached is not None:
            return cached
        caps = [bounded(c) for c in pool.values()]
        if hook != "message":
            caps = [c for c in caps if not c.is_write]
        fast = hook in ("init", "shutdown") or all(not c.is_write for c in caps)
        # app_state marks the run as an app's: an agent without it (a server's own) refuses
        # to resume it after a crash, and leaves it to an apps engine
        caps.append(self._state_cap)
        agent = self._agent(self.model, caps, self._policy(manifest), fast=fast)
        self._hook_agents[key] = agent
        return agent

    async def plan_agent(
        self,
        manifest: Manifest,
        record: AppRecord | None,
        *,
        batch: bool = False,
        per_action: bool = False,
    ) -> Agent:
        """The agent of an intent run: the planned model, the app's capabilities (``auto`` when
        a person approved the batch), the engine's own, and the app's live grants. Without a
        record (enabling): the engine's own capabilities only."""
        live: list[LiveGrant] = []
        if not per_action and not batch:
            now = self.clock.now()
            for grant in await self.tables.grants(manifest.id):
                item = LiveGrant(grant, await self.tables.grant_spent(grant.grant_id))
                if not item.expired(now):
                    live.append(item)
        policy = self._policy(
            manifest,
            grants=tuple(live),
            floor="confirm" if per_action else None,
            batch_approved=batch,
        )
        caps: list[Capability] = []
        if record is not None:
            for cap in self._caps(manifest, record).values():
                bound = bounded(cap)
                caps.append(self._watch(manifest, bound, policy))
        return self._agent(runs.PlannedModel(), [*caps, *self._own], policy)

    def _watch(self, manifest: Manifest, cap: Capability, policy: GrantPolicy) -> Capability:
        from ._caps import watched

        def noted(c: Capability, args: Any) -> None:
            policy.args_of[c.name] = args.model_dump(mode="json")

        async def executed(
            c: Capability, args: Any, ctx: CallContext, amount: Decimal | None
        ) -> None:
            if amount is None or c.operation is None:
                return
            key = f"spent_cents:{c.operation}"
            await self.count(manifest.id, key, int((amount * 100).to_integral_value()))
            grant = policy.take(c, amount)
            if grant is None:
                return
            gid = grant.record.grant_id
            if await self.tables.use_grant(gid, ctx.idempotency_key, c.operation, amount):
                grant.spent[c.operation] = grant.spent.get(c.operation, Decimal(0)) + amount
                await self.note(
                    manifest.id, "grant_used", grant=gid, capability=c.name, amount_usd=str(amount)
                )

        return watched(cap, noted=noted, executed=executed)

    # --- decisions -------------------------------------------------------------------------
    def decider(self) -> Agent:
        """An agent that may decide any approval the apps engine asked for."""
        caps = {**self.paper, **(self.live or {})}
        return self._agent(runs.PlannedModel(), [*caps.values(), *self._own], self.policy)

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
                await self._save(record)
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
                await self._save(record)
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

    async def _state_of(self, app_id: str) -> dict[str, Any]:
        return (await self.record(app_id)).state

    async def _enabled(self, app_id: str, mode: str) -> None:
        """``app_enable``'s handler: a person approved exactly this (mode included)."""
        record = await self.record(app_id)
        await self._save(replace(record, approved_mode=mode))
        await self.note(app_id, "enable_approved", mode=mode)

    async def _start(self, manifest: Manifest, record: AppRecord, attempt: str) -> AppRecord:
        if "init" in manifest.hooks:
            answer = await self._hook(
                manifest, record, "init", runs.step_id(manifest.id, "init", attempt)
            )
            if answer is None:
                return record
            record = await self._apply(manifest, record, answer)
        record = replace(
            record, enabled=True, last_hash=None, consecutive_errors=0, paused_until=None
        )
        await self.count(manifest.id, "enables")
        await self._save(record)
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
            answer = await self._hook(manifest, record, "shutdown", rid)
            if answer is not None:
                record = await self._apply(manifest, record, answer)
        record = replace(record, enabled=False, last_hash=None, approved_mode=None)
        await self.count(app_id, "disables")
        await self._save(record)
        await self.note(app_id, "disabled")
        return record

    # --- hooks -----------------------------------------------------------------------------
    def _prompt(self, manifest: Manifest, hook: str, context: Mapping[str, Any]) -> str:
        keys = "reply, state, emit" if hook == "message" else "reply, state, intents, emit"
        return (
            f"[app {manifest.id}] hook {hook}\n\n{manifest.instructions}\n\n"
            f"Context:\n{canonical_json(dict(context))}\n\n"
            f"Answer with one JSON object with the keys {keys}."
        )

    async def _hook(
        self,
        manifest: Manifest,
        record: AppRecord,
        hook: str,
        run_id: UUID,
        context: Mapping[str, Any] | None = None,
        origin: Origin | None = None,
    ) -> dict[str, Any] | None:
        """Run one hook invocation; its structured answer, or None while it waits for a person.
        Raises ``HookOutputError`` for an answer that is not the structured output, ``RunError``
        for a run that failed, ``DrivenElsewhereError`` when another process drives it."""
        agent = self.hook_agent(manifest, hook, record)
        ctx = context if context is not None else self._base_context(manifest, record)
        prompt = self._prompt(manifest, hook, ctx)
        run = await runs.drive(agent, run_id, prompt, self.principal, origin=origin)
        if run is None:
            raise DrivenElsewhereError(run_id)
        if run.status in ("failed", "cancelled"):
            raise RunError("state", f"the {hook} hook's run {run_id} ended {run.status}")
        if run.status != "completed":
            return None
        _, final = await runs.outcomes(agent, run_id)
        keys = MESSAGE_KEYS if hook == "message" else TICK_KEYS
        if hook in ("execute", "result"):
            keys = keys | {"action"}
        return runs.hook_output(final or "", allowed=keys)

    async def _apply(
        self, manifest: Manifest, record: AppRecord, answer: Mapping[str, Any]
    ) -> AppRecord:
        """A hook's answer: its state replaces the app's (written through), its emits logged."""
        if isinstance(answer.get("state"), dict):
            record = replace(record, state=dict(answer["state"]))
            await self._save(record)
        emits = answer.get("emit")
        for item in emits if isinstance(emits, list) else [emits] if emits else []:
            await self.note(manifest.id, "emit", data=item)
        return record

    def _base_context(self, manifest: Manifest, record: AppRecord) -> dict[str, Any]:
        return {
            "state": record.state,
            "config": manifest.config.as_context(),
            "permissions": list(manifest.permissions),
            "budget": self._budget(manifest, record),
        }

    def _budget(self, manifest: Manifest, record: AppRecord) -> dict[str, Any]:
        spent = {
            op: Decimal(record.counters.get(f"spent_cents:{op}", 0)) / 100 for op in manifest.limits
        }
        return {
            "limits": {op: str(v) for op, v in manifest.limits.items()},
            "spent": {op: str(v) for op, v in spent.items()},
            "remaining": {
                op: str(max(v - spent[op], Decimal(0))) for op, v in manifest.limits.items()
            },
        }

    # --- grants ----------------------------------------------------------------------------
    async def _granted(self, spec: dict[str, Any], ctx: CallContext) -> str:
        """``app_grant``'s handler: a person approved exactly this grant; it starts now."""
        grant_id = str(runs.step_id("grant", ctx.idempotency_key))
        expires = self.clock.now() + timedelta(seconds=float(spec["ttl_seconds"]))
        grant = GrantRecord(
            grant_id=grant_id,
            app_id=spec["app_id"],
            principal=ctx.principal.actor_id,
            operations=tuple(spec["operations"]),
            limits_usd={k: str(Decimal(str(v))) for k, v in spec["limits_usd"].items()},
            resources=tuple(spec["resources"]),
            expires_at=expires.isoformat(),
            approval=str(ctx.run_id),
        )
        if await self.tables.add_grant(grant):
            await self.note(
                spec["app_id"], "grant_created", grant=grant_id, expires_at=grant.expires_at
            )
        return grant_id

    # --- ticks -----------------------------------------------------------------------------
    def slot_of(self, manifest: Manifest, now: datetime) -> str:
        """The scheduled slot ``now`` falls in, on the app's tier."""
        every = self.tiers[manifest.tier]
        epoch = now.astimezone(UTC).timestamp()
        start = datetime.fromtimestamp(epoch - epoch % every, UTC)
        return start.isoformat()

    async def tick(self, app_id: str, slot: str | None = None) -> TickResult:
        """Run one tick of an app (the current slot unless given), once across processes."""
        manifest = self.manifest(app_id)
        slot = slot or self.slot_of(manifest, self.clock.now())
        record = await self.record(app_id)
        rid = runs.step_id(app_id, "tick", slot)
        if not record.enabled:
            return TickResult(app_id, slot, "disabled")
        now = self.clock.now()
        if record.paused_until is not None and now < datetime.fromisoformat(record.paused_until):
            return await self._skip(manifest, record, slot, rid, "paused", record.paused_until)
        existing = await self.tables.get_tick(app_id, slot)
        if existing is not None:
            return TickResult(app_id, slot, "taken", rid, existing.outcome or existing.status)
        busy = await self.tables.ticks(app_id, status="running", limit=1)
        busy += await self.tables.ticks(app_id, status="waiting", limit=1)
        if busy:
            return await self._skip(manifest, record, slot, rid, "busy", busy[0].slot)
        tick = TickRecord(app_id, slot, str(rid), "running", owner=self.owner, at=now.isoformat())
        if not await self.tables.claim_tick(tick):
            return TickResult(app_id, slot, "taken", rid)
        return await self._process(manifest, tick)

    async def _skip(
        self, manifest: Manifest, record: AppRecord, slot: str, rid: UUID, outcome: str, detail: str
    ) -> TickResult:
        tick = TickRecord(
            manifest.id,
            slot,
            str(rid),
            "done",
            outcome,
            detail,
            self.owner,
            self.clock.now().isoformat(),
        )
        if not await self.tables.claim_tick(tick):  # the slot is another process's
            return TickResult(manifest.id, slot, "taken", rid)
        await self.count(manifest.id, f"skipped_{outcome}")
        await self.note(manifest.id, f"tick_{outcome}", slot=slot, detail=detail)
        return TickResult(manifest.id, slot, outcome, None, detail)

    async def resume_ticks(self) -> list[TickResult]:
        """Continue every tick waiting for a person, and every tick left running by a process
        that has not touched it for ``lease_seconds`` (it died: its runs resume from their
        logs, each step at most once)."""
        done: list[TickResult] = []
        stale = self.clock.now() - timedelta(seconds=self.lease_seconds)
        statuses: tuple[TickStatus, ...] = ("running", "waiting")
        for status in statuses:
            for tick in await self.tables.ticks(status=status, limit=1000):
                manifest = self.manifests.get(tick.app_id)
                if manifest is None or tick.app_id in self._running:
                    continue
                if status == "running" and datetime.fromisoformat(tick.at) > stale:
                    continue
                done.append(await self._process(manifest, replace(tick, owner=self.owner)))
        return done

    async def _process(self, manifest: Manifest, tick: TickRecord) -> TickResult:
        from .intents import process_intents

        rid = UUID(tick.run_id)
        record = await self.record(manifest.id)  # restored at each tick start
        try:
            answer: dict[str, Any] | None
            if await self.store.get_run(rid) is None:
                context = await self._context(manifest, record)
                if context is None:
                    pause = manifest.config.errors.source_fail == "pause"
                    return await self._failed(manifest, tick, "a source failed", pause=pause)
                digest = hashlib.sha256(canonical_json(context).encode()).hexdigest()
                if digest == record.last_hash:
                    await self.count(manifest.id, "skipped_unchanged")
                    return await self._finish(manifest, tick, "unchanged", digest[:12])
                record = replace(record, last_hash=digest)
                await self.count(manifest.id, "model_calls")
                await self._save(record)
                answer = await self._hook(manifest, record, "tick", rid, context)
            else:
                answer = await self._hook(manifest, record, "tick", rid)
            if answer is None:
                return await self._finish(manifest, tick, "waiting", "", status="waiting")
            record = await self._apply(manifest, await self.record(manifest.id), answer)
            state = await process_intents(self, manifest, rid, list(answer.get("intents") or []))
        except DrivenElsewhereError:
            return TickResult(manifest.id, tick.slot, "elsewhere", rid)
        except (RunError, runs.HookOutputError) as exc:
            return await self._failed(manifest, tick, str(exc), pause=False)
        if state.waiting:
            return await self._finish(manifest, tick, "waiting", state.summary, status="waiting")
        records = state.records
        if state.failed and manifest.config.errors.execute_fail == "pause":
            return await self._failed(manifest, tick, state.summary, pause=True, records=records)
        if state.failed:
            return await self._failed(manifest, tick, state.summary, pause=False, records=records)
        record = await self.record(manifest.id)
        await self._save(replace(record, consecutive_errors=0))
        return await self._finish(manifest, tick, "ran", state.summary, records=records)

    async def _context(self, manifest: Manifest, record: AppRecord) -> dict[str, Any] | None:
        fetched: dict[str, Any] = {}
        policy = manifest.config.errors.source_fail
        for name in manifest.sources:
            attempts = 2 if policy == "retry" else 1
            for attempt in range(attempts):
                try:
                    fetched[name] = await self.sources[name]()
                    break
                except Exception as exc:  # a source's failure is the app's error policy's
                    await self.note(manifest.id, "source_failed", source=name, error=str(exc)[:200])
                    if attempt == attempts - 1:
                        return None
        context = self._base_context(manifest, record)
        context["sources"] = fetched
        return context

    async def _pause(self, manifest: Manifest) -> None:
        record = await self.record(manifest.id)
        until = (self.clock.now() + self.cooldown).isoformat()
        await self._save(replace(record, paused_until=until, consecutive_errors=0))
        await self.count(manifest.id, "pauses")
        await self.note(manifest.id, "paused", until=until)

    async def _failed(
        self,
        manifest: Manifest,
        tick: TickRecord,
        detail: str,
        *,
        pause: bool,
        records: Sequence[tuple[str, dict[str, Any]]] = (),
    ) -> TickResult:
        record = await self.record(manifest.id)
        record = replace(record, consecutive_errors=record.consecutive_errors + 1)
        await self.count(manifest.id, "errors")
        await self._save(record)  # the state is persisted on error too
        if pause or record.consecutive_errors >= self.max_errors:
            await self._pause(manifest)
        return await self._finish(manifest, tick, "error", detail, records=records)

    async def _finish(
        self,
        manifest: Manifest,
        tick: TickRecord,
        outcome: str,
        detail: str,
        *,
        status: TickStatus = "done",
        records: Sequence[tuple[str, dict[str, Any]]] = (),
    ) -> TickResult:
        """Record the tick's end; only the process whose update ends it writes its log (two
        engines continuing one waiting tick do not record it twice)."""
        done = replace(tick, status=status, outcome=outcome, detail=detail[:500])
        if await self.tables.update_tick(done) and status == "done":
            for kind, fields in records:
                await self.note(manifest.id, kind, slot=tick.slot, **fields)
            await self.note(manifest.id, f"tick_{outcome}", slot=tick.slot, detail=detail[:500])
        return TickResult(manifest.id, tick.slot, outcome, UUID(tick.run_id), detail)

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

    def _register(self, app_id: str) -> None:
        """The app as an inbox target (once: a manifest may be replaced)."""
        if app_id in self.inbox:
            return

        async def target(principal: Principal, text: str, channel: str) -> Reply:
            return await self._message_hook(app_id, text, message_origin(self, app_id, channel))

        self.inbox.add(app_id, target)

    async def _message_hook(self, app_id: str, text: str, origin: Origin | None = None) -> AppReply:
        manifest = self.manifest(app_id)
        if "message" not in manifest.hooks:
            raise RunError("invalid", f"app {app_id} has no message hook")
        record = await self.record(app_id)
        if not record.enabled:
            raise RunError("state", f"app {app_id} is not enabled")
        context = {"message": text, "appId": app_id, **self._base_context(manifest, record)}
        rid = uuid4()
        answer = await self._hook(manifest, record, "message", rid, context, origin)
        if answer is None:
            pending = await self.decider().pending_approvals(run_id=rid)
            return AppReply("", tuple(pending), run_id=rid, waiting=True)
        await self._apply(manifest, record, answer)
        said = answer.get("reply")
        text_out = None if said is None else str(said)
        return AppReply(text_out or "", run_id=rid, reply=text_out)

    # --- the scheduler ---------------------------------------------------------------------
    async def step(self) -> list[TickResult]:
        """One pass of the scheduler: continue enables and waiting ticks, then tick every
        enabled app whose current slot has not run (in parallel across apps)."""
        for record in await self.tables.list_apps():
            if record.enable_run is not None and record.app_id in self.manifests:
                await self.enable(record.app_id)
        results = await self.resume_ticks()
        now = self.clock.now()
        due: list[Awaitable[TickResult]] = []
        for record in await self.tables.list_apps():
            manifest = self.manifests.get(record.app_id)
            if manifest is None or not record.enabled or "tick" not in manifest.hooks:
                continue
            due.append(self._guarded(manifest, self.slot_of(manifest, now)))
        results.extend(await asyncio.gather(*due))
        return results

    async def _guarded(self, manifest: Manifest, slot: str) -> TickResult:
        """A tick, unless this process is still running the app's previous one (→ busy)."""
        running = self._running.get(manifest.id)
        if running is not None and not running.done():
            record = await self.record(manifest.id)
            rid = runs.step_id(manifest.id, "tick", slot)
            return await self._skip(manifest, record, slot, rid, "busy", "still running")
        task = asyncio.ensure_future(self.tick(manifest.id, slot))
        self._running[manifest.id] = task
        try:
            return await asyncio.shield(task)
        finally:
            if task.done() and self._running.get(manifest.id) is task:
                del self._running[manifest.id]

    async def run_forever(self, *, every: float = 1.0) -> None:
        """Step every ``every`` seconds until cancelled (``serve`` and ``worker`` run this)."""
        while True:
            await self.step()
            await asyncio.sleep(every)
