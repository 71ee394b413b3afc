"""What the provider tests share: the scenario, its scripted twin, and projections to compare.

Every provider's recorded wire plays the same three turns: two reads in parallel (with text
before them), a payment that needs a person's approval, a final answer. ``SCRIPT`` is the same
conversation for ``ScriptedModel``; a provider passes when it yields what the scripted model
yields, once what only a real model has (thinking, token counts, call ids) is set aside.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fiduciary import Agent, Policy
from fiduciary.events import (
    Event,
    PendingAction,
    TextDelta,
    ThinkingDelta,
    ThinkingDone,
    ToolCallEnd,
    ToolCallStart,
)
from fiduciary.models.base import (
    Model,
    ModelEvent,
    ModelRequest,
    StreamRetry,
    StreamStop,
    StreamTextDelta,
    StreamThinkingDelta,
    StreamThinkingDone,
    StreamToolCall,
    StreamUsage,
    ToolSpec,
    UserTextMessage,
)
from fiduciary.testing import Call, MemoryStore, Reply, Script, ScriptedModel, ToolCalls, allow_all

from ..conftest import Effects, toy_capabilities

QUESTION = "Can I send bob 60 dollars? Check my balance and the EUR rate first."
READS_TEXT = "Let me check your balance and the rate."
ANSWER = "Sent 60 USD to bob. Your balance was 250 USD before it."

SCRIPT = Script(
    "send bob",
    [
        ToolCalls(
            [Call("balance", {"account": "main"}), Call("rates", {"currency": "EUR"})],
            text=READS_TEXT,
        ),
        ToolCalls([Call("send", {"to": "bob", "amount": "60"})]),
        Reply(ANSWER),
    ],
)

TOOLS = (
    ToolSpec("balance", "The balance of an account, in USD.", {"type": "object"}, "read"),
    ToolSpec("rates", "The exchange rate of a currency to USD.", {"type": "object"}, "read"),
)


def request(*, settings: dict[str, Any] | None = None) -> ModelRequest:
    return ModelRequest(
        system=("You act for a person.", "Read before you write."),
        messages=(UserTextMessage(QUESTION),),
        tools=TOOLS,
        settings=settings or {},
    )


async def events_of(model: Model, req: ModelRequest | None = None) -> list[ModelEvent]:
    return [e async for e in model.stream(req or request())]


async def events_until_error(
    model: Model, req: ModelRequest | None = None
) -> tuple[list[ModelEvent], Exception]:
    """The events a stream yielded before it raised, and what it raised."""
    seen: list[ModelEvent] = []
    try:
        async for event in model.stream(req or request()):
            seen.append(event)
    except Exception as exc:
        return seen, exc
    raise AssertionError("the stream did not fail")


def essence(events: Sequence[ModelEvent]) -> list[tuple[Any, ...]]:
    """What a turn says, whoever said it: text (joined), calls (parsed), the stop reason.

    Events before a ``StreamRetry`` are dropped, as a consumer must.
    """
    out: list[tuple[Any, ...]] = []
    text = ""
    for event in events:
        if isinstance(event, StreamRetry):
            out, text = [], ""
        elif isinstance(event, StreamTextDelta):
            text += event.text
        elif isinstance(event, StreamToolCall):
            if text:
                out.append(("text", text))
                text = ""
            out.append(("call", event.name, json.loads(event.arguments)))
        elif isinstance(event, StreamStop):
            if text:
                out.append(("text", text))
                text = ""
            out.append(("stop", event.reason))
        elif isinstance(
            event, StreamUsage | StreamThinkingDelta | StreamThinkingDone
        ):  # only real models have these
            continue
    return out


async def scripted_turn(step: int) -> list[tuple[Any, ...]]:
    """The essence of the scripted model's turn ``step`` (0: reads, 1: send, 2: answer)."""
    model = ScriptedModel([SCRIPT])
    from fiduciary.models.base import AssistantMessage, ToolResult, ToolResultsMessage

    messages: list[Any] = [UserTextMessage(QUESTION)]
    for _ in range(step):
        messages += [AssistantMessage(()), ToolResultsMessage((ToolResult("x", "{}"),))]
    req = ModelRequest(system=(), messages=tuple(messages), tools=TOOLS)
    return essence(await events_of(model, req))


# --- the agent scenario -------------------------------------------------------------------------


def build_agent(model: Model, effects: Effects) -> Agent:
    return Agent(
        model=model,
        capabilities=toy_capabilities(effects),
        store=MemoryStore(),
        policy=Policy(preset="balanced"),  # send: auto below 10, confirm below 200
        authorize=allow_all,
    )


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in events]


async def run_scenario(model: Model) -> tuple[list[Event], Effects]:
    """Ask, wait for the approval, approve, resume: every event of the run and what it did."""
    effects = Effects()
    agent = build_agent(model, effects)
    first = await collect(agent.run(QUESTION, principal="alice"))
    pending = [e for e in first if isinstance(e, PendingAction)]
    assert len(pending) == 1, [e.type for e in first]
    await agent.approve(pending[0].approval_id, by="alice")
    second = await collect(agent.resume(pending[0].run_id))
    return first + second, effects


def story(events: Sequence[Event]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """A run as a person would tell it: ids, token counts and thinking left out.

    Reads start as soon as the model names them, so when they end depends on how fast the
    model streams: their ends are returned apart, as a sorted list, after checking that each
    follows its start.
    """
    out: list[tuple[Any, ...]] = []
    ends: list[tuple[Any, ...]] = []
    started: set[str] = set()
    text = ""
    for event in events:
        if isinstance(event, ThinkingDelta | ThinkingDone):
            continue
        if isinstance(event, TextDelta):
            text += event.text
            continue
        if text:
            out.append(("text", text))
            text = ""
        if isinstance(event, ToolCallStart):
            started.add(event.tool_use_id)
            out.append((event.type, event.name, json.dumps(event.input, sort_keys=True)))
        elif isinstance(event, ToolCallEnd):
            assert event.tool_use_id in started, "a call ended before it started"
            ends.append((event.type, event.name, event.is_error))
        elif isinstance(event, PendingAction):
            out.append((event.type, event.name, str(event.amount_usd)))
        else:
            out.append((event.type,))
    return out, sorted(ends)


class Sleeps:
    """An injectable ``sleep`` that records the waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
