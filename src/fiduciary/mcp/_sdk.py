"""The one place the ``mcp`` SDK is imported from: without the extra, an error naming it."""

from __future__ import annotations

try:
    import mcp
    import mcp.types as mcp_types
    from mcp import Client, StdioServerParameters
    from mcp.shared.exceptions import MCPError
    from mcp.types.version import MODERN_PROTOCOL_VERSIONS
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fiduciary.mcp needs the official MCP SDK: pip install 'fiduciary[mcp]'"
    ) from exc

__all__ = [
    "MODERN_PROTOCOL_VERSIONS",
    "Client",
    "MCPError",
    "StdioServerParameters",
    "mcp",
    "mcp_types",
]
