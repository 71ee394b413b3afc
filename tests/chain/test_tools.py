"""The chain's real parts, installed by the project: the committed artifacts are what solc-js
(pinned in package-lock.json) builds from the contracts, and `fiduciary chain deploy` deploys
them on a real anvil and writes a configuration that a wallet then connects with."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fiduciary.chain.config import load_config

from .anvil import ROOT, rpc
from .conftest import PASSPHRASE, funded_keystore

pytestmark = pytest.mark.slow

ARTIFACTS = ROOT / "src" / "fiduciary" / "chain" / "artifacts"
COMPILE = ROOT / "src" / "fiduciary" / "chain" / "contracts" / "compile.mjs"


def _require_solc() -> str:
    node = shutil.which("node")
    if node is None or not (ROOT / "node_modules" / "solc").exists():
        reason = "node or solc-js is not installed: run `make chain-tools` (npm ci)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: the chain tests must run)")
        pytest.skip(reason)
    return node


def test_the_committed_artifacts_are_what_solc_builds(tmp_path: Path) -> None:
    node = _require_solc()
    subprocess.run([node, str(COMPILE), str(tmp_path)], check=True, capture_output=True)
    built = sorted(p.name for p in tmp_path.glob("*.json"))
    assert built == sorted(p.name for p in ARTIFACTS.glob("*.json"))
    assert built == ["SavingsVault.json", "UsdStablecoin.json"]
    for name in built:
        assert (tmp_path / name).read_text() == (ARTIFACTS / name).read_text(), name


def test_fiduciary_chain_deploy_writes_a_configuration_of_live_contracts(
    anvil_url: str, tmp_path: Path
) -> None:
    keystore = tmp_path / "deployer.json"
    address = funded_keystore(anvil_url, keystore, PASSPHRASE)
    out = tmp_path / "chain.json"
    env = {**os.environ, "FIDUCIARY_KEYSTORE_PASSPHRASE": PASSPHRASE}
    done = subprocess.run(
        [sys.executable, "-m", "fiduciary", "chain", "deploy", "--rpc", anvil_url,
         "--keystore", str(keystore), "--out", str(out), "--mint", "10000",
         "--uniswap", str(ROOT / "node_modules")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"written to {out}" in done.stdout
    assert "Uniswap V2 router 0x" in done.stdout
    config = load_config(out, env={})
    assert config.chain_id == 31337
    assert config.vault is not None
    assert config.router is not None
    assert config.weth is not None
    for contract in (config.token, config.vault, config.router, config.weth):
        assert rpc(anvil_url, "eth_getCode", contract, "latest") not in ("0x", "")
    data = "0x70a08231" + "0" * 24 + address.lower()[2:]
    held = int(rpc(anvil_url, "eth_call", {"to": config.token, "data": data}, "latest"), 16)
    assert held == (10_000 - 6_000) * 10**6  # the mint, less what went into the pool
    assert PASSPHRASE not in done.stdout + done.stderr


def test_deploy_with_a_wrong_passphrase_says_so_in_one_line(anvil_url: str, tmp_path: Path) -> None:
    keystore = tmp_path / "deployer.json"
    funded_keystore(anvil_url, keystore, PASSPHRASE)
    env = {**os.environ, "FIDUCIARY_KEYSTORE_PASSPHRASE": "not-the-passphrase-CANARY"}
    done = subprocess.run(
        [sys.executable, "-m", "fiduciary", "chain", "deploy", "--rpc", anvil_url,
         "--keystore", str(keystore), "--out", str(tmp_path / "c.json")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "wrong passphrase or damaged file" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    assert "CANARY" not in done.stderr + done.stdout
    assert not (tmp_path / "c.json").exists()
