"""The whole loop per provider, over recorded traffic: reads, an approval, a final answer.

Each run must tell the same story as the same conversation played by ``ScriptedModel``; what the
provider was sent on each turn (tool results, thinking signatures) is checked on the wire.
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from fiduciary.events import Event, RunFailed, ThinkingDone, ToolCallEnd, Usage
from fiduciary.models.anthropic import AnthropicModel
from fiduciary.models.base import Model
from fiduciary.models.cli_agents import ClaudeCLIModel
from fiduciary.models.codex_cli import CodexCLIModel
from fiduciary.models.gemini import GeminiModel
from fiduciary.models.openai import OpenAIModel, openai_compatible
from fiduciary.models.retry import RetryPolicy
from fiduciary.testing import ScriptedModel, collect

from ..conftest import Effects
from .helpers import ANSWER, QUESTION, SCRIPT, build_agent, run_scenario, story
from .standins import StandIn
from .wire import Reply, Wire

pytestmark = [pytest.mark.usefixtures("keys"), pytest.mark.timeout(60)]


async def scripted_story() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    events, effects = await run_scenario(ScriptedModel([SCRIPT]))
    assert effects.payments == [{"to": "bob", "amount": Decimal("60"), "memo": ""}]
    return story(events)


async def check(model: Model, *, text_before_reads: bool = True) -> list[Event]:
    events, effects = await run_scenario(model)
    assert effects.payments == [{"to": "bob", "amount": Decimal("60"), "memo": ""}]
    expected, expected_ends = await scripted_story()
    if not text_before_reads:
        expected = [e for e in expected if e[0] != "text" or e[1] == ANSWER]
    told, ends = story(events)
    assert told == expected
    assert ends == expected_ends
    assert events[-1].type == "run_completed"
    return events


async def test_anthropic(retry: RetryPolicy) -> None:
    wire = Wire(
        Reply.sse("anthropic_reads.sse"),
        Reply.sse("anthropic_send.sse"),
        Reply.sse("anthropic_answer.sse"),
    )
    events = await check(
        AnthropicModel("claude-sonnet-4-6", http_client=wire.client(), retry=retry)
    )
    signatures = [e.signature for e in events if isinstance(e, ThinkingDone)]
    assert signatures[0] == "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds5kdHvI1kEqr"
    usages = [e for e in events if isinstance(e, Usage)]
    assert [(u.cache_read_tokens, u.cache_write_tokens) for u in usages] == [
        (0, 1536),
        (1536, 233),
        (1769, 121),
    ]
    reads, send, answer = wire.bodies
    assert [m["role"] for m in reads["messages"]] == ["user"]
    # turn 2 sends turn 1 back: thinking blocks with their signatures, then the calls' results
    assistant = send["messages"][1]["content"]
    assert [b["type"] for b in assistant] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
        "tool_use",
    ]
    assert assistant[0]["signature"] == signatures[0]
    assert (
        assistant[1]["data"] == "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
    )
    results = send["messages"][2]["content"]
    assert [r["tool_use_id"] for r in results] == [assistant[3]["id"], assistant[4]["id"]]
    assert json.loads(results[0]["content"]) == {"account": "main", "usd": "250.00"}
    assert results[-1]["cache_control"] == {"type": "ephemeral"}
    # turn 3: the approved payment's result
    last = answer["messages"][-1]["content"]
    assert last[0]["type"] == "tool_result"
    assert last[0]["content"].startswith('{"sent": "60", "to": "bob"')


async def test_openai_responses(retry: RetryPolicy) -> None:
    wire = Wire(
        Reply.sse("openai_responses_reads.sse"),
        Reply.sse("openai_responses_send.sse"),
        Reply.sse("openai_responses_answer.sse"),
    )
    await check(OpenAIModel("gpt-5.1", http_client=wire.client(), retry=retry))
    _, send, answer = wire.bodies
    kinds = [i.get("type", "message") for i in send["input"]]
    assert kinds == [
        "message",
        "reasoning",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    reasoning = send["input"][1]
    assert reasoning["id"] == "rs_0a1b2c3d4e5f6071829300000001"
    assert reasoning["encrypted_content"].startswith("gAAAAABpV0x1")
    assert [s["text"] for s in reasoning["summary"]] == [
        "Reading the balance and the EUR rate first.\n\nBoth reads can run at once."
    ]
    assert send["input"][5]["call_id"] == "call_Q4n8Vd2kLw7pXz1R"
    assert answer["input"][-1]["type"] == "function_call_output"
    assert answer["input"][-1]["call_id"] == "call_Hk2Lm9Qp4Rs7Tv1W"


async def test_openai_chat_completions(retry: RetryPolicy) -> None:
    wire = Wire(
        Reply.sse("openai_chat_reads.sse"),
        Reply.sse("openai_chat_send.sse"),
        Reply.sse("openai_chat_answer.sse"),
    )
    await check(OpenAIModel("gpt-4.1", api="chat", http_client=wire.client(), retry=retry))
    _, send, _ = wire.bodies
    roles = [m["role"] for m in send["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool"]
    assert [c["id"] for c in send["messages"][2]["tool_calls"]] == [
        "call_Q4n8Vd2kLw7pXz1R",
        "call_B7m3Tc9jHs5qYx2F",
    ]


async def test_openai_compatible_ollama(retry: RetryPolicy) -> None:
    wire = Wire(
        Reply.sse("ollama_chat_reads.sse"),
        Reply.sse("ollama_chat_send.sse"),
        Reply.sse("ollama_chat_answer.sse"),
    )
    model = openai_compatible(
        "qwen2.5:7b", "http://127.0.0.1:11434/v1", http_client=wire.client(), retry=retry
    )
    events = await check(model, text_before_reads=False)
    # no usage in the stream: the turn still reports one, empty
    assert all(u.input_tokens == 0 for u in events if isinstance(u, Usage))


async def test_gemini(retry: RetryPolicy) -> None:
    wire = Wire(
        Reply.sse("gemini_reads.sse"),
        Reply.sse("gemini_send.sse"),
        Reply.sse("gemini_answer.sse"),
    )
    events = await check(GeminiModel("gemini-2.5-flash", http_client=wire.client(), retry=retry))
    usages = [e for e in events if isinstance(e, Usage)]
    assert [(u.input_tokens, u.cache_read_tokens) for u in usages] == [
        (412, 0),
        (162, 1536),
        (309, 1536),
    ]
    _, send, answer = wire.bodies
    assert [c["role"] for c in send["contents"]] == ["user", "model", "user"]
    # turn 2 sends turn 1 back: text, then the calls (Gemini gave no ids: none is sent), the
    # first with its thought signature, then the results, named after their calls
    text, balance, rates = send["contents"][1]["parts"]
    assert text == {"text": "Let me check your balance and the rate."}
    signature = balance.get("thoughtSignature") or balance["thought_signature"]
    # the same bytes as received (the SDK encodes them URL-safe; Google's parser takes both)
    assert base64.urlsafe_b64decode(signature) == base64.b64decode(
        "CpcCAdHtim/4pJqy+TxmJHkzTJ/JISbWtUZSFwT18CXZBO8jqbuEN+vKP5ALiFplU09sgE8="
    )
    assert (balance["functionCall"], rates["functionCall"]) == (
        {"name": "balance", "args": {"account": "main"}},
        {"name": "rates", "args": {"currency": "EUR"}},
    )
    results = [p["functionResponse"] for p in send["contents"][2]["parts"]]
    assert [r["name"] for r in results] == ["balance", "rates"]
    assert all("id" not in r for r in results)
    assert json.loads(results[0]["response"]["output"]) == {"account": "main", "usd": "250.00"}
    # turn 3: the approved payment answers the call by the id Gemini gave it
    call = answer["contents"][-2]["parts"][-1]
    assert call["functionCall"]["id"] == "fc_9s2Lq7Wm4Xr1"
    (result,) = answer["contents"][-1]["parts"]
    assert result["functionResponse"]["id"] == "fc_9s2Lq7Wm4Xr1"
    assert result["functionResponse"]["response"]["output"].startswith('{"sent": "60", "to": "bob"')


async def test_claude_cli(tmp_path: Path, retry: RetryPolicy) -> None:
    stand_in = StandIn(
        tmp_path / "bin",
        "claude",
        ["claude_cli_reads.jsonl", "claude_cli_send.jsonl", "claude_cli_answer.jsonl"],
    )
    await check(ClaudeCLIModel("sonnet", executable=str(stand_in.path), retry=retry))
    reads, send, answer = stand_in.calls
    assert [t["name"] for t in reads["mcp"]["fiduciary"]["tools"]] == ["balance", "rates", "send"]
    assert '<tool_call id="toolu_01Mn3kQ8vWx5Ry7Tz2Lp9Hc" name="balance">' in send["stdin"]
    assert '<tool_result id="toolu_01Mn3kQ8vWx5Ry7Tz2Lp9Hc">' in send["stdin"]
    assert '"sent": "60"' in answer["stdin"]


async def test_codex_cli(tmp_path: Path, retry: RetryPolicy) -> None:
    # codex drives a run limited to reads (the run's whitelist): the reads run, then it answers
    stand_in = StandIn(tmp_path / "bin", "codex", ["codex_reads.jsonl", "codex_answer.jsonl"])
    effects = Effects()
    agent = build_agent(CodexCLIModel(executable=str(stand_in.path), retry=retry), effects)
    events = await collect(
        agent.run(QUESTION, principal="alice", capabilities=["balance", "rates"])
    )
    assert events[-1].type == "run_completed"
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert sorted(e.name for e in ends) == ["balance", "rates"]
    assert effects.payments == []
    reads, answer = stand_in.calls
    assert "- send:" not in reads["stdin"]  # a write is never offered to codex
    assert '<tool_result id="call_' in answer["stdin"]


async def test_codex_cli_is_refused_for_a_run_that_can_move_money(
    tmp_path: Path, retry: RetryPolicy
) -> None:
    # codex cannot switch off every tool of its own: a run offering "send" never reaches it
    stand_in = StandIn(
        tmp_path / "bin", "codex", ["codex_reads.jsonl", "codex_send.jsonl", "codex_answer.jsonl"]
    )
    effects = Effects()
    agent = build_agent(CodexCLIModel(executable=str(stand_in.path), retry=retry), effects)
    events = await collect(agent.run(QUESTION, principal="alice"))
    failed = events[-1]
    assert isinstance(failed, RunFailed)
    assert failed.reason == "error"
    assert "codex cannot switch off all of its own tools" in failed.message
    assert "this run can call send" in failed.message
    assert stand_in.calls == []  # the CLI never ran
    assert effects.payments == []


def test_every_provider_has_an_agent_test() -> None:
    names = {n for n in globals() if n.startswith("test_")}
    for provider in (
        "anthropic",
        "openai_responses",
        "openai_chat_completions",
        "openai_compatible_ollama",
        "gemini",
        "claude_cli",
        "codex_cli",
    ):
        assert f"test_{provider}" in names
    assert RetryPolicy().max_attempts >= 2
