"""MCP both ways, and skills (needs the ``mcp`` extra: ``pip install 'fiduciary[mcp]'``).

- ``mcp_capabilities(server, ...)``: an external MCP server's tools as gated capabilities
  (``client``; the supervised connection is ``_connection``), or from configuration: a TOML
  file's ``[[mcp]]`` tables or a Claude Desktop / Cursor ``mcpServers`` JSON (``config``), given
  to an agent a factory built (``attach``: ``fiduciary serve``, ``worker``, ``mcp``).
- ``McpGateway``, ``serve_stdio``, ``McpHttpApp``: fiduciary's capabilities to any MCP client,
  every call a run through the gates (``bridge`` makes the run, ``server`` speaks MCP,
  ``elicit`` offers a pending approval to the person at the client). ``proposals``: the same
  server with tools that run nothing, for the claude CLI provider.
- ``load_skills``, ``skills_capability``: ``SKILL.md`` playbooks (``fiduciary.context.skills``,
  which needs no SDK) as MCP prompts and as a read capability.

The core never imports this package.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..context.skills import Skill, load_skills, parse_skill, skills_capability
    from ._connection import McpServer
    from .attach import attach_toolset, attached_mcp
    from .bridge import CallOutcome, McpGateway
    from .client import McpToolset, ToolPolicy, mcp_capabilities
    from .config import McpServerConfig, mcp_capabilities_from_config, read_config
    from .server import McpHttpApp, build_server, serve_stdio

# where each public name lives: imported on first use, so that ``fiduciary mcp``'s commands
# (and every other command of the CLI, which registers them) start without loading the SDK
_WHERE = {
    "Skill": "..context.skills",
    "load_skills": "..context.skills",
    "parse_skill": "..context.skills",
    "skills_capability": "..context.skills",
    "McpServer": "._connection",
    "attach_toolset": ".attach",
    "attached_mcp": ".attach",
    "CallOutcome": ".bridge",
    "McpGateway": ".bridge",
    "McpToolset": ".client",
    "ToolPolicy": ".client",
    "mcp_capabilities": ".client",
    "McpServerConfig": ".config",
    "mcp_capabilities_from_config": ".config",
    "read_config": ".config",
    "McpHttpApp": ".server",
    "build_server": ".server",
    "serve_stdio": ".server",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(where, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "CallOutcome",
    "McpGateway",
    "McpHttpApp",
    "McpServer",
    "McpServerConfig",
    "McpToolset",
    "Skill",
    "ToolPolicy",
    "attach_toolset",
    "attached_mcp",
    "build_server",
    "load_skills",
    "mcp_capabilities",
    "mcp_capabilities_from_config",
    "parse_skill",
    "read_config",
    "serve_stdio",
    "skills_capability",
]
