"""Stand-in executables for the CLI agents: they replay recorded output in the documented format.

A stand-in records each invocation (argv, stdin, working directory) to ``calls.jsonl`` beside
it and prints the next recorded fixture. The ``claude`` stand-in also starts the MCP server named
by its ``--mcp-config``, as the real CLI does, lists its tools and calls the first one, and
reports what it saw in its ``system/init`` line. A fixture line ``{"stand_in": "hang"}`` makes it
block until it is killed, so a test sees whether the model stops the CLI by itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

WIRE = Path(__file__).parent / "wire"

_SCRIPT = r"""#!{python}
import json, os, subprocess, sys, threading

HERE = {here!r}
FIXTURES = {fixtures!r}
CLAUDE = {claude!r}


def mcp_session(config_arg):
    if config_arg.lstrip().startswith("{{"):  # the CLI takes a file or the JSON itself
        config = json.loads(config_arg)
    else:
        with open(config_arg) as f:
            config = json.load(f)
    servers = config.get("mcpServers", {{}})
    seen = {{}}
    for name, server in servers.items():
        proc = subprocess.Popen(
            [server["command"], *server.get("args", [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        def ask(i, method, params):
            proc.stdin.write(json.dumps({{"jsonrpc": "2.0", "id": i, "method": method,
                                         "params": params}}) + "\n")
            proc.stdin.flush()
            return json.loads(proc.stdout.readline())
        init = ask(1, "initialize", {{"protocolVersion": "2025-06-18", "capabilities": {{}},
                                     "clientInfo": {{"name": "stand-in", "version": "0"}}}})
        note = {{"jsonrpc": "2.0", "method": "notifications/initialized"}}
        proc.stdin.write(json.dumps(note) + "\n")
        listed = ask(2, "tools/list", {{}})["result"]["tools"]
        called = None
        if listed:
            first = {{"name": listed[0]["name"], "arguments": {{}}}}
            called = ask(3, "tools/call", first)["result"]
        unknown = ask(4, "prompts/list", {{}})
        proc.stdin.close()
        proc.wait()
        seen[name] = {{"server": init["result"]["serverInfo"]["name"], "tools": listed,
                       "called": called, "unknown": unknown.get("error")}}
    return seen


argv = sys.argv[1:]
stdin = sys.stdin.read()
mcp = {{}}
if CLAUDE and "--mcp-config" in argv:
    mcp = mcp_session(argv[argv.index("--mcp-config") + 1])
calls = os.path.join(HERE, "calls.jsonl")
count = 0
if os.path.exists(calls):
    with open(calls) as f:
        count = sum(1 for _ in f)
with open(calls, "a") as f:
    f.write(json.dumps({{"argv": argv, "stdin": stdin, "cwd": os.getcwd(), "mcp": mcp}}) + "\n")
fixture = FIXTURES[min(count, len(FIXTURES) - 1)]
sys.stderr.write("stand-in: replaying " + os.path.basename(fixture) + "\n")
with open(fixture) as f:
    for line in f:
        data = json.loads(line)
        if data == {{"stand_in": "hang"}}:
            sys.stdout.flush()
            threading.Event().wait()
        if data.get("type") == "system" and data.get("subtype") == "init":
            names = [(s, t["name"]) for s, v in mcp.items() for t in v["tools"]]
            data["tools"] = ["mcp__" + s + "__" + t for s, t in names]
        sys.stdout.write(json.dumps(data) + "\n")
        sys.stdout.flush()
sys.exit({exit_code})
"""


class StandIn:
    """A stand-in executable at ``path``; ``calls`` reads back what it was asked."""

    def __init__(self, directory: Path, name: str, fixtures: list[str], exit_code: int = 0) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.path = directory / name
        self.path.write_text(
            _SCRIPT.format(
                python=sys.executable,
                here=str(directory),
                fixtures=[str(WIRE / f) for f in fixtures],
                claude=name == "claude",
                exit_code=exit_code,
            ),
            encoding="utf-8",
        )
        self.path.chmod(0o755)

    @property
    def calls(self) -> list[dict[str, Any]]:
        file = self.directory / "calls.jsonl"
        if not file.exists():
            return []
        return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]
