"""``codex exec --json`` as a model (``codex-cli:gpt-5.3-codex``).

Each model turn runs the CLI once, with the whole conversation in its prompt (the CLI agents'
shared base: ``_cli_agent.py``): the capabilities are described in the prompt, with a JSON reply
format for calls; the agent runs in an empty directory under a read-only sandbox, with codex's
own tools switched off as far as its configuration allows (``CODEX_TOOLS_OFF``: the shell, the
unified exec tool, apply_patch, web search). Codex has no switch for every tool it may ship
(``view_image`` reads a file from disk, and new ones come with new versions), so it is refused
(``ModelError(code="unsafe_tools")``) for a request offering any capability that is not a read
or a preview: a run that can move money never runs on it."""

from __future__ import annotations

import json
import re
import tempfile
import uuid
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..exceptions import ModelError
from ._cli_agent import CLIAgentModel, render_transcript
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
from .retry import retry_call

__all__ = ["CODEX_KINDS", "CODEX_TOOLS_OFF", "CodexCLIModel", "CodexTurn", "parse_tool_calls"]

# codex's own tools, switched off through its configuration (``-c key=value``, highest
# precedence): the shell (``features.shell_tool``, openai/codex#6481), the unified exec tool,
# apply_patch and web search. An unknown feature key is only warned about by older versions.
CODEX_TOOLS_OFF = (
    "features.shell_tool=false",
    "features.unified_exec=false",
    "features.apply_patch_freeform=false",
    "include_apply_patch_tool=false",
    'web_search="disabled"',
)
# what codex may be offered: calls with no effect (the seeds forbid it a shell and file reads,
# and its own tools cannot all be switched off)
CODEX_KINDS = frozenset({"read", "preview"})

_CALL_FORMAT = (
    "You act only through the tools below; you cannot run them yourself, and you must not run "
    "commands or edit files. To call tools, reply with one JSON object and nothing else:\n"
    '{"tool_calls": [{"name": "<tool>", "arguments": {...}}]}\n'
    "List every call you need now; their results come in the next message. Otherwise reply with "
    "your answer to the person in plain text. Never claim a call happened unless a tool result "
    "says so."
)


class CodexCLIModel(CLIAgentModel):
    """``codex exec --json`` as a model (``codex-cli:gpt-5.3-codex``)."""

    provider = "codex-cli"
    default_model = "gpt-5.3-codex"
    default_executable = "codex"

    def _args(self, exe: str, workdir: str, effort: str | None, schema: str | None) -> list[str]:
        args = [
            exe,
            "exec",
            "--json",
            "--model",
            self.model,
            "--skip-git-repo-check",
            "--ephemeral",
            "--sandbox",
            "read-only",
            "--cd",
            workdir,
        ]
        for setting in CODEX_TOOLS_OFF:
            args += ["-c", setting]
        if effort is not None:
            args += ["-c", f'model_reasoning_effort="{effort}"']
        if schema is not None:
            args += ["--output-schema", schema]
        return [*args, *self._extra, "-"]

    def prompt(self, request: ModelRequest) -> str:
        parts = [s for s in request.system if s]
        if request.tools:
            tools = "\n".join(
                f"- {t.name}: {t.description}\n  arguments (JSON schema): "
                f"{json.dumps(t.input_schema, sort_keys=True)}"
                for t in request.tools
            )
            parts += [_CALL_FORMAT, "Tools:\n" + tools]
        parts.append("The conversation so far:\n" + render_transcript(request.messages))
        parts.append("Reply now as the assistant.")
        return "\n\n".join(parts)

    def refuse_effects(self, tools: Sequence[ToolSpec]) -> None:
        """``ModelError("unsafe_tools")`` when a tool may have an effect (or its kind is
        unknown): codex's own tools cannot all be switched off, so it only drives reads."""
        reaching = sorted(t.name for t in tools if t.kind not in CODEX_KINDS)
        if reaching:
            raise ModelError(
                f"{self.name} cannot be used for this run: codex cannot switch off all of its "
                "own tools (such as reading files), so it may only be offered reads and "
                f"previews, and this run can call {', '.join(reaching)}. Use another model "
                "(claude-cli, anthropic, openai) or a run limited to read capabilities.",
                code="unsafe_tools",
            )

    async def _attempt(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        self.refuse_effects(request.tools)
        exe = self._binary()
        effort = request.settings.get("effort")
        known = {t.name for t in request.tools}
        with tempfile.TemporaryDirectory(prefix="fiduciary-codex-") as tmp:
            args = self._args(
                exe, tmp, effort if effort in ("low", "medium", "high") else None, None
            )
            turn = CodexTurn(self.name, known)
            async for event in self._turn(args, self.prompt(request), cwd=tmp, turn=turn):
                yield event

    async def complete_json(self, system: str, prompt: str, schema: dict[str, Any]) -> Any:
        """One JSON value matching ``schema``, through ``--output-schema``."""

        async def once() -> Any:
            exe = self._binary()
            with tempfile.TemporaryDirectory(prefix="fiduciary-codex-") as tmp:
                schema_file = Path(tmp) / "schema.json"
                schema_file.write_text(json.dumps(schema), encoding="utf-8")
                args = self._args(exe, tmp, None, str(schema_file))
                lines, stderr = await self._lines(args, f"{system}\n\n{prompt}", cwd=tmp)
            turn = CodexTurn(self.name, set())
            text = [
                event.text
                for data in lines
                for event in turn.feed(data)
                if isinstance(event, StreamTextDelta)
            ]
            list(turn.finish(stderr))
            try:
                return json.loads("".join(text))
            except ValueError as exc:
                raise ModelError(
                    f"{self.name} did not answer with JSON", code="invalid_output"
                ) from exc

        return await retry_call(once, self._retry, model=self.name)


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_tool_calls(text: str, known: set[str]) -> list[tuple[str, str]] | None:
    """``[(name, arguments JSON)]`` when ``text`` is a tool-call reply, else None."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    if not body.startswith("{"):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    calls = data.get("tool_calls") if isinstance(data, dict) else None
    if not isinstance(calls, list) or not calls:
        return None
    out: list[tuple[str, str]] = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None
        arguments = call.get("arguments", {})
        out.append(
            (call["name"], arguments if isinstance(arguments, str) else json.dumps(arguments))
        )
    if known and not any(name in known for name, _ in out):
        return None  # JSON about something else, not a call of ours
    return out


class CodexTurn:
    """Folds ``codex exec --json`` lines into fiduciary's model events."""

    def __init__(self, model: str, known: set[str]) -> None:
        self._model = model
        self._known = known
        self._thinking = 0
        self._calls = 0
        self._usage: StreamUsage | None = None
        self._failed: str | None = None  # turn.failed: the turn's outcome
        self._last_error: str | None = None  # "error" frames are notices (codex reconnecting)
        self._completed = False
        self.finished = False  # codex's lines are read to its end

    def feed(self, data: Mapping[str, Any]) -> Iterator[ModelEvent]:
        kind = data.get("type")
        if kind == "item.completed":
            item = data.get("item") or {}
            item_type = item.get("type")
            text = str(item.get("text", ""))
            if item_type == "reasoning" and text:
                ordinal = self._thinking
                self._thinking += 1
                yield StreamThinkingDelta(text, ordinal)
                yield StreamThinkingDone(ordinal, None)
            elif item_type == "agent_message":
                calls = parse_tool_calls(text, self._known)
                if calls is None:
                    if text:
                        yield StreamTextDelta(text)
                else:
                    for name, arguments in calls:
                        self._calls += 1
                        yield StreamToolCall(
                            id=f"call_{uuid.uuid4().hex[:16]}", name=name, arguments=arguments
                        )
        elif kind == "turn.completed":
            usage = data.get("usage") or {}
            cached = int(usage.get("cached_input_tokens") or 0)
            self._usage = StreamUsage(
                input_tokens=max(0, int(usage.get("input_tokens") or 0) - cached),
                output_tokens=int(usage.get("output_tokens") or 0),
                cache_read_tokens=cached,
            )
            self._completed = True
        elif kind == "turn.failed":
            error = data.get("error") or {}
            self._failed = str(error.get("message", "the turn failed"))
        elif kind == "error":
            # not an outcome: codex also reports reconnects this way, and the turn may still
            # complete; it explains a turn that ends with neither turn.completed nor turn.failed
            self._last_error = str(data.get("message", "error"))

    def finish(self, stderr: str = "") -> Iterator[ModelEvent]:
        if self._failed is not None or not self._completed:
            reason = self._failed or self._last_error
            message = reason or "the CLI ended without completing its turn"
            lowered = message.lower()
            retryable = any(
                w in lowered for w in ("rate limit", "overloaded", "429", "503", "timeout")
            )
            raise ModelError(
                f"{self._model}: {message}" + (f" ({stderr})" if stderr and not reason else ""),
                code="rate_limited" if "rate limit" in lowered or "429" in lowered else "error",
                retryable=retryable,
            )
        if self._usage is not None:
            yield self._usage
        yield StreamStop("tool_use" if self._calls else "end_turn")
