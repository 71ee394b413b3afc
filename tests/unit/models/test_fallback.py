"""FallbackModel: the next model answers a failure before any output, never after one."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from fiduciary import Agent, ConfigurationError, ModelError, RunCompleted, RunFailed, encode_event
from fiduciary.events import Event, TurnComplete, Usage
from fiduciary.models import FallbackModel
from fiduciary.models.base import (
    ModelEvent,
    ModelRequest,
    StreamFallback,
    StreamStop,
    StreamTextDelta,
    StreamToolCall,
)
from fiduciary.models.pricing import Price
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

OVERLOADED = ModelError("primary is overloaded", code="overloaded", retryable=True)
AUTH = ModelError("the key was refused", code="auth")


class Failing:
    """A model that fails, after streaming ``before`` (nothing by default)."""

    def __init__(
        self, error: ModelError, *, name: str = "primary", before: tuple[ModelEvent, ...] = ()
    ) -> None:
        self.error = error
        self._name = name
        self.before = before
        self.asked = 0

    @property
    def name(self) -> str:
        return self._name

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.asked += 1
        for event in self.before:
            yield event
        raise self.error


def secondary(*steps: Any, price: Price | None = None) -> ScriptedModel:
    return ScriptedModel(
        [Script("hello", list(steps) or [Reply("Hello from secondary.")])],
        name="secondary",
        price=price,
    )


def request() -> ModelRequest:
    return ModelRequest(system=("s",), messages=(), tools=())


async def events_of(model: FallbackModel) -> list[ModelEvent]:
    return [e async for e in model.stream(request())]


async def test_the_next_model_answers_a_failure_before_any_output() -> None:
    primary = Failing(OVERLOADED)
    model = FallbackModel([primary, secondary()])
    agent = Agent(model=model, capabilities=[], store=MemoryStore())
    events = await collect(agent.run("hello", principal="alice"))
    done = events[-1]
    assert isinstance(done, RunCompleted)
    assert done.text == "Hello from secondary."
    turn = next(e for e in events if isinstance(e, TurnComplete))
    assert turn.model == "secondary"
    assert [(f.model, f.reason) for f in turn.fallbacks] == [("primary", "overloaded")]
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.model == "secondary"
    assert primary.asked == 1
    assert model.name == "fallback:primary,secondary"


async def test_a_turn_is_priced_at_the_price_of_the_model_that_answered() -> None:
    million, zero = Decimal(1_000_000), Decimal(0)
    price = Price(input=million, output=zero, cache_read=zero, cache_write=zero)  # $1 a token
    model = FallbackModel([Failing(OVERLOADED), secondary(price=price)])
    agent = Agent(model=model, capabilities=[], store=MemoryStore())
    events = await collect(agent.run("hello", principal="alice"))
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.cost_usd == Decimal(usage.input_tokens)


async def test_a_failure_after_text_is_not_passed_on() -> None:
    primary = Failing(OVERLOADED, before=(StreamTextDelta("Hel"),))
    fallback = FallbackModel([primary, secondary()])
    with pytest.raises(ModelError, match="overloaded"):
        await events_of(fallback)
    agent = Agent(model=fallback, capabilities=[], store=MemoryStore())
    events = await collect(agent.run("hello", principal="alice"))
    assert isinstance(events[-1], RunFailed)
    assert "Hello from secondary" not in "".join(encode_event(e) for e in events)


async def test_a_failure_after_a_tool_call_is_never_passed_on() -> None:
    call = StreamToolCall(id="t1", name="pay", arguments="{}")
    primary = Failing(OVERLOADED, before=(call,))
    with pytest.raises(ModelError) as raised:
        await events_of(FallbackModel([primary, secondary()]))
    assert raised.value is OVERLOADED


async def test_an_error_that_is_not_an_outage_is_not_passed_on() -> None:
    with pytest.raises(ModelError, match="refused"):
        await events_of(FallbackModel([Failing(AUTH), secondary()]))
    # unless the rule says so
    relaxed = FallbackModel([Failing(AUTH), secondary()], fallback_on=lambda e: True)
    got = await events_of(relaxed)
    assert isinstance(got[0], StreamFallback)
    assert got[0].reason == "auth"


async def test_when_every_model_fails_the_error_names_them_all() -> None:
    model = FallbackModel(
        [Failing(OVERLOADED), Failing(OVERLOADED, name="backup"), Failing(OVERLOADED, name="last")]
    )
    with pytest.raises(ModelError, match=r"after primary: overloaded; backup: overloaded"):
        await events_of(model)


async def test_the_events_of_a_turn_without_fallback_are_unchanged() -> None:
    model = FallbackModel([secondary(), Failing(OVERLOADED, name="spare")])
    agent = Agent(model=model, capabilities=[], store=MemoryStore())
    events: list[Event] = await collect(agent.run("hello", principal="alice"))
    turn = next(e for e in events if isinstance(e, TurnComplete))
    assert set(json.loads(encode_event(turn))) == {"run_id", "seq", "at", "type", "stop_reason"}


async def test_a_tool_calling_secondary_runs_its_calls_through_the_gates() -> None:
    from fiduciary import capability

    @capability(kind="read")
    async def weather() -> str:
        """Today's weather."""
        return "sunny"

    model = FallbackModel(
        [Failing(OVERLOADED), secondary(ToolCalls([Call("weather")]), Reply("It is sunny."))]
    )
    agent = Agent(model=model, capabilities=[weather], store=MemoryStore(), authorize=allow_all)
    events = await collect(agent.run("hello", principal="alice"))
    assert isinstance(events[-1], RunCompleted)
    turns = [e for e in events if isinstance(e, TurnComplete)]
    assert [t.model for t in turns] == ["secondary", "secondary"]  # primary is down both times


async def test_structured_answers_fall_back_too() -> None:
    class Down:
        name = "down"

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            yield StreamStop("end_turn")

        async def complete_json(self, system: str, prompt: str, schema: dict[str, Any]) -> Any:
            raise OVERLOADED

    up = ScriptedModel([], name="up", json_answer={"ok": True})
    assert await FallbackModel([Down(), up]).complete_json("s", "p", {}) == {"ok": True}


def test_it_needs_two_distinct_models() -> None:
    with pytest.raises(ConfigurationError, match="at least two"):
        FallbackModel([secondary()])
    with pytest.raises(ConfigurationError, match="distinct names"):
        FallbackModel([secondary(), secondary()])
