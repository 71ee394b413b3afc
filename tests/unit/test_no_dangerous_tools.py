"""No shipped capability, MCP default or CLI-agent provider hands a model a shell, arbitrary
file reads or writes, arbitrary SQL or a call-any-URL tool (the seeds forbid them): every
capability set fiduciary ships is walked — names, descriptions, input schemas — and the argv
the CLI-agent providers build is checked."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import pytest

from fiduciary import Capability, ManualClock, MemoryStore, capability
from fiduciary.apps._caps import engine_capabilities, state_capability
from fiduciary.context.skills import Skill, with_skills
from fiduciary.context.todos import update_todo
from fiduciary.demo import Billing, build_demo_agent
from fiduciary.mcp.bridge import McpGateway
from fiduciary.mcp.server import GatewayTools
from fiduciary.models.cli_agents import MCP_SERVER, ClaudeCLIModel
from fiduciary.models.codex_cli import CODEX_TOOLS_OFF, CodexCLIModel
from fiduciary.wallet.capabilities import wallet_capabilities
from fiduciary.wallet.demo import build_wallet_agent
from fiduciary.wallet.wallet import PaperWallet

# what a capability offering one of those powers would be called or take
FORBIDDEN_NAME = re.compile(
    r"(shell|bash|terminal|subprocess|exec_?command|run_?command|command|eval|python|"
    r"read_?file|write_?file|file_?(read|write)|filesystem|open_?file|list_?dir|path|"
    r"sql|query_?db|database|execute_?query|"
    r"http|fetch|url|curl|wget|request|browse|download|upload)",
    re.IGNORECASE,
)
FORBIDDEN_ARGUMENTS = frozenset(
    {
        "command",
        "cmd",
        "shell",
        "script",
        "code",
        "argv",
        "path",
        "file",
        "filename",
        "filepath",
        "directory",
        "sql",
        "query",
        "statement",
        "url",
        "uri",
        "endpoint",
        "href",
        "method",
        "headers",
    }
)
FORBIDDEN_WORDS = re.compile(
    r"\b(shell command|run (a|any) command|any file|file system|filesystem|arbitrary|"
    r"SQL|any URL|HTTP request)\b",
    re.IGNORECASE,
)


def _properties(schema: Any) -> Iterable[str]:
    """Every property name anywhere in a JSON schema."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                yield from value
            yield from _properties(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _properties(item)


def shipped() -> dict[str, list[Capability]]:
    """Every capability set fiduciary ships, by where it comes from."""
    clock = ManualClock()
    wallet = PaperWallet(clock=clock)
    sets = {
        "demo": build_demo_agent(MemoryStore(), Billing(), clock=clock),
        "wallet agent": build_wallet_agent(MemoryStore(), wallet, clock=clock),
    }
    out = {
        name: [c for n in agent.gates.names if (c := agent.gates.get(n)) is not None]
        for name, agent in sets.items()
    }
    out["wallet"] = wallet_capabilities(wallet)

    async def nothing(*_: Any) -> Any:
        return {}

    out["apps"] = [
        *engine_capabilities(enabled=nothing, granted=nothing),
        state_capability(nothing),
    ]
    skill = Skill(name="budget", description="Plan a budget.", body="...")
    out["context"] = [update_todo, *with_skills([], {"budget": skill})]
    return out


CASES = [(where, cap) for where, caps in shipped().items() for cap in caps]


def test_the_walk_covers_every_shipped_set() -> None:
    assert {where for where, _ in CASES} == {"demo", "wallet agent", "wallet", "apps", "context"}
    assert len(CASES) > 20


def powers(cap: Capability) -> list[str]:
    """What in a capability looks like a shell, files, SQL or any URL (empty: nothing)."""
    found = []
    if FORBIDDEN_NAME.search(cap.name):
        found.append(f"name {cap.name}")
    if FORBIDDEN_WORDS.search(cap.description):
        found.append(f"description {cap.description!r}")
    schema = cap.input_schema()
    found += [f"argument {a}" for a in sorted(set(_properties(schema)) & FORBIDDEN_ARGUMENTS)]
    if FORBIDDEN_WORDS.search(json.dumps(schema)):
        found.append("schema text")
    return found


def test_the_check_finds_such_a_tool() -> None:
    @capability(kind="read")
    async def read_file(path: str) -> dict[str, str]:
        """Read any file from the file system."""
        return {}

    @capability(kind="read")
    async def lookup(sql: str) -> dict[str, str]:
        """Look something up."""
        return {}

    assert powers(read_file) == [
        "name read_file",
        "description 'Read any file from the file system.'",
        "argument path",
    ]
    assert powers(lookup) == ["argument sql", "schema text"]


@pytest.mark.parametrize(("where", "cap"), CASES, ids=[f"{w}:{c.name}" for w, c in CASES])
def test_no_capability_offers_a_shell_files_sql_or_any_url(where: str, cap: Capability) -> None:
    assert powers(cap) == [], where


def test_the_mcp_server_lists_exactly_the_agents_whitelist() -> None:
    clock = ManualClock()
    agent = build_wallet_agent(MemoryStore(), PaperWallet(clock=clock), clock=clock)
    listed = GatewayTools(McpGateway(agent)).listed()
    assert sorted(t.name for t in listed) == sorted(agent.gates.names)
    for tool in listed:
        assert not FORBIDDEN_NAME.search(tool.name)
        assert not set(_properties(tool.input_schema)) & FORBIDDEN_ARGUMENTS


def test_the_claude_cli_gets_no_tool_of_its_own() -> None:
    argv = ClaudeCLIModel("sonnet")._args("claude", "system", "{}", None)
    assert argv[argv.index("--tools") + 1] == ""  # every built-in tool off
    assert "--strict-mcp-config" in argv  # no MCP server but fiduciary's
    assert argv[argv.index("--allowedTools") + 1] == f"mcp__{MCP_SERVER}"
    assert "--dangerously-skip-permissions" not in argv


def test_the_codex_cli_gets_its_own_tools_switched_off_in_a_read_only_sandbox() -> None:
    argv = CodexCLIModel()._args("codex", "/tmp/empty", None, None)
    assert argv[argv.index("--sandbox") + 1] == "read-only"
    settings = [argv[i + 1] for i, a in enumerate(argv) if a == "-c"]
    assert "features.shell_tool=false" in settings
    assert set(CODEX_TOOLS_OFF) <= set(settings)
    assert not any("danger" in a or a == "--yolo" for a in argv)
