"""Typed output (fiduciary.outputs): the answer validated against a type, retried, recorded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, field_validator
from typing_extensions import TypedDict  # pydantic wants it on Python < 3.12

from fiduciary import (
    Agent,
    ConfigurationError,
    RunCompleted,
    RunError,
    RunFailed,
    RunStarted,
    ToolCallEnd,
    capability,
    decode_event,
    encode_event,
    run_sync,
)
from fiduciary.events import Event, TurnComplete
from fiduciary.models.base import ToolResultsMessage, UserTextMessage
from fiduciary.outputs import OUTPUT_TOOL, OutputSpec, Valid
from fiduciary.stores.base import Store
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

ALICE = "alice"


class Invoice(BaseModel):
    """An invoice's number and total."""

    number: str
    total: Decimal

    @field_validator("number")
    @classmethod
    def _shaped(cls, value: str) -> str:
        if not value.startswith("INV-"):
            raise ValueError("an invoice number starts with INV-")
        return value


@dataclass
class Line:
    item: str
    qty: int


class Totals(TypedDict):
    net: Decimal
    tax: Decimal


def answer(args: dict[str, Any], text: str = "") -> ToolCalls:
    return ToolCalls([Call(OUTPUT_TOOL, args)], text=text)


def agent_with(store: Store, *steps: Any, **options: Any) -> Agent:
    @capability(kind="read")
    async def fetch(doc: str) -> str:
        """A document's text."""
        return f"Invoice INV-7, total 12.50 ({doc})"

    model = ScriptedModel([Script("invoice", list(steps))])
    options.setdefault("output_type", Invoice)
    return Agent(model=model, capabilities=[fetch], store=store, authorize=allow_all, **options)


def of(events: list[Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


async def test_a_valid_answer_completes_the_run_with_its_typed_output() -> None:
    store = MemoryStore()
    agent = agent_with(
        store,
        ToolCalls([Call("fetch", {"doc": "a.pdf"})]),
        answer({"number": "INV-7", "total": "12.50"}, text="Here it is."),
    )
    events = await collect(agent.run("read the invoice", principal=ALICE))
    done = events[-1]
    assert isinstance(done, RunCompleted)
    assert done.output == {"number": "INV-7", "total": "12.50"}
    assert done.text == "Here it is."
    value = await agent.output(done.run_id)
    assert value == Invoice(number="INV-7", total=Decimal("12.50"))
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.output_type == f"{__name__}.Invoice"
    assert started.output_retries == 1
    # the model was offered the answer's tool, with the type's schema and its docstring
    request = agent.model.requests[0]  # type: ignore[attr-defined]
    tool = next(t for t in request.tools if t.name == OUTPUT_TOOL)
    assert set(tool.input_schema["properties"]) == {"number", "total"}
    assert "invoice's number and total" in tool.description
    # the answer's call has its result in the log: the conversation can go on
    ends = [e for e in of(events, ToolCallEnd) if e.name == OUTPUT_TOOL]
    assert [e.is_error for e in ends] == [False]


async def test_an_invalid_answer_goes_back_to_the_model_with_the_errors() -> None:
    store = MemoryStore()
    agent = agent_with(
        store,
        answer({"number": "7", "total": "twelve"}),
        answer({"number": "INV-7", "total": "12.50"}),
    )
    events = await collect(agent.run("invoice please", principal=ALICE))
    assert isinstance(events[-1], RunCompleted)
    rejected = [e for e in of(events, ToolCallEnd) if e.is_error]
    assert [e.error_code for e in rejected] == ["invalid_answer"]
    told = rejected[0].output
    assert "number: Value error, an invoice number starts with INV-" in told
    assert "total:" in told
    assert "twelve" not in told  # the errors, never the input echoed back
    second = agent.model.requests[1]  # type: ignore[attr-defined]
    last = second.messages[-1]
    assert isinstance(last, ToolResultsMessage)
    assert last.results[0].is_error
    assert (await agent.output(events[-1].run_id)).number == "INV-7"


async def test_past_its_retries_the_run_fails_with_invalid_output() -> None:
    store = MemoryStore()
    bad = answer({"number": "INV-1"})
    agent = agent_with(store, bad, bad, bad, output_retries=1)
    events = await collect(agent.run("invoice please", principal=ALICE))
    failed = events[-1]
    assert isinstance(failed, RunFailed)
    assert failed.reason == "invalid_output"
    assert "after 2 attempts" in failed.message
    assert len(agent.model.requests) == 2  # type: ignore[attr-defined]
    assert (await agent.get_run(failed.run_id)).status == "failed"


async def test_zero_retries_fails_at_the_first_invalid_answer() -> None:
    agent = agent_with(MemoryStore(), answer({}), output_retries=0)
    events = await collect(agent.run("invoice please", principal=ALICE))
    assert isinstance(events[-1], RunFailed)
    assert events[-1].reason == "invalid_output"


async def test_text_that_is_the_type_as_json_is_accepted() -> None:
    agent = agent_with(MemoryStore(), Reply('```json\n{"number": "INV-9", "total": 3}\n```'))
    events = await collect(agent.run("invoice please", principal=ALICE))
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].output == {"number": "INV-9", "total": "3"}


async def test_text_that_is_not_an_answer_is_refused_on_its_turn() -> None:
    agent = agent_with(
        MemoryStore(), Reply("The total is 12.50."), answer({"number": "INV-7", "total": 1})
    )
    events = await collect(agent.run("invoice please", principal=ALICE))
    turns = of(events, TurnComplete)
    assert turns[0].output_error is not None
    assert OUTPUT_TOOL in turns[0].output_error
    assert turns[1].output_error is None
    second = agent.model.requests[1]  # type: ignore[attr-defined]
    assert isinstance(second.messages[-1], UserTextMessage)
    assert OUTPUT_TOOL in second.messages[-1].text
    assert isinstance(events[-1], RunCompleted)


async def test_an_answer_beside_other_calls_is_not_taken() -> None:
    agent = agent_with(
        MemoryStore(),
        ToolCalls(
            [Call("fetch", {"doc": "x"}), Call(OUTPUT_TOOL, {"number": "INV-1", "total": 1})]
        ),
        answer({"number": "INV-1", "total": 1}),
    )
    events = await collect(agent.run("invoice please", principal=ALICE))
    first = next(e for e in of(events, ToolCallEnd) if e.name == OUTPUT_TOOL)
    assert first.is_error
    assert "alone" in first.output
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].output is not None


@pytest.mark.parametrize(
    ("output_type", "args", "expected", "value"),
    [
        (int, {"response": 42}, 42, 42),
        (list[str], {"response": ["a", "b"]}, ["a", "b"], ["a", "b"]),
        (Line, {"item": "pen", "qty": "3"}, {"item": "pen", "qty": 3}, Line("pen", 3)),
        (
            Totals,
            {"net": 10.1, "tax": "2.02"},
            {"net": "10.1", "tax": "2.02"},
            {"net": Decimal("10.1"), "tax": Decimal("2.02")},
        ),
    ],
)
async def test_dataclasses_typed_dicts_and_scalars(
    output_type: Any, args: dict[str, Any], expected: Any, value: Any
) -> None:
    agent = agent_with(MemoryStore(), answer(args), output_type=output_type)
    events = await collect(agent.run("invoice please", principal=ALICE))
    assert isinstance(events[-1], RunCompleted), events[-1]
    assert events[-1].output == expected
    assert await agent.output(events[-1].run_id) == value


async def test_str_output_is_the_text_and_offers_no_tool() -> None:
    agent = agent_with(MemoryStore(), Reply("just text"), output_type=str)
    events = await collect(agent.run("invoice please", principal=ALICE))
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].output == "just text"
    assert all(t.name != OUTPUT_TOOL for t in agent.model.requests[0].tools)  # type: ignore[attr-defined]


async def test_run_output_type_overrides_the_agents() -> None:
    agent = agent_with(MemoryStore(), answer({"response": 5}), output_type=None)
    events = await collect(agent.run("invoice please", principal=ALICE, output_type=int))
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].output == 5
    # the run's type is fixed when it starts
    with pytest.raises(RunError, match="output type is set when it starts"):
        await collect(agent.run("more", principal=ALICE, run_id=events[0].run_id, output_type=str))


async def test_a_secret_in_the_answer_is_redacted_in_the_record() -> None:
    key = "sk-" + "a" * 40
    agent = agent_with(MemoryStore(), answer({"response": [f"key {key}"]}), output_type=list[str])
    events = await collect(agent.run("invoice please", principal=ALICE))
    assert key not in encode_event(events[-1])


async def test_another_process_needs_the_type_to_resume_or_read_the_run(tmp_path: Path) -> None:
    from fiduciary import SQLiteStore

    path = tmp_path / "runs.sqlite3"
    store = SQLiteStore(path)
    agent = agent_with(store, answer({"number": "INV-2", "total": 2}))
    events = await collect(agent.run("invoice please", principal=ALICE))
    run_id = events[0].run_id
    await store.close()
    other = SQLiteStore(path)
    try:
        plain = agent_with(other, output_type=None)
        with pytest.raises(RunError, match=r"typed .*Invoice") as refused:
            await plain.check_resumable(run_id)
        assert refused.value.code == "agent_mismatch"
        with pytest.raises(RunError, match=r"agent_mismatch|Invoice"):
            await plain.output(run_id)
        typed = agent_with(other)
        assert await typed.output(run_id) == Invoice(number="INV-2", total=Decimal(2))
    finally:
        await other.close()


async def test_runs_without_an_output_type_record_nothing_new() -> None:
    agent = agent_with(MemoryStore(), Reply("plain"), output_type=None)
    events = await collect(agent.run("invoice please", principal=ALICE))
    for event in events:
        keys = set(json.loads(encode_event(event)))
        assert not keys & {"output", "output_type", "output_retries", "deps", "output_error"}
        assert not keys & {"fallbacks"}
        assert event.type != "turn_complete" or "model" not in keys
    assert await agent.output(events[0].run_id) is None


def test_old_logs_still_load() -> None:
    old = (
        '{"run_id":"6f1c1d2e-8a0b-4c2d-9e3f-0a1b2c3d4e5f","seq":9,"at":"2025-01-01T00:00:00Z",'
        '"type":"run_completed","text":"done","input_tokens":1,"output_tokens":2,'
        '"tool_calls":0,"cost_usd":null}'
    )
    event = decode_event(old)
    assert isinstance(event, RunCompleted)
    assert event.output is None
    assert encode_event(event) == old  # and written back byte for byte


def test_the_sync_api_returns_the_typed_output() -> None:
    agent = agent_with(MemoryStore(), answer({"number": "INV-3", "total": "3.30"}))
    result = run_sync(agent, "invoice please", principal=ALICE)
    assert result.status == "completed"
    assert result.output == Invoice(number="INV-3", total=Decimal("3.30"))


def test_bad_declarations_are_refused() -> None:
    @capability(kind="read")
    async def final_result() -> str:
        """A capability that would shadow the answer's tool."""
        return ""

    with pytest.raises(ConfigurationError, match="final_result"):
        Agent(model=ScriptedModel([]), capabilities=[final_result], output_type=Invoice)
    with pytest.raises(ConfigurationError, match="output_retries"):
        OutputSpec(Invoice, retries=-1)
    with pytest.raises(ConfigurationError, match="cannot be validated"):
        OutputSpec(object())


async def test_a_typed_run_replays_typed() -> None:
    from fiduciary.observability.replay import replay

    agent = agent_with(
        MemoryStore(),
        ToolCalls([Call("fetch", {"doc": "a.pdf"})]),
        answer({"number": "INV-7", "total": "12.50"}),
    )
    events = await collect(agent.run("read the invoice", principal=ALICE))
    again = await replay(agent, events[0].run_id)
    assert (await agent.get_run(again)).status == "completed"
    assert await agent.output(again) == await agent.output(events[0].run_id)


def test_text_that_is_json_but_not_the_type_is_told_what_is_wrong() -> None:
    spec: OutputSpec[Invoice] = OutputSpec(Invoice)
    told = spec.from_text('{"number": "INV-1", "total": "lots"}')
    assert not isinstance(told, Valid)
    assert OUTPUT_TOOL in told.message
    assert "- total: " in told.message
    assert "lots" not in told.message
    assert "- " not in spec.from_text("just words").message  # type: ignore[union-attr]
