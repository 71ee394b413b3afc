"""The claude CLI provider's proposals server: the public MCP server, with tools that run nothing.

``ClaudeCLIModel`` starts it for each model turn as ``python -m fiduciary.mcp.proposals SPEC.json``
(the tools offered that turn: name, description, inputSchema). It is ``build_server`` over stdio
with ``DeferredTools``: ``tools/list`` lists the spec, and every ``tools/call`` is answered with
``DEFERRED_RESULT`` without running anything: fiduciary reads the calls from the CLI's output
and runs them itself, through its gates. No prompts, no store; the resources are the docs
(``docs://guide``, and ``docs://api``: the tools of this turn).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from ..capabilities import Principal
from ..models.cli_agents import DEFERRED_RESULT
from ._sdk import mcp_types
from .server import Caller, serve_stdio

__all__ = ["DeferredTools", "main"]


class DeferredTools:
    """Tools that are listed, and whose calls are only recorded (answered ``DEFERRED_RESULT``)."""

    def __init__(self, tools: Sequence[dict[str, Any]]) -> None:
        self._tools = [mcp_types.Tool.model_validate(t) for t in tools]

    @classmethod
    def from_spec(cls, spec: Path) -> DeferredTools:
        return cls(json.loads(spec.read_text(encoding="utf-8")))

    def listed(self) -> list[mcp_types.Tool]:
        return list(self._tools)

    async def call(
        self, ctx: Any, caller: Caller, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(text=DEFERRED_RESULT)], is_error=False
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m fiduciary.mcp.proposals SPEC.json", file=sys.stderr)
        return 2
    tools = DeferredTools.from_spec(Path(args[0]))

    async def serve() -> None:
        # the principal is never used: nothing runs here
        await serve_stdio(tools, principal=Principal("claude-cli"), instructions=DEFERRED_RESULT)

    anyio.run(serve)
    return 0


if __name__ == "__main__":  # pragma: no cover - run as the CLI's MCP server process
    raise SystemExit(main())
