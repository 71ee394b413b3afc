"""External MCP servers from configuration, from the outside: ``fiduciary serve`` and
``fiduciary mcp`` as real processes, given the bank server (a real MCP server process written
with the SDK) through ``[[mcp]]`` tables of ``--config`` and ``--mcp-config`` files (TOML, or
the ``mcpServers`` JSON of Claude Desktop and Cursor)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from fiduciary import Principal
from fiduciary.exceptions import ConfigurationError
from fiduciary.mcp import McpGateway, McpServer, mcp_capabilities
from fiduciary.mcp.attach import attach_toolset, attached_mcp, configured_servers
from fiduciary.mcp.config import read_config
from fiduciary.stores.memory import MemoryStore
from fiduciary.stores.sqlite import SQLiteStore

from .conftest import ROOT
from .served_agent import mcp_agent

pytestmark = pytest.mark.timeout(180)

AGENT = "tests.unit.mcp.served_agent:mcp_agent"
BANK = [sys.executable, "-m", "tests.unit.mcp.bank_server"]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "300", "TERM": "dumb"}
    env.pop("FIDUCIARY_POSTGRES", None)
    env.pop("FIDUCIARY_MCP_CONFIG", None)
    env["FIDUCIARY_DB"] = str(tmp_path / "serve.sqlite3")
    env["PYTHONPATH"] = str(ROOT)
    return env


def _bank_table(name: str, log: Path, prefix: str = "", extra: str = "") -> str:
    return (
        f'[[mcp]]\nname = "{name}"\ncommand = {json.dumps(BANK[0])}\n'
        f"args = {json.dumps(BANK[1:])}\ncwd = {json.dumps(str(ROOT))}\n"
        f'prefix = "{prefix}"\n{extra}'
        f"[mcp.env]\nBANK_LOG = {json.dumps(str(log))}\nPYTHONPATH = {json.dumps(str(ROOT))}\n"
    )


def _bank_json(name: str, log: Path, prefix: str) -> dict[str, Any]:
    return {
        "mcpServers": {
            name: {
                "command": BANK[0],
                "args": BANK[1:],
                "cwd": str(ROOT),
                "env": {"BANK_LOG": str(log), "PYTHONPATH": str(ROOT)},
                "prefix": prefix,
                "autoApprove": ["transfer"],  # another client's setting: it approves nothing here
            },
            "off": {"command": "no-such-command", "disabled": True},
        }
    }


class Serving:
    def __init__(self, url: str, key: str, stderr: list[str]) -> None:
        self.url, self.key, self.stderr = url, key, stderr


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[Serving]:
    """``fiduciary serve`` with bank ([[mcp]] of --config) and twin (an --mcp-config JSON)."""
    env = _env(tmp_path)
    log = tmp_path / "transfers.log"
    config = tmp_path / "server.toml"
    config.write_text(_bank_table("bank", log, "bank_", 'reads = ["rates"]\n'), encoding="utf-8")
    twin = tmp_path / "twin.json"
    twin.write_text(json.dumps(_bank_json("twin", log, "twin_")), encoding="utf-8")
    key = subprocess.run(
        [sys.executable, "-m", "fiduciary", "keys", "create", "--principal", "alice"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    served = subprocess.Popen(
        [
            *[sys.executable, "-m", "fiduciary", "serve", "--port", "0", "--agent", AGENT],
            *["--config", str(config), "--mcp-config", str(twin)],
        ],
        env=env,
        cwd=str(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert served.stderr is not None
        lines: list[str] = []
        for line in served.stderr:
            lines.append(line)
            if "console and API at" in line:
                break
        found = re.search(r"at (http://127\.0\.0\.1:\d+/) \(", "".join(lines))
        assert found is not None, "".join(lines)
        yield Serving(found.group(1), key, lines)
    finally:
        served.terminate()
        served.wait(timeout=30)
        if served.stderr is not None:
            served.stderr.close()


async def test_serve_gives_the_agent_the_configured_servers_tools_behind_its_gates(
    serving: Serving, tmp_path: Path
) -> None:
    assert "fiduciary: 12 tools from MCP servers bank, twin\n" in serving.stderr
    headers = {"authorization": f"Bearer {serving.key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(serving.url + "mcp", http_client=http), cache=None) as mcp,
    ):
        names = {t.name for t in (await mcp.list_tools()).tools}
        assert {"balance", "send", "bank_rates", "bank_transfer", "twin_transfer"} <= names
        rates = await mcp.call_tool("bank_rates", {"currency": "EUR"})  # a read the host named
        assert rates.structured_content is not None
        assert rates.structured_content["status"] == "done"
        args = {"to": "bob", "amount": 12.5}
        pending = (await mcp.call_tool("bank_transfer", args)).structured_content
        assert pending is not None
        assert pending["status"] == "pending_approval"  # an unmapped tool: a write, confirm
        untouched = (await mcp.call_tool("twin_transfer", args)).structured_content
        assert untouched is not None
        assert untouched["status"] == "pending_approval"  # autoApprove means nothing here
        assert not (tmp_path / "transfers.log").exists()
        async with httpx.AsyncClient(base_url=serving.url, headers=headers, timeout=60) as api:
            decided = await api.post(
                f"approvals/{pending['approval_id']}/approve",
                json={"args_digest": pending["args_digest"]},
            )
            assert decided.status_code == 200, decided.text
        done = (await mcp.call_tool("bank_transfer", args)).structured_content
        again = (await mcp.call_tool("bank_transfer", args)).structured_content
        prompts = {p.name for p in (await mcp.list_prompts()).prompts}
    assert done is not None
    assert done["status"] == "done"
    assert again == done
    assert (tmp_path / "transfers.log").read_text() == "transfer bob 12.5\n"  # exactly once
    # both servers' prompts are the agent's skills, after their prefixes
    assert prompts == {"skill-bank-careful-transfer", "skill-twin-careful-transfer"}


def _serve_refused(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``fiduciary serve --port 0 OPTIONS``, expected to refuse its configuration and exit."""
    return subprocess.run(
        [sys.executable, "-m", "fiduciary", "serve", "--port", "0", *options],
        env=_env(tmp_path),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_two_servers_offering_one_name_without_a_prefix_are_refused(tmp_path: Path) -> None:
    log = tmp_path / "transfers.log"
    config = tmp_path / "server.toml"
    config.write_text(_bank_table("bank", log) + _bank_table("twin", log), encoding="utf-8")
    served = _serve_refused(tmp_path, "--agent", AGENT, "--config", str(config))
    assert served.returncode == 2
    assert served.stderr.splitlines()[-1] == (
        "error: the tool name 'balance' is offered by two MCP servers, 'bank' and 'twin': "
        "give one of them a prefix"
    )


def test_a_bad_mcp_table_is_one_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text('[[mcp]]\nname = "bank"\nprefix = "b_"\n', encoding="utf-8")
    served = _serve_refused(tmp_path, "--config", str(config))
    assert served.returncode == 2
    assert served.stderr.splitlines()[-1] == (
        "error: [[mcp]] of --config: MCP server 'bank': give either a command (stdio) or a "
        "url (HTTP)"
    )


async def test_fiduciary_mcp_serves_a_configured_servers_tools_gated(tmp_path: Path) -> None:
    """A Claude Desktop configuration file given to ``fiduciary mcp``: the client reaches the
    bank's tools only as fiduciary's gated capabilities."""
    log = tmp_path / "transfers.log"
    bank = tmp_path / "bank.json"
    bank.write_text(json.dumps(_bank_json("bank", log, "bank_")), encoding="utf-8")
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *["-m", "fiduciary", "mcp", "--agent", AGENT, "--principal", "alice"],
            *["--db", str(tmp_path / "runs.sqlite3"), "--mcp-config", str(bank)],
        ],
        env=_env(tmp_path),
        cwd=str(ROOT),
    )
    async with Client(params, cache=None) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        answer = await client.call_tool("bank_transfer", {"to": "bob", "amount": 5})
    assert {"balance", "bank_balance", "bank_transfer"} <= names
    assert answer.structured_content is not None
    assert answer.structured_content["status"] == "pending_approval"
    assert not log.exists()


async def test_a_servers_tool_named_like_the_agents_own_is_refused(tmp_path: Path) -> None:
    agent = mcp_agent(MemoryStore())
    server = McpServer.stdio("bank", *BANK, cwd=str(ROOT), env={"PYTHONPATH": str(ROOT)})
    async with await mcp_capabilities(server) as tools:
        with pytest.raises(ConfigurationError) as refused:
            attach_toolset(agent, tools)
    assert str(refused.value) == (
        "the MCP server 'bank' offers 'balance', which the agent already has: give the server "
        "a prefix"
    )
    assert agent.gates.get("transfer") is None  # nothing was added


def test_configuration_files_read_as_documented(tmp_path: Path) -> None:
    toml = tmp_path / "servers.toml"
    toml.write_text(_bank_table("bank", tmp_path / "log", "b_"), encoding="utf-8")
    claude = tmp_path / "claude_desktop_config.json"
    claude.write_text(json.dumps(_bank_json("twin", tmp_path / "log", "t_")), encoding="utf-8")
    remote = tmp_path / "remote.json"
    remote.write_text(
        json.dumps({"mcpServers": {"far": {"type": "http", "url": "https://x.example/mcp"}}})
    )
    configs = configured_servers([], [toml, claude, remote])
    assert [(c.name, c.prefix) for c in configs] == [("bank", "b_"), ("twin", "t_"), ("far", "")]
    assert configs[2].url == "https://x.example/mcp"
    sse = tmp_path / "sse.json"
    sse.write_text(json.dumps({"mcpServers": {"old": {"type": "sse", "url": "https://x/sse"}}}))
    with pytest.raises(ConfigurationError, match="the transport 'sse' is not supported"):
        read_config(sse)
    broken = tmp_path / "broken.toml"
    broken.write_text("[[mcp]\n")
    with pytest.raises(ConfigurationError, match=r"broken\.toml"):
        read_config(broken)
    twice = configured_servers([], [toml, toml])
    assert [c.name for c in twice] == ["bank", "bank"]  # refused when connecting (named)


async def test_an_agent_without_skills_gets_use_skill_over_the_servers_prompts() -> None:
    agent = mcp_agent(MemoryStore())
    assert agent.gates.get("use_skill") is None
    server = McpServer.stdio(
        "bank", *BANK, cwd=str(ROOT), env={"PYTHONPATH": str(ROOT)}, prefix="bank_"
    )
    async with await mcp_capabilities(server) as tools:
        agent = attach_toolset(agent, tools, skills=await tools.skills())
        use_skill = agent.gates.get("use_skill")
        assert use_skill is not None
        listed = use_skill.handler(skill="")
    assert agent.gates.get("bank_transfer") is not None
    assert agent.gates.get("balance") is not None  # its own stay
    assert listed == {
        "skills": [
            {
                "name": "bank-careful-transfer",
                "description": "Check the balance before any transfer.",
            }
        ]
    }


async def test_the_approvals_command_is_given_the_servers_by_the_environment(
    tmp_path: Path,
) -> None:
    db, log = tmp_path / "runs.sqlite3", tmp_path / "transfers.log"
    servers = tmp_path / "servers.toml"
    servers.write_text(_bank_table("bank", log, "bank_"), encoding="utf-8")
    store = SQLiteStore(db)
    agent = mcp_agent(store)
    alice, args = Principal("alice"), {"to": "bob", "amount": 7}
    try:
        async with attached_mcp(agent, read_config(servers)) as (agent, _):
            gateway = McpGateway(agent)
            pending = await gateway.call(alice, "bank_transfer", args)
            assert pending.status == "pending_approval"
            command = [
                *[sys.executable, "-m", "fiduciary", "approvals", "approve"],
                *[pending.details["approval_id"], "--by", "alice", "--agent", AGENT],
                *["--db", str(db)],
            ]
            env = _env(tmp_path)

            def approve() -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    command, env=env, capture_output=True, text=True, timeout=120, check=False
                )

            without = await asyncio.to_thread(approve)
            assert without.returncode != 0
            assert "bank_transfer" in without.stderr  # this agent lacks the run's capability
            env["FIDUCIARY_MCP_CONFIG"] = str(servers)
            approved = await asyncio.to_thread(approve)
            assert approved.returncode == 0, approved.stderr
            assert approved.stdout.startswith("approved ")
            done = await gateway.call(alice, "bank_transfer", args)
    finally:
        await store.close()
    assert done.status == "done"
    assert log.read_text() == "transfer bob 7.0\n"
