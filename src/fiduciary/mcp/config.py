"""External MCP servers named in configuration: a TOML file's ``[[mcp]]`` tables (the server's
``--config``, or an ``--mcp-config`` file), or the ``mcpServers`` JSON of Claude Desktop and
Cursor (an ``--mcp-config`` file ending in ``.json``).

```toml
[[mcp]]
name = "bank"
command = "python"              # or: url = "https://bank.example/mcp"
args = ["-m", "bank_mcp"]
prefix = "bank_"
reads = ["balance", "rates"]
trust_read_only_hint = false
timeout = 30
skills = true                   # its prompts without arguments become skills
[mcp.operations.transfer]
operation = "send"
amount = "amount"
```

In the JSON form each server is ``"name": {"command", "args", "env", "cwd"}`` or
``{"type": "http", "url", "headers"}``, with the same optional keys as a table (``prefix``,
``reads`` ...); ``"disabled": true`` leaves it out; another client's approval settings
(``autoApprove``, ``alwaysAllow``) are ignored: fiduciary's policy decides.

``await mcp_capabilities_from_config(path)`` connects to each and returns one toolset; a tool
name two servers share without a prefix is refused, naming both.
"""

from __future__ import annotations

import asyncio
import json
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..capabilities import Risk
from ..exceptions import ConfigurationError
from ._connection import McpServer
from .client import DEFAULT_CACHE_SECONDS, DEFAULT_TIMEOUT, McpToolset, ToolPolicy, mcp_capabilities

__all__ = [
    "McpServerConfig",
    "connect_servers",
    "mcp_capabilities_from_config",
    "parse_config",
    "read_config",
]

# keys of other MCP clients' configurations that mean nothing here (never an approval)
_FOREIGN = frozenset({"type", "disabled", "autoApprove", "alwaysAllow", "description"})


class _ToolConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    operation: str | None = None
    amount: str | None = None
    risk: Risk = Risk.HIGH


class McpServerConfig(BaseModel):
    """One ``[[mcp]]`` table."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    prefix: str = ""
    reads: list[str] = Field(default_factory=list)
    trust_read_only_hint: bool = False
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    cache_seconds: float = Field(default=DEFAULT_CACHE_SECONDS, ge=0)
    operations: dict[str, _ToolConfig] = Field(default_factory=dict)
    skills: bool = True

    def server(self) -> McpServer:
        return McpServer(
            self.name,
            command=self.command,
            args=tuple(self.args),
            env=self.env,
            cwd=self.cwd,
            url=self.url,
            headers=self.headers,
            prefix=self.prefix,
        )


def parse_config(data: Mapping[str, Any], *, where: str = "[[mcp]]") -> list[McpServerConfig]:
    """The ``[[mcp]]`` tables of a parsed TOML document (or ``mcpServers`` of a JSON one)."""
    if "mcpServers" in data:
        return _mcp_servers(data["mcpServers"], where)
    tables = data.get("mcp", [])
    if not isinstance(tables, list):
        raise ConfigurationError(f"{where}: mcp must be an array of tables ([[mcp]])")
    return [_validated(t, where) for t in tables]


def read_config(path: str | Path) -> list[McpServerConfig]:
    """The servers of one file: TOML ``[[mcp]]`` tables, or JSON ``mcpServers`` (``.json``)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
        data = json.loads(text) if file.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:  # (TOMLDecodeError and JSONDecodeError are ValueErrors)
        raise ConfigurationError(f"{file}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigurationError(f"{file}: expected an object with mcpServers")
    configs = parse_config(data, where=str(file))
    if not configs:
        raise ConfigurationError(f"{file}: no MCP server is configured ([[mcp]] or mcpServers)")
    return configs


def _mcp_servers(servers: Any, where: str) -> list[McpServerConfig]:
    if not isinstance(servers, dict):
        raise ConfigurationError(f"{where}: mcpServers must map names to servers")
    found = []
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise ConfigurationError(f"{where}: mcpServers.{name} must be an object")
        if entry.get("disabled") is True:
            continue
        kind = entry.get("type", "http" if "url" in entry else "stdio")
        if kind not in ("stdio", "http", "streamable-http", "streamableHttp"):
            raise ConfigurationError(
                f"{where}: mcpServers.{name}: the transport {kind!r} is not supported "
                "(stdio or streamable HTTP)"
            )
        table = {k: v for k, v in entry.items() if k not in _FOREIGN}
        found.append(_validated({"name": name, **table}, where))
    return found


def _validated(table: Any, where: str) -> McpServerConfig:
    try:
        config = McpServerConfig.model_validate(table)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in error["loc"])
        name = table.get("name", "?") if isinstance(table, dict) else "?"
        raise ConfigurationError(
            f"{where}: MCP server {name!r}: {field + ': ' if field else ''}{error['msg']}"
        ) from exc
    if (config.command is None) == (config.url is None):
        raise ConfigurationError(
            f"{where}: MCP server {config.name!r}: give either a command (stdio) or a url (HTTP)"
        )
    return config


async def connect_servers(configs: Sequence[McpServerConfig]) -> McpToolset:
    """Connect to every configured server, together; one toolset of all their tools. A name two
    servers (or two configurations of one name) share is refused, naming both."""
    names = [c.name for c in configs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigurationError(f"two MCP servers are named {twice[0]!r}")
    made = await asyncio.gather(
        *(
            mcp_capabilities(
                c.server(),
                reads=c.reads,
                trust_read_only_hint=c.trust_read_only_hint,
                operations={
                    k: ToolPolicy(v.operation, amount=v.amount, risk=v.risk)
                    for k, v in c.operations.items()
                },
                timeout=c.timeout,
                cache_seconds=c.cache_seconds,
            )
            for c in configs
        ),
        return_exceptions=True,
    )
    toolsets = [m for m in made if isinstance(m, McpToolset)]
    failed = [m for m in made if isinstance(m, BaseException)]
    if failed:
        await asyncio.gather(*(t.aclose() for t in toolsets))
        raise failed[0]
    try:
        combined = McpToolset.combine(toolsets)
    except BaseException:
        await asyncio.gather(*(t.aclose() for t in toolsets))
        raise
    combined.skill_servers = frozenset(c.name for c in configs if c.skills)
    return combined


async def mcp_capabilities_from_config(
    source: str | Path | Mapping[str, Any] | Iterable[str | Path],
) -> McpToolset:
    """The tools of every server in a TOML file's ``[[mcp]]`` tables (or a JSON file's
    ``mcpServers``, or the parsed mapping, or several files)."""
    if isinstance(source, Mapping):
        configs = parse_config(source)
    elif isinstance(source, str | Path):
        configs = read_config(source)
    else:
        configs = [c for path in source for c in read_config(path)]
    if not configs:
        raise ConfigurationError("no [[mcp]] server is configured")
    return await connect_servers(configs)
