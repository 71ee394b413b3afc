"""Fixtures of the chain tests: a real anvil per test, the contracts deployed on it, and a
funded account in an encrypted keystore that owns the minted USDC."""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from .anvil import ROOT, rpc, running_anvil

pytest.importorskip("web3", reason="the chain extra is not installed")

from fiduciary.chain.config import ChainConfig, save_config
from fiduciary.chain.deploy import deploy
from fiduciary.chain.keys import Signer, load_keystore, write_keystore

PASSPHRASE = "correct horse battery staple (test)"
FUNDING_WEI = 10 * 10**18


@dataclass(frozen=True)
class ChainSetup:
    url: str
    config: ChainConfig
    config_path: Path
    keystore: Path
    passphrase_file: Path
    db: Path

    def signer(self) -> Signer:
        return load_keystore(self.keystore, passphrase_file=self.passphrase_file)


def funded_keystore(url: str, path: Path, passphrase: str) -> str:
    """A new account, its key in a (fast, pbkdf2) keystore at ``path``, given 10 ETH."""
    address = write_keystore(path, secrets.token_bytes(32), passphrase, iterations=2)
    rpc(url, "anvil_setBalance", address, hex(FUNDING_WEI))
    return address


@pytest.fixture
def anvil_url() -> Iterator[str]:
    with running_anvil() as url:
        yield url


@pytest.fixture
def chain(anvil_url: str, tmp_path: Path) -> ChainSetup:
    keystore = tmp_path / "owner.json"
    funded_keystore(anvil_url, keystore, PASSPHRASE)
    passphrase_file = tmp_path / "passphrase"
    passphrase_file.write_text(PASSPHRASE + "\n")
    signer = load_keystore(keystore, passphrase_file=passphrase_file)
    config = asyncio.run(deploy(anvil_url, signer, mint=Decimal(1000)))
    config_path = tmp_path / "chain.json"
    save_config(config, config_path)
    return ChainSetup(anvil_url, config, config_path, keystore, passphrase_file, tmp_path / "f.db")


@pytest.fixture
def chain_rich(anvil_url: str, tmp_path: Path) -> ChainSetup:
    """``chain`` with 10,000 USDC minted (for the tests that pay a hundred times)."""
    keystore = tmp_path / "owner.json"
    funded_keystore(anvil_url, keystore, PASSPHRASE)
    passphrase_file = tmp_path / "passphrase"
    passphrase_file.write_text(PASSPHRASE + "\n")
    signer = load_keystore(keystore, passphrase_file=passphrase_file)
    config = asyncio.run(deploy(anvil_url, signer, mint=Decimal(10_000)))
    config_path = tmp_path / "chain.json"
    save_config(config, config_path)
    return ChainSetup(anvil_url, config, config_path, keystore, passphrase_file, tmp_path / "f.db")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, chain: ChainSetup) -> Iterator[tuple[str, str]]:
    if request.param == "sqlite":
        yield "sqlite", str(chain.db)
    else:
        dsn: str = request.getfixturevalue("postgres_dsn")
        yield "postgres", dsn


@pytest.fixture
def chain_pool(anvil_url: str, tmp_path: Path) -> ChainSetup:
    """``chain`` plus Uniswap V2 from the packages' published builds and a USDC/ETH pool."""
    keystore = tmp_path / "owner.json"
    funded_keystore(anvil_url, keystore, PASSPHRASE)
    passphrase_file = tmp_path / "passphrase"
    passphrase_file.write_text(PASSPHRASE + "\n")
    signer = load_keystore(keystore, passphrase_file=passphrase_file)
    config = asyncio.run(
        deploy(anvil_url, signer, mint=Decimal(100_000), uniswap=ROOT / "node_modules")
    )
    config_path = tmp_path / "chain.json"
    save_config(config, config_path)
    return ChainSetup(anvil_url, config, config_path, keystore, passphrase_file, tmp_path / "f.db")


def fee_on(card: str) -> Decimal:
    """The maximum fee in USD an approval card shows ("max fee about $0.94")."""
    found = re.search(r"max fee about \$([0-9,.]+)", card)
    assert found is not None, card
    return Decimal(found.group(1).replace(",", ""))
