"""The CLI agents against stand-in executables that print the documented output formats."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fiduciary.exceptions import ModelError
from fiduciary.models.base import (
    AssistantMessage,
    ModelRequest,
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
    ToolSpec,
    ToolUsePart,
    UserTextMessage,
)
from fiduciary.models.cli_agents import DEFERRED_RESULT, ClaudeCLIModel, render_transcript
from fiduciary.models.codex_cli import CODEX_TOOLS_OFF, CodexCLIModel, parse_tool_calls
from fiduciary.models.retry import RetryPolicy

from .helpers import essence, events_of, request, scripted_turn
from .standins import StandIn

pytestmark = pytest.mark.timeout(60)


def claude(stand_in: StandIn, retry: RetryPolicy, **kw: object) -> ClaudeCLIModel:
    return ClaudeCLIModel("sonnet", executable=str(stand_in.path), retry=retry, **kw)  # type: ignore[arg-type]


def codex(stand_in: StandIn, retry: RetryPolicy) -> CodexCLIModel:
    return CodexCLIModel("gpt-5.3-codex", executable=str(stand_in.path), retry=retry)


# --- claude -------------------------------------------------------------------------------------


async def test_claude_streams_thinking_text_and_calls_then_stops_the_cli(
    tmp_path: Path, retry: RetryPolicy
) -> None:
    stand_in = StandIn(tmp_path / "bin", "claude", ["claude_cli_reads.jsonl"])
    # the fixture hangs after the message (as the CLI would go on): the model must end it
    events = await asyncio.wait_for(events_of(claude(stand_in, retry)), timeout=30)
    assert events == [
        StreamThinkingDelta("I should read the balance ", 0),
        StreamThinkingDelta("and the EUR rate first.", 0),
        StreamThinkingDone(0, None),  # a CLI's signature cannot be sent back to it: not kept
        StreamTextDelta("Let me check your "),
        StreamTextDelta("balance and the rate."),
        StreamToolCall("toolu_01Mn3kQ8vWx5Ry7Tz2Lp9Hc", "balance", '{"account": "main"}'),
        # the CLI had begun "running" balance before rates was streamed: rates still counts
        StreamToolCall("toolu_01Pq6sT9wYz2Bc4Df7Gh1Jk", "rates", '{"currency": "EUR"}'),
        StreamUsage(
            input_tokens=3, output_tokens=142, cache_read_tokens=11021, cache_write_tokens=1884
        ),
        StreamStop("tool_use"),
    ]
    assert essence(events) == await scripted_turn(0)


async def test_claude_is_offered_the_capabilities_through_mcp_and_runs_none(
    tmp_path: Path, retry: RetryPolicy
) -> None:
    stand_in = StandIn(tmp_path / "bin", "claude", ["claude_cli_answer.jsonl"])
    await events_of(claude(stand_in, retry), request(settings={"effort": "high"}))
    (call,) = stand_in.calls
    argv = call["argv"]
    assert argv[:3] == ["-p", "--output-format", "stream-json"]
    for flag in (
        "--verbose",
        "--include-partial-messages",
        "--strict-mcp-config",
        "--no-session-persistence",
    ):
        assert flag in argv
    assert argv[argv.index("--model") + 1] == "sonnet"
    assert argv[argv.index("--tools") + 1] == ""  # no built-in tools
    assert argv[argv.index("--allowedTools") + 1] == "mcp__fiduciary"
    assert argv[argv.index("--effort") + 1] == "high"
    system = argv[argv.index("--system-prompt") + 1]
    assert system.startswith("You act for a person.\n\nRead before you write.")
    # the MCP server the config names lists the tools and answers a call without running it
    server = call["mcp"]["fiduciary"]
    assert server["server"] == "fiduciary"
    assert [t["name"] for t in server["tools"]] == ["balance", "rates"]
    assert server["tools"][0]["inputSchema"] == {"type": "object"}
    assert server["called"] == {
        "content": [{"type": "text", "text": DEFERRED_RESULT}],
        "isError": False,
    }
    assert server["unknown"]["code"] == -32601
    # the conversation is in the prompt; the CLI runs in a scratch directory
    assert call["stdin"] == "<user>\n" + request().messages[0].text + "\n</user>"  # type: ignore[union-attr]
    assert Path(call["cwd"]).name.startswith("fiduciary-claude-")
    assert not await asyncio.to_thread(Path(call["cwd"]).exists)  # removed afterwards


async def test_claude_answer_uses_the_result_s_usage(tmp_path: Path, retry: RetryPolicy) -> None:
    stand_in = StandIn(tmp_path / "bin", "claude", ["claude_cli_answer.jsonl"])
    events = await events_of(claude(stand_in, retry))
    assert essence(events) == await scripted_turn(2)
    assert StreamUsage(4, 19, 13307, 221) in events


async def test_claude_without_partial_messages_reads_whole_blocks(
    tmp_path: Path, retry: RetryPolicy
) -> None:
    stand_in = StandIn(tmp_path / "bin", "claude", ["claude_cli_reads_blocks.jsonl"])
    model = claude(stand_in, retry, partial_messages=False)
    events = await asyncio.wait_for(events_of(model), timeout=30)
    assert essence(events) == await scripted_turn(0)
    assert "--include-partial-messages" not in stand_in.calls[0]["argv"]


async def test_claude_api_errors_are_model_errors(tmp_path: Path, retry: RetryPolicy) -> None:
    stand_in = StandIn(
        tmp_path / "bin", "claude", ["claude_cli_overloaded.jsonl", "claude_cli_answer.jsonl"]
    )
    events = await events_of(claude(stand_in, retry))  # 529 is retryable: asked again
    assert essence(events) == await scripted_turn(2)
    assert len(stand_in.calls) == 2
    only_errors = StandIn(tmp_path / "bin2", "claude", ["claude_cli_overloaded.jsonl"])
    with pytest.raises(ModelError) as caught:
        await events_of(claude(only_errors, RetryPolicy(max_attempts=1)))
    assert caught.value.code == "overloaded"
    assert "529" in str(caught.value)


async def test_a_cli_that_dies_without_a_result(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    stand_in = StandIn(tmp_path / "bin", "claude", [str(tmp_path / "empty.jsonl")], exit_code=3)
    with pytest.raises(ModelError) as caught:
        await events_of(claude(stand_in, RetryPolicy(max_attempts=1)))
    assert "without a result" in str(caught.value)
    assert "stand-in: replaying" in str(caught.value)  # the CLI's last words


async def test_a_missing_binary_is_unavailable() -> None:
    model = ClaudeCLIModel("sonnet", executable="claude-not-installed-here")
    with pytest.raises(ModelError) as caught:
        await events_of(model)
    assert caught.value.code == "unavailable"
    with pytest.raises(ModelError):
        await events_of(CodexCLIModel(executable="codex-not-installed-here"))


async def test_claude_complete_json_uses_json_schema(tmp_path: Path, retry: RetryPolicy) -> None:
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 1,
        "duration_api_ms": 1,
        "num_turns": 1,
        "result": "",
        "session_id": "s",
        "structured_output": {"route": "act"},
    }
    (tmp_path / "json.jsonl").write_text(json.dumps(result) + "\n", encoding="utf-8")
    stand_in = StandIn(tmp_path / "bin", "claude", [str(tmp_path / "json.jsonl")])
    schema = {"type": "object", "properties": {"route": {"type": "string"}}}
    assert await claude(stand_in, retry).complete_json("judge", "act?", schema) == {"route": "act"}
    argv = stand_in.calls[0]["argv"]
    assert json.loads(argv[argv.index("--json-schema") + 1]) == schema
    assert stand_in.calls[0]["stdin"] == "act?"


# --- codex --------------------------------------------------------------------------------------


async def test_codex_calls_from_its_json_reply(tmp_path: Path, retry: RetryPolicy) -> None:
    stand_in = StandIn(tmp_path / "bin", "codex", ["codex_reads.jsonl"])
    events = await events_of(codex(stand_in, retry), request(settings={"effort": "low"}))
    assert events[:2] == [
        StreamThinkingDelta(
            "**Checking funds**\n\nRead the balance and the EUR rate before anything else.", 0
        ),
        StreamThinkingDone(0, None),
    ]
    calls = [e for e in events if isinstance(e, StreamToolCall)]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("balance", {"account": "main"}),
        ("rates", {"currency": "EUR"}),
    ]
    assert len({c.id for c in calls}) == 2
    assert StreamUsage(input_tokens=537, output_tokens=96, cache_read_tokens=2304) in events
    assert events[-1] == StreamStop("tool_use")
    # codex writes no text before its calls; otherwise it says what the scripted model says
    assert essence(events) == [e for e in await scripted_turn(0) if e[0] != "text"]
    (call,) = stand_in.calls
    argv = call["argv"]
    assert argv[:2] == ["exec", "--json"]
    assert argv[-1] == "-"
    for flag in ("--skip-git-repo-check", "--ephemeral"):
        assert flag in argv
    assert argv[argv.index("--sandbox") + 1] == "read-only"
    settings = [argv[i + 1] for i, a in enumerate(argv) if a == "-c"]
    assert 'model_reasoning_effort="low"' in settings
    # codex's own tools are switched off: the shell, exec, apply_patch, web search
    assert set(CODEX_TOOLS_OFF) <= set(settings)
    assert "features.shell_tool=false" in settings
    prompt = call["stdin"]
    assert '{"tool_calls": [{"name": "<tool>", "arguments": {...}}]}' in prompt
    assert "- balance: The balance of an account, in USD." in prompt
    assert "<user>\nCan I send bob 60 dollars?" in prompt


@pytest.mark.parametrize("kind", ["propose", "approve", "execute", None])
async def test_codex_is_refused_for_a_request_offering_a_capability_with_an_effect(
    tmp_path: Path, retry: RetryPolicy, kind: str | None
) -> None:
    stand_in = StandIn(tmp_path / "bin", "codex", ["codex_send.jsonl"])
    send = ToolSpec("send", "Send USD to a recipient.", {"type": "object"}, kind)
    req = replace(request(), tools=(*request().tools, send))
    with pytest.raises(ModelError) as refused:
        await events_of(codex(stand_in, retry), req)
    assert refused.value.code == "unsafe_tools"
    assert not refused.value.retryable
    assert "this run can call send" in refused.value.message
    assert stand_in.calls == []  # the CLI never ran


async def test_codex_answers_a_run_of_reads(tmp_path: Path, retry: RetryPolicy) -> None:
    stand_in = StandIn(tmp_path / "bin", "codex", ["codex_answer.jsonl"])
    assert essence(await events_of(codex(stand_in, retry), request())) == await scripted_turn(2)


async def test_codex_failures(tmp_path: Path) -> None:
    stand_in = StandIn(tmp_path / "bin", "codex", ["codex_rate_limited.jsonl"])
    with pytest.raises(ModelError) as caught:
        await events_of(codex(stand_in, RetryPolicy(max_attempts=1)))
    assert caught.value.code == "rate_limited"
    assert caught.value.retryable


async def test_codex_reconnecting_is_not_a_failure(tmp_path: Path, retry: RetryPolicy) -> None:
    # codex reports its own reconnects as "error" frames; the turn's outcome is turn.completed
    stand_in = StandIn(tmp_path / "bin", "codex", ["codex_reconnecting.jsonl"])
    events = await events_of(codex(stand_in, retry))
    assert essence(events) == await scripted_turn(2)
    assert StreamUsage(input_tokens=116, output_tokens=22, cache_read_tokens=3072) in events


async def test_codex_ending_without_an_outcome_fails_with_its_last_error(tmp_path: Path) -> None:
    stand_in = StandIn(tmp_path / "bin", "codex", ["codex_cut_after_error.jsonl"])
    with pytest.raises(ModelError) as caught:
        await events_of(codex(stand_in, RetryPolicy(max_attempts=1)))
    assert "503 Service Unavailable" in caught.value.message
    assert caught.value.retryable


def test_tool_call_replies() -> None:
    known = {"balance"}
    assert parse_tool_calls('{"tool_calls": [{"name": "balance"}]}', known) == [("balance", "{}")]
    assert parse_tool_calls("Your balance is 250 USD.", known) is None
    assert parse_tool_calls('{"tool_calls": []}', known) is None
    assert parse_tool_calls('{"tool_calls": [{"name": "other"}]}', known) is None
    assert parse_tool_calls('{"balance": 250}', known) is None
    fenced = '```json\n{"tool_calls": [{"name": "balance", "arguments": "{\\"a\\": 1}"}]}\n```'
    assert parse_tool_calls(fenced, known) == [("balance", '{"a": 1}')]


# --- shared ------------------------------------------------------------------------------------


def test_the_transcript_a_cli_sees() -> None:
    text = render_transcript(
        (
            UserTextMessage("pay bob"),
            AssistantMessage(
                (
                    ThinkingPart("private", "sig"),
                    TextPart("Checking."),
                    ToolUsePart("call_1", "balance", {"account": "main"}),
                )
            ),
            ToolResultsMessage((ToolResult("call_1", '{"usd": "250"}', is_error=True),)),
        )
    )
    assert text == (
        "<user>\npay bob\n</user>\n<assistant>\nChecking.\n"
        '<tool_call id="call_1" name="balance">{"account": "main"}</tool_call>\n</assistant>\n'
        '<tool_result id="call_1" error="true">\n{"usd": "250"}\n</tool_result>'
    )


def test_the_proposals_server_is_fiduciarys_mcp_server_with_tools_that_run_nothing(
    tmp_path: Path,
) -> None:
    import subprocess

    spec = tmp_path / "tools.json"
    spec.write_text(json.dumps([{"name": "send", "description": "d", "inputSchema": {}}]))
    requests: list[dict[str, Any]] = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-03-26",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "send", "arguments": {"to": "x"}},
        },
        {"jsonrpc": "2.0", "id": 4, "method": "prompts/list"},
        {"jsonrpc": "2.0", "id": 5, "method": "resources/list"},
    ]
    answers: dict[int, Any] = {}
    with subprocess.Popen(
        [sys.executable, "-m", "fiduciary.mcp.proposals", str(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as server:
        assert server.stdin is not None
        assert server.stdout is not None
        for request in requests:  # one at a time, each answer read before the next (as the CLI)
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            if "id" in request:
                answer = json.loads(server.stdout.readline())
                answers[answer["id"]] = answer
        server.stdin.close()
        server.wait(timeout=60)
    assert sorted(answers) == [1, 2, 3, 4, 5]
    assert answers[1]["result"]["protocolVersion"] == "2025-03-26"
    assert answers[1]["result"]["serverInfo"]["name"] == "fiduciary"
    assert answers[1]["result"]["instructions"] == DEFERRED_RESULT
    assert answers[2]["result"] == {}
    assert answers[3]["result"]["content"] == [{"type": "text", "text": DEFERRED_RESULT}]
    assert answers[3]["result"]["isError"] is False
    assert answers[4]["error"]["code"] == -32601  # no runs here: nothing but tools
    # and fiduciary's own documentation, so the CLI's short prompt can point at it
    listed = [r["uri"] for r in answers[5]["result"]["resources"]]
    assert listed == ["docs://guide", "docs://api"]


def test_the_proposals_server_needs_its_spec() -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "fiduciary.mcp.proposals"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == "usage: python -m fiduciary.mcp.proposals SPEC.json\n"


def test_names() -> None:
    assert ClaudeCLIModel("opus").name == "claude-cli:opus"
    assert CodexCLIModel("gpt-5.1-codex-mini").name == "codex-cli:gpt-5.1-codex-mini"
    assert isinstance(ModelRequest((), (), ()).tools, tuple)
