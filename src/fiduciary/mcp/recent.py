"""What a principal did through MCP lately, shown to the guards of their next MCP write.

Each ``tools/call`` is a run of its own (``bridge``), so a write's run holds neither the
balance the client read a moment ago nor the person's words. The guards of an MCP write see
instead (``RelayedGuards``):

- the calls the same principal made over MCP (either transport) in the last ``window``
  (5 minutes), ended with an outcome, oldest first, before the write's own call: a
  ``balance_check`` there satisfies ``balance_freshness``, a write succeeding after it does
  not; the calls are ordered and dated by their outcome (a write approved later counts then);
- that the run is relayed (``RunHistory.relayed_by == "mcp"``): the person's conversation is
  with the client, so a guard that needs their words (``address_source``) holds the call for
  the person instead of looking for them.

Only MCP runs (this bridge's private model) count: a chat run's guards see that run's log and
nothing else, as before. The earlier calls are read from the store when a guard first asks,
once per ``tools/call``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from uuid import UUID

from ..events import RunStarted, ToolCallEnd, ToolCallStart
from ..guards import CallRecord, Guard, GuardCall, GuardTier, Phase, Verdict

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["RELAYED_BY", "WINDOW", "RelayedGuards", "recent_calls"]

RELAYED_BY = "mcp"
WINDOW = timedelta(minutes=5)
_RUNS_READ = 50  # the principal's latest runs looked at
_TITLE = "MCP call: "  # every bridge run's first message (and so its title)


async def recent_calls(
    agent: Agent, principal: str, *, model: str, since: datetime, excluding: UUID
) -> list[CallRecord]:
    """The calls ``principal`` made through the bridge (runs of ``model``) that ended after
    ``since``, oldest outcome first; ``excluding`` (the run asking) left out."""
    found: list[CallRecord] = []
    runs = await agent.store.list_runs(principal=principal, limit=_RUNS_READ)
    for run in reversed(runs):  # oldest first: calls ending at the same instant keep their order
        if run.run_id == excluding or run.updated_at < since or not run.title.startswith(_TITLE):
            continue
        started: dict[str, ToolCallStart] = {}
        async for event in agent.events(run.run_id, follow=False):
            if isinstance(event, RunStarted) and event.model != model:
                break  # not a bridge run: another client's words are not this one's
            if isinstance(event, ToolCallStart):
                started[event.tool_use_id] = event
            elif isinstance(event, ToolCallEnd) and event.at >= since:
                start = started.get(event.tool_use_id)
                if start is not None:
                    found.append(_record(run.run_id, start, event))
    return sorted(found, key=lambda c: c.at)


def _record(run_id: UUID, start: ToolCallStart, end: ToolCallEnd) -> CallRecord:
    return CallRecord(
        tool_use_id=f"{run_id}:{start.tool_use_id}",
        name=start.name,
        kind=start.kind,
        input=start.input,
        args_digest=start.args_digest,
        at=end.at,  # when it took effect (or answered): a write approved later counts then
        ok=not end.is_error,
        output=end.output,
    )


class RelayedGuards:
    """The agent's guards, each seeing a ``tools/call``'s run with the principal's recent MCP
    calls before it, as relayed (read from the store once, when a guard first asks)."""

    def __init__(self, agent: Agent, *, model: str, window: timedelta = WINDOW) -> None:
        self.agent = agent
        self.model = model
        self.window = window
        self._earlier: list[CallRecord] | None = None

    def wrap(self, guards: Sequence[Guard]) -> list[Guard]:
        return [_Relayed(guard, self) for guard in guards]

    async def seen(self, call: GuardCall) -> GuardCall:
        if self._earlier is None:
            self._earlier = await recent_calls(
                self.agent,
                call.principal.actor_id,
                model=self.model,
                since=call.now - self.window,
                excluding=call.run_id,
            )
        return replace(call, history=call.history.relayed(RELAYED_BY, self._earlier))


class _Relayed:
    """One guard, judging the call as ``RelayedGuards`` shows it."""

    def __init__(self, guard: Guard, relayed: RelayedGuards) -> None:
        self.guard = guard
        self.relayed = relayed
        self.name: str = guard.name
        self.tier: GuardTier = guard.tier
        self.phase: Phase = guard.phase

    async def check(self, call: GuardCall) -> Verdict:
        verdict = self.guard.check(await self.relayed.seen(call))
        return verdict if isinstance(verdict, Verdict) else await verdict
