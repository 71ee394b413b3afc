"""Every command of the CLI starts without loading the MCP SDK (about a second of CPU per
start, paid by every ``fiduciary`` process and every test that starts one); ``fiduciary.mcp``
loads each public name on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import fiduciary.mcp as package

from .support import fiduciary

pytestmark = pytest.mark.timeout(120)


def test_the_cli_starts_without_the_mcp_sdk() -> None:
    code = (
        "import sys, fiduciary.cli.app; "
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert loaded.stdout.strip() == "[]"


def test_without_the_sdk_the_mcp_command_names_the_extra() -> None:
    result = fiduciary("mcp", "--agent", "x:y", without=("mcp",))
    assert result.returncode == 2
    assert (
        result.stderr
        == "error: fiduciary mcp needs the 'mcp' extra: pip install 'fiduciary[mcp]'\n"
    )


def test_every_public_name_of_fiduciary_mcp_resolves() -> None:
    for name in package.__all__:
        assert getattr(package, name).__name__ == name
    with pytest.raises(AttributeError):
        _ = package.no_such_name
