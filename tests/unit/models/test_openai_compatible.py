"""OpenAI-compatible servers (Ollama, vLLM, llama.cpp server, LM Studio) by base URL."""

from __future__ import annotations

import pytest

from fiduciary.models.base import (
    StreamStop,
    StreamThinkingDelta,
    StreamThinkingDone,
    StreamToolCall,
    StreamUsage,
)
from fiduciary.models.openai import OpenAIModel, openai_compatible
from fiduciary.models.registry import resolve_model
from fiduciary.models.retry import RetryPolicy

from .helpers import essence, events_of, request, scripted_turn
from .wire import Reply, Wire

OLLAMA = "http://127.0.0.1:11434/v1"


def ollama(wire: Wire, retry: RetryPolicy, **kw: object) -> OpenAIModel:
    return openai_compatible("qwen2.5:7b", OLLAMA, http_client=wire.client(), retry=retry, **kw)  # type: ignore[arg-type]


@pytest.mark.usefixtures("keys")
async def test_tool_calls_in_one_piece_and_no_usage(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("ollama_chat_reads.sse"))
    events = await events_of(ollama(wire, retry))
    assert events == [
        StreamToolCall("call_x1f2k9q3", "balance", '{"account":"main"}'),
        StreamToolCall("call_7mzp0c4e", "rates", '{"currency":"EUR"}'),
        StreamStop("tool_use"),
    ]
    # the scripted twin says the same, but for the text before the calls this model did not write
    assert essence(events) == [e for e in await scripted_turn(0) if e[0] != "text"]


@pytest.mark.usefixtures("keys")
async def test_the_request_goes_to_the_server_without_openai_s_key(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("ollama_chat_answer.sse"))
    await events_of(ollama(wire, retry), request(settings={"max_tokens": 300, "effort": "high"}))
    (seen,) = wire.seen
    assert seen.url == f"{OLLAMA}/chat/completions"
    # OPENAI_API_KEY is set (the keys fixture) but must never reach another server
    assert seen.headers["authorization"] == "Bearer not-needed"
    body = seen.body
    assert body["model"] == "qwen2.5:7b"
    assert body["max_tokens"] == 300  # what local servers understand
    assert "max_completion_tokens" not in body
    assert "parallel_tool_calls" not in body
    assert "reasoning_effort" not in body


async def test_a_key_from_the_variable_it_names(
    retry: RetryPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "token-abc123")
    wire = Wire(Reply.sse("ollama_chat_answer.sse"))
    model = openai_compatible(
        "Qwen/Qwen2.5-7B-Instruct",
        "http://gpu-box:8000/v1",
        api_key_env="VLLM_API_KEY",
        http_client=wire.client(),
        retry=retry,
    )
    assert essence(await events_of(model)) == await scripted_turn(2)
    assert wire.seen[0].headers["authorization"] == "Bearer token-abc123"
    assert model.name == "openai-compatible:Qwen/Qwen2.5-7B-Instruct@http://gpu-box:8000/v1"


async def test_calls_without_an_index_and_reasoning_content(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("llamacpp_chat_reads.sse"))
    model = openai_compatible(
        "gpt-oss-20b", "http://127.0.0.1:8080/v1", http_client=wire.client(), retry=retry
    )
    events = await events_of(model)
    assert events == [
        StreamThinkingDelta("Need balance ", 0),
        StreamThinkingDelta("and rate.", 0),
        StreamThinkingDone(0, None),
        StreamToolCall("call_a1", "balance", '{"account":"main"}'),
        StreamToolCall("call_b2", "rates", '{"currency":"EUR"}'),
        StreamUsage(input_tokens=311, output_tokens=47),
        StreamStop("tool_use"),
    ]


async def test_usage_can_be_left_out_of_the_request(retry: RetryPolicy) -> None:
    wire = Wire(Reply.sse("ollama_chat_answer.sse"))
    await events_of(ollama(wire, retry, include_usage=False))
    assert "stream_options" not in wire.bodies[0]


def test_the_model_string() -> None:
    model = resolve_model("openai-compatible:qwen2.5:7b@http://127.0.0.1:11434/v1")
    assert isinstance(model, OpenAIModel)
    assert model.model == "qwen2.5:7b"
    assert model.base_url == OLLAMA
    assert model.api == "chat"
    assert model.compatible
