"""A child's model spend counts against its parent's budget, and a child's share is enforced."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from fiduciary import Agent, ManualClock, capability
from fiduciary.delegation import child_run_id, delegated_spend
from fiduciary.events import RunCompleted, RunFailed, RunStarted, ToolCallEnd
from fiduciary.models.base import AssistantMessage, ToolResult, ToolResultsMessage, ToolUsePart
from fiduciary.models.pricing import Price
from fiduciary.testing import (
    Call,
    MemoryStore,
    Reply,
    Results,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
    collect,
)

EXPENSIVE = Price.of({"input": "10", "output": "10"})  # USD per million tokens


@capability
def get_balance() -> dict[str, str]:
    """The balance."""
    return {"usd": "42.00"}


def team(manager_steps: list[Any], *, budget: str) -> tuple[Agent, MemoryStore]:
    store = MemoryStore()
    options: dict[str, Any] = {"store": store, "clock": ManualClock(), "authorize": allow_all}
    worker = Agent(
        model=ScriptedModel([Script("balance", [Reply("it is $42.00")])], price=EXPENSIVE),
        capabilities=[get_balance],
        **options,
    )
    manager = Agent(
        model=ScriptedModel([Script("how much", manager_steps)]),
        capabilities=[get_balance],
        delegates={"worker": worker},
        budget_usd=budget,
        **options,
    )
    return manager, store


def just_over(results: Results) -> dict[str, str]:
    # less than the whole budget, more than what the first child's spend leaves
    asked = Decimal(5) - Decimal(results["delegate"]["cost_usd"]) / 2
    return {"agent": "worker", "task": "the balance again", "budget_usd": str(asked)}


async def test_an_earlier_childs_spend_leaves_less_for_the_next() -> None:
    first = {"agent": "worker", "task": "the balance"}
    manager, store = team(
        [
            ToolCalls([Call("delegate", first)]),
            ToolCalls([Call("delegate", just_over)]),
            Reply(lambda r: r.errors.get("delegate", "no error")),
        ],
        budget="5",
    )
    events = await collect(manager.run("how much?", principal="alice"))
    ends = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "delegate"]
    assert [e.is_error for e in ends] == [False, True]
    assert "over_budget" in str(ends[1].output)
    spent = Decimal(str(ends[0].output).split('"cost_usd": "')[1].split('"')[0])
    assert spent > 0  # the worker's model is priced: the refusal counted its spend
    assert len(await store.list_runs()) == 2  # the second child was never started


async def test_a_child_stops_at_its_share() -> None:
    ask = {"agent": "worker", "task": "the balance", "budget_usd": "0.000001"}
    manager, store = team(
        [ToolCalls([Call("delegate", ask)]), Reply(lambda r: r["delegate"]["text"])], budget="5"
    )
    events = await collect(manager.run("how much?", principal="alice"))
    started = events[0]
    assert isinstance(started, RunStarted)
    child = child_run_id(started.run_id, "toolu_000_0")
    child_log = await store.read_events(child)
    first = child_log[0]
    assert isinstance(first, RunStarted)
    assert first.budget_usd == Decimal("0.000001")
    assert isinstance(child_log[-1], RunFailed)
    assert child_log[-1].reason == "budget"
    final = events[-1]
    assert isinstance(final, RunCompleted)
    assert final.text.startswith("failed (budget)")


def test_the_childrens_spend_is_read_from_the_parents_log() -> None:
    uses = (ToolUsePart("t1", "delegate", {}), ToolUsePart("t2", "get_balance", {}))
    child = '{"agent": "w", "run_id": "x", "status": "completed", "text": "", "cost_usd": "0.25"}'
    results = ToolResultsMessage((ToolResult("t1", child), ToolResult("t2", '{"cost_usd": "9"}')))
    assert delegated_spend([AssistantMessage(uses), results]) == Decimal("0.25")
    again = ToolResultsMessage((ToolResult("t3", child.replace("0.25", "1")),))
    turn = AssistantMessage((ToolUsePart("t3", "delegate", {}),))
    assert delegated_spend([AssistantMessage(uses), results, turn, again]) == Decimal("1.25")
    refused = ToolResultsMessage((ToolResult("t1", child, is_error=True),))
    assert delegated_spend([AssistantMessage(uses), refused]) == 0
