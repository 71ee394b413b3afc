"""The chain backend's settings and the deployment file ``fiduciary chain deploy`` writes.

The file is JSON: the RPC URL, the chain id the node must report at start-up, the token and
vault addresses, the confirmations a receipt needs and static USD prices for the policy (a
dev-chain stand-in for a price feed). ``FIDUCIARY_CHAIN_RPC`` overrides the URL.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..exceptions import ConfigurationError

__all__ = ["RPC_ENV", "ChainConfig", "load_config", "save_config"]

RPC_ENV = "FIDUCIARY_CHAIN_RPC"


@dataclass(frozen=True, slots=True)
class ChainConfig:
    """Where the chain is and what is deployed on it."""

    rpc_url: str
    chain_id: int
    token: str  # the USD stablecoin (an ERC-20) the wallet's USDC is
    token_symbol: str = "USDC"
    token_decimals: int = 6
    vault: str | None = None  # an ERC-4626 vault over the token
    router: str | None = None  # a Uniswap V2 router (swaps between the token and the coin)
    weth: str | None = None  # the wrapped native coin the router's pool pairs with the token
    native_symbol: str = "ETH"
    confirmations: int = 1
    usd_prices: Mapping[str, Decimal] = field(
        default_factory=lambda: {"USDC": Decimal(1), "ETH": Decimal(3000)}
    )
    receipt_timeout: float = 120.0
    poll_interval: float = 0.1

    def __post_init__(self) -> None:
        if self.confirmations < 1:
            raise ConfigurationError("confirmations must be 1 or more")
        if self.chain_id < 1:
            raise ConfigurationError("chain_id must be a positive integer")

    def to_json(self) -> dict[str, Any]:
        return {
            "rpc_url": self.rpc_url,
            "chain_id": self.chain_id,
            "token": self.token,
            "token_symbol": self.token_symbol,
            "token_decimals": self.token_decimals,
            "vault": self.vault,
            "router": self.router,
            "weth": self.weth,
            "native_symbol": self.native_symbol,
            "confirmations": self.confirmations,
            "usd_prices": {k: str(v) for k, v in self.usd_prices.items()},
        }


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> ChainConfig:
    """The deployment file at ``path``; ``FIDUCIARY_CHAIN_RPC`` (in ``env``) overrides its URL."""
    source = os.environ if env is None else env
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        config = ChainConfig(
            rpc_url=str(data["rpc_url"]),
            chain_id=int(data["chain_id"]),
            token=str(data["token"]),
            token_symbol=str(data.get("token_symbol", "USDC")),
            token_decimals=int(data.get("token_decimals", 6)),
            vault=None if data.get("vault") is None else str(data["vault"]),
            router=None if data.get("router") is None else str(data["router"]),
            weth=None if data.get("weth") is None else str(data["weth"]),
            native_symbol=str(data.get("native_symbol", "ETH")),
            confirmations=int(data.get("confirmations", 1)),
            usd_prices={
                str(k): Decimal(str(v)) for k, v in dict(data.get("usd_prices", {})).items()
            },
        )
    except FileNotFoundError:
        raise ConfigurationError(f"no chain configuration at {path}") from None
    except (ValueError, KeyError, TypeError, ArithmeticError) as exc:
        raise ConfigurationError(f"the chain configuration at {path} is not valid: {exc}") from None
    rpc = source.get(RPC_ENV, "").strip()
    return replace(config, rpc_url=rpc) if rpc else config


def save_config(config: ChainConfig, path: str | Path) -> None:
    """Write the deployment file (replacing it whole)."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(config.to_json(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(target)
