"""MCP both ways, and skills (needs the ``mcp`` extra: ``pip install 'fiduciary[mcp]'``).

- ``mcp_capabilities(server, ...)``: an external MCP server's tools as gated capabilities
  (``client``; the supervised connection is ``_connection``).
- ``McpGateway``, ``serve_stdio``, ``mcp_http_app``: fiduciary's capabilities to any MCP
  client, every call a run through the gates (``bridge`` makes the run, ``server`` speaks MCP).
- ``load_skills``, ``skills_capability``: ``SKILL.md`` playbooks as MCP prompts and as a read
  capability (``skills``).

The core never imports this package.
"""

from ._connection import McpServer
from .client import McpToolset, ToolPolicy, mcp_capabilities

__all__ = ["McpServer", "McpToolset", "ToolPolicy", "mcp_capabilities"]
