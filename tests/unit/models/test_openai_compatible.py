"""OpenAI-compatible servers (Ollama, vLLM, llama.cpp server, LM Studio) by base URL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai.types.chat import ChatCompletionChunk

from fiduciary.events import RunCompleted
from fiduciary.exceptions import ModelError
from fiduciary.models._openai_chat import ChatTurn
from fiduciary.models.base import (
    ModelEvent,
    StreamStop,
    StreamThinkingDelta,
    StreamThinkingDone,
    StreamToolCall,
    StreamUsage,
)
from fiduciary.models.openai import OpenAIModel, openai_compatible
from fiduciary.models.registry import resolve_model
from fiduciary.models.retry import RetryPolicy
from fiduciary.testing import MemoryStore, collect

from .. import scenario_reused_ids as reused_ids
from ..scenario_payments import EffectTarget
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


# --- tool calls however a server numbers them -----------------------------------------------


def _sse(*deltas: dict[str, object], finish: str = "tool_calls") -> Reply:
    """A chat completion stream of these deltas, then a finish reason."""
    chunks: list[dict[str, object]] = [
        {"index": 0, "delta": d, "finish_reason": None} for d in deltas
    ]
    chunks.append({"index": 0, "delta": {}, "finish_reason": finish})
    lines = [
        "data: "
        + json.dumps(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1767225600,
                "model": "m",
                "choices": [c],
            }
        )
        + "\n\n"
        for c in chunks
    ]
    return Reply(("".join(lines) + "data: [DONE]\n\n").encode())


def _piece(
    arguments: str, *, index: int | None = None, id: str | None = None, name: str | None = None
) -> dict[str, object]:
    call: dict[str, object] = {"function": {"arguments": arguments}}
    if name is not None:
        call["function"] = {"name": name, "arguments": arguments}
        call["type"] = "function"
    if index is not None:
        call["index"] = index
    if id is not None:
        call["id"] = id
    return call


def _calls(events: list[ModelEvent]) -> list[tuple[str, str]]:
    return [(e.name, e.arguments) for e in events if isinstance(e, StreamToolCall)]


async def test_calls_without_ids_get_ids_unique_across_turns(retry: RetryPolicy) -> None:
    send = _sse({"tool_calls": [_piece('{"to":"bob","amount":"5"}', index=0, name="send")]})
    wire = Wire(send, send)
    model = ollama(wire, retry)
    first, second = await events_of(model), await events_of(model)
    ids = [e.id for e in first + second if isinstance(e, StreamToolCall)]
    assert len(ids) == len(set(ids)) == 2  # counters restarting at call_0 made them equal


async def test_calls_interleaved_by_index_are_handed_out_whole(retry: RetryPolicy) -> None:
    wire = Wire(
        _sse(
            {"tool_calls": [_piece('{"account":', index=0, id="c1", name="balance")]},
            {"tool_calls": [_piece('{"currency":', index=1, id="c2", name="rates")]},
            {"tool_calls": [_piece(' "main"}', index=0)]},
            {"tool_calls": [_piece(' "EUR"}', index=1)]},
        )
    )
    events = await events_of(ollama(wire, retry))
    assert _calls(events) == [
        ("balance", '{"account": "main"}'),
        ("rates", '{"currency": "EUR"}'),
    ]


def test_a_call_is_handed_out_as_soon_as_it_is_whole() -> None:
    def chunk(*pieces: dict[str, object]) -> ChatCompletionChunk:
        return ChatCompletionChunk.model_validate(
            {
                "id": "x",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": {"tool_calls": list(pieces)}}],
            }
        )

    turn = ChatTurn("m")
    out = list(turn.feed(chunk(_piece('{"a":', index=0, id="c1", name="x"))))
    out += list(turn.feed(chunk(_piece("{}", index=1, id="c2", name="y"))))
    assert out == []  # x is not whole yet: nothing is handed out, not even y
    out = list(turn.feed(chunk(_piece("1}", index=0))))
    assert out == [StreamToolCall("c1", "x", '{"a":1}')]


async def test_two_calls_in_one_chunk_without_index_or_id_stay_two(retry: RetryPolicy) -> None:
    wire = Wire(
        _sse(
            {
                "tool_calls": [
                    _piece('{"account":"main"}', name="balance"),
                    _piece('{"currency":"EUR"}', name="rates"),
                ]
            },
        )
    )
    events = await events_of(ollama(wire, retry))
    assert _calls(events) == [
        ("balance", '{"account":"main"}'),
        ("rates", '{"currency":"EUR"}'),
    ]
    ids = [e.id for e in events if isinstance(e, StreamToolCall)]
    assert len(set(ids)) == 2


async def test_calls_without_index_or_id_in_pieces(retry: RetryPolicy) -> None:
    wire = Wire(
        _sse(
            {"tool_calls": [_piece('{"account":', name="balance")]},
            {"tool_calls": [_piece('"main"}')]},
            {"tool_calls": [_piece('{"currency":', name="rates")]},
            {"tool_calls": [_piece('"EUR"}')]},
        )
    )
    events = await events_of(ollama(wire, retry))
    assert _calls(events) == [
        ("balance", '{"account":"main"}'),
        ("rates", '{"currency":"EUR"}'),
    ]


async def test_a_server_that_wants_a_key_says_how_to_give_one(retry: RetryPolicy) -> None:
    body = {"error": {"message": "Invalid API Key", "type": "invalid_request_error"}}
    with pytest.raises(ModelError) as caught:
        await events_of(ollama(Wire(Reply.json(body, status=401)), retry))
    assert caught.value.code == "auth"
    assert "api_key_env=" in caught.value.message
    named = ollama(Wire(Reply.json(body, status=401)), retry, api_key_env="VLLM_API_KEY")
    with pytest.raises(ModelError) as caught:
        await events_of(named)
    assert "check VLLM_API_KEY" in caught.value.message


async def test_a_payment_asked_twice_by_a_server_without_call_ids_is_made_twice(
    retry: RetryPolicy, tmp_path: Path
) -> None:
    send = _sse({"tool_calls": [_piece('{"payee":"bob","amount":"5"}', index=0, name="send")]})
    answer = _sse({"content": "Sent bob 5 dollars twice."}, finish="stop")
    wire = Wire(send, send, answer)
    target = EffectTarget(tmp_path / "effects.sqlite3")
    agent = reused_ids.agent(MemoryStore(), target, model=ollama(wire, retry))
    events = await collect(agent.run(reused_ids.MESSAGE, principal="alice"))
    assert isinstance(events[-1], RunCompleted)
    assert [row[1:] for row in target.effects()] == [("bob", "5"), ("bob", "5")]
    # the server is told of each call, and of its result, under one id of its own
    messages = wire.bodies[-1]["messages"]
    called = [c["id"] for m in messages for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert called == answered
    assert len(set(called)) == 2
