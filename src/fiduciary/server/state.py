"""``Server``: the state behind the app, and the rules every handler shares.

It holds the agent, the keys, the background drives, the live-event hub, the webhooks and the
rate limiter; it answers cancel requests that other processes send for the runs driven here.

Tenancy: a key acts for one principal. It sees and decides only that principal's runs and
approvals; anything else is ``not_found``, exactly as if it did not exist. An ``admin`` key sees
and decides everyone's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from uuid import UUID

from .._logs import logger
from ..agent import Agent
from ..capabilities import Principal
from ..dual_control import rule_for
from ..events import Event, Origin
from ..exceptions import ConfigurationError, FiduciaryError
from ..stores.base import (
    ApprovalRecord,
    CancelChannel,
    CancelRequest,
    RunRecord,
    follow_poll_seconds,
)
from ..worker import WorkQueue
from . import auth
from .ai import ModelChoice
from .auth import ApiKey, KeyStore
from .deciders import OtherDecider
from .drives import Drives
from .problems import ProblemError
from .ratelimit import RateLimit, RateLimiter
from .schemas import Balances
from .sse import EventHub, GlobalStreams
from .webhooks import InboundChannel, Notifier, SignatureVerifier

__all__ = ["BalancesHook", "Server"]

log = logger("fiduciary.server")

BalancesHook = Callable[
    [str], Awaitable[Mapping[str, Decimal] | Balances] | Mapping[str, Decimal] | Balances
]
"""``balances(principal)``: the principal's balances by asset, or a ``Balances`` with their USD
values too (shown in the console)."""


class Server:
    """The state behind the app: the agent, keys, background drives, live events, webhooks."""

    def __init__(
        self,
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
        drive: bool = True,
    ) -> None:
        if not drive and not isinstance(agent.store, WorkQueue):
            raise ConfigurationError(
                "drive=False leaves runs to workers, and workers need a store that hands out "
                f"work (PostgresStore), not {type(agent.store).__name__}"
            )
        if not drive and notifier is not None:
            raise ConfigurationError(
                "notifications are sent by the process that drives a run, and with "
                "drive=False (--no-drive) this one drives none: it would never send them"
            )
        self.agent = agent
        self.drive = drive
        self.keys = keys
        self.balances_hook = balances
        self.limiter = RateLimiter(rate_limit or RateLimit(), clock=agent.clock)
        self.channels = {c.name: c for c in channels}
        self.verifier = SignatureVerifier(clock=agent.clock)
        self.notifier = notifier
        self.max_body_bytes = max_body_bytes
        self.models = ModelChoice(agent, keys)  # the default model of new runs (ai.py)
        # approvals of runs a feature drives (an apps engine's): decided by its agent
        self.other_deciders: list[OtherDecider] = []
        self.drives = Drives(agent, on_event=self._on_event, models=self.models)
        self.hub = EventHub(
            agent,
            buffer=subscriber_buffer,
            heartbeat_seconds=heartbeat_seconds,
            poll_seconds=follow_poll_seconds(agent.store) if poll_seconds is None else poll_seconds,
            coalesce_seconds=coalesce_seconds,
        )
        self.global_streams = GlobalStreams(
            agent, heartbeat_seconds=heartbeat_seconds, poll_seconds=self.hub.poll_seconds
        )
        agent.tracer.watch_sse_subscribers(  # when traced
            lambda: self.hub.subscriber_count + self.global_streams.subscriber_count
        )
        self._principals: dict[UUID, str] = {}
        # cancel requests from other processes (PostgreSQL) for the runs driven here
        self._cancelling: set[asyncio.Task[None]] = set()
        self._asked: dict[UUID, float] = {}  # by request id: when one being honoured last arrived
        self._unlisten = (
            agent.store.on_cancel_request(self._on_cancel_request)
            if drive and isinstance(agent.store, CancelChannel)
            else None
        )

    def _on_event(self, event: Event) -> None:
        if self.notifier is None:
            return
        principal = self._principals.get(event.run_id)
        if principal is not None:
            self.notifier.notify(event, principal=principal)

    def _on_cancel_request(self, request: CancelRequest) -> None:
        now = asyncio.get_running_loop().time()
        if request.request_id in self._asked:  # the same request again: its sender still waits
            self._asked[request.request_id] = now
            return
        if not self.drives.has_drive(request.run_id):  # (this process's own request included)
            return
        self._asked[request.request_id] = now
        task = asyncio.create_task(self._cancel_requested(request))
        self._cancelling.add(task)
        task.add_done_callback(self._cancelling.discard)
        task.add_done_callback(lambda _: self._asked.pop(request.request_id, None))

    async def _cancel_requested(self, request: CancelRequest) -> None:
        by = Principal(request.by, frozenset(request.scopes))
        try:
            run = await self.agent.get_run(request.run_id)
            if not request.allowed_for(run.principal):  # checked before anything is stopped
                log.warning(
                    "run %s: ignored a cancel request of %s, who may not cancel it",
                    request.run_id,
                    request.by,
                )
                return
            # kept (and the principal's lock awaited again) while the request keeps arriving
            await self.drives.cancel(
                request.run_id,
                by,
                request.reason,
                keep=lambda since: self._asked.get(request.request_id, since) > since,
            )
        except FiduciaryError as exc:
            log.info(
                "run %s: %s's cancel request was not recorded: %s", request.run_id, request.by, exc
            )

    def end_streams(self) -> None:
        """End every event stream now (their clients reconnect): the server is going away."""
        self.hub.end_all()
        self.global_streams.end_all()

    async def close(self) -> None:
        self.global_streams.end_all()
        if self._unlisten is not None:
            self._unlisten()
        for task in list(self._cancelling):
            task.cancel()
        await asyncio.gather(*self._cancelling, return_exceptions=True)
        await self.drives.close()
        await self.hub.close()
        if self.notifier is not None:
            await self.notifier.close()

    # --- limits and tenancy -----------------------------------------------------------------
    def limit(self, principal: str) -> None:
        """Count one message of ``principal``; ``rate_limited`` when over the limit."""
        wait = self.limiter.acquire(principal)
        if wait > 0:
            raise ProblemError(
                "rate_limited",
                f"at most {self.limiter.rule.limit} messages per "
                f"{self.limiter.rule.window_seconds:g} s",
                headers={"retry-after": RateLimiter.retry_after(wait)},
            )

    async def visible_run(self, key: ApiKey, text: str) -> RunRecord:
        """The run ``text`` names, if ``key`` may see it; else ``not_found``."""
        run_id = parse_id(text, "run")
        run = await self.agent.store.get_run(run_id)
        if run is None or not (key.is_admin or run.principal == key.principal):
            raise ProblemError("not_found", f"no run {run_id}")
        return run

    async def visible_approval(self, key: ApiKey, text: str) -> ApprovalRecord:
        """The approval ``text`` names, if ``key`` may see it; else ``not_found``."""
        approval_id = parse_id(text, "approval")
        record = await self.agent.store.get_approval(approval_id)
        if record is None or not (
            key.is_admin or record.principal == key.principal or self.is_approver(key, record)
        ):
            raise ProblemError("not_found", f"no approval {approval_id}")
        return record

    def is_approver(self, key: ApiKey, record: ApprovalRecord) -> bool:
        """Whether the key's principal is in a dual-control group this approval needs."""
        gates = self.agent.gates
        cap = gates.get(record.capability)
        rule = rule_for(
            gates.policy.dual_control, record.amount_usd, None if cap is None else cap.operation
        )
        return rule is not None and key.principal in rule.members

    @staticmethod
    def decider(key: ApiKey) -> Principal:
        """Who a decision or a cancel is recorded as: the key's principal (admin or not)."""
        return Principal(key.principal, frozenset({auth.ADMIN}) if key.is_admin else frozenset())

    # --- starting, continuing and resuming runs ---------------------------------------------
    async def start(
        self,
        message: str,
        principal: Principal,
        *,
        capabilities: Sequence[str] | None = None,
        plan_first: bool = False,
        origin: Origin | None = None,
    ) -> tuple[UUID, int]:
        """A new run, driven here or recorded for workers: its id and first seq. ``origin``:
        the outside event the message comes from (a webhook), None for the caller in person."""
        if not self.drive:
            run = await self.agent.submit(
                message,
                principal=principal,
                capabilities=capabilities,
                plan_first=plan_first,
                origin=origin,
            )
            return run.run_id, 1
        first = await self.drives.start(
            message,
            principal,
            capabilities=capabilities,
            plan_first=plan_first,
            on_claim=self.remember(principal.actor_id),
            origin=origin,
        )
        return first.run_id, first.seq

    async def say(
        self, run: RunRecord, message: str, principal: Principal, *, origin: Origin | None = None
    ) -> tuple[UUID, int]:
        """A message continuing an idle run, driven here or left to workers."""
        if not self.drive:
            submitted = await self.agent.submit(
                message, principal=principal, run_id=run.run_id, origin=origin
            )
            return run.run_id, submitted.last_seq
        first = await self.drives.say(
            run.run_id, message, principal, on_claim=self.remember(run.principal), origin=origin
        )
        return first.run_id, first.seq

    def resume(self, run_id: UUID, principal: str) -> None:
        """Drive ``run_id`` again in the background (with ``drive=False``: leave it to workers,
        for whom a decision alone makes the run claimable)."""
        if not self.drive:
            return
        self.remember(principal)(run_id)
        self.drives.resume(run_id)

    def remember(self, principal: str) -> Callable[[UUID], None]:
        """A callback recording whose run an id is (for the notifications of its events)."""

        def remember(run_id: UUID) -> None:
            self._principals[run_id] = principal
            if len(self._principals) > 100_000:  # bounded: the oldest runs are forgotten
                del self._principals[next(iter(self._principals))]

        return remember


def parse_id(text: str, what: str) -> UUID:
    """A path's id; an id that is not a UUID names nothing: ``not_found``."""
    try:
        return UUID(text)
    except ValueError:
        raise ProblemError("not_found", f"no {what} {text[:60]!r}") from None
