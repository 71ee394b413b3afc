"""The Gemini model over recorded ``streamGenerateContent`` streams (SSE), through the SDK."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from fiduciary.exceptions import ModelError
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
from fiduciary.models.gemini import (
    GENERATED_ID,
    SIGNATURE,
    GeminiModel,
    gemini_schema,
    gemini_version,
    to_contents,
)
from fiduciary.models.pricing import default_prices
from fiduciary.models.registry import resolve_model
from fiduciary.models.retry import RetryPolicy
from fiduciary.models.tiers import TieredModel

from .helpers import Sleeps, essence, events_of, events_until_error, request, scripted_turn
from .wire import Reply, Wire

pytestmark = pytest.mark.usefixtures("keys")

BASE = "https://generativelanguage.googleapis.com"
READS_SIGNATURE = "CpcCAdHtim/4pJqy+TxmJHkzTJ/JISbWtUZSFwT18CXZBO8jqbuEN+vKP5ALiFplU09sgE8="
UNAVAILABLE = {
    "error": {
        "code": 503,
        "message": "The model is overloaded. Please try again later.",
        "status": "UNAVAILABLE",
    }
}
EXHAUSTED = {
    "error": {
        "code": 429,
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}],
    }
}


def model(wire: Wire, retry: RetryPolicy, name: str = "gemini-2.5-flash", **kw: Any) -> GeminiModel:
    return GeminiModel(name, http_client=wire.client(), retry=retry, **kw)


def signature_of(event: StreamThinkingDone) -> dict[str, Any]:
    assert event.signature is not None
    assert event.signature.startswith(SIGNATURE)
    data: dict[str, Any] = json.loads(event.signature[len(SIGNATURE) :])
    return data


async def test_a_turn_with_thoughts_text_and_parallel_calls_without_ids(
    retry: RetryPolicy,
) -> None:
    wire = Wire(Reply.sse("gemini_reads.sse"))
    events = await events_of(model(wire, retry))
    calls = [e for e in events if isinstance(e, StreamToolCall)]
    # Gemini gave no ids: each call has one of its own
    assert all(c.id.startswith(GENERATED_ID) for c in calls)
    assert len({c.id for c in calls}) == 2
    assert events[:5] == [
        StreamThinkingDelta("**Reading first**\n\nThe person wants to send money; ", 0),
        StreamThinkingDelta("I should check the balance and the EUR rate first.", 0),
        StreamThinkingDone(0, None),
        StreamTextDelta("Let me check your "),
        StreamTextDelta("balance and the rate."),
    ]
    # the first call's thought signature, kept in a thinking block bound to that call
    assert events[5] == StreamThinkingDelta("", 1)
    done = events[6]
    assert isinstance(done, StreamThinkingDone)
    assert signature_of(done) == {"call": calls[0].id, "signature": READS_SIGNATURE}
    assert events[7:] == [
        StreamToolCall(calls[0].id, "balance", '{"account": "main"}'),
        StreamToolCall(calls[1].id, "rates", '{"currency": "EUR"}'),
        # thinking tokens are billed as output
        StreamUsage(input_tokens=412, output_tokens=31 + 87, cache_read_tokens=0),
        StreamStop("tool_use"),
    ]
    assert essence(events) == await scripted_turn(0)


async def test_ids_are_unique_across_turns(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("gemini_reads.sse"), Reply.sse("gemini_reads.sse"))
    first = await events_of(model(wire, retry))
    second = await events_of(model(wire, retry))
    ids = [e.id for e in first + second if isinstance(e, StreamToolCall)]
    assert len(set(ids)) == 4


async def test_a_call_with_an_id_keeps_it(retry: RetryPolicy) -> None:
    events = await events_of(model(Wire(Reply.sse("gemini_send.sse")), retry))
    assert [e for e in events if isinstance(e, StreamToolCall)] == [
        StreamToolCall("fc_9s2Lq7Wm4Xr1", "send", '{"to": "bob", "amount": "60"}')
    ]
    assert StreamUsage(input_tokens=1698 - 1536, output_tokens=12 + 41, cache_read_tokens=1536) in (
        events
    )
    assert essence(events) == await scripted_turn(1)


async def test_the_request_carries_system_tools_thinking_and_the_key(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("gemini_answer.sse"))
    req = request(settings={"effort": "high", "max_tokens": 900, "temperature": 0.2})
    await events_of(model(wire, retry), req)
    (seen,) = wire.seen
    assert seen.url.startswith(f"{BASE}/")
    assert seen.url.endswith("/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    assert seen.headers["x-goog-api-key"] == "AIza-gemini-test-0000"
    body = seen.body
    assert body["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "Can I send bob 60 dollars? Check my balance and the EUR rate first."}
            ],
        }
    ]
    assert body["systemInstruction"]["parts"] == [
        {"text": "You act for a person.\n\nRead before you write."}
    ]
    (tools,) = body["tools"]
    declarations = tools["functionDeclarations"]
    assert [d["name"] for d in declarations] == ["balance", "rates"]
    schema = (
        declarations[0].get("parametersJsonSchema") or declarations[0]["parameters_json_schema"]
    )
    assert schema == {"type": "object", "properties": {}}
    config = body["generationConfig"]
    assert config["maxOutputTokens"] == 900
    assert config["temperature"] == 0.2
    thinking = config["thinkingConfig"]
    assert thinking in (
        {"include_thoughts": True, "thinking_budget": 24576},
        {"includeThoughts": True, "thinkingBudget": 24576},
    )


async def test_gemini_3_thinks_by_level_and_older_models_not_at_all(retry: RetryPolicy) -> None:
    wire = Wire(*[Reply.sse("gemini_answer.sse") for _ in range(3)])
    await events_of(model(wire, retry, "gemini-3-pro-preview"), request(settings={"effort": "low"}))
    await events_of(model(wire, retry, "gemini-2.0-flash"))
    await events_of(model(wire, retry, thinking="off"))
    level, old, off = (b.get("generationConfig", {}) for b in wire.bodies)
    assert json.dumps(level["thinkingConfig"]).replace("_l", "L") in (
        '{"include_thoughts": true, "thinkingLevel": "LOW"}',
        '{"includeThoughts": true, "thinkingLevel": "LOW"}',
    )
    assert "thinkingConfig" not in old
    assert "thinkingConfig" not in off
    assert gemini_version("gemini-2.5-flash-lite") == (2, 5)
    assert gemini_version("models/gemini-3-pro-preview") == (3, 0)
    assert gemini_version("gemma-3-27b-it") is None


def test_thought_signatures_go_back_on_their_parts_and_generated_ids_stay_home() -> None:
    sig_call = base64.b64encode(b"sig-of-the-call").decode()
    sig_text = base64.b64encode(b"sig-of-the-text").decode()
    made = f"{GENERATED_ID}0a1b"
    messages = (
        UserTextMessage("pay bob"),
        AssistantMessage(
            (
                ThinkingPart("summary", ""),
                ThinkingPart("", SIGNATURE + json.dumps({"call": None, "signature": sig_text})),
                TextPart("Checking."),
                ThinkingPart("", SIGNATURE + json.dumps({"call": made, "signature": sig_call})),
                ThinkingPart("another provider's", "EqQBCgIYAhIM"),
                ToolUsePart(made, "balance", {"account": "main"}),
                ToolUsePart("fc_given", "rates", {"currency": "EUR"}),
            )
        ),
        ToolResultsMessage(
            (ToolResult(made, '{"usd": "250"}'), ToolResult("fc_given", "no such rate", True))
        ),
        UserTextMessage("and then?"),
        AssistantMessage(()),  # an empty turn is dropped
    )
    out = [c.model_dump(mode="json", exclude_none=True) for c in to_contents(messages)]
    assert [c["role"] for c in out] == ["user", "model", "user"]
    assert out[1]["parts"] == [
        {"text": "Checking.", "thought_signature": sig_text},
        {
            "function_call": {"name": "balance", "args": {"account": "main"}},
            "thought_signature": sig_call,
        },
        {"function_call": {"id": "fc_given", "name": "rates", "args": {"currency": "EUR"}}},
    ]
    # results answer their calls by name (and by id where Gemini gave one); the next question
    # shares their user turn
    assert out[2]["parts"] == [
        {"function_response": {"name": "balance", "response": {"output": '{"usd": "250"}'}}},
        {
            "function_response": {
                "id": "fc_given",
                "name": "rates",
                "response": {"error": "no such rate"},
            }
        },
        {"text": "and then?"},
    ]


def test_schemas_are_trimmed_to_what_gemini_takes() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "SendInput",
        "properties": {
            "to": {"type": "string", "examples": ["bob"]},
            "amount": {"anyOf": [{"type": "number"}, {"type": "string", "pattern": "^\\d+$"}]},
            "currency": {"const": "USD"},
            "memo": {"oneOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "line": {"$ref": "#/$defs/Line"},
        },
        "required": ["to", "amount"],
        "$defs": {"Line": {"type": "object", "properties": {"sku": {"const": "x"}}}},
    }
    assert gemini_schema(schema) == {
        "type": "object",
        "title": "SendInput",
        "properties": {
            "to": {"type": "string"},
            "amount": {"anyOf": [{"type": "number"}, {"type": "string", "pattern": "^\\d+$"}]},
            "currency": {"enum": ["USD"]},
            "memo": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "line": {"$ref": "#/$defs/Line"},
        },
        "required": ["to", "amount"],
        "$defs": {"Line": {"type": "object", "properties": {"sku": {"enum": ["x"]}}}},
    }
    assert gemini_schema({}) == {"type": "object", "properties": {}}
    # a property called like a dropped keyword is still a property
    assert gemini_schema({"type": "object", "properties": {"examples": {"type": "string"}}}) == {
        "type": "object",
        "properties": {"examples": {"type": "string"}},
    }


async def test_a_safety_stop_is_a_refusal(retry: RetryPolicy) -> None:
    events = await events_of(model(Wire(Reply.sse("gemini_refusal.sse")), retry))
    assert essence(events) == [("text", "I can't help with"), ("stop", "refusal")]


async def test_a_blocked_prompt_is_a_refusal(retry: RetryPolicy) -> None:
    blocked = {
        "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
        "usageMetadata": {"promptTokenCount": 40, "totalTokenCount": 40},
        "modelVersion": "gemini-2.5-flash",
    }
    body = f"data: {json.dumps(blocked)}\r\n\r\n".encode()
    events = await events_of(model(Wire(Reply(body)), retry))
    assert events == [StreamUsage(input_tokens=40), StreamStop("refusal")]


async def test_max_tokens_is_a_stop_reason(retry: RetryPolicy) -> None:
    body = Reply.sse("gemini_answer.sse").body.replace(
        b'"finishReason":"STOP"', b'"finishReason":"MAX_TOKENS"'
    )
    events = await events_of(model(Wire(Reply(body)), retry))
    assert events[-1] == StreamStop("max_tokens")


async def test_a_malformed_function_call_is_asked_again(retry: RetryPolicy) -> None:
    malformed = {
        "candidates": [{"finishReason": "MALFORMED_FUNCTION_CALL", "index": 0}],
        "usageMetadata": {"promptTokenCount": 40, "totalTokenCount": 40},
    }
    wire = Wire(
        Reply(f"data: {json.dumps(malformed)}\r\n\r\n".encode()), Reply.sse("gemini_send.sse")
    )
    events = await events_of(model(wire, retry))
    assert essence(events) == await scripted_turn(1)
    assert len(wire.seen) == 2


async def test_429_waits_what_retry_info_says(retry: RetryPolicy, sleeps: Sleeps) -> None:
    wire = Wire(Reply.json(EXHAUSTED, status=429), Reply.sse("gemini_answer.sse"))
    events = await events_of(model(wire, retry))
    assert essence(events) == await scripted_turn(2)
    assert len(wire.seen) == 2  # the SDK's own retries are off: only fiduciary's
    assert sleeps.waits == [7.0]


async def test_503_unavailable_then_success(retry: RetryPolicy, sleeps: Sleeps) -> None:
    wire = Wire(Reply.json(UNAVAILABLE, status=503), Reply.sse("gemini_answer.sse"))
    events = await events_of(model(wire, retry))
    assert essence(events) == await scripted_turn(2)
    assert sleeps.waits == [0.5]


async def test_an_error_event_mid_stream_retracts_and_asks_again(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("gemini_overloaded.sse"), Reply.sse("gemini_answer.sse"))
    events = await events_of(model(wire, retry))
    assert events[:2] == [StreamTextDelta("Sent 60"), StreamRetry(1, "overloaded")]
    assert essence(events) == await scripted_turn(2)


async def test_a_stream_cut_in_the_middle_is_asked_again(retry: RetryPolicy) -> None:
    body = Reply.sse("gemini_answer.sse").body
    cut = body.index(b"Your balance")  # after the first text chunk was delivered
    wire = Wire(Reply(body, cut_after=cut), Reply.sse("gemini_answer.sse"))
    events = await events_of(model(wire, retry))
    assert StreamRetry(1, "connection") in events
    assert essence(events) == await scripted_turn(2)


async def test_a_stream_that_ends_without_a_finish_reason_is_asked_again(
    retry: RetryPolicy,
) -> None:
    body = Reply.sse("gemini_answer.sse").body
    truncated = body[: body.index(b"data:", 10)]  # the first chunk only
    wire = Wire(Reply(truncated), Reply.sse("gemini_answer.sse"))
    events = await events_of(model(wire, retry))
    assert StreamRetry(1, "stream_cut") in events
    assert essence(events) == await scripted_turn(2)


async def test_a_stream_cut_after_a_tool_call_is_never_asked_again(retry: RetryPolicy) -> None:
    # the calls arrive in one chunk, and the finish reason in a later one, which is cut
    calls = Reply.sse("gemini_reads.sse").body.replace(b'"finishReason":"STOP",', b"")
    final = {
        "candidates": [{"content": {"parts": [{"text": ""}], "role": "model"}, "index": 0}],
        "finishReason": "STOP",
    }
    body = calls + f"data: {json.dumps(final)}\r\n\r\n".encode()
    wire = Wire(Reply(body, cut_after=len(calls) + 20), Reply.sse("gemini_reads.sse"))
    seen, error = await events_until_error(model(wire, retry))
    assert [e.name for e in seen if isinstance(e, StreamToolCall)] == ["balance", "rates"]
    assert isinstance(error, ModelError)
    assert error.code == "connection"
    assert not error.retryable
    assert len(wire.seen) == 1


async def test_errors_that_retrying_cannot_fix_fail_at_once(retry: RetryPolicy) -> None:
    bad = {
        "error": {
            "code": 400,
            "message": "* GenerateContentRequest.tools[0]: bad schema",
            "status": "INVALID_ARGUMENT",
        }
    }
    wire = Wire(Reply.json(bad, status=400))
    with pytest.raises(ModelError) as caught:
        await events_of(model(wire, retry))
    assert caught.value.code == "bad_request"
    assert caught.value.status == 400
    assert "bad schema" in str(caught.value)
    assert len(wire.seen) == 1


async def test_retries_give_up_after_the_policy_s_attempts(
    retry: RetryPolicy, sleeps: Sleeps
) -> None:
    wire = Wire(*[Reply.json(UNAVAILABLE, status=503) for _ in range(4)])
    with pytest.raises(ModelError) as caught:
        await events_of(model(wire, retry))
    assert caught.value.code == "overloaded"
    assert len(wire.seen) == 4
    assert sleeps.waits == [0.5, 1.0, 2.0]


async def test_a_missing_key_names_both_variables_and_is_read_at_request_time(
    retry: RetryPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY")
    wire = Wire(Reply.sse("gemini_answer.sse"), Reply.sse("gemini_answer.sse"))
    m = model(wire, retry)
    with pytest.raises(ModelError) as caught:
        await events_of(m)
    assert caught.value.code == "auth"
    assert "set GEMINI_API_KEY or GOOGLE_API_KEY" in str(caught.value)
    assert not wire.seen
    monkeypatch.setenv("GOOGLE_API_KEY", "AIza-google-later-1111")
    await events_of(m)
    assert wire.seen[0].headers["x-goog-api-key"] == "AIza-google-later-1111"
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-gemini-first-2222")  # the Gemini variable wins
    await events_of(m)
    assert wire.seen[1].headers["x-goog-api-key"] == "AIza-gemini-first-2222"
    assert "AIza" not in repr(m)
    assert "AIza" not in json.dumps({k: repr(v) for k, v in vars(m).items()})


async def test_a_refused_key_names_its_variables_and_not_the_key(retry: RetryPolicy) -> None:
    body = {
        "error": {
            "code": 400,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                }
            ],
        }
    }
    wire = Wire(Reply.json(body, status=400))
    with pytest.raises(ModelError) as caught:
        await events_of(model(wire, retry))
    error = caught.value
    assert (error.code, error.retryable, error.status) == ("auth", False, 400)
    assert "check GEMINI_API_KEY or GOOGLE_API_KEY" in error.message
    assert "AIza" not in str(error)


async def test_complete_json_uses_a_json_schema_response(retry: RetryPolicy) -> None:
    answer = {
        "candidates": [
            {
                "content": {"parts": [{"text": '{"route": "act", "p": 0.82}'}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 120, "candidatesTokenCount": 14},
        "modelVersion": "gemini-2.5-flash-lite",
    }
    schema = {
        "type": "object",
        "properties": {"route": {"type": "string"}, "p": {"type": "number"}},
        "required": ["route", "p"],
        "additionalProperties": False,
    }
    wire = Wire(Reply.json(UNAVAILABLE, status=503), Reply.json(answer))
    m = model(wire, retry, "gemini-2.5-flash-lite")
    assert await m.complete_json("judge", "act?", schema) == {"route": "act", "p": 0.82}
    seen = wire.seen[-1]
    assert seen.url.endswith("/models/gemini-2.5-flash-lite:generateContent")
    config = seen.body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config.get("responseJsonSchema", config.get("response_json_schema")) == schema
    assert seen.body["systemInstruction"]["parts"] == [{"text": "judge"}]
    assert seen.body["contents"] == [{"role": "user", "parts": [{"text": "act?"}]}]


async def test_complete_json_refusal_is_a_model_error(retry: RetryPolicy) -> None:
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {}}
    with pytest.raises(ModelError) as caught:
        await model(Wire(Reply.json(blocked)), retry).complete_json("s", "p", {"type": "object"})
    assert caught.value.code == "refused"


def test_the_model_string_the_tiers_and_the_prices() -> None:
    named = resolve_model("gemini:gemini-2.5-flash")
    assert isinstance(named, GeminiModel)
    assert named.name == "gemini:gemini-2.5-flash"
    auto = resolve_model("gemini:auto")
    assert isinstance(auto, TieredModel)
    assert [m.name for m in auto.models.values()] == [
        "gemini:gemini-2.5-flash-lite",
        "gemini:gemini-2.5-flash",
        "gemini:gemini-2.5-pro",
    ]
    for tier in auto.models.values():
        assert default_prices().lookup(tier.name) is not None
    price = default_prices().lookup("gemini:gemini-2.5-flash")
    assert price is not None
    assert price.output > price.input > price.cache_read
