"""``fiduciary demo --chain`` as a user runs it, in a subprocess: it starts its own anvil,
deploys, shows the card with the simulation, sends after the approval, and reads the balances
back from the chain and reconciles them (0 differences). Without anvil it says how to get it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .anvil import require_anvil

pytestmark = pytest.mark.slow

DEMO_TIMEOUT = 180


def _demo(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fiduciary", "demo", "--chain", "--yes"],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        check=False,
    )


def test_the_chain_demo_sends_once_and_reconciles(tmp_path: Path) -> None:
    require_anvil()
    done = _demo(tmp_path)
    out = done.stdout
    assert done.returncode == 0, (out, done.stderr)
    assert re.search(r"anvil started at http://127\.0\.0\.1:\d+", out)
    assert re.search(r"deployed on chain 31337: USDC 0x[0-9a-fA-F]{40}, vault 0x", out)
    card = next(line for line in out.splitlines() if line.startswith("  Send 250 USDC"))
    assert "(a person's address (no contract code))" in card
    assert re.search(r"gas limit \d+, max fee about \$[0-9.]+; simulated: succeeds$", card)
    counted = re.search(r"waiting for you \(\$([0-9.,]+) counted, the gas included\)", out)
    assert counted is not None
    assert float(counted.group(1)) > 250
    assert re.search(r"sent: transaction 0x[0-9a-f]{64} in block \d+", out)
    assert "you 750.000000 USDC" in out
    assert "0x52908400098527886E0F7030069857D2E4169EE7 250.000000 USDC" in out
    assert out.rstrip().endswith("reconciled with the chain: 0 differences")


def test_without_anvil_the_chain_demo_says_how_to_get_it(tmp_path: Path) -> None:
    empty = tmp_path / "node_modules"
    empty.mkdir()
    done = _demo(tmp_path, FIDUCIARY_NODE_MODULES=str(empty))
    assert done.returncode != 0
    shown = done.stdout + done.stderr
    assert "anvil is not installed: run `make chain-tools`" in shown
    assert "Traceback" not in shown
