"""The Anthropic model over recorded Messages API streams, through the official SDK."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fiduciary.exceptions import ModelError
from fiduciary.models.anthropic import AnthropicModel, claude_version, to_messages
from fiduciary.models.base import (
    AssistantMessage,
    ModelRequest,
    StreamRetry,
    StreamStop,
    StreamTextDelta,
    StreamThinkingDelta,
    StreamThinkingDone,
    StreamToolCall,
    StreamUsage,
    TextPart,
    ThinkingPart,
    ToolResult,
    ToolResultsMessage,
    ToolUsePart,
    UserTextMessage,
)
from fiduciary.models.retry import RetryPolicy

from .helpers import Sleeps, essence, events_of, events_until_error, request, scripted_turn
from .wire import Reply, Wire

pytestmark = pytest.mark.usefixtures("keys")

OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
RATE_LIMITED = {
    "type": "error",
    "error": {"type": "rate_limit_error", "message": "Number of requests has exceeded your rate"},
}


def sent_key(headers: dict[str, str]) -> str:
    # the SDK sends the key as x-api-key (1.x) or as a bearer token (2.x)
    return headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")


def model(
    wire: Wire, retry: RetryPolicy, name: str = "claude-sonnet-4-6", **kw: Any
) -> AnthropicModel:
    return AnthropicModel(name, http_client=wire.client(), retry=retry, **kw)


async def test_a_turn_with_thinking_text_and_parallel_calls(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("anthropic_reads.sse"))
    events = await events_of(model(wire, retry))
    assert events == [
        StreamThinkingDelta("The person wants to know whether they can send money. ", 0),
        StreamThinkingDelta("I should read the balance and the EUR rate first.", 0),
        StreamThinkingDone(0, "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds5kdHvI1kEqr"),
        StreamThinkingDelta("", 1),
        StreamThinkingDone(
            1, "redacted_thinking:EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
        ),
        StreamTextDelta("Let me check your "),
        StreamTextDelta("balance and the rate."),
        StreamToolCall("toolu_01A09q90qw90lq917835lq9", "balance", '{"account": "main"}'),
        StreamToolCall("toolu_01B2r5mKq8NvTz3xWc7yHd4", "rates", '{"currency": "EUR"}'),
        StreamUsage(
            input_tokens=412, output_tokens=187, cache_read_tokens=0, cache_write_tokens=1536
        ),
        StreamStop("tool_use"),
    ]
    assert essence(events) == await scripted_turn(0)


async def test_the_request_caches_tools_and_system_and_thinks(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("anthropic_reads.sse"))
    await events_of(model(wire, retry, "claude-haiku-4-5"), request(settings={"effort": "high"}))
    (seen,) = wire.seen
    assert seen.url == "https://api.anthropic.com/v1/messages"
    assert sent_key(seen.headers) == "sk-ant-test-0000"
    body = seen.body
    assert body["stream"] is True
    assert body["model"] == "claude-haiku-4-5"
    assert body["system"] == [
        {"type": "text", "text": "You act for a person."},
        {"type": "text", "text": "Read before you write.", "cache_control": {"type": "ephemeral"}},
    ]
    assert [t["name"] for t in body["tools"]] == ["balance", "rates"]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    # Haiku 4.5 takes a thinking budget; effort high → the largest one, within max_tokens
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 24576}
    assert body["max_tokens"] > 24576
    assert "output_config" not in body
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


async def test_adaptive_thinking_for_newer_models_and_none_when_off(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("anthropic_answer.sse"), Reply.sse("anthropic_answer.sse"))
    await events_of(model(wire, retry), request(settings={"effort": "low"}))
    await events_of(model(wire, retry, thinking="off", cache=False), request())
    adaptive, off = wire.bodies
    assert adaptive["thinking"] == {"type": "adaptive"}
    assert adaptive["output_config"] == {"effort": "low"}
    assert "thinking" not in off
    assert "cache_control" not in off["system"][-1]
    assert "cache_control" not in off["tools"][-1]


def test_claude_versions() -> None:
    assert claude_version("claude-sonnet-4-5-20250929") == (4, 5)
    assert claude_version("claude-3-7-sonnet-20250219") == (3, 7)
    assert claude_version("claude-opus-4-6") == (4, 6)
    assert claude_version("claude-sonnet-5") == (5, 0)
    assert claude_version("claude-mythos-preview") is None


def test_thinking_signatures_go_back_exactly_and_roles_alternate() -> None:
    messages = (
        UserTextMessage("pay bob"),
        AssistantMessage(
            (
                ThinkingPart("think", "sig-1"),
                ThinkingPart("", "redacted_thinking:opaque"),
                ThinkingPart("unsigned, from another provider", None),
                TextPart("Checking."),
                ToolUsePart("toolu_1", "balance", {"account": "main"}),
            )
        ),
        ToolResultsMessage((ToolResult("toolu_1", '{"usd": "250"}'),)),
        UserTextMessage("and then?"),
        AssistantMessage(()),  # an empty turn is dropped
    )
    out = to_messages(messages, cache={"type": "ephemeral"})
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[1]["content"] == [
        {"type": "thinking", "thinking": "think", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "balance", "input": {"account": "main"}},
    ]
    # the tool results and the next question share one user turn; only the last is a breakpoint
    assert out[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": '{"usd": "250"}',
            "is_error": False,
        },
        {"type": "text", "text": "and then?", "cache_control": {"type": "ephemeral"}},
    ]


async def test_refusal_is_a_stop_reason(retry: RetryPolicy) -> None:
    events = await events_of(model(Wire(Reply.sse("anthropic_refusal.sse")), retry))
    assert essence(events) == [("text", "I can't help with"), ("stop", "refusal")]


async def test_429_then_success_waits_what_retry_after_says(
    retry: RetryPolicy, sleeps: Sleeps
) -> None:
    wire = Wire(
        Reply.json(RATE_LIMITED, status=429, headers={"retry-after": "7"}),
        Reply.sse("anthropic_answer.sse"),
    )
    events = await events_of(model(wire, retry))
    assert essence(events) == await scripted_turn(2)
    assert len(wire.seen) == 2  # the SDK's own retries are off: only fiduciary's
    assert sleeps.waits == [7.0]
    assert not any(isinstance(e, StreamRetry) for e in events)  # nothing to take back


async def test_529_overloaded_then_success(retry: RetryPolicy, sleeps: Sleeps) -> None:
    wire = Wire(Reply.json(OVERLOADED, status=529), Reply.sse("anthropic_answer.sse"))
    events = await events_of(model(wire, retry))
    assert essence(events) == await scripted_turn(2)
    assert sleeps.waits == [0.5]


async def test_overloaded_error_event_mid_stream_retracts_and_asks_again(
    retry: RetryPolicy,
) -> None:
    wire = Wire(Reply.sse("anthropic_overloaded.sse"), Reply.sse("anthropic_answer.sse"))
    events = await events_of(model(wire, retry))
    assert events[:2] == [StreamTextDelta("Sent 60"), StreamRetry(1, "overloaded")]
    assert essence(events) == await scripted_turn(2)


async def test_a_stream_cut_in_the_middle_is_asked_again(retry: RetryPolicy) -> None:
    body = Reply.sse("anthropic_answer.sse").body
    cut = body.index(b"Your balance")  # after the first text delta was delivered
    wire = Wire(Reply.sse("anthropic_answer.sse", cut_after=cut), Reply.sse("anthropic_answer.sse"))
    events = await events_of(model(wire, retry))
    assert StreamRetry(1, "connection") in events
    assert essence(events) == await scripted_turn(2)


async def test_a_stream_that_ends_without_message_stop_is_asked_again(retry: RetryPolicy) -> None:
    body = Reply.sse("anthropic_answer.sse").body
    truncated = body[: body.index(b"event: message_delta")]
    wire = Wire(Reply(truncated), Reply.sse("anthropic_answer.sse"))
    events = await events_of(model(wire, retry))
    assert StreamRetry(1, "stream_cut") in events
    assert essence(events) == await scripted_turn(2)


async def test_a_stream_cut_after_a_tool_call_is_never_asked_again(retry: RetryPolicy) -> None:
    body = Reply.sse("anthropic_reads.sse").body
    cut = body.index(b'"index":4,"content_block"')  # balance was complete, rates not yet
    wire = Wire(Reply.sse("anthropic_reads.sse", cut_after=cut), Reply.sse("anthropic_reads.sse"))
    seen, error = await events_until_error(model(wire, retry))
    assert [e.name for e in seen if isinstance(e, StreamToolCall)] == ["balance"]
    assert isinstance(error, ModelError)
    assert error.code == "connection"
    assert not error.retryable
    assert len(wire.seen) == 1


async def test_errors_that_retrying_cannot_fix_fail_at_once(retry: RetryPolicy) -> None:
    bad = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: bad"},
    }
    wire = Wire(Reply.json(bad, status=400))
    with pytest.raises(ModelError) as caught:
        await events_of(model(wire, retry))
    assert caught.value.code == "bad_request"
    assert caught.value.status == 400
    assert "max_tokens: bad" in str(caught.value)
    assert len(wire.seen) == 1


async def test_retries_give_up_after_the_policy_s_attempts(
    retry: RetryPolicy, sleeps: Sleeps
) -> None:
    wire = Wire(*[Reply.json(OVERLOADED, status=529) for _ in range(4)])
    with pytest.raises(ModelError) as caught:
        await events_of(model(wire, retry))
    assert caught.value.code == "overloaded"
    assert len(wire.seen) == 4
    assert sleeps.waits == [0.5, 1.0, 2.0]


async def test_a_retry_after_too_long_is_not_waited_for(retry: RetryPolicy) -> None:
    wire = Wire(Reply.json(RATE_LIMITED, status=429, headers={"retry-after": "3600"}))
    with pytest.raises(ModelError) as caught:
        await events_of(model(wire, retry))
    assert caught.value.retry_after == 3600
    assert len(wire.seen) == 1


async def test_the_key_is_read_at_request_time_and_never_kept(
    retry: RetryPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    wire = Wire(Reply.sse("anthropic_answer.sse"))
    m = model(wire, retry)
    with pytest.raises(ModelError) as caught:
        await events_of(m)
    assert caught.value.code == "auth"
    assert "ANTHROPIC_API_KEY" in str(caught.value)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-later-1111")
    await events_of(m)
    assert sent_key(wire.seen[0].headers) == "sk-ant-later-1111"
    assert "sk-ant" not in repr(m)
    assert "sk-ant" not in json.dumps({k: repr(v) for k, v in vars(m).items()})


async def test_complete_json_uses_structured_outputs(retry: RetryPolicy) -> None:
    message = {
        "id": "msg_01Jd8sKf3LqWp5RtYv7XzBn2",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5-20251001",
        "content": [{"type": "text", "text": '{"route": "act", "p": 0.82}'}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 120, "output_tokens": 14},
    }
    schema = {
        "type": "object",
        "properties": {"route": {"type": "string"}, "p": {"type": "number"}},
        "required": ["route", "p"],
        "additionalProperties": False,
    }
    wire = Wire(Reply.json(OVERLOADED, status=529), Reply.json(message))
    answer = await model(wire, retry, "claude-haiku-4-5").complete_json("judge", "act?", schema)
    assert answer == {"route": "act", "p": 0.82}
    body = wire.bodies[-1]
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert "stream" not in body
    assert body["messages"] == [{"role": "user", "content": "act?"}]


async def test_complete_json_refusal_is_a_model_error(retry: RetryPolicy) -> None:
    message = {
        "id": "msg_x",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [],
        "stop_reason": "refusal",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    wire = Wire(Reply.json(message))
    with pytest.raises(ModelError) as caught:
        await model(wire, retry).complete_json("s", "p", {"type": "object"})
    assert caught.value.code == "refused"


def test_the_name_is_the_model_string() -> None:
    assert AnthropicModel("claude-sonnet-4-6").name == "anthropic:claude-sonnet-4-6"
    assert isinstance(ModelRequest((), (), ()).settings, dict)


async def test_a_refused_key_names_its_variable_and_not_the_key(retry: RetryPolicy) -> None:
    body = {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key sk-ant-api03-Xy"},
    }
    wire = Wire(Reply.json(body, status=401))
    with pytest.raises(ModelError) as caught:
        await events_of(model(wire, retry))
    error = caught.value
    assert (error.code, error.retryable, error.status) == ("auth", False, 401)
    assert "check ANTHROPIC_API_KEY" in error.message
    assert "sk-ant" not in str(error)
    assert "Xy" not in str(error)


async def test_the_cache_breakpoint_stays_on_the_last_stable_system_layer(
    retry: RetryPolicy,
) -> None:
    wire = Wire(Reply.sse("anthropic_answer.sse"))
    layered = ModelRequest(
        system=("You act for a person.", "<financial_context>12 USDC</financial_context>"),
        messages=(UserTextMessage("hi"),),
        tools=(),
        stable_layers=1,
    )
    await events_of(model(wire, retry), layered)
    (body,) = wire.bodies
    assert body["system"] == [
        {"type": "text", "text": "You act for a person.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "<financial_context>12 USDC</financial_context>"},
    ]
