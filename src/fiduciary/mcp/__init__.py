"""MCP both ways, and skills (needs the ``mcp`` extra: ``pip install 'fiduciary[mcp]'``).

- ``mcp_capabilities(server, ...)``: an external MCP server's tools as gated capabilities
  (``client``; the supervised connection is ``_connection``), or from a TOML file's ``[[mcp]]``
  tables (``config``).
- ``McpGateway``, ``serve_stdio``, ``McpHttpApp``: fiduciary's capabilities to any MCP client,
  every call a run through the gates (``bridge`` makes the run, ``server`` speaks MCP).
- ``load_skills``, ``skills_capability``: ``SKILL.md`` playbooks as MCP prompts and as a read
  capability (``skills``).

The core never imports this package.
"""

from ..context.skills import Skill, load_skills, parse_skill, skills_capability
from ._connection import McpServer
from .bridge import CallOutcome, McpGateway
from .client import McpToolset, ToolPolicy, mcp_capabilities
from .config import McpServerConfig, mcp_capabilities_from_config
from .server import McpHttpApp, build_server, serve_stdio

__all__ = [
    "CallOutcome",
    "McpGateway",
    "McpHttpApp",
    "McpServer",
    "McpServerConfig",
    "McpToolset",
    "Skill",
    "ToolPolicy",
    "build_server",
    "load_skills",
    "mcp_capabilities",
    "mcp_capabilities_from_config",
    "parse_skill",
    "serve_stdio",
    "skills_capability",
]
