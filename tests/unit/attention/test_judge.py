"""The judge: schema, system prompt, lenient parsing, refusal, images, budget and halving."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fiduciary import ManualClock
from fiduciary.attention.actions import RouteAction
from fiduciary.attention.judge import (
    ANSWER,
    ANSWER_WITH_PREDICATES,
    DEFAULT_SYSTEM,
    CompleteRequest,
    JudgeAnswerError,
    judgment_schema,
    llm_judge,
    user_content,
)
from fiduciary.attention.record import AttentionRecord
from fiduciary.attention.types import (
    DEFAULT_CRITERIA,
    Batch,
    Incoming,
    JudgeImage,
    JudgeInput,
    PermanentError,
    Predicate,
    Role,
    RouteOffer,
    WindowEvent,
)
from fiduciary.attention.watch import Attention
from fiduciary.attention.window import DROPPABLE, tokens_of
from fiduciary.exceptions import ConfigurationError, ModelError
from fiduciary.models.scripted import ScriptedModel

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def offer(*routes: str) -> tuple[RouteOffer, ...]:
    return tuple(RouteOffer(route=r) for r in routes)


def window(roles: str) -> tuple[WindowEvent, ...]:
    """One event per letter: a act, c consequence, x context, f flush."""
    names: dict[str, Role] = {"a": "act", "c": "consequence", "x": "context", "f": "flush"}
    return tuple(
        WindowEvent(
            role=names[ch],
            type=f"e{i}",
            at=T0 + timedelta(minutes=i),
            data={"note": "price moved " * 5, "i": i},
            id=f"id-{i}",
        )
        for i, ch in enumerate(roles)
    )


def judge_input(**changes: Any) -> JudgeInput:
    base: dict[str, Any] = {"routes": offer("act", "notify", "drop"), "window": window("xa")}
    base.update(changes)
    return JudgeInput(**base)


class Recorder:
    """A ``complete`` callable answering from a list, recording each request."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: list[CompleteRequest] = []

    async def __call__(self, request: CompleteRequest) -> Any:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


async def no_sleep(_: float) -> None:
    return None


GOOD = {"route": "act", "probabilities": {"act": 0.6, "notify": 0.3, "drop": 0.1}}


# --- the schema -------------------------------------------------------------------------------


def _numbers(*keys: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": "number"} for k in keys},
        "required": list(keys),
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("routes", "predicates", "expected"),
    [
        (
            ["act", "drop"],
            [],
            {
                "type": "object",
                "properties": {
                    "route": {"type": "string", "enum": ["act", "drop"]},
                    "probabilities": _numbers("act", "drop"),
                },
                "required": ["route", "probabilities"],
                "additionalProperties": False,
            },
        ),
        (
            ["notify"],
            ["urgent"],
            {
                "type": "object",
                "properties": {
                    "route": {"type": "string", "enum": ["notify"]},
                    "probabilities": _numbers("notify"),
                    "predicates": _numbers("urgent"),
                },
                "required": ["route", "probabilities", "predicates"],
                "additionalProperties": False,
            },
        ),
        (
            ["act", "notify", "drop"],
            ["urgent", "fraud"],
            {
                "type": "object",
                "properties": {
                    "route": {"type": "string", "enum": ["act", "notify", "drop"]},
                    "probabilities": _numbers("act", "notify", "drop"),
                    "predicates": _numbers("urgent", "fraud"),
                },
                "required": ["route", "probabilities", "predicates"],
                "additionalProperties": False,
            },
        ),
    ],
)
def test_golden_schemas(routes: list[str], predicates: list[str], expected: Any) -> None:
    schema = judgment_schema(routes, predicates)
    assert schema == expected
    assert "minimum" not in json.dumps(schema)
    assert "maximum" not in json.dumps(schema)


async def test_the_request_carries_the_schema_of_the_offer_and_the_asked_predicates() -> None:
    complete = Recorder(GOOD)
    judge = llm_judge(complete)
    await judge(
        judge_input(
            routes=offer("act", "drop"), predicates=(Predicate(name="urgent", question="Now?"),)
        )
    )
    assert complete.requests[0].schema == judgment_schema(["act", "drop"], ["urgent"])


# --- the system prompt ------------------------------------------------------------------------


async def test_system_prompt_layout_and_criteria_precedence() -> None:
    complete = Recorder(GOOD, GOOD)
    judge = llm_judge(complete, system="BASE", criteria={"act": "configured act", "hold": "wait"})
    routes = (
        RouteOffer(route="act"),
        RouteOffer(route="notify", criterion="from the input"),
        RouteOffer(route="drop"),
    )
    await judge(judge_input(routes=routes))
    assert complete.requests[0].system == "\n".join(
        [
            "BASE",
            "",
            "Routes on offer:",
            "- act: configured act",
            "- notify: from the input",
            f"- drop: {DEFAULT_CRITERIA['drop']}",
            "",
            ANSWER,
        ]
    )
    await judge(
        judge_input(
            routes=(RouteOffer(route="hold"), RouteOffer(route="act", criterion="input wins")),
            predicates=(Predicate(name="p", question="q?"),),
        )
    )
    assert complete.requests[1].system.splitlines()[3:] == [
        "- hold: wait",
        "- act: input wins",
        "",
        ANSWER_WITH_PREDICATES,
    ]


async def test_a_route_without_any_criterion_is_a_permanent_error() -> None:
    judge = llm_judge(Recorder(GOOD))
    with pytest.raises(PermanentError, match="no criterion for route 'escalate'"):
        await judge(judge_input(routes=offer("escalate")))


# --- parsing ----------------------------------------------------------------------------------


async def test_lenient_parse_keeps_finite_numbers_under_known_keys_and_renormalises() -> None:
    reply = {
        "route": "notify",
        "probabilities": {"act": 1, "notify": 3, "drop": "x", "other": 5, "nan": float("nan")},
        "predicates": {"urgent": 0.7, "fraud": float("inf"), "stray": 0.2},
    }
    complete = Recorder(reply)
    judge = llm_judge(complete)
    predicates = (Predicate(name="urgent", question="?"), Predicate(name="fraud", question="?"))
    judgment = await judge(judge_input(predicates=predicates))
    assert len(complete.requests) == 1  # no retry for garbled ride-alongs
    assert judgment.route == "notify"
    assert judgment.probabilities == {"act": 0.25, "notify": 0.75}
    assert judgment.predicates == {"urgent": 0.7}


async def test_a_route_outside_the_offer_is_asked_again_with_backoff() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    complete = Recorder({"route": "sell"}, [1, 2], GOOD)
    judge = llm_judge(complete, sleep=sleep, jitter=lambda: 1.0, backoff=2.0)
    judgment = await judge(judge_input())
    assert judgment.route == "act"
    assert len(complete.requests) == 3
    assert waits == [2.0, 4.0]


async def test_a_route_outside_the_offer_every_time_raises_after_the_attempts() -> None:
    complete = Recorder({"route": "sell"}, {"route": "sell"}, {"route": "sell"})
    judge = llm_judge(complete, sleep=no_sleep)
    with pytest.raises(JudgeAnswerError, match='route "sell", which is not one of'):
        await judge(judge_input())
    assert len(complete.requests) == 3


async def test_a_refusal_is_permanent_and_not_retried() -> None:
    complete = Recorder(ModelError("m refused to answer", code="refused"), GOOD)
    judge = llm_judge(complete, sleep=no_sleep)
    with pytest.raises(PermanentError, match="refused"):
        await judge(judge_input())
    assert len(complete.requests) == 1


async def test_a_permanent_error_from_complete_is_not_retried() -> None:
    complete = Recorder(PermanentError("judge refused"), GOOD)
    with pytest.raises(PermanentError):
        await llm_judge(complete, sleep=no_sleep)(judge_input())
    assert len(complete.requests) == 1


async def test_through_a_structured_model() -> None:
    seen: list[tuple[str, str, Any]] = []

    def answer(system: str, prompt: str, schema: Any) -> Any:
        seen.append((system, prompt, schema))
        return GOOD

    model = ScriptedModel([], json_answer=answer, name="scripted")
    judgment = await llm_judge(model)(judge_input())
    assert judgment.route == "act"
    assert judgment.model == "scripted"
    assert seen[0][0].startswith(DEFAULT_SYSTEM)
    assert json.loads(seen[0][1])["window"][0]["role"] == "context"
    assert judgment.prompt_tokens == tokens_of(seen[0][0] + seen[0][1])


# --- images -----------------------------------------------------------------------------------


async def test_images_are_passed_and_placed_after_the_prompt() -> None:
    image = JudgeImage(mime_type="image/png", data="aGk=")
    complete = Recorder(GOOD)
    await llm_judge(complete)(judge_input(images=(image,)))
    request = complete.requests[0]
    assert request.images == (image,)
    blocks = user_content(request)
    assert [b["type"] for b in blocks] == ["text", "image"]
    assert blocks[1]["source"]["data"] == "aGk="
    assert [b["type"] for b in user_content(request, style="openai")] == [
        "input_text",
        "input_image",
    ]


async def test_a_structured_model_refuses_images_clearly() -> None:
    model = ScriptedModel([], json_answer=GOOD)
    image = JudgeImage(mime_type="image/png", data="aGk=")
    with pytest.raises(PermanentError, match="takes no images"):
        await llm_judge(model)(judge_input(images=(image,)))


# --- budget -----------------------------------------------------------------------------------


def test_context_tokens_not_above_reserved_names_both() -> None:
    reserved = llm_judge(Recorder()).reserved_tokens
    assert reserved > 100
    with pytest.raises(ConfigurationError) as caught:
        llm_judge(Recorder(), context_tokens=reserved)
    assert f"context_tokens is {reserved}" in str(caught.value)
    assert f"takes {reserved} reserved_tokens" in str(caught.value)
    judge = llm_judge(Recorder(), context_tokens=reserved + 1)
    assert judge.budget is not None
    assert judge.budget.reserved_tokens == reserved


def roles_of(prompt: str) -> list[str]:
    return [e["role"] for e in json.loads(prompt)["window"]]


async def test_the_window_drops_oldest_droppable_first_and_acts_survive_any_trim() -> None:
    roles = "xaxcfxcaxx" * 4
    complete = Recorder(GOOD)
    reserved = llm_judge(Recorder()).reserved_tokens
    judge = llm_judge(complete, context_tokens=reserved + 800)
    await judge(judge_input(window=window(roles)))
    prompt = complete.requests[0].prompt
    kept = json.loads(prompt)["window"]
    assert tokens_of(prompt) <= 800
    assert [e["role"] for e in kept].count("act") == roles.count("a")
    assert [e["role"] for e in kept].count("flush") == roles.count("f")
    kept_droppable = [e["type"] for e in kept if e["role"] in DROPPABLE]
    all_droppable = [f"e{i}" for i, ch in enumerate(roles) if ch in "xc"]
    assert 0 < len(kept_droppable) < len(all_droppable)
    assert kept_droppable == all_droppable[-len(kept_droppable) :]  # the newest stayed
    assert json.loads(prompt)["older_events_omitted"] == len(all_droppable) - len(kept_droppable)


async def test_acts_survive_even_a_budget_they_exceed() -> None:
    complete = Recorder(GOOD)
    reserved = llm_judge(Recorder()).reserved_tokens
    await llm_judge(complete, context_tokens=reserved + 10)(judge_input(window=window("axfaxa")))
    assert roles_of(complete.requests[0].prompt) == ["act", "flush", "act", "act"]


CONTEXT_ERROR = ModelError(
    "m: 400 invalid_request_error prompt is too long: 210000 tokens > 200000 maximum",
    code="bad_request",
    status=400,
)


async def test_a_context_length_rejection_once_is_asked_again_with_the_window_halved() -> None:
    complete = Recorder(CONTEXT_ERROR, GOOD)
    judge = llm_judge(complete, sleep=no_sleep)
    roles = "xcxaxxcfxx"
    judgment = await judge(judge_input(window=window(roles)))
    assert judgment.route == "act"
    assert len(complete.requests) == 2
    first, second = (roles_of(r.prompt) for r in complete.requests)
    droppable = [r for r in first if r in DROPPABLE]
    assert len([r for r in second if r in DROPPABLE]) <= len(droppable) // 2
    assert second.count("act") == 1
    assert second.count("flush") == 1


async def test_a_context_length_rejection_twice_propagates() -> None:
    complete = Recorder(CONTEXT_ERROR, CONTEXT_ERROR, GOOD)
    with pytest.raises(PermanentError, match="even with the window halved"):
        await llm_judge(complete, sleep=no_sleep)(judge_input(window=window("xxxx")))
    assert len(complete.requests) == 2


async def test_an_sdk_error_with_a_status_naming_the_context_length_also_halves() -> None:
    class BadRequestError(Exception):
        status_code = 400

    complete = Recorder(BadRequestError("This model's maximum context length is 8192 tokens"), GOOD)
    assert (await llm_judge(complete, sleep=no_sleep)(judge_input())).route == "act"
    assert len(complete.requests) == 2


async def test_a_context_length_rejection_of_a_window_that_cannot_shrink_is_permanent_at_once() -> (
    None
):
    """Only acts and flushes: halving would send the identical prompt, so it is not sent."""
    complete = Recorder(CONTEXT_ERROR, GOOD)
    with pytest.raises(PermanentError) as caught:
        await llm_judge(complete, sleep=no_sleep)(judge_input(window=window("afaf")))
    assert len(complete.requests) == 1
    prompt = complete.requests[0].prompt
    assert str(caught.value).startswith(
        f"the judge's prompt ({len(prompt)} characters) does not fit the model's context and "
        "cannot shrink: only acts and flushes remain in its window: "
    )


async def test_a_window_that_cannot_shrink_leaves_a_dead_letter_saying_why() -> None:
    complete = Recorder(CONTEXT_ERROR, GOOD)
    record = AttentionRecord()
    attention = Attention(
        judge=llm_judge(complete, sleep=no_sleep),
        record=record,
        routes={"notify": RouteAction(do="notify"), "drop": RouteAction(do="drop")},
        clock=ManualClock(T0),
    )
    event = Incoming(id="ev-1", source="list", type="run_started", at=T0, role="act")
    (decision,) = await attention.accept("list", Batch(events=(event,), cursor="1"))
    assert decision.kind == "dead_letter"
    assert decision.error is not None
    assert "does not fit the model's context and cannot shrink" in decision.error
    assert len(complete.requests) == 1
    assert await record.pending() == []
    await record.close()
