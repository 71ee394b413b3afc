"""A write in a run an outside event started (an attention decision, a webhook, an app's tick,
a chat that is not the principal's) never runs on its own unless the origin's autonomous
budget allows it; the principal in person keeps the policy's tiers."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from fiduciary import Agent, Capability, ManualClock, Policy, capability, run_sync
from fiduciary.events import Origin, PendingAction, RunStarted, UserMessage
from fiduciary.policy import PRESETS
from fiduciary.testing import (
    Call,
    MemoryStore,
    Reply,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
    collect,
)

WRITE_KINDS = ("propose", "approve", "execute")


def saving(kind: str, done: list[str]) -> Capability:
    @capability(kind=kind, operation="save", amount_usd=lambda args, ctx: Decimal(args.usd))
    async def save_money(usd: str) -> dict[str, str]:
        """Move USD to savings."""
        done.append(usd)
        return {"saved": usd}

    return save_money


async def run_saving(
    preset: str, kind: str, usd: str, origin: Origin | None
) -> tuple[str, list[str]]:
    """One run that saves ``usd``: the run's status and what the handler executed."""
    done: list[str] = []
    script = Script("save", [ToolCalls([Call("save_money", {"usd": usd})]), Reply("ok")])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[saving(kind, done)],
        store=MemoryStore(),
        clock=ManualClock(),
        policy=Policy(preset=preset),
        authorize=allow_all,
    )
    events = await collect(agent.run("save some", principal="alice", origin=origin))
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.origin == origin
    assert isinstance(events[1], UserMessage)
    assert events[1].origin == origin
    return (await agent.get_run(started.run_id)).status, done


ALL = [(p, k) for p in sorted(PRESETS) for k in WRITE_KINDS]


@pytest.mark.parametrize(("preset", "kind"), ALL)
async def test_the_principal_in_person_keeps_the_policys_auto_tier(preset: str, kind: str) -> None:
    assert await run_saving(preset, kind, "1", None) == ("completed", ["1"])


@pytest.mark.parametrize(("preset", "kind"), ALL)
async def test_an_outside_event_without_a_budget_never_runs_a_write_on_its_own(
    preset: str, kind: str
) -> None:
    status, done = await run_saving(preset, kind, "1", Origin(source="attention:act"))
    assert (status, done) == ("awaiting_approval", [])


@pytest.mark.parametrize(("preset", "kind"), ALL)
async def test_a_budget_lets_writes_run_within_its_operations_and_cap_and_a_person_beyond(
    preset: str, kind: str
) -> None:
    budget = Origin(source="webhook:bank", budget={"save": Decimal("2")})
    assert await run_saving(preset, kind, "1", budget) == ("completed", ["1"])
    assert await run_saving(preset, kind, "2", budget) == ("completed", ["2"])
    # $3 is automatic for the principal under every preset, but beyond this budget
    assert await run_saving(preset, kind, "3", None) == ("completed", ["3"])
    assert await run_saving(preset, kind, "3", budget) == ("awaiting_approval", [])
    other = Origin(source="webhook:bank", budget={"send": Decimal("100")})
    assert await run_saving(preset, kind, "1", other) == ("awaiting_approval", [])


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_policy_says_why_and_a_budgeted_write_still_counts_toward_the_daily_limit(
    preset: str,
) -> None:
    cap = saving("execute", [])
    policy = Policy(preset=preset)
    held = policy.decide(cap, Decimal("1"), origin=Origin(source="attention:act"))
    assert held.tier == "confirm"
    assert held.reason == (
        "started by attention:act, with no autonomous budget: a person approves writes"
    )
    budget = Origin(source="attention:act", budget={"save": Decimal("2")})
    beyond = policy.decide(cap, Decimal("3"), origin=budget)
    assert beyond.reason == "beyond the autonomous budget of attention:act (save up to $2 a call)"
    assert policy.decide(cap, Decimal("1"), origin=budget).tier == "auto"
    limited = policy.decide(cap, Decimal("1"), origin=budget, spent_today=Decimal("99.5"))
    assert (limited.tier, limited.limited) == ("confirm", True)


def test_a_budget_is_money_never_a_float() -> None:
    with pytest.raises(ValidationError, match="must be a Decimal, an int or a string"):
        Origin.model_validate({"source": "x", "budget": {"save": 2.5}})
    with pytest.raises(ValidationError, match="must be an amount >= 0"):
        Origin.model_validate({"source": "x", "budget": {"save": "-1"}})
    parsed = Origin.model_validate({"source": "x", "budget": {"save": "2.50"}})
    assert parsed.budget == {"save": Decimal("2.50")}


async def test_the_card_of_an_outside_write_says_why_a_person_is_asked() -> None:
    done: list[str] = []
    script = Script("save", [ToolCalls([Call("save_money", {"usd": "1"})]), Reply("ok")])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[saving("propose", done)],
        authorize=allow_all,
    )
    events = await collect(agent.run("save", principal="a", origin=Origin(source="tick")))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    assert (pending.tier, pending.amount_usd) == ("confirm", Decimal("1"))
    (note,) = pending.guard_notes  # the card says why the person is asked
    assert (note.guard, note.verdict) == ("outside_event", "warn")
    assert note.message == "started by tick, with no autonomous budget: a person approves writes"


def test_the_blocking_api_records_an_origin_too() -> None:
    done: list[str] = []
    script = Script("save", [ToolCalls([Call("save_money", {"usd": "1"})]), Reply("ok")])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[saving("execute", done)],
        authorize=allow_all,
    )
    result = run_sync(agent, "save", principal="a", origin=Origin(source="cron:nightly"))
    assert (result.status, done) == ("awaiting_approval", [])
    assert [p.name for p in result.pending] == ["save_money"]
