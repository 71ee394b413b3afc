"""Private: the stdio MCP server through which ``claude`` sees fiduciary's capabilities.

It lists the tools of a spec file and answers every call with ``DEFERRED_RESULT``: it never runs
anything. fiduciary reads the calls from the CLI's output and runs them itself, through its
gates. Started by the CLI as ``python -m fiduciary.models._mcp_proposals SPEC.json``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFERRED_RESULT", "MCP_SERVER", "main", "serve_proposals"]

MCP_SERVER = "fiduciary"
DEFERRED_RESULT = (
    "Recorded. fiduciary runs this call itself, after its checks, and gives you its result in "
    "the next message. End your turn now."
)


def serve_proposals(spec: Path, stdin: Any = None, stdout: Any = None) -> None:
    """A stdio MCP server listing the tools in ``spec`` whose calls are only recorded.

    Speaks newline-delimited JSON-RPC 2.0: ``initialize``, ``ping``, ``tools/list``,
    ``tools/call`` (answered with ``DEFERRED_RESULT``); anything else is "method not found".
    """
    tools = json.loads(spec.read_text(encoding="utf-8"))
    source = stdin if stdin is not None else sys.stdin
    sink = stdout if stdout is not None else sys.stdout

    def send(message: dict[str, Any]) -> None:
        sink.write(json.dumps(message) + "\n")
        sink.flush()

    for line in source:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if not isinstance(request, dict) or "id" not in request:
            continue  # a notification
        method = request.get("method")
        params = request.get("params") or {}
        result: dict[str, Any]
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": MCP_SERVER, "version": "1"},
                "instructions": DEFERRED_RESULT,
            }
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = {"tools": tools}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": DEFERRED_RESULT}], "isError": False}
        else:
            send(
                {
                    "jsonrpc": "2.0",
                    "id": request["id"],
                    "error": {"code": -32601, "message": f"method not found: {method}"},
                }
            )
            continue
        send({"jsonrpc": "2.0", "id": request["id"], "result": result})


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 1:
        serve_proposals(Path(args[0]))
        return 0
    print("usage: python -m fiduciary.models._mcp_proposals SPEC.json", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover - run as the MCP server's process
    raise SystemExit(main())
