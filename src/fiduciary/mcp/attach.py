"""Configured MCP servers given to an agent that a factory built (``fiduciary serve``,
``fiduciary worker``, ``fiduciary mcp``, the ``runs`` and ``approvals`` commands).

``attached_mcp(agent, configs)`` connects to the servers, adds their tools to the agent's
capabilities (every gate applies to them as to any) and their prompts to its skills, and closes
the connections when the block ends. A tool or skill name the agent already has is refused,
naming the server. Every process that drives or decides the agent's runs needs the same
configuration: a run records the capabilities it may call, and an agent lacking one leaves it
alone (``agent_mismatch``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from ..agent import Agent
from ..capabilities import Capability
from ..context.skills import USE_SKILL, Skill, skill_table, skills_capability
from ..exceptions import ConfigurationError
from ..gates import Gates
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


def attach_toolset(agent: Agent, toolset: McpToolset, *, skills: Sequence[Skill] = ()) -> None:
    """Add ``toolset``'s capabilities and ``skills`` to an agent built already."""
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
    agent.skills.update(added)  # (the agent's use_skill follows its skills)
    caps: list[Capability] = list(toolset)
    if agent.skills and agent.gates.get(USE_SKILL) is None:
        caps.append(skills_capability(agent.skills))
    agent.gates = _extended(agent.gates, caps)


@asynccontextmanager
async def attached_mcp(
    agent: Agent, configs: Sequence[McpServerConfig]
) -> AsyncIterator[McpToolset | None]:
    """The configured servers' tools and prompts on ``agent`` for the block (None: none)."""
    if not configs:
        yield None
        return
    toolset = await connect_servers(configs)
    try:
        attach_toolset(agent, toolset, skills=await toolset.skills())
        yield toolset
    finally:
        await toolset.aclose()


def _extended(gates: Gates, more: Sequence[Capability]) -> Gates:
    """The same gates (store, policy, guards, authorize, clock, redactor, budgets) with more
    capabilities."""
    mine = [c for n in gates.names if (c := gates.get(n)) is not None]
    return Gates(
        [*mine, *more],
        store=gates.store,
        policy=gates.policy,
        guards=gates.guards,
        authorize=gates.authorize,
        clock=gates.clock,
        redactor=gates.redactor,
        default_result_chars=gates.default_result_chars,
        authorize_timeout=gates.authorize_timeout,
    )
