"""Configured MCP servers given to an agent that a factory built (``fiduciary serve``,
``fiduciary worker``, ``fiduciary mcp``, the ``runs`` and ``approvals`` commands).

``attached_mcp(agent, configs)`` connects to the servers, gives the block the agent with their
tools added to its capabilities (every gate applies to them as to any) and their prompts to its
skills, and closes the connections when the block ends. A tool or skill name the agent already
has is refused, naming the server. Every process that drives or decides the agent's runs needs
the same configuration: a run records the capabilities it may call, and an agent lacking one
leaves it alone (``agent_mismatch``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from ..agent import Agent
from ..context.skills import Skill, skill_table
from ..exceptions import ConfigurationError
from .client import McpToolset
from .config import McpServerConfig, connect_servers, parse_config, read_config

__all__ = ["attach_toolset", "attached_mcp", "configured_servers"]


def configured_servers(
    tables: Iterable[Any] = (), files: Iterable[str | Path] = ()
) -> list[McpServerConfig]:
    """The servers of a server configuration's ``[[mcp]]`` tables and of ``--mcp-config``
    files (TOML ``[[mcp]]``, or JSON ``mcpServers``)."""
    configs = parse_config({"mcp": list(tables)}, where="[[mcp]] of --config")
    for file in files:
        configs += read_config(file)
    return configs


def attach_toolset(agent: Agent, toolset: McpToolset, *, skills: Sequence[Skill] = ()) -> Agent:
    """``agent`` with ``toolset``'s capabilities and ``skills`` added: another agent, sharing
    the rest (``agent.with_options``)."""
    for name in toolset.names:
        if agent.gates.get(name) is not None:
            raise ConfigurationError(
                f"the MCP server {toolset.origin.get(name, '?')!r} offers {name!r}, which the "
                "agent already has: give the server a prefix"
            )
    added = skill_table(skills)
    for name in added:
        if name in agent.skills:
            raise ConfigurationError(
                f"an MCP server's prompt {name!r} has the name of one of the agent's skills: "
                "give the server a prefix"
            )
    options = agent.options  # (its use_skill is built over all the skills)
    return agent.with_options(
        capabilities=(*options.capabilities, *toolset), skills=(*options.skills, *added.values())
    )


@asynccontextmanager
async def attached_mcp(
    agent: Agent, configs: Sequence[McpServerConfig]
) -> AsyncIterator[tuple[Agent, McpToolset | None]]:
    """For the block: ``agent`` with the configured servers' tools and prompts, and the
    servers' toolset (``agent`` itself and None when no server is configured)."""
    if not configs:
        yield agent, None
        return
    toolset = await connect_servers(configs)
    try:
        yield attach_toolset(agent, toolset, skills=await toolset.skills()), toolset
    finally:
        await toolset.aclose()
