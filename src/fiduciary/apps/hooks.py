"""Hooks: an app's hook invocation as a run, and the agents an app's runs are made of.

``Hooks`` builds the agent of each run the apps engine makes: a hook's (the app's model; reads
only, except the message hook, which may use the app's capabilities through the gates), an
intent run's (the ``PlannedModel``, the app's capabilities bounded and watched, the engine's
own, the app's live grants), and the decider's (any approval the engine asked for). ``run``
invokes one hook: a run with a derived id, its answer parsed as the hook's structured output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any
from uuid import UUID

from ..agent import Agent
from ..capabilities import CallContext, Capability, Principal, canonical_json
from ..clock import Clock
from ..events import Origin
from ..exceptions import RunError
from ..gates import Authorize
from ..guards import Guard
from ..models.base import Model
from ..policy import Policy, Threshold
from ..redaction import Redactor
from ..stores.base import IDLE, Store
from ..tracing import NO_TRACER, RunTracer
from . import runs
from ._caps import (
    HOOK_TOOL_CALLS,
    bounded,
    engine_capabilities,
    grant_request,
    intent_pricer,
    state_capability,
    watched,
)
from .grants import GrantPolicy, LiveGrant
from .manifest import Manifest
from .state import AppState
from .tables import AppRecord

__all__ = ["MESSAGE_KEYS", "SESSION_HOOKS", "TICK_KEYS", "DrivenElsewhereError", "Hooks"]

SESSION_HOOKS = frozenset({"tick", "message"})  # the hooks whose turns an app's sessions keep
TICK_KEYS = frozenset({"reply", "state", "intents", "emit"})
MESSAGE_KEYS = frozenset({"reply", "state", "emit"})


class DrivenElsewhereError(RunError):
    """Another process drives this run (its lease is live): leave the step to it."""

    def __init__(self, run_id: UUID) -> None:
        super().__init__("busy", f"run {run_id} is being driven by another process")
        self.run_id = run_id


class Hooks:
    """The agents of an app's runs, and one hook invoked as a run."""

    def __init__(
        self,
        *,
        model: Model,
        paper: dict[str, Capability],
        live: dict[str, Capability] | None,
        store: Store,
        principal: Principal,
        state: AppState,
        policy: Policy,
        guards: Sequence[Guard] | None,
        authorize: Authorize | None,
        clock: Clock,
        lease_seconds: float,
        context_window: int | None = None,
    ) -> None:
        self.model = model
        self.paper = paper
        self.live = live
        self.store = store
        self.principal = principal
        self.state = state
        self.policy = policy
        self.guards = guards
        self.authorize = authorize
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.context_window = context_window  # the hooks' model's (compaction), when known
        self.tracer: RunTracer = NO_TRACER  # the hooks' agents': set where the apps are served
        self.redactor = Redactor()  # one for every agent of the engine (they are many)
        self._hook_agents: dict[tuple[str, str, bool], Agent] = {}
        # the live grants each app's message agent (cached) decides with, read again from the
        # tables before each drive and when a grant it asked for is created
        self._message_grants: dict[str, list[LiveGrant]] = {}
        self.own = engine_capabilities(
            enabled=state.mode_approved,
            granted=state.grant,
            intent_amount=intent_pricer(lambda: {**self.paper, **(self.live or {})}),
        )
        self._state_cap = state_capability(state.state_of)

    # --- what an app may call ----------------------------------------------------------------
    def capabilities(self, manifest: Manifest, record: AppRecord | None) -> dict[str, Capability]:
        """The app's capabilities on its backend (a live app: only once a person enabled it
        live, and with a live backend registered)."""
        live = manifest.config.mode == "live"
        if live and (self.live is None or record is None or record.approved_mode != "live"):
            raise RunError(
                "forbidden",
                f"app {manifest.id} is live, and needs a live backend and an enabling "
                "approval that said live",
            )
        pool = self.live if live and self.live is not None else self.paper
        return {n: pool[n] for n in manifest.capabilities if n in pool}

    def policy_for(self, manifest: Manifest, **extra: Any) -> GrantPolicy:
        """The engine's policy with the app's limits as ceilings (and ``extra``: grants...)."""
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

    # --- agents ------------------------------------------------------------------------------
    def _agent(
        self,
        model: Model,
        caps: Iterable[Capability],
        policy: Policy,
        *,
        fast: bool = False,
        context_window: int | None = None,
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
            context_window=context_window,
        )
        return agent.with_options(tracer=self.tracer)

    def hook_agent(self, manifest: Manifest, hook: str, record: AppRecord | None) -> Agent:
        """The agent of one hook invocation: the app's model; reads only, except for the message
        hook, which may use the app's capabilities directly (through the gates) and, when the
        app has permissions, ask for a grant (``request_grant``): its policy sees the app's live
        grants. Kept per app, kind of hook and backend."""
        pool = self.capabilities(manifest, record)
        kind = "message" if hook == "message" else "fast" if hook in ("init", "shutdown") else ""
        key = (manifest.id, kind, manifest.config.mode == "live")
        cached = self._hook_agents.get(key)
        if cached is not None:
            return cached
        if hook == "message":
            grants = self._message_grants.setdefault(manifest.id, [])
            policy = self.policy_for(manifest, grants=grants)
        else:
            policy = self.policy_for(manifest)
        caps = [bounded(c) for c in pool.values()]
        if hook != "message":
            caps = [c for c in caps if not c.is_write]
        else:
            caps = [self._watch(manifest, c, policy, count=False) for c in caps]
        fast = hook in ("init", "shutdown") or all(not c.is_write for c in caps)
        if hook == "message" and manifest.permissions:
            caps.append(self._grant_request(manifest))
        # app_state marks the run as an app's: an agent without it (a server's own) refuses
        # to resume it after a crash, and leaves it to an apps engine
        caps.append(self._state_cap)
        window = self.context_window
        agent = self._agent(self.model, caps, policy, fast=fast, context_window=window)
        self._hook_agents[key] = agent
        return agent

    def _grant_request(self, manifest: Manifest) -> Capability:
        async def granted(spec: dict[str, Any], ctx: CallContext) -> str:
            grant_id = await self.state.grant(spec, ctx)
            await self.refresh_grants(manifest)  # the retried write sees it in this drive
            return grant_id

        return grant_request(manifest.id, manifest.permissions, granted)

    async def live_grants(self, manifest: Manifest) -> list[LiveGrant]:
        """The app's grants not yet expired, each with what was spent of it."""
        tables, now = self.state.tables, self.clock.now()
        live: list[LiveGrant] = []
        for grant in await tables.grants(manifest.id):
            item = LiveGrant(grant, await tables.grant_spent(grant.grant_id))
            if not item.expired(now):
                live.append(item)
        return live

    async def refresh_grants(self, manifest: Manifest) -> None:
        """Read the app's live grants again for its message agent (in place: it is cached)."""
        grants = self._message_grants.setdefault(manifest.id, [])
        grants[:] = await self.live_grants(manifest)

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
            live = await self.live_grants(manifest)
        policy = self.policy_for(
            manifest,
            grants=tuple(live),
            floor="confirm" if per_action else None,
            batch_approved=batch,
        )
        caps: list[Capability] = []
        if record is not None:
            for cap in self.capabilities(manifest, record).values():
                caps.append(self._watch(manifest, bounded(cap), policy))
        return self._agent(runs.PlannedModel(), [*caps, *self.own], policy)

    def _watch(
        self, manifest: Manifest, cap: Capability, policy: GrantPolicy, *, count: bool = True
    ) -> Capability:
        """The capability, its arguments noted for the grants and each grant use recorded
        (``count``: and what it moved added to the app's ``spent_cents`` counters)."""
        state = self.state

        def noted(c: Capability, args: Any) -> None:
            policy.args_of[c.name] = args.model_dump(mode="json")

        async def executed(
            c: Capability, args: Any, ctx: CallContext, amount: Decimal | None
        ) -> None:
            if amount is None or c.operation is None:
                return
            if count:
                key = f"spent_cents:{c.operation}"
                await state.count(manifest.id, key, int((amount * 100).to_integral_value()))
            grant = policy.take(c, amount)
            if grant is None:
                return
            gid = grant.record.grant_id
            if await state.tables.use_grant(gid, ctx.idempotency_key, c.operation, amount):
                grant.spent[c.operation] = grant.spent.get(c.operation, Decimal(0)) + amount
                await state.note(
                    manifest.id, "grant_used", grant=gid, capability=c.name, amount_usd=str(amount)
                )

        return watched(cap, noted=noted, executed=executed)

    def decider(self) -> Agent:
        """An agent that may decide any approval the apps engine asked for."""
        caps = {**self.paper, **(self.live or {})}
        asked = grant_request("", None, _decided_elsewhere)  # the message runs' grant requests
        return self._agent(runs.PlannedModel(), [*caps.values(), *self.own, asked], self.policy)

    async def unfinished(self, run_id: UUID) -> bool:
        """Whether the run has yet to finish: its end, when a drive now reaches it, is news
        (the live channels tell it once, not again each time a waiting tick is re-entered)."""
        run = await self.store.get_run(run_id)
        return run is None or run.status not in ("completed", "failed", "cancelled")

    # --- one hook ----------------------------------------------------------------------------
    def prompt(self, manifest: Manifest, hook: str, context: Mapping[str, Any]) -> str:
        keys = "reply, state, emit" if hook == "message" else "reply, state, intents, emit"
        return (
            f"[app {manifest.id}] hook {hook}\n\n{manifest.instructions}\n\n"
            f"Context:\n{canonical_json(dict(context))}\n\n"
            f"Answer with one JSON object with the keys {keys}."
        )

    def run_of(self, manifest: Manifest, hook: str, record: AppRecord, turn: UUID) -> UUID:
        """The run a hook invocation ``turn`` is a turn of: its session's, for an app that
        keeps sessions (one for ticks, one for messages, new after each disable), else its
        own."""
        if not manifest.session or hook not in SESSION_HOOKS:
            return turn
        epoch = str(record.counters.get("disables", 0))
        return runs.step_id(manifest.id, "session", hook, epoch)

    async def asked(self, manifest: Manifest, hook: str, record: AppRecord, turn: UUID) -> bool:
        """Whether the hook invocation ``turn`` was started (its run, or its session turn)."""
        session = self.run_of(manifest, hook, record, turn)
        if session == turn:
            return await self.store.get_run(turn) is not None
        return await runs.turn_of(self.store, session, _marker(turn)) is not None

    async def answered(self, manifest: Manifest, hook: str, record: AppRecord, turn: UUID) -> bool:
        """Whether the hook invocation ``turn`` has finished (its answer is old news)."""
        session = self.run_of(manifest, hook, record, turn)
        if session == turn:
            return not await self.unfinished(turn)
        found = await runs.turn_of(self.store, session, _marker(turn))
        return found is not None and found.status != "waiting"

    async def run(
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
        for a run that failed, ``DrivenElsewhereError`` when another process drives it. In an
        app that keeps sessions, a tick or a message is a turn (``run_id``) of its session."""
        agent = self.hook_agent(manifest, hook, record)
        if hook == "message":
            await self.refresh_grants(manifest)
        ctx = context if context is not None else self.state.context(manifest, record)
        prompt = self.prompt(manifest, hook, ctx)
        session = self.run_of(manifest, hook, record, run_id)
        if session != run_id:
            final = await self._turn(agent, session, run_id, prompt, hook, origin)
            if final is None:
                return None
        else:
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

    async def _turn(
        self,
        agent: Agent,
        session: UUID,
        turn: UUID,
        prompt: str,
        hook: str,
        origin: Origin | None,
    ) -> str | None:
        """One turn of a session run: the prompt sent once (marked with the turn's id), the
        session continued or resumed; the turn's final text, None while it waits."""
        marker = _marker(turn)
        if await runs.turn_of(self.store, session, marker) is None:
            existing = await self.store.get_run(session)
            if existing is not None and existing.status not in IDLE:
                # a turn a crash cut, or one waiting for a person: it ends before a new one
                run = await runs.drive(agent, session, prompt, self.principal)
                if run is None:
                    raise DrivenElsewhereError(session)
                if run.status not in IDLE:
                    raise RunError("busy", f"the {hook} session {session} waits for a person")
            sent = await runs.drive(
                agent, session, prompt + marker, self.principal, origin=origin, again=True
            )
            if sent is None:
                raise DrivenElsewhereError(session)
        else:
            run = await runs.drive(agent, session, prompt + marker, self.principal)
            if run is None:
                raise DrivenElsewhereError(session)
        found = await runs.turn_of(self.store, session, marker)
        if found is None or found.status == "waiting":
            return None
        if found.status == "failed":
            raise RunError("state", f"the {hook} session's turn {turn} failed")
        return found.text


async def _decided_elsewhere(spec: dict[str, Any], ctx: CallContext) -> str:
    # the decider decides a grant request; the app's message agent, resuming, creates it
    raise RunError("state", "a grant request is carried out by its app's message run")


def _marker(turn: UUID) -> str:
    """How a session turn's prompt ends: the turn's id, to find it again after a crash."""
    return f"\n\n[turn {turn}]"
