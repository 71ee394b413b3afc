"""Events: every type round-trips through JSON and the SSE wire codec, exactly."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, get_args
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from fiduciary.events import (
    EVENT_ADAPTER,
    ActionResolved,
    Canvas,
    Compaction,
    ContextLayers,
    Draft,
    Event,
    GuardFired,
    GuardNote,
    PendingAction,
    PendingInput,
    PostGuardFired,
    RunCompleted,
    RunFailed,
    RunStarted,
    SSEMessage,
    TextDelta,
    TextDeltaDraft,
    TextGuardFired,
    ThinkingDelta,
    ThinkingDone,
    TodoItem,
    TodoUpdate,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
    ToolProgress,
    TurnComplete,
    TurnRetracted,
    TurnRetractedDraft,
    Usage,
    UserMessage,
    decode_event,
    encode_event,
    encode_sse,
    parse_sse,
    stamp,
)

RUN = UUID("6f1c2a4e-3b5d-4e8f-9a0b-1c2d3e4f5a6b")
APPROVAL = UUID("0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")
AT = datetime(2026, 1, 1, 12, 30, 15, 123456, tzinfo=UTC)
DIGEST = "9f" * 32


def base(seq: int) -> dict[str, Any]:
    return {"run_id": RUN, "seq": seq, "at": AT + timedelta(seconds=seq)}


ALL_EVENTS: list[Event] = [
    RunStarted(
        **base(1),
        principal="alice",
        capabilities=["balance", "send"],
        model="scripted",
        allowed_kinds=["read", "preview", "execute"],
    ),
    UserMessage(**base(2), text="Pay Carol $150 for the flowers 🌷\nThanks"),
    ThinkingDelta(**base(3), text="The person wants a payment.", block_index=0),
    ThinkingDone(**base(4), block_index=0, signature="sig-abc"),
    TextDelta(**base(5), text="Let me check "),
    ToolCallStart(
        **base(6),
        tool_use_id="toolu_1",
        name="send",
        input={"to": "carol", "amount": "150.00", "tags": ["gift"], "nested": {"n": 1}},
        args_digest=DIGEST,
        kind="execute",
    ),
    GuardFired(
        **base(7),
        tool_use_id="toolu_1",
        guard="irreversibility",
        tier="ux",
        phase="pre",
        verdict="hint",
        message="send cannot be undone",
    ),
    PendingAction(
        **base(8),
        approval_id=APPROVAL,
        tool_use_id="toolu_1",
        name="send",
        input={"to": "carol", "amount": "150.00"},
        description="send(to=carol, amount=150.00), about $150.00",
        amount_usd=Decimal("150.00"),
        tier="explicit",
        acknowledge="amount",
        modifiable_fields=["amount", "memo"],
        guard_notes=[GuardNote(guard="irreversibility", verdict="hint", message="no preview")],
        expires_at=AT + timedelta(minutes=15),
        args_digest=DIGEST,
        executor="client",
    ),
    ActionResolved(
        **base(9),
        approval_id=APPROVAL,
        tool_use_id="toolu_1",
        decision="approved",
        by="alice",
        reason="looks right",
        edits={"amount": "140"},
        args_digest="ab" * 32,
    ),
    ToolProgress(**base(10), tool_use_id="toolu_1", name="send", message="signing", pct=50.0),
    ToolCallEnd(
        **base(11),
        tool_use_id="toolu_1",
        name="send",
        output='{"sent": "140"}',
        is_error=False,
        recovery="ledger",
        truncated=True,
        hints=["[irreversibility] no preview"],
    ),
    ToolCallRejected(
        **base(12),
        tool_use_id="toolu_2",
        name="rm_rf",
        reason="not_allowed",
        message="There is no capability named 'rm_rf'",
    ),
    Compaction(
        **base(13),
        phase="end",
        summary="Paid Carol.",
        tokens_before=9000,
        tokens_after=800,
        method="summary",
        kept_from=12,
        stubbed_before=12,
    ),
    ContextLayers(
        **base(13),
        context="<financial_context>12 USDC</financial_context>",
        recalled=["fact: paid Carol 3 times"],
    ),
    TodoUpdate(
        **base(13),
        tool_use_id="t9",
        todos=[TodoItem(text="Check the balance", status="done"), TodoItem(text="Pay Carol")],
    ),
    Usage(
        **base(14),
        model="scripted",
        input_tokens=120,
        output_tokens=30,
        cache_read_tokens=100,
        cache_write_tokens=20,
        total_input_tokens=500,
        total_output_tokens=90,
    ),
    TurnComplete(**base(15), stop_reason="end_turn"),
    TurnRetracted(**base(16), from_seq=5),
    RunCompleted(
        **base(17), text="Paid Carol $140.", input_tokens=500, output_tokens=90, tool_calls=2
    ),
    RunFailed(**base(18), reason="budget", message="the token budget of this run is spent"),
    PostGuardFired(
        **base(19),
        tool_use_id="toolu_1",
        name="send",
        guard="balance_promise",
        tier="financial",
        verdict="warn",
        message="the balance after differs from the preview",
        for_person="Your balance after this is not what was shown.",
    ),
    TextGuardFired(
        **base(30),
        guard="unbacked_amount",
        tier="financial",
        phase="output",
        verdict="warn",
        message="The answer states amounts no tool returned: 1250.",
        for_person="Check these figures: no tool of this run returned them.",
    ),
    Canvas(
        **base(31),
        tool_use_id="toolu_8",
        title="Spending by month",
        kind="bar_chart",
        html="<!doctype html><html><body><svg><text>March</text></svg></body></html>",
    ),
    PendingInput(
        **base(32),
        input_id="in_1",
        input_schema={"type": "object", "properties": {"iban": {"type": "string"}}},
        prompt="Which account should receive it?",
    ),
]


def union_members() -> set[type[Any]]:
    union, _discriminator = get_args(Event)
    return set(get_args(union))


def test_every_event_type_is_covered() -> None:
    assert {type(e) for e in ALL_EVENTS} == union_members()
    assert len({e.type for e in ALL_EVENTS}) == len(ALL_EVENTS)


def test_event_type_names_are_stable() -> None:
    assert [e.type for e in ALL_EVENTS] == [
        "run_started",
        "user_message",
        "thinking_delta",
        "thinking_done",
        "text_delta",
        "tool_call_start",
        "guard_fired",
        "pending_action",
        "action_resolved",
        "tool_progress",
        "tool_call_end",
        "tool_call_rejected",
        "compaction",
        "context_layers",
        "todo_update",
        "usage",
        "turn_complete",
        "turn_retracted",
        "run_completed",
        "run_failed",
        "post_guard_fired",
        "text_guard_fired",
        "canvas",
        "pending_input",
    ]


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: str(e.type))
def test_round_trip_through_json(event: Event) -> None:
    text = encode_event(event)
    assert "\n" not in text
    decoded = decode_event(text)
    assert type(decoded) is type(event)
    assert decoded == event
    assert decode_event(text.encode()) == event
    assert json.loads(text)["type"] == event.type


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: str(e.type))
def test_round_trip_through_the_adapter(event: Event) -> None:
    assert EVENT_ADAPTER.validate_json(EVENT_ADAPTER.dump_json(event)) == event
    as_json = EVENT_ADAPTER.dump_python(event, mode="json")
    assert EVENT_ADAPTER.validate_python(as_json) == event
    assert EVENT_ADAPTER.validate_python(event.model_dump()) == event


@pytest.mark.parametrize(
    "amount", ["150.00", "0.1", "1E+3", "12345678901234567890.123456789", "-0.000001"]
)
def test_decimal_amounts_stay_exact(amount: str) -> None:
    pending = ALL_EVENTS[7]
    assert isinstance(pending, PendingAction)
    event = pending.model_copy(update={"amount_usd": Decimal(amount)})
    text = encode_event(event)
    assert json.loads(text)["amount_usd"] == amount  # a string on the wire, never a float
    decoded = decode_event(text)
    assert isinstance(decoded, PendingAction)
    assert isinstance(decoded.amount_usd, Decimal)
    assert str(decoded.amount_usd) == amount


def test_unknown_amount_stays_none() -> None:
    pending = ALL_EVENTS[7]
    assert isinstance(pending, PendingAction)
    decoded = decode_event(encode_event(pending.model_copy(update={"amount_usd": None})))
    assert isinstance(decoded, PendingAction)
    assert decoded.amount_usd is None


def test_an_event_is_encoded_once_and_a_copy_of_it_anew() -> None:
    from fiduciary import events

    event = TextDelta(run_id=RUN, seq=3, at=AT, text="hello")
    first = encode_event(event)
    assert encode_event(event) is first  # the store's row and the SSE frame share it
    assert encode_sse(event) == f"id: 3\nevent: text_delta\ndata: {first}\n\n"
    copy = event.model_copy(update={"text": "other"})
    assert json.loads(encode_event(copy))["text"] == "other"
    assert copy == TextDelta(run_id=RUN, seq=3, at=AT, text="other")
    key = id(event)
    del event  # the kept text leaves with its event
    assert key not in events._ENCODED


def test_timestamps_keep_their_timezone() -> None:
    decoded = decode_event(encode_event(ALL_EVENTS[0]))
    assert decoded.at == AT + timedelta(seconds=1)
    assert decoded.at.utcoffset() == timedelta(0)


VALID_TEXT_DELTA = {"run_id": str(RUN), "seq": 1, "at": AT.isoformat(), "type": "text_delta"}


@pytest.mark.parametrize(
    "data",
    [
        "",
        "{",
        "not json at all",
        "[]",
        "null",
        json.dumps({**VALID_TEXT_DELTA, "type": "telepathy", "text": "hi"}),
        json.dumps({k: v for k, v in VALID_TEXT_DELTA.items() if k != "type"} | {"text": "x"}),
        json.dumps(VALID_TEXT_DELTA),  # missing text
        json.dumps({**VALID_TEXT_DELTA, "text": "hi", "seq": 0}),
        json.dumps({**VALID_TEXT_DELTA, "text": "hi", "run_id": "not-a-uuid"}),
    ],
    ids=[
        "empty",
        "truncated",
        "text",
        "array",
        "null",
        "unknown_type",
        "no_type",
        "missing_field",
        "seq_zero",
        "bad_uuid",
    ],
)
def test_malformed_input_raises_validation_error(data: str) -> None:
    with pytest.raises(ValidationError):
        decode_event(data)


def test_a_valid_text_delta_decodes() -> None:
    event = decode_event(json.dumps({**VALID_TEXT_DELTA, "text": "hi"}))
    assert event == TextDelta(run_id=RUN, seq=1, at=AT, text="hi")


def test_events_are_immutable() -> None:
    event = TextDelta(run_id=RUN, seq=1, at=AT, text="hi")
    with pytest.raises(ValidationError):
        event.text = "changed"  # type: ignore[misc]


# --- SSE ----------------------------------------------------------------------------------


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: str(e.type))
def test_encode_sse(event: Event) -> None:
    wire = encode_sse(event)
    assert wire == f"id: {event.seq}\nevent: {event.type}\ndata: {encode_event(event)}\n\n"
    (message,) = parse_sse(wire)
    assert message == SSEMessage(event=event.type, data=encode_event(event), id=str(event.seq))
    assert decode_event(message.data) == event


def test_a_stream_of_events_parses_back_in_order() -> None:
    wire = "".join(encode_sse(e) for e in ALL_EVENTS)
    messages = list(parse_sse(wire))
    assert [m.id for m in messages] == [str(e.seq) for e in ALL_EVENTS]
    assert [decode_event(m.data) for m in messages] == ALL_EVENTS


def test_comments_are_ignored() -> None:
    wire = ": keep-alive\n\n:another\nevent: ping\n: inside a message\ndata: x\n\n"
    assert list(parse_sse(wire)) == [SSEMessage(event="ping", data="x")]


@pytest.mark.parametrize("newline", ["\r\n", "\r", "\n"])
def test_line_endings(newline: str) -> None:
    wire = newline.join(["id: 7", "event: text_delta", "data: a", "data: b", "", ""])
    assert list(parse_sse(wire)) == [SSEMessage(event="text_delta", data="a\nb", id="7")]


def test_multi_line_data_and_defaults() -> None:
    wire = "data: first\ndata:second\ndata:  third\ndata\n\n"
    (message,) = parse_sse(wire)
    assert message.event == "message"
    assert message.id is None
    assert message.retry is None
    # one space after the colon is dropped, a second one is data; a bare "data" is an empty line
    assert message.data == "first\nsecond\n third\n"


def test_a_trailing_message_without_a_blank_line_is_not_yielded() -> None:
    wire = "data: complete\n\ndata: cut off"
    assert [m.data for m in parse_sse(wire)] == ["complete"]
    assert list(parse_sse("data: cut off\n")) == []


def test_fields_reset_between_messages() -> None:
    wire = "id: 1\nevent: a\nretry: 10\ndata: x\n\ndata: y\n\n"
    assert list(parse_sse(wire)) == [
        SSEMessage(event="a", data="x", id="1", retry=10),
        SSEMessage(event="message", data="y"),
    ]


@pytest.mark.parametrize(
    ("line", "retry"),
    [
        ("retry: 3000", 3000),
        ("retry:0", 0),
        ("retry: soon", None),
        ("retry: -5", None),
        ("retry: 1.5", None),
        ("retry: ²", None),
        ("retry: ٣", None),
    ],
)
def test_retry_field(line: str, retry: int | None) -> None:
    (message,) = parse_sse(f"{line}\ndata: x\n\n")
    assert message.retry == retry
    assert message.data == "x"


def test_unknown_fields_are_ignored() -> None:
    assert list(parse_sse("foo: bar\ndata: x\n\n")) == [SSEMessage(data="x")]


def sse_data(text: str) -> str:
    """How a server sends text as SSE data: one ``data:`` line per line of text."""
    return "".join(f"data: {line}\n" for line in text.split("\n")) + "\n"


no_cr = st.text(alphabet=st.characters(exclude_characters="\r", exclude_categories=["Cs"]))


@given(no_cr)
def test_any_text_round_trips_as_data(text: str) -> None:
    (message,) = parse_sse(sse_data(text))
    assert message.data == text


@given(st.text())
def test_any_text_delta_round_trips_through_sse(text: str) -> None:
    event = TextDelta(run_id=RUN, seq=3, at=AT, text=text)
    (message,) = parse_sse(encode_sse(event))
    assert decode_event(message.data) == event


# --- drafts: what the loop builds, stamped with run_id, seq and at ---------------------------


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: str(e.type))
def test_a_stamped_draft_is_the_event_validated_in_full(event: Event) -> None:
    draft_cls = type(event).__mro__[1]
    assert issubclass(draft_cls, Draft)
    assert draft_cls.__name__ == f"{type(event).__name__}Draft"
    own = event.model_dump(exclude={"run_id", "seq", "at"})
    stamped = stamp(draft_cls.model_validate(own), event.run_id, event.seq, event.at)
    assert type(stamped) is type(event)
    assert stamped == event
    assert encode_event(stamped) == encode_event(event)  # same bytes, same field order
    assert decode_event(encode_event(stamped)) == event


def test_a_draft_checks_its_fields_as_it_is_built() -> None:
    with pytest.raises(ValidationError):
        TurnRetractedDraft.model_validate({"from_seq": "not a number"})
    with pytest.raises(ValidationError):  # the envelope is the loop's, never the draft's
        TextDeltaDraft.model_validate({"text": "x", "seq": 3})
