"""What the README and docs/ tell a person to type or to expect holds: ids the CLI accepts, a
desktop MCP configuration that names a program a desktop app can start, and statements about the
code that the code keeps (each checked against the code, not against a copy of the sentence)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fiduciary.cli._common import _MIN_PREFIX
from fiduciary.server.operations import OPERATIONS
from fiduciary.server.served import DEFAULT_AGENT

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DECIDE = re.compile(r"fiduciary approvals (?:approve|deny)(?: \| deny)? (\S+)")


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_approval_id_shown_is_one_the_cli_accepts(page: Path) -> None:
    for ref in DECIDE.findall(_text(page)):
        if ref.isupper() or ref.startswith(("$", "<", '"$')):  # ID, $APPROVAL, <id>: placeholders
            continue
        hex_digits = ref.replace("-", "")
        assert re.fullmatch(r"[0-9a-f]+", hex_digits), (page.name, ref)
        assert len(hex_digits) >= _MIN_PREFIX, f"{page.name}: {ref} is shorter than the CLI takes"


DESKTOP_PAGES = [ROOT / "README.md", ROOT / "docs" / "mcp.md"]


@pytest.mark.parametrize("page", DESKTOP_PAGES, ids=lambda p: p.name)
def test_the_desktop_mcp_configuration_names_the_program_by_its_absolute_path(page: Path) -> None:
    """A desktop app does not start from the person's shell: a bare command name is not found."""
    blocks = re.findall(r"```json\n(.*?)```", _text(page), re.S)
    servers = [json.loads(b).get("mcpServers", {}) for b in blocks]
    stdio = [found["fiduciary"] for found in servers if "command" in found.get("fiduciary", {})]
    assert stdio, page
    for server in stdio:
        command = Path(server["command"])
        assert command.is_absolute(), command
        assert command.parts[-3:-1] == (".venv", "bin"), command


def test_the_server_page_names_the_default_agent() -> None:
    text = " ".join(_text(ROOT / "docs" / "server.md").split())
    assert f"The default, `{DEFAULT_AGENT}`, serves the paper-wallet agent" in text
    assert "billing agent" not in text


def test_the_event_page_names_the_routes_that_serve_its_streams() -> None:
    text = _text(ROOT / "docs" / "events.md")
    served = {(op.method, op.path) for op in OPERATIONS}
    for route in ("/runs/{run_id}/events", "/events"):
        assert ("GET", route) in served
        assert f"`GET {route}`" in text
    assert "not built yet" not in text


def test_the_security_page_says_edits_are_authorized_again() -> None:
    """tests/unit/test_agent.py::test_edited_arguments_are_authorized_again holds the code."""
    text = " ".join(_text(ROOT / "docs" / "security.md").split())
    assert "Authorization is asked again for the edited arguments" in text
    assert "not asked again" not in text
