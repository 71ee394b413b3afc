"""fiduciary's own documentation over MCP: ``docs://guide`` and ``docs://api``, read with the SDK's
own client from a real ``fiduciary mcp`` process (stdio), from ``/mcp`` of the served app
(streamable HTTP), and from the claude CLI provider's proposals server (a real process too)."""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextResourceContents

from fiduciary.mcp.docs import API_URI, GUIDE_PAGES, GUIDE_URI, guide_text

from .conftest import ROOT
from .serving import Served, served

pytestmark = pytest.mark.timeout(120)

__all__ = ["served"]  # the fixture, over stdio and HTTP

SHIPPED = ROOT / "src" / "fiduciary" / "mcp" / "guide"


def _text(contents: object) -> str:
    assert isinstance(contents, TextResourceContents)
    return contents.text


def _schemas(api: str) -> dict[str, object]:
    """Each tool's input schema, read back from the markdown."""
    found = re.findall(r"^## (\S+) \((?:read|write)\)\n.*?```json\n(.*?)```", api, re.S | re.M)
    return {name: json.loads(block) for name, block in found}


@pytest.mark.parametrize("page", GUIDE_PAGES)
def test_the_shipped_pages_are_the_docs_pages(page: str) -> None:
    # the wheel holds only src/fiduciary: the guide's pages are links to docs/, so they cannot
    # drift (the wheel carries their text: test_the_wheel_carries_the_guide)
    shipped = SHIPPED / page
    fix = f"ln -sf ../../../../docs/{page} src/fiduciary/mcp/guide/{page}"
    assert shipped.is_symlink(), fix
    assert shipped.resolve() == (ROOT / "docs" / page).resolve(), fix
    assert sorted(p.name for p in SHIPPED.glob("*.md")) == sorted(GUIDE_PAGES)


async def test_both_listed_and_read_as_markdown(served: Served) -> None:
    async with served.connect("alice") as client:
        # the server's instructions are short, and say where the rest is
        instructions = client.instructions or ""
        assert GUIDE_URI in instructions
        assert API_URI in instructions
        listed = {str(r.uri): r for r in (await client.list_resources()).resources}
        tools = {t.name: t for t in (await client.list_tools()).tools}
        guide = await client.read_resource(GUIDE_URI)
        api = await client.read_resource(API_URI)
    assert {GUIDE_URI, API_URI} <= set(listed)
    assert listed[GUIDE_URI].mime_type == listed[API_URI].mime_type == "text/markdown"
    text = _text(guide.contents[0])
    assert text == guide_text()
    for page in GUIDE_PAGES:  # every page, whole
        assert (ROOT / "docs" / page).read_text(encoding="utf-8").strip() in text
    # the API is the live whitelist: every tool, its kind, description and exact input schema
    reference = _text(api.contents[0])
    schemas = _schemas(reference)
    assert sorted(schemas) == sorted(tools) == ["balance", "greeting", "note", "send", "slow_send"]
    for name, tool in tools.items():
        assert schemas[name] == tool.input_schema
        assert (tool.description or "").strip() in reference
    assert "## balance (read)" in reference
    assert "## send (write)" in reference


async def test_the_proposals_server_serves_them_with_the_turn_s_tools(tmp_path: Path) -> None:
    spec = tmp_path / "tools.json"
    offered = {
        "name": "pay",
        "description": "Pay someone.",
        "inputSchema": {"type": "object", "properties": {"to": {"type": "string"}}},
    }
    spec.write_text(json.dumps([offered]), encoding="utf-8")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "fiduciary.mcp.proposals", str(spec)], cwd=ROOT
    )
    async with Client(params) as client:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        api = _text((await client.read_resource(API_URI)).contents[0])
        guide = _text((await client.read_resource(GUIDE_URI)).contents[0])
    assert listed == {GUIDE_URI, API_URI}  # no runs, no approvals: nothing is stored here
    assert _schemas(api) == {"pay": offered["inputSchema"]}
    assert "Pay someone." in api
    assert guide == guide_text()


def test_the_wheel_carries_the_guide(tmp_path: Path) -> None:
    from hatchling.builders.wheel import WheelBuilder

    (built,) = WheelBuilder(str(ROOT)).build(directory=str(tmp_path))
    with zipfile.ZipFile(built) as wheel:
        names = set(wheel.namelist())
        for page in GUIDE_PAGES:
            assert f"fiduciary/mcp/guide/{page}" in names
        shipped = wheel.read("fiduciary/mcp/guide/approvals.md")
    assert shipped == (ROOT / "docs" / "approvals.md").read_bytes()
