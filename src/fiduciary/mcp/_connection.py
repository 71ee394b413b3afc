"""One supervised connection to an external MCP server (stdio or streamable HTTP).

A task owns the SDK's ``Client``: it connects, lists the tools, and holds the session until a
call finds it broken (closed, or silent past its timeout: a hung server); then it reconnects
with exponential backoff. Meanwhile calls are refused at once (``mcp_unavailable``), so a run
never waits on a dead server; every call is bounded by its timeout.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from .._logs import logger
from ..exceptions import CapabilityError, ConfigurationError
from ._sdk import Client, MCPError, StdioServerParameters, mcp_types

__all__ = ["Connection", "ConnectionLostError", "McpServer"]

log = logger("fiduciary.mcp")

_CONNECTION_CLOSED = -32000
_REQUEST_TIMEOUT = -32001


@dataclass(frozen=True, slots=True)
class McpServer:
    """Where an external MCP server is: a command to launch (stdio) or a URL (streamable HTTP).

    ``name`` names the server in errors and refusals; ``prefix`` is put before each of its
    tool names (``bank_`` + ``transfer``)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] | None = None
    prefix: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigurationError("an MCP server needs a name")
        if (self.command is None) == (self.url is None):
            raise ConfigurationError(
                f"MCP server {self.name!r}: give either a command (stdio) or a url (HTTP)"
            )

    @classmethod
    def stdio(
        cls,
        name: str,
        command: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        prefix: str = "",
    ) -> McpServer:
        return cls(name, command=command, args=args, env=env, cwd=cwd, prefix=prefix)

    @classmethod
    def http(
        cls, name: str, url: str, *, headers: Mapping[str, str] | None = None, prefix: str = ""
    ) -> McpServer:
        return cls(name, url=url, headers=headers, prefix=prefix)

    def _client(self) -> Client:
        # the SDK's own response cache is off: reads are cached here, by name and arguments
        if self.command is not None:
            params = StdioServerParameters(
                command=self.command,
                args=list(self.args),
                env=dict(self.env) if self.env is not None else None,
                cwd=self.cwd,
            )
            return Client(params, cache=None)
        assert self.url is not None
        if self.headers:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = create_mcp_http_client(headers=dict(self.headers))
            return Client(streamable_http_client(self.url, http_client=http), cache=None)
        return Client(self.url, cache=None)


class ConnectionLostError(RuntimeError):
    """The server went away while a write was in flight: it may or may not have acted."""


@dataclass(slots=True)
class Connection:
    """The supervised session with one server; ``tools`` as listed at the first connection."""

    server: McpServer
    connect_timeout: float = 15.0
    backoff: float = 0.5
    max_backoff: float = 30.0
    tools: list[mcp_types.Tool] = field(default_factory=list)
    client: Client | None = None
    _up: asyncio.Event = field(default_factory=asyncio.Event)
    _broken: asyncio.Event = field(default_factory=asyncio.Event)
    _closing: bool = False
    _task: asyncio.Task[None] | None = None
    _first: asyncio.Future[None] | None = None
    reconnects: int = 0

    async def start(self) -> None:
        """Connect and list the tools; raise ``ConfigurationError`` if the first attempt fails
        (a server that is wrong from the start is a configuration error, not an outage)."""
        self._first = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.server.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._first), timeout=self.connect_timeout)
        except TimeoutError:
            await self.aclose()
            raise ConfigurationError(
                f"the MCP server {self.server.name!r} did not answer within "
                f"{self.connect_timeout:g}s"
            ) from None
        except BaseException:
            await self.aclose()
            raise

    async def _supervise(self) -> None:
        delay = self.backoff
        while not self._closing:
            try:
                async with self.server._client() as client:
                    tools = await asyncio.wait_for(_list_tools(client), self.connect_timeout)
                    if self._first is not None and not self._first.done():
                        self.tools = tools
                        self._first.set_result(None)
                    else:
                        self.reconnects += 1
                        log.info("MCP server %s: reconnected", self.server.name)
                    self.client = client
                    self._up.set()
                    delay = self.backoff
                    await self._broken.wait()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                if self._first is not None and not self._first.done():
                    self._first.set_exception(
                        ConfigurationError(
                            f"cannot connect to the MCP server {self.server.name!r}: {_reason(exc)}"
                        )
                    )
                    return
                log.warning(
                    "MCP server %s is unavailable (%s); retrying in %.1fs",
                    self.server.name,
                    _reason(exc),
                    delay,
                )
            finally:
                self.client = None
                self._up.clear()
                self._broken.clear()
            if self._closing:
                return
            await asyncio.sleep(delay * (1 + random.random() / 4))
            delay = min(delay * 2, self.max_backoff)

    async def call(
        self, tool: str, arguments: dict[str, Any], *, seconds: float, is_write: bool
    ) -> mcp_types.CallToolResult:
        client = self.client
        name = self.server.name
        if client is None:
            raise CapabilityError(
                "mcp_unavailable",
                f"The MCP server {name!r} is not reachable right now (reconnecting); "
                f"{tool} was not called. Tell the person, and try again later.",
            )
        try:
            return await client.call_tool(tool, arguments, read_timeout_seconds=seconds)
        except MCPError as exc:
            if exc.code == _REQUEST_TIMEOUT:
                self._broken.set()  # a server that does not answer is restarted
                raise TimeoutError from None
            if exc.code == _CONNECTION_CLOSED:
                self._broken.set()
                return self._lost(tool, is_write)
            raise CapabilityError(
                "mcp_error", f"The MCP server {name!r} refused {tool}: {exc.message}"
            ) from None
        except Exception as exc:  # the transport broke (a closed pipe or stream, a bad answer)
            self._broken.set()
            log.info("MCP server %s: %s", name, _reason(exc))
            return self._lost(tool, is_write)

    async def prompts(self) -> list[tuple[mcp_types.Prompt, str]]:
        """The server's prompts without required arguments, each with its text."""
        client = self.client
        if client is None or client.server_capabilities.prompts is None:
            return []
        listed: list[mcp_types.Prompt] = []
        cursor: str | None = None
        for _ in range(100):
            page = await client.list_prompts(cursor=cursor)
            listed.extend(page.prompts)
            cursor = page.next_cursor
            if cursor is None:
                break
        out: list[tuple[mcp_types.Prompt, str]] = []
        for prompt in listed:
            if any(a.required for a in prompt.arguments or []):
                continue
            got = await client.get_prompt(prompt.name)
            texts = [getattr(m.content, "text", "") for m in got.messages]
            out.append((prompt, "\n\n".join(t for t in texts if t)))
        return out

    def _lost(self, tool: str, is_write: bool) -> mcp_types.CallToolResult:
        if is_write:  # it may have acted before it went away
            raise ConnectionLostError(
                f"the MCP server {self.server.name!r} went away during {tool}"
            )
        raise CapabilityError(
            "mcp_unavailable",
            f"The MCP server {self.server.name!r} went away during {tool}; it is being "
            "reconnected. Try again later.",
        )

    async def aclose(self) -> None:
        self._closing = True
        self._broken.set()
        task, self._task = self._task, None
        if task is None:
            return
        # the session closes itself (its subprocess ended, its HTTP session deleted); a server
        # that will not go within a few seconds is cut off
        done, _ = await asyncio.wait({task}, timeout=5.0)
        if not done:
            task.cancel()
        with suppress(BaseException):
            await task


async def _list_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a paginator that never ends cannot hang the connection
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__
