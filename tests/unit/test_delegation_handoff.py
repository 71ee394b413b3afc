"""A handoff: the delegated agent's answer is the parent run's final answer, with no model turn
of the parent's after it (also when the parent is resumed from its log)."""

from __future__ import annotations

from typing import Any

from fiduciary import Agent, ManualClock, capability
from fiduciary.delegation import handoff_answer
from fiduciary.events import RunCompleted, RunStarted, TurnComplete
from fiduciary.models.base import (
    AssistantMessage,
    ToolResult,
    ToolResultsMessage,
    ToolUsePart,
)
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


@capability
def get_balance() -> dict[str, str]:
    """The balance."""
    return {"usd": "42.00"}


def pair(handoff: bool) -> tuple[Agent, MemoryStore]:
    store = MemoryStore()
    options: dict[str, Any] = {"store": store, "clock": ManualClock(), "authorize": allow_all}
    worker = Agent(
        model=ScriptedModel([Script("balance", [Reply("You have $42.00.")])]),
        capabilities=[get_balance],
        **options,
    )
    task = {"agent": "worker", "task": "answer about the balance", "handoff": handoff}
    manager = Agent(
        model=ScriptedModel(
            [Script("how much", [ToolCalls([Call("delegate", task)]), Reply("the manager's")])]
        ),
        capabilities=[get_balance],
        delegates={"worker": worker},
        **options,
    )
    return manager, store


async def test_a_handoff_answers_the_person_with_the_childs_words() -> None:
    manager, _ = pair(handoff=True)
    events = await collect(manager.run("how much do I have?", principal="alice"))
    final = events[-1]
    assert isinstance(final, RunCompleted)
    assert final.text == "You have $42.00."
    assert len([e for e in events if isinstance(e, TurnComplete)]) == 1  # no reply of its own


async def test_without_a_handoff_the_parent_answers() -> None:
    manager, _ = pair(handoff=False)
    events = await collect(manager.run("how much do I have?", principal="alice"))
    final = events[-1]
    assert isinstance(final, RunCompleted)
    assert final.text == "the manager's"
    started = events[0]
    assert isinstance(started, RunStarted)


def test_the_handoff_is_read_from_the_log_alone() -> None:
    use = ToolUsePart(id="toolu_1", name="delegate", input={})
    ok = (
        '{"agent": "worker", "run_id": "x", "status": "completed", "text": "hi", '
        '"cost_usd": "0", "handoff": true}'
    )
    turn = AssistantMessage((use,))
    assert handoff_answer([turn, ToolResultsMessage((ToolResult("toolu_1", ok),))]) == "hi"
    failed = ok.replace('"completed"', '"failed"')
    assert handoff_answer([turn, ToolResultsMessage((ToolResult("toolu_1", failed),))]) is None
    refused = ToolResultsMessage((ToolResult("toolu_1", ok, is_error=True),))
    assert handoff_answer([turn, refused]) is None
    assert handoff_answer([turn]) is None
