"""Agent.regenerate beyond the wallet: fresh arguments go through the policy again, never
below the tier the person was shown, and reserve nothing of the daily autonomous limit."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from fiduciary import CallContext, ManualClock, Policy, Threshold, capability
from fiduciary.events import ActionResolved, PendingAction, ToolCallEnd, ToolCallRejected
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ToolCalls, collect
from tests.agent_support import make_agent

pytestmark = pytest.mark.timeout(30)

POLICY = Policy(
    thresholds={"convert": Threshold(auto_below=Decimal(50), confirm_below=Decimal(1000))},
    daily_autonomous_limit_usd=Decimal(100),
)


def converter(fails: bool = False) -> Any:
    def smaller(args: Any, ctx: CallContext) -> dict[str, Any]:
        if fails:
            raise RuntimeError("the price source is down")
        return {"amount": "5", "rate": "1.10"}  # so small that the policy would run it alone

    @capability(
        kind="execute",
        operation="convert",
        amount_usd=lambda a, ctx: Decimal(a.amount),
        regenerate=smaller,
    )
    async def convert(amount: Decimal, rate: str) -> dict[str, str]:
        """Convert USD to EUR at a rate."""
        return {"converted": str(amount), "rate": rate}

    return convert


SCRIPT = Script(
    "convert",
    [ToolCalls([Call("convert", {"amount": "500", "rate": "1.08"})]), Reply("converted")],
)


async def test_fresh_arguments_wait_for_a_person_and_reserve_nothing(
    store: Store, clock: ManualClock
) -> None:
    agent = make_agent(None, store, clock, SCRIPT, capabilities=[converter()], policy=POLICY)
    events = await collect(agent.run("convert 500", principal="ann"))
    (first,) = [e for e in events if isinstance(e, PendingAction)]
    await agent.regenerate(first.approval_id, by="ann")
    events = await collect(agent.resume(first.run_id))
    (second,) = [e for e in events if isinstance(e, PendingAction)]
    assert second.input == {"amount": "5", "rate": "1.10"}
    assert second.tier == "confirm"  # the policy says auto; the person asked, the person decides
    assert not [e for e in events if isinstance(e, ToolCallEnd)]  # nothing ran
    since = POLICY.day_start(clock.now())
    assert await store.autonomous_spend("ann", since=since) == Decimal(0)


async def test_a_hook_that_fails_ends_the_call_and_runs_nothing(
    store: Store, clock: ManualClock
) -> None:
    agent = make_agent(
        None, store, clock, SCRIPT, capabilities=[converter(fails=True)], policy=POLICY
    )
    events = await collect(agent.run("convert 500", principal="ann"))
    (first,) = [e for e in events if isinstance(e, PendingAction)]
    await agent.regenerate(first.approval_id, by="ann")
    events = await collect(agent.resume(first.run_id))
    assert [e.decision for e in events if isinstance(e, ActionResolved)] == ["superseded"]
    (rejected,) = [e for e in events if isinstance(e, ToolCallRejected)]
    assert "could not be made" in rejected.message
    assert "Nothing was executed" in rejected.message
    assert not [e for e in events if isinstance(e, PendingAction)]
    assert await store.list_approvals(run_id=first.run_id, status="pending") == []
