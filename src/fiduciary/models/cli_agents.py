"""The ``claude`` CLI as a model (print mode, stream-json): ``claude-cli:sonnet``.

Each model turn runs the CLI once, with the whole conversation in its prompt, and ends it as soon
as the model has proposed its tool calls: fiduciary, not the CLI, runs them (through its gates)
and gives the results in the next turn. Nothing of a CLI session survives a turn, so a run resumes
in any process. What the CLI agents share (the prompt, the subprocess, the timeout, the retries)
is ``_cli_agent.py``; ``codex exec --json`` is ``codex_cli.py``.

fiduciary's capabilities are offered through an MCP config naming fiduciary's own MCP server over
stdio (``python -m fiduciary.mcp.proposals SPEC``, the ``mcp`` extra) with tools that *never
run*: a call is only recorded. Built-in tools are switched off. With partial messages on, text
and thinking stream token by token and the end of the model's message is seen exactly.

This model runs only where the binary exists; otherwise a request fails with
``ModelError(code="unavailable")``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from collections.abc import AsyncGenerator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Unpack

from ..exceptions import ModelError
from ._cli_agent import CLIAgentModel, CLISettings, render_transcript
from .base import (
    ModelEvent,
    ModelRequest,
    StreamStop,
    StreamTextDelta,
    StreamThinkingDelta,
    StreamThinkingDone,
    StreamToolCall,
    StreamUsage,
    ToolSpec,
)
from .retry import classify_status, retry_call

__all__ = [
    "DEFERRED_RESULT",
    "ClaudeCLIModel",
    "render_transcript",
]


MCP_SERVER = "fiduciary"  # the name the CLI knows fiduciary's MCP server by
MCP_PREFIX = f"mcp__{MCP_SERVER}__"
PROPOSALS_MODULE = "fiduciary.mcp.proposals"
DEFERRED_RESULT = (
    "Recorded. fiduciary runs this call itself, after its checks, and gives you its result in "
    "the next message. End your turn now."
)


def _needs_mcp(name: str) -> None:
    """The tools are offered through fiduciary's MCP server, which needs the official SDK."""
    if importlib.util.find_spec("mcp") is None:
        raise ModelError(
            f"{name} offers tools through MCP: pip install 'fiduciary[mcp]'", code="unavailable"
        )


# --- claude -------------------------------------------------------------------------------------


class ClaudeCLIModel(CLIAgentModel):
    """The ``claude`` CLI in print mode as a model (``claude-cli:sonnet``)."""

    provider = "claude-cli"
    default_model = "sonnet"
    default_executable = "claude"

    def __init__(
        self,
        model: str | None = None,
        *,
        partial_messages: bool = True,
        python: str = sys.executable,
        **settings: Unpack[CLISettings],
    ) -> None:
        """``partial_messages``: stream token by token; ``python``: the interpreter that runs
        fiduciary's MCP server for the CLI."""
        super().__init__(model, **settings)
        self._partial = partial_messages
        self._python = python

    def _args(self, exe: str, system: str, mcp_config: str, effort: str | None) -> list[str]:
        args = [exe, "-p", "--output-format", "stream-json", "--verbose", "--model", self.model]
        if self._partial:
            args.append("--include-partial-messages")
        args += [
            "--system-prompt",
            system,
            "--tools",
            "",
            "--strict-mcp-config",
            "--mcp-config",
            mcp_config,
            "--allowedTools",
            f"mcp__{MCP_SERVER}",
            "--no-session-persistence",
            "--disable-slash-commands",
        ]
        if effort is not None:
            args += ["--effort", effort]
        return args + self._extra

    def _system(self, request: ModelRequest) -> str:
        layers = [s for s in request.system if s]
        if request.tools:
            layers.append(
                f"Your tools are those of the MCP server {MCP_SERVER!r}. When you call tools, call "
                "every one you need now and then end your turn: fiduciary checks and runs them and "
                "gives you their results in the next message. Never assume a call happened."
            )
        return "\n\n".join(layers)

    async def _attempt(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        exe = self._binary()
        effort = request.settings.get("effort")
        with tempfile.TemporaryDirectory(prefix="fiduciary-claude-") as tmp:
            spec = Path(tmp) / "tools.json"
            spec.write_text(json.dumps([_tool_json(t) for t in request.tools]), encoding="utf-8")
            servers: dict[str, Any] = {}
            if request.tools:
                _needs_mcp(self.name)
                servers[MCP_SERVER] = {
                    "type": "stdio",
                    "command": self._python,
                    "args": ["-m", PROPOSALS_MODULE, str(spec)],
                }
            config = Path(tmp) / "mcp.json"
            config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
            args = self._args(
                exe,
                self._system(request),
                str(config),
                effort if effort in ("low", "medium", "high") else None,
            )
            prompt = render_transcript(request.messages)
            turn = ClaudeStreamTurn(self.name)
            async for event in self._turn(args, prompt, cwd=tmp, turn=turn):
                yield event

    async def complete_json(self, system: str, prompt: str, schema: dict[str, Any]) -> Any:
        """One JSON value matching ``schema``, through ``--json-schema``."""

        async def once() -> Any:
            exe = self._binary()
            with tempfile.TemporaryDirectory(prefix="fiduciary-claude-") as tmp:
                args = [
                    exe,
                    "-p",
                    "--output-format",
                    "stream-json",
                    "--verbose",
                    "--model",
                    self.model,
                    "--system-prompt",
                    system,
                    "--json-schema",
                    json.dumps(schema),
                    "--tools",
                    "",
                    "--strict-mcp-config",
                    "--mcp-config",
                    json.dumps({"mcpServers": {}}),
                    "--no-session-persistence",
                    *self._extra,
                ]
                lines, stderr = await self._lines(args, prompt, cwd=tmp)
            results = [data for data in lines if data.get("type") == "result"]
            if not results:
                raise ModelError(f"{self.name}: no result ({stderr})", code="error")
            result = results[-1]
            _raise_for_result(self.name, result)
            value = result.get("structured_output")
            if value is None:
                try:
                    value = json.loads(str(result.get("result", "")))
                except ValueError as exc:
                    raise ModelError(
                        f"{self.name} did not answer with JSON", code="invalid_output"
                    ) from exc
            return value

        return await retry_call(once, self._retry, model=self.name)


def _tool_json(tool: ToolSpec) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema}


def _raise_for_result(model: str, result: Mapping[str, Any]) -> None:
    if result.get("subtype") == "success" and not result.get("is_error"):
        return
    status = result.get("api_error_status")
    code, retryable = classify_status(status if isinstance(status, int) else None, None)
    errors = result.get("errors") or result.get("result") or result.get("subtype")
    raise ModelError(f"{model}: {errors}", code=code, retryable=retryable)


@dataclass
class _CliBlock:
    kind: str
    ordinal: int = 0
    id: str = ""
    name: str = ""
    pieces: list[str] = field(default_factory=list)
    signature: str = ""
    said: bool = False


class ClaudeStreamTurn:
    """Folds the CLI's stream-json lines into fiduciary's model events.

    With ``--include-partial-messages`` the raw Messages API events arrive as ``stream_event``
    lines and are used (token streaming, an exact end of message); without, the complete
    ``assistant`` lines are. ``finished`` turns true once the model's message has ended with tool
    calls: the caller then stops the CLI before it goes on.
    """

    def __init__(self, model: str) -> None:
        self._model = model
        self._partial = False
        self._blocks: dict[int, _CliBlock] = {}
        self._thinking = 0
        self._calls: list[str] = []
        self._usage = StreamUsage()
        self._stop = "end_turn"
        self._message_done = False
        self._last_message: str | None = None
        self._result: dict[str, Any] | None = None
        self.finished = False

    def feed(self, data: Mapping[str, Any]) -> Iterator[ModelEvent]:
        kind = data.get("type")
        if kind == "stream_event" and not data.get("parent_tool_use_id"):
            self._partial = True
            event = data.get("event")
            if isinstance(event, Mapping):
                yield from self._raw(event)
        elif kind == "assistant" and not self._partial and not data.get("parent_tool_use_id"):
            message = data.get("message")
            if isinstance(message, Mapping):
                yield from self._assistant(message)
        elif kind in ("user", "result") and self._calls and not self._partial:
            self.finished = True  # the CLI has begun running the calls: the message is over
        if kind == "result":
            self._result = dict(data)
            self.finished = True

    # partial messages: the Messages API stream, as dicts
    def _raw(self, event: Mapping[str, Any]) -> Iterator[ModelEvent]:
        kind = event.get("type")
        index = event.get("index", 0)
        if kind == "message_start":
            self._blocks.clear()
            usage = (event.get("message") or {}).get("usage") or {}
            self._usage = _usage(usage)
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            yield from self._open(index, block)
        elif kind == "content_block_delta":
            state = self._blocks.get(index)
            delta = event.get("delta") or {}
            if state is None:
                return
            if delta.get("type") == "text_delta" and delta.get("text"):
                yield StreamTextDelta(str(delta["text"]))
            elif delta.get("type") == "thinking_delta":
                state.said = True
                yield StreamThinkingDelta(str(delta.get("thinking", "")), state.ordinal)
            elif delta.get("type") == "signature_delta":
                state.signature += str(delta.get("signature", ""))
            elif delta.get("type") == "input_json_delta":
                state.pieces.append(str(delta.get("partial_json", "")))
        elif kind == "content_block_stop":
            yield from self._close(index)
        elif kind == "message_delta":
            stop = (event.get("delta") or {}).get("stop_reason")
            if stop:
                self._stop = str(stop)
            usage = event.get("usage") or {}
            self._usage = _usage({**_usage_dict(self._usage), **usage})
        elif kind == "message_stop":
            self._message_done = True
            if self._calls:
                self.finished = True

    def _open(self, index: int, block: Mapping[str, Any]) -> Iterator[ModelEvent]:
        kind = block.get("type")
        if kind == "text":
            self._blocks[index] = _CliBlock("text")
            if block.get("text"):
                yield StreamTextDelta(str(block["text"]))
        elif kind in ("thinking", "redacted_thinking"):
            self._blocks[index] = _CliBlock(
                str(kind), ordinal=self._thinking, signature=str(block.get("signature", ""))
            )
            self._thinking += 1
        elif kind == "tool_use":
            self._blocks[index] = _CliBlock(
                "tool", id=str(block.get("id", "")), name=str(block.get("name", ""))
            )
        else:
            self._blocks[index] = _CliBlock("other")

    def _close(self, index: int) -> Iterator[ModelEvent]:
        state = self._blocks.pop(index, None)
        if state is None:
            return
        if state.kind == "tool":
            yield from self._call(state.id, state.name, "".join(state.pieces) or "{}")
        elif state.kind in ("thinking", "redacted_thinking"):
            if not state.said:
                yield StreamThinkingDelta("", state.ordinal)
            yield StreamThinkingDone(state.ordinal, None)

    def _call(self, call_id: str, name: str, arguments: str) -> Iterator[ModelEvent]:
        if call_id in self._calls:
            return
        self._calls.append(call_id)
        plain = name[len(MCP_PREFIX) :] if name.startswith(MCP_PREFIX) else name
        yield StreamToolCall(id=call_id, name=plain, arguments=arguments)

    # complete messages (no partial messages): one content block or more per line
    def _assistant(self, message: Mapping[str, Any]) -> Iterator[ModelEvent]:
        message_id = message.get("id")
        if self._calls and message_id != self._last_message:
            self.finished = True  # a new message after tool calls: the CLI went on
            return
        self._last_message = str(message_id) if message_id is not None else None
        usage = message.get("usage")
        if isinstance(usage, Mapping):
            self._usage = _usage(usage)
        for block in message.get("content") or []:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "text" and block.get("text"):
                yield StreamTextDelta(str(block["text"]))
            elif kind in ("thinking", "redacted_thinking"):
                ordinal = self._thinking
                self._thinking += 1
                yield StreamThinkingDelta(str(block.get("thinking", "")), ordinal)
                yield StreamThinkingDone(ordinal, None)
            elif kind == "tool_use":
                arguments = json.dumps(block.get("input") or {})
                yield from self._call(
                    str(block.get("id", "")), str(block.get("name", "")), arguments
                )
        stop = message.get("stop_reason")
        if stop:
            self._stop = str(stop)

    def finish(self, stderr: str = "") -> Iterator[ModelEvent]:
        result = self._result
        if result is not None and not self._calls:
            _raise_for_result(self._model, result)
            usage = result.get("usage")
            if isinstance(usage, Mapping):
                self._usage = _usage(usage)
        elif not self._calls and result is None:
            raise ModelError(
                f"{self._model}: the CLI ended without a result"
                + (f" ({stderr})" if stderr else ""),
                code="error",
            )
        yield self._usage
        if self._calls:
            yield StreamStop("tool_use")
        else:
            yield StreamStop(self._stop if self._stop != "tool_use" else "end_turn")


def _usage(usage: Mapping[str, Any]) -> StreamUsage:
    def number(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) else 0

    return StreamUsage(
        input_tokens=number("input_tokens"),
        output_tokens=number("output_tokens"),
        cache_read_tokens=number("cache_read_input_tokens"),
        cache_write_tokens=number("cache_creation_input_tokens"),
    )


def _usage_dict(usage: StreamUsage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
    }
