"""The route map: what each route of a decision does — start a gated agent run, tell a person,
or nothing.

A run started from a decision has a run id derived from the decision's id (itself derived from
the source and the event id), so acting on the same decision twice — redelivery, or a restart
between recording a decision and recording its action — never starts a second run. The run goes
through ``Agent.run`` like any other: under the route's principal and capability whitelist,
plan-first unless the route says otherwise, and every gate applies. Its message is recorded with
its ``Origin`` (``attention:<route>``): nobody asked for it, so a write it proposes waits for a
person, unless the route grants an autonomous budget (``autonomous``: operation → the most
USD a call may move on its own, within the daily autonomous limit).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID, uuid5

from .._logs import logger
from ..agent import Agent
from ..events import Origin
from ..exceptions import ConflictError, FiduciaryError
from .record import DecisionRecord
from .types import Incoming, PermanentError, RouteOffer

__all__ = [
    "ATTENTION_NAMESPACE",
    "Notify",
    "RouteAction",
    "act_on",
    "decision_id_of",
    "offers",
    "render_message",
    "run_id_of",
]

log = logger("fiduciary.attention")

ATTENTION_NAMESPACE = UUID("4f6c8a52-1c0e-5d43-9a61-6a7e2b1d0c9f")

DEFAULT_MESSAGE = (
    "An event needs your attention: {type} from {source} at {at}. Details: {data}. "
    "Look into it with your read capabilities and propose what to do."
)

Notify = Callable[[DecisionRecord, str], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteAction:
    """What a route does. ``do``: ``run`` (an agent run), ``notify`` (a person) or ``drop``.

    ``principal`` None means the event's own principal; ``capabilities`` None means every
    capability of the agent; ``message`` is formatted with the event's ``id``, ``type``,
    ``source``, ``at``, ``principal`` and ``data`` (JSON), plus ``route``.
    ``autonomous``: the route's autonomous budget, operation → the most USD a call may move
    without a person (empty by default: every write of its runs waits for a person).
    """

    do: Literal["run", "notify", "drop"]
    criterion: str | None = None
    principal: str | None = None
    capabilities: tuple[str, ...] | None = None
    plan_first: bool = True
    message: str = DEFAULT_MESSAGE
    autonomous: Mapping[str, Decimal] = field(default_factory=dict)

    def origin(self, route: str) -> Origin:
        """What a run this route starts records as its message's origin."""
        return Origin(source=f"attention:{route}", budget=dict(self.autonomous))


def offers(routes: Mapping[str, RouteAction]) -> tuple[RouteOffer, ...]:
    return tuple(RouteOffer(route=r, criterion=a.criterion) for r, a in routes.items())


def decision_id_of(source: str, event_id: str) -> UUID:
    return uuid5(ATTENTION_NAMESPACE, f"decision\n{source}\n{event_id}")


def run_id_of(decision_id: UUID) -> UUID:
    return uuid5(ATTENTION_NAMESPACE, f"run\n{decision_id}")


def render_message(template: str, event: Incoming, route: str) -> str:
    fields: dict[str, Any] = {
        "id": event.id,
        "type": event.type,
        "source": event.source,
        "at": event.at.isoformat(),
        "principal": event.principal or "",
        "data": json.dumps(dict(event.data), sort_keys=True, default=str),
        "route": route,
    }
    return template.format_map(fields)


async def act_on(
    decision: DecisionRecord,
    event: Incoming,
    action: RouteAction,
    *,
    agent: Agent | None,
    notify: Notify | None,
) -> tuple[str, UUID | None]:
    """Do what ``action`` says for ``decision``; (what was done, the run id if one started)."""
    route = decision.route or ""
    message = render_message(action.message, event, route)
    if action.do == "drop":
        return "dropped", None
    if action.do == "notify":
        if notify is None:
            log.warning("attention: %s on %s (no notifier configured)", route, event.type)
        else:
            await notify(decision, message)
        return "notified", None
    if agent is None:
        raise PermanentError(f"route {route!r} starts a run, but no agent is configured")
    principal = action.principal or event.principal
    if principal is None:
        raise PermanentError(f"route {route!r} names no principal and the event carries none")
    run_id = run_id_of(decision.decision_id)
    existing = await agent.store.get_run(run_id)
    if existing is not None:
        return f"run:{existing.status}", run_id
    try:
        async for _ in agent.run(
            message,
            principal=principal,
            run_id=run_id,
            capabilities=action.capabilities,
            plan_first=action.plan_first,
            origin=action.origin(route),
        ):
            pass
    except ConflictError:
        pass  # another process started this decision's run first
    except FiduciaryError as exc:
        if await agent.store.get_run(run_id) is None:
            raise PermanentError(f"the run for route {route!r} could not start: {exc}") from exc
    run = await agent.store.get_run(run_id)
    return f"run:{run.status if run else 'unknown'}", run_id
