"""The OpenAI model over recorded Responses and Chat Completions streams, through the SDK."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fiduciary.exceptions import ModelError
from fiduciary.models._openai_chat import to_chat_messages
from fiduciary.models.base import (
    AssistantMessage,
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
from fiduciary.models.openai import (
    OpenAIModel,
    is_reasoning_model,
    is_strict_schema,
    to_responses_input,
)
from fiduciary.models.retry import RetryPolicy

from .helpers import Sleeps, essence, events_of, events_until_error, request, scripted_turn
from .wire import Reply, Wire

pytestmark = pytest.mark.usefixtures("keys")

RATE_LIMITED = {
    "error": {
        "message": "Rate limit reached for gpt-5.1 on tokens per min (TPM).",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
SERVER_ERROR = {
    "error": {
        "message": "The server had an error while processing your request.",
        "type": "server_error",
        "param": None,
        "code": None,
    }
}


def responses(wire: Wire, retry: RetryPolicy, name: str = "gpt-5.1", **kw: Any) -> OpenAIModel:
    return OpenAIModel(name, http_client=wire.client(), retry=retry, **kw)


def chat(wire: Wire, retry: RetryPolicy, name: str = "gpt-4.1", **kw: Any) -> OpenAIModel:
    return OpenAIModel(name, api="chat", http_client=wire.client(), retry=retry, **kw)


# --- Responses API ------------------------------------------------------------------------------


async def test_responses_reasoning_text_and_parallel_calls(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("openai_responses_reads.sse"))
    events = await events_of(responses(wire, retry))
    encrypted = "gAAAAABpV0x1R2Q5bXhLc0RkVjRwN2lnQ3lFcUtBc2ZtWHl0UGh6bE5xY1BwM2Z6T3VtT0Q="
    signature = json.dumps(
        {"id": "rs_0a1b2c3d4e5f6071829300000001", "encrypted_content": encrypted}
    )
    assert events == [
        StreamThinkingDelta("Reading the balance ", 0),
        StreamThinkingDelta("and the EUR rate first.", 0),
        StreamThinkingDelta("\n\n", 0),
        StreamThinkingDelta("Both reads can run at once.", 0),
        StreamThinkingDone(0, signature),
        StreamTextDelta("Let me check your "),
        StreamTextDelta("balance and the rate."),
        StreamToolCall("call_Q4n8Vd2kLw7pXz1R", "balance", '{"account":"main"}'),
        StreamToolCall("call_B7m3Tc9jHs5qYx2F", "rates", '{"currency":"EUR"}'),
        # 2380 input tokens of which 1920 read from the cache: priced apart
        StreamUsage(input_tokens=460, output_tokens=213, cache_read_tokens=1920),
        StreamStop("tool_use"),
    ]
    assert essence(events) == await scripted_turn(0)


async def test_responses_request(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("openai_responses_reads.sse"))
    await events_of(responses(wire, retry), request(settings={"effort": "high", "max_tokens": 900}))
    (seen,) = wire.seen
    assert seen.url == "https://api.openai.com/v1/responses"
    assert seen.headers["authorization"] == "Bearer sk-openai-test-0000"
    body = seen.body
    assert body["stream"] is True
    assert body["store"] is False  # reasoning travels back encrypted instead
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["reasoning"] == {"effort": "high", "summary": "auto"}
    assert body["max_output_tokens"] == 900
    assert body["instructions"] == "You act for a person.\n\nRead before you write."
    assert body["parallel_tool_calls"] is True
    assert body["tools"][0] == {
        "type": "function",
        "name": "balance",
        "description": "The balance of an account, in USD.",
        "parameters": {"type": "object"},
        "strict": False,
    }
    assert body["prompt_cache_key"].startswith("fiduciary-")
    assert body["input"] == [{"role": "user", "content": request().messages[0].text}]  # type: ignore[union-attr]


async def test_a_model_without_reasoning_gets_no_reasoning_parameters(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("openai_responses_answer.sse"))
    await events_of(responses(wire, retry, "gpt-4.1"), request(settings={"temperature": 0.2}))
    body = wire.bodies[0]
    assert "reasoning" not in body
    assert "include" not in body
    assert body["temperature"] == 0.2
    assert is_reasoning_model("o4-mini")
    assert is_reasoning_model("gpt-5.1-codex-mini")
    assert not is_reasoning_model("gpt-4o")


def test_responses_input_sends_reasoning_calls_and_results_back() -> None:
    signature = json.dumps({"id": "rs_1", "encrypted_content": "gAAA"})
    items = to_responses_input(
        (
            UserTextMessage("pay bob"),
            AssistantMessage(
                (
                    ThinkingPart("summary", signature),
                    ThinkingPart("claude's thinking", "EqQB-anthropic-signature"),
                    TextPart("Checking."),
                    ToolUsePart("call_1", "balance", {"account": "main"}),
                )
            ),
            ToolResultsMessage((ToolResult("call_1", '{"usd": "250"}'),)),
        )
    )
    assert items == [
        {"role": "user", "content": "pay bob"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "summary"}],
            "encrypted_content": "gAAA",
        },
        {"role": "assistant", "content": "Checking."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "balance",
            "arguments": '{"account": "main"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": '{"usd": "250"}'},
    ]


async def test_responses_refusal(retry: RetryPolicy) -> None:
    events = await events_of(responses(Wire(Reply.sse("openai_responses_refusal.sse")), retry))
    assert essence(events) == [("text", "I can't help with that."), ("stop", "refusal")]


async def test_responses_failed_mid_stream_is_asked_again(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("openai_responses_failed.sse"), Reply.sse("openai_responses_answer.sse"))
    events = await events_of(responses(wire, retry))
    assert events[:2] == [StreamTextDelta("Sent 60"), StreamRetry(1, "server_error")]
    assert essence(events) == await scripted_turn(2)


async def test_responses_429_then_success(retry: RetryPolicy, sleeps: Sleeps) -> None:
    wire = Wire(
        Reply.json(RATE_LIMITED, status=429, headers={"retry-after-ms": "1500"}),
        Reply.sse("openai_responses_answer.sse"),
    )
    events = await events_of(responses(wire, retry))
    assert essence(events) == await scripted_turn(2)
    assert sleeps.waits == [1.5]
    assert len(wire.seen) == 2


async def test_exhausted_quota_is_not_retried(retry: RetryPolicy) -> None:
    quota = {
        "error": {
            "message": "You exceeded your current quota.",
            "type": "insufficient_quota",
            "param": None,
            "code": "insufficient_quota",
        }
    }
    wire = Wire(Reply.json(quota, status=429))
    with pytest.raises(ModelError) as caught:
        await events_of(responses(wire, retry))
    assert caught.value.code == "quota"
    assert not caught.value.retryable
    assert len(wire.seen) == 1


async def test_responses_5xx_then_success(retry: RetryPolicy, sleeps: Sleeps) -> None:
    wire = Wire(Reply.json(SERVER_ERROR, status=503), Reply.sse("openai_responses_send.sse"))
    events = await events_of(responses(wire, retry))
    assert essence(events) == await scripted_turn(1)
    assert sleeps.waits == [0.5]


async def test_responses_stream_cut_in_the_middle(retry: RetryPolicy) -> None:
    body = Reply.sse("openai_responses_answer.sse").body
    wire = Wire(
        Reply.sse("openai_responses_answer.sse", cut_after=body.index(b"Your balance")),
        Reply.sse("openai_responses_answer.sse"),
    )
    events = await events_of(responses(wire, retry))
    assert StreamRetry(1, "connection") in events
    assert essence(events) == await scripted_turn(2)


async def test_responses_stream_cut_after_a_call_is_not_retried(retry: RetryPolicy) -> None:
    body = Reply.sse("openai_responses_reads.sse").body
    cut = body.index(b'"output_index":3,"item"')  # balance done, rates not yet
    wire = Wire(Reply.sse("openai_responses_reads.sse", cut_after=cut))
    with pytest.raises(ModelError) as caught:
        await events_of(responses(wire, retry))
    assert not caught.value.retryable
    assert len(wire.seen) == 1


async def test_responses_without_a_terminal_event_is_a_cut(retry: RetryPolicy) -> None:
    body = Reply.sse("openai_responses_answer.sse").body
    wire = Wire(
        Reply(body[: body.index(b"event: response.completed")]),
        Reply.sse("openai_responses_answer.sse"),
    )
    events = await events_of(responses(wire, retry))
    assert StreamRetry(1, "stream_cut") in events


# --- Chat Completions ---------------------------------------------------------------------------


async def test_chat_text_and_parallel_calls_in_pieces(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("openai_chat_reads.sse"))
    events = await events_of(chat(wire, retry))
    assert events == [
        StreamTextDelta("Let me check your "),
        StreamTextDelta("balance and the rate."),
        StreamToolCall("call_Q4n8Vd2kLw7pXz1R", "balance", '{"account": "main"}'),
        StreamToolCall("call_B7m3Tc9jHs5qYx2F", "rates", '{"currency": "EUR"}'),
        StreamUsage(input_tokens=254, output_tokens=58, cache_read_tokens=1152),
        StreamStop("tool_use"),
    ]
    assert essence(events) == await scripted_turn(0)


async def test_a_chat_call_is_yielded_as_soon_as_the_next_begins(retry: RetryPolicy) -> None:
    body = Reply.sse("openai_chat_reads.sse").body
    cut = body.index(b'"function":{"arguments":": \\"EUR')  # rates begun, not finished
    wire = Wire(Reply.sse("openai_chat_reads.sse", cut_after=cut))
    seen, error = await events_until_error(chat(wire, retry))
    # balance was complete when rates began, so it was yielded (and may have started running);
    # the cut is therefore not retried
    assert [e.name for e in seen if isinstance(e, StreamToolCall)] == ["balance"]
    assert isinstance(error, ModelError)
    assert not error.retryable


async def test_chat_request(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("openai_chat_reads.sse"), Reply.sse("openai_chat_answer.sse"))
    await events_of(chat(wire, retry), request(settings={"max_tokens": 700}))
    await events_of(chat(wire, retry, "o4-mini"), request(settings={"effort": "low"}))
    plain, reasoning = wire.bodies
    assert wire.seen[0].url == "https://api.openai.com/v1/chat/completions"
    assert plain["stream_options"] == {"include_usage": True}
    assert plain["max_completion_tokens"] == 700
    assert plain["messages"][0] == {
        "role": "system",
        "content": "You act for a person.\n\nRead before you write.",
    }
    assert plain["tools"][0]["function"]["name"] == "balance"
    assert "reasoning_effort" not in plain
    assert reasoning["reasoning_effort"] == "low"


def test_chat_messages() -> None:
    out = to_chat_messages(
        (),
        (
            UserTextMessage("pay bob"),
            AssistantMessage(
                (
                    ThinkingPart("not sent", "sig"),
                    ToolUsePart("call_1", "balance", {}),
                    ToolUsePart("call_2", "rates", {"currency": "EUR"}),
                )
            ),
            ToolResultsMessage((ToolResult("call_1", "{}"), ToolResult("call_2", "x", True))),
            AssistantMessage((TextPart("Done."),)),
        ),
    )
    assert out == [
        {"role": "user", "content": "pay bob"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "balance", "arguments": "{}"},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "rates", "arguments": '{"currency": "EUR"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "{}"},
        {"role": "tool", "tool_call_id": "call_2", "content": "x"},
        {"role": "assistant", "content": "Done."},
    ]


async def test_chat_refusal(retry: RetryPolicy) -> None:
    events = await events_of(chat(Wire(Reply.sse("openai_chat_refusal.sse")), retry))
    assert essence(events) == [("text", "I can't help with that."), ("stop", "refusal")]


async def test_chat_429_then_success_and_a_cut(retry: RetryPolicy, sleeps: Sleeps) -> None:
    body = Reply.sse("openai_chat_answer.sse").body
    wire = Wire(
        Reply.json(RATE_LIMITED, status=429, headers={"retry-after": "2"}),
        Reply.sse("openai_chat_answer.sse", cut_after=body.index(b"Your balance")),
        Reply.sse("openai_chat_answer.sse"),
    )
    events = await events_of(chat(wire, retry))
    assert essence(events) == await scripted_turn(2)
    assert sleeps.waits == [2.0, 1.0]
    assert StreamRetry(2, "connection") in events


async def test_garbled_json_is_asked_again(retry: RetryPolicy) -> None:
    body = Reply.sse("openai_chat_answer.sse").body
    garbled = body.replace(b'"Your balance', b'"Your balance\n\n', 1)
    wire = Wire(Reply(garbled), Reply.sse("openai_chat_answer.sse"))
    events = await events_of(chat(wire, retry))
    assert StreamRetry(1, "invalid_output") in events
    assert essence(events) == await scripted_turn(2)


async def test_chat_without_a_finish_reason_is_a_cut(retry: RetryPolicy) -> None:
    body = Reply.sse("openai_chat_answer.sse").body
    end = body.rindex(b"data: ", 0, body.index(b'"finish_reason":"stop"'))
    wire = Wire(Reply(body[:end] + b"data: [DONE]\n\n"), Reply.sse("openai_chat_answer.sse"))
    events = await events_of(chat(wire, retry))
    assert StreamRetry(1, "stream_cut") in events
    assert essence(events) == await scripted_turn(2)


# --- structured output --------------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"route": {"type": "string"}, "p": {"type": "number"}},
    "required": ["route", "p"],
    "additionalProperties": False,
}


async def test_complete_json_with_responses(retry: RetryPolicy) -> None:
    response = {
        "id": "resp_x",
        "object": "response",
        "created_at": 1767225600,
        "status": "completed",
        "model": "gpt-5-mini",
        "output": [
            {
                "id": "msg_x",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": '{"route":"wait","p":0.4}', "annotations": []}
                ],
            }
        ],
        "usage": {"input_tokens": 50, "output_tokens": 9},
    }
    wire = Wire(Reply.json(response))
    answer = await responses(wire, retry, "gpt-5-mini").complete_json("judge", "now?", SCHEMA)
    assert answer == {"route": "wait", "p": 0.4}
    body = wire.bodies[0]
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "answer", "schema": SCHEMA, "strict": True}
    }
    assert body["input"] == "now?"


async def test_complete_json_with_chat(retry: RetryPolicy) -> None:
    completion = {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "gpt-4.1",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": '{"route":"act","p":0.9}',
                    "refusal": None,
                },
                "finish_reason": "stop",
            }
        ],
    }
    wire = Wire(Reply.json(completion))
    loose = {"type": "object", "properties": {"route": {"type": "string"}}}
    answer = await chat(wire, retry).complete_json("judge", "now?", loose)
    assert answer == {"route": "act", "p": 0.9}
    fmt = wire.bodies[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["strict"] is False  # the schema is not closed: strict would refuse it


def test_strict_schemas() -> None:
    assert is_strict_schema(SCHEMA)
    assert not is_strict_schema({"type": "object", "properties": {"a": {"type": "string"}}})
    nested = {**SCHEMA, "properties": {"route": {"type": "object", "properties": {}}, "p": {}}}
    assert not is_strict_schema(nested)


async def test_an_openai_key_is_required(
    retry: RetryPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ModelError) as caught:
        await events_of(responses(Wire(), retry))
    assert caught.value.code == "auth"


OPENAI_401 = {
    "error": {
        "message": "Incorrect API key provided: sk-proj-****************************************"
        "************cdef. You can find your API key at https://platform.openai.com/account/"
        "api-keys.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}


async def test_a_refused_key_names_its_variable_and_not_the_key(retry: RetryPolicy) -> None:
    for model in (
        responses(Wire(Reply.json(OPENAI_401, status=401)), retry),
        chat(Wire(Reply.json(OPENAI_401, status=401)), retry),
    ):
        with pytest.raises(ModelError) as caught:
            await events_of(model)
        error = caught.value
        assert (error.code, error.retryable, error.status) == ("auth", False, 401)
        assert "check OPENAI_API_KEY" in error.message
        for fragment in ("sk-", "****", "cdef"):
            assert fragment not in str(error)
