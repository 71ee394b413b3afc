"""The Claude Desktop / Cursor configuration in docs/mcp.md, launched as written with the SDK's
client (only the database path swapped for a temporary one)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from .conftest import ROOT

pytestmark = pytest.mark.timeout(120)


def _config() -> dict[str, object]:
    text = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```json\n(.*?)```", text, re.S) if "mcpServers" in b]
    config: dict[str, object] = json.loads(block)["mcpServers"]["fiduciary"]
    return config


async def test_the_documented_client_configuration_serves_the_wallet(tmp_path: Path) -> None:
    config = _config()
    args = [str(a) for a in config["args"]]  # type: ignore[attr-defined]
    args[args.index("--db") + 1] = str(tmp_path / "fiduciary.sqlite3")
    command = shutil.which(str(config["command"]), path=str(Path(sys.executable).parent))
    assert command is not None
    params = StdioServerParameters(command=command, args=args, cwd=str(tmp_path))
    async with Client(params, cache=None) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        answer = await client.call_tool("rates_info", {})
    assert {"balance_check", "send_transfer", "swap_execute"} <= names
    assert not answer.is_error
    assert answer.structured_content is not None
    assert answer.structured_content["status"] == "done"
