"""External MCP servers named in configuration (a TOML file's ``[[mcp]]`` tables).

```toml
[[mcp]]
name = "bank"
command = "python"              # or: url = "https://bank.example/mcp"
args = ["-m", "bank_mcp"]
prefix = "bank_"
reads = ["balance", "rates"]
trust_read_only_hint = false
timeout = 30
[mcp.operations.transfer]
operation = "send"
amount = "amount"
```

``await mcp_capabilities_from_config(path)`` connects to each and returns one toolset; a tool
name two servers share without a prefix is refused, naming both.
"""

from __future__ import annotations

import asyncio
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..capabilities import Risk
from ..exceptions import ConfigurationError
from ._connection import McpServer
from .client import DEFAULT_CACHE_SECONDS, DEFAULT_TIMEOUT, McpToolset, ToolPolicy, mcp_capabilities

__all__ = ["McpServerConfig", "mcp_capabilities_from_config"]


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


def parse_config(data: Mapping[str, Any]) -> list[McpServerConfig]:
    tables = data.get("mcp", [])
    if not isinstance(tables, list):
        raise ConfigurationError("[[mcp]] must be an array of tables")
    try:
        return [McpServerConfig.model_validate(t) for t in tables]
    except ValidationError as exc:
        raise ConfigurationError(f"[[mcp]]: {exc.errors(include_url=False)[0]['msg']}") from exc


async def mcp_capabilities_from_config(source: str | Path | Mapping[str, Any]) -> McpToolset:
    """The tools of every ``[[mcp]]`` server in a TOML file (or its parsed mapping)."""
    data = (
        source
        if isinstance(source, Mapping)
        else tomllib.loads(Path(source).read_text(encoding="utf-8"))  # noqa: ASYNC240 - once
    )
    configs = parse_config(data)
    if not configs:
        raise ConfigurationError("no [[mcp]] server is configured")
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
        return McpToolset.combine(toolsets)
    except BaseException:
        await asyncio.gather(*(t.aclose() for t in toolsets))
        raise
