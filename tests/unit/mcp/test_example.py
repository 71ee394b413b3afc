"""examples/mcp_approval.py: an external MCP tool waits on the approval card, then runs once."""

from __future__ import annotations

import importlib.util
import io

import pytest
from rich.console import Console

from .conftest import ROOT

pytestmark = pytest.mark.timeout(120)


async def test_the_mcp_approval_example_runs() -> None:
    spec = importlib.util.spec_from_file_location("mcp_approval", ROOT / "examples/mcp_approval.py")
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    shown = io.StringIO()
    code = await example.main(True, Console(file=shown, width=120))
    text = shown.getvalue()
    assert code == 0
    assert "approval needed" in text
    assert "transfer(to=bob, amount=40)" in text
    assert "sent 40.0 USD to bob" in text
