"""The loop with the model layer: tiers and effort per turn, costs in usage, the run budget,
and a model call asked again after part of it was streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal

import pytest

from fiduciary import Agent, Policy
from fiduciary.events import (
    Event,
    RunCompleted,
    RunFailed,
    RunStarted,
    TextDelta,
    TurnRetracted,
    Usage,
)
from fiduciary.models.base import (
    ModelEvent,
    ModelRequest,
    StreamRetry,
    StreamStop,
    StreamTextDelta,
    StreamUsage,
)
from fiduciary.models.pricing import Price, estimate_call_usd
from fiduciary.models.tiers import TieredModel
from fiduciary.testing import MemoryStore, Reply, Script, ScriptedModel, allow_all

from ..conftest import Effects, toy_capabilities
from .helpers import QUESTION, SCRIPT, run_scenario

PRICE = Price(Decimal("3"), Decimal("15"), Decimal("0.30"), Decimal("3.75"))


def agent(model: object, **options: object) -> Agent:
    return Agent(
        model=model,  # type: ignore[arg-type]
        capabilities=toy_capabilities(Effects()),
        store=MemoryStore(),
        policy=Policy(preset="balanced"),
        authorize=allow_all,
        **options,  # type: ignore[arg-type]
    )


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in events]


async def test_tier_effort_and_cost_are_in_the_events() -> None:
    model = ScriptedModel([SCRIPT], price=PRICE)
    events, _ = await run_scenario(model)
    started = events[0]
    assert isinstance(started, RunStarted)
    # send is a high-risk financial write; "send bob 60 dollars": an operation and an amount
    assert (started.tier, started.effort) == ("powerful", "medium")
    usages = [e for e in events if isinstance(e, Usage)]
    assert {(u.tier, u.effort) for u in usages} == {("powerful", "medium")}
    for usage in usages:
        expected = (usage.input_tokens * 3 + usage.output_tokens * 15) / Decimal(1_000_000)
        assert usage.cost_usd == expected
    assert usages[-1].total_cost_usd == sum((u.cost_usd or Decimal(0) for u in usages), Decimal(0))
    completed = events[-1]
    assert isinstance(completed, RunCompleted)
    assert completed.cost_usd == usages[-1].total_cost_usd
    assert model.requests[0].settings == {"tier": "powerful", "effort": "medium"}


async def test_overrides_win() -> None:
    model = ScriptedModel([SCRIPT])
    a = agent(model, model_tier="fast", model_settings={"effort": "low"})
    events = await collect(a.run(QUESTION, principal="alice"))
    started = events[0]
    assert isinstance(started, RunStarted)
    assert (started.tier, started.effort) == ("fast", "low")
    assert model.requests[0].settings == {"effort": "low", "tier": "fast"}


async def test_a_tiered_model_answers_with_the_tier_s_model_and_its_price() -> None:
    fast = ScriptedModel([SCRIPT], name="x:fast", price=Price.of({"input": "1", "output": "1"}))
    standard = ScriptedModel([SCRIPT], name="x:standard")
    powerful = ScriptedModel([SCRIPT], name="x:powerful", price=PRICE)
    tiered = TieredModel(fast=fast, standard=standard, powerful=powerful, name="x:auto")
    events = await collect(agent(tiered).run(QUESTION, principal="alice"))
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.model == "x:powerful"
    assert usage.cost_usd == (usage.input_tokens * 3 + usage.output_tokens * 15) / Decimal(10**6)
    assert len(powerful.requests) == 2  # the reads, then the payment
    assert not fast.requests
    assert not standard.requests
    plan_first = await collect(agent(tiered).run(QUESTION, principal="bob", plan_first=True))
    assert next(e for e in plan_first if isinstance(e, Usage)).model == "x:fast"


async def test_the_budget_stops_the_run_before_the_call_that_would_exceed_it() -> None:
    unlimited = ScriptedModel([SCRIPT], price=PRICE)
    await collect(agent(unlimited).run(QUESTION, principal="alice"))
    first = estimate_call_usd(PRICE, unlimited.requests[0])
    assert first is not None
    # a budget of exactly the first call's worst case: it is made; the second (a longer request
    # on top of what the first cost) would pass the budget, so it is not
    model = ScriptedModel([SCRIPT], price=PRICE)
    events = await collect(agent(model, budget_usd=first).run(QUESTION, principal="alice"))
    failed = events[-1]
    assert isinstance(failed, RunFailed)
    assert failed.reason == "budget"
    assert "budget" in failed.message
    assert len(model.requests) == 1  # the first call was made, the second was not
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.total_cost_usd is not None
    assert usage.total_cost_usd < first


async def test_a_budget_without_a_price_refuses_at_once() -> None:
    model = ScriptedModel([SCRIPT], name="openai:unpriced-model")
    events = await collect(agent(model, budget_usd=Decimal(5)).run(QUESTION, principal="alice"))
    failed = events[-1]
    assert isinstance(failed, RunFailed)
    assert failed.reason == "budget"
    assert "no price is known for openai:unpriced-model" in failed.message
    assert not model.requests


def test_a_bad_budget_is_a_configuration_error() -> None:
    from fiduciary.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError):
        agent(ScriptedModel([]), budget_usd="-1")
    with pytest.raises(ConfigurationError):
        agent(ScriptedModel([]), budget_usd="lots")


class Stuttering:
    """Streams some text, is asked again (``StreamRetry``), then answers in full."""

    name = "stuttering"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield StreamTextDelta("Sent 6")
        yield StreamRetry(1, "overloaded")
        yield StreamTextDelta("Nothing was sent.")
        yield StreamUsage(input_tokens=10, output_tokens=4)
        yield StreamStop("end_turn")


async def test_a_retried_call_retracts_what_it_had_streamed() -> None:
    events = await collect(agent(Stuttering()).run("hello", principal="alice"))
    kinds = [e.type for e in events]
    assert kinds[2:7] == ["text_delta", "turn_retracted", "text_delta", "text_delta", "usage"]
    retracted = events[3]
    assert isinstance(retracted, TurnRetracted)
    assert retracted.from_seq == events[2].seq
    # a line's last word is held until what follows it shows it is not a piece of a secret:
    # the retried turn's held "6" is dropped, the answer's last word comes at the turn's end
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == ["Sent ", "Nothing was ", "sent."]
    completed = events[-1]
    assert isinstance(completed, RunCompleted)
    assert completed.text == "Nothing was sent."


async def test_no_budget_means_no_estimate_and_no_refusal() -> None:
    model = ScriptedModel([Script("hello", [Reply("hi")])], name="openai:unpriced-model")
    events = await collect(agent(model).run("hello", principal="alice"))
    assert isinstance(events[-1], RunCompleted)
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.cost_usd is None
    assert usage.total_cost_usd == Decimal(0)
