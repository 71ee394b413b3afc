"""Private: what the CLI agents as models share (``cli_agents.py`` claude, ``codex_cli.py``
codex).

Each model turn runs the CLI once, with the whole conversation in its prompt
(``render_transcript``), and reads the JSON lines it prints into a turn object that folds them
into fiduciary's model events. ``CLIAgentModel`` holds the settings both take, finds the
binary (``ModelError(code="unavailable")`` where it is missing), runs the process (killed when
the turn is over or abandoned) under the model's timeout, and retries through ``retry.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypedDict

from ..exceptions import ModelError
from .base import (
    AssistantMessage,
    Message,
    ModelEvent,
    ModelRequest,
    TextPart,
    ThinkingPart,
    ToolResultsMessage,
    ToolUsePart,
    UserTextMessage,
)
from .pricing import Price
from .retry import RetryPolicy, retry_stream

__all__ = ["CLIAgentModel", "CLISettings", "CLITurn", "render_transcript"]

_STDOUT_LIMIT = 1 << 24  # one JSON line may carry a long message


def render_transcript(messages: Sequence[Message]) -> str:
    """The conversation as text for a CLI agent (which keeps no state between turns)."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, UserTextMessage):
            lines += ["<user>", message.text, "</user>"]
        elif isinstance(message, AssistantMessage):
            body: list[str] = []
            for part in message.parts:
                if isinstance(part, TextPart) and part.text:
                    body.append(part.text)
                elif isinstance(part, ToolUsePart):
                    args = json.dumps(part.input, sort_keys=True)
                    body.append(f'<tool_call id="{part.id}" name="{part.name}">{args}</tool_call>')
                elif isinstance(part, ThinkingPart):
                    continue  # not sent back: only the provider that made it can verify it
            if body:
                lines += ["<assistant>", *body, "</assistant>"]
        elif isinstance(message, ToolResultsMessage):
            for r in message.results:
                status = ' error="true"' if r.is_error else ""
                lines += [
                    f'<tool_result id="{r.tool_use_id}"{status}>',
                    r.content,
                    "</tool_result>",
                ]
    return "\n".join(lines)


class CLITurn(Protocol):
    """Folds a CLI's JSON lines into model events; ``finished`` turns true when the CLI may be
    stopped before it ends by itself."""

    @property
    def finished(self) -> bool: ...

    def feed(self, data: Mapping[str, Any]) -> Iterator[ModelEvent]: ...

    def finish(self, stderr: str = "") -> Iterator[ModelEvent]: ...


async def json_lines(
    args: Sequence[str],
    stdin: str,
    *,
    cwd: str | None,
    env: Mapping[str, str] | None,
    stderr_tail: list[str],
) -> AsyncGenerator[dict[str, Any], None]:
    """Run a CLI and yield the JSON objects it prints, one per line; kill it when closed early."""
    proc = await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        limit=_STDOUT_LIMIT,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    err = proc.stderr

    async def drain_stderr() -> None:
        while chunk := await err.read(4096):
            stderr_tail.append(chunk.decode(errors="replace"))
            while sum(len(s) for s in stderr_tail) > 4000:
                stderr_tail.pop(0)

    errors = asyncio.create_task(drain_stderr())
    try:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin.encode())
            await proc.stdin.drain()
            proc.stdin.close()
        async for raw in proc.stdout:
            line = raw.strip()
            if not line.startswith(b"{"):
                continue
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                yield data
        await proc.wait()
        await errors
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        if not errors.done():
            errors.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await errors


def last_line(stderr: list[str]) -> str:
    """The last line the CLI wrote to stderr (300 characters at most), for an error message."""
    text = "".join(stderr).strip()
    return text.splitlines()[-1][:300] if text else ""


class CLISettings(TypedDict, total=False):
    """The settings every CLI agent takes (keyword arguments of ``CLIAgentModel``)."""

    executable: str
    extra_args: Sequence[str]
    timeout: float
    env: Mapping[str, str] | None
    retry: RetryPolicy | None
    price: Price | None


class CLIAgentModel:
    """A CLI agent as a model: ``{provider}:{model}``; subclasses build its arguments, prompt
    and turn (``_attempt``). ``executable`` is the command looked up on PATH at each request,
    ``extra_args`` go at the end of its arguments, ``timeout`` bounds one run of it, ``env``
    replaces its environment."""

    provider: ClassVar[str]
    default_model: ClassVar[str]
    default_executable: ClassVar[str]

    def __init__(
        self,
        model: str | None = None,
        *,
        executable: str | None = None,
        extra_args: Sequence[str] = (),
        timeout: float = 600.0,
        env: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        price: Price | None = None,
    ) -> None:
        self.model = self.default_model if model is None else model
        self.price = price
        self._executable = self.default_executable if executable is None else executable
        self._extra = list(extra_args)
        self._timeout = timeout
        self._env = env
        self._retry = retry or RetryPolicy(max_attempts=2)

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}"

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        return retry_stream(lambda: self._attempt(request), self._retry, model=self.name)

    def _attempt(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        raise NotImplementedError

    def _binary(self) -> str:
        found = shutil.which(self._executable)
        if found is None:
            raise ModelError(
                f"{self.name}: the {self._executable!r} command was not found on PATH",
                code="unavailable",
            )
        return found

    async def _turn(
        self, args: Sequence[str], stdin: str, *, cwd: str, turn: CLITurn
    ) -> AsyncGenerator[ModelEvent, None]:
        """Run the CLI once and yield its turn's events; stop it once ``turn.finished``."""
        stderr: list[str] = []
        lines = json_lines(args, stdin, cwd=cwd, env=self._env, stderr_tail=stderr)
        try:
            async with asyncio.timeout(self._timeout), contextlib.aclosing(lines):
                async for data in lines:
                    for event in turn.feed(data):
                        yield event
                    if turn.finished:
                        break
        except TimeoutError as exc:
            raise ModelError(
                f"{self.name}: no answer within {self._timeout:.0f}s",
                code="timeout",
                retryable=True,
            ) from exc
        for event in turn.finish(last_line(stderr)):
            yield event

    async def _lines(
        self, args: Sequence[str], stdin: str, *, cwd: str
    ) -> tuple[list[dict[str, Any]], str]:
        """Every JSON line of one run of the CLI, and the last line of its stderr."""
        stderr: list[str] = []
        out: list[dict[str, Any]] = []
        lines = json_lines(args, stdin, cwd=cwd, env=self._env, stderr_tail=stderr)
        async with asyncio.timeout(self._timeout), contextlib.aclosing(lines):
            async for data in lines:
                out.append(data)
        return out, last_line(stderr)
