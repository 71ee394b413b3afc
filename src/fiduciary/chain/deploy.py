"""Deploying the contracts on a dev chain: the USD stablecoin (OpenZeppelin ERC20, 6 decimals)
and an ERC-4626 savings vault over it (OpenZeppelin ERC4626), from the committed artifacts;
the deployer receives the minted supply. The addresses go to a ``ChainConfig``."""

from __future__ import annotations

import asyncio
import json
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

from eth_abi.abi import encode
from eth_typing import ChecksumAddress, HexStr
from eth_utils.address import to_checksum_address
from web3 import AsyncHTTPProvider, AsyncWeb3
from web3.exceptions import TransactionNotFound, Web3Exception
from web3.types import TxParams

from ..exceptions import ConfigurationError
from .artifacts import abi_of, artifact
from .config import ChainConfig
from .keys import Signer

__all__ = ["deploy"]


def _router_abi(node_modules: Path) -> list[dict[str, Any]]:
    path = node_modules / "@uniswap" / "v2-periphery" / "build" / "UniswapV2Router02.json"
    abi: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["abi"]
    return abi


DEPLOY_TIMEOUT = 60.0


async def deploy(
    rpc_url: str,
    signer: Signer,
    *,
    mint: Decimal = Decimal(1_000_000),
    confirmations: int = 1,
    uniswap: Path | None = None,
    pool_usdc: Decimal = Decimal(6_000),
    pool_eth: Decimal = Decimal(2),
) -> ChainConfig:
    """Deploy the stablecoin and the vault with ``signer`` (who pays the gas and receives
    ``mint`` USDC); the configuration that names them. ``uniswap``: a ``node_modules`` holding
    ``@uniswap/v2-core`` and ``v2-periphery``, whose published builds are deployed too (WETH9,
    the factory, Router02) with a pool of ``pool_usdc`` USDC against ``pool_eth`` ETH."""
    w3 = AsyncWeb3(AsyncHTTPProvider(rpc_url))
    try:
        try:
            chain_id = await w3.eth.chain_id
        except (Web3Exception, OSError, TimeoutError) as exc:
            raise ConfigurationError(
                f"cannot reach the chain node at {rpc_url} ({type(exc).__name__})"
            ) from None
        me = to_checksum_address(signer.address)
        nonce = int(await w3.eth.get_transaction_count(me, "pending"))

        async def send(tx: dict[str, Any]) -> dict[str, Any]:
            nonlocal nonce
            tx.update({"from": me, "chainId": chain_id})
            gas = await w3.eth.estimate_gas(cast(TxParams, tx))
            tip = int(await w3.eth.max_priority_fee)
            base = int((await w3.eth.get_block("latest")).get("baseFeePerGas", 0))
            tx.update(
                gas=gas * 12 // 10,
                maxFeePerGas=2 * base + tip,
                maxPriorityFeePerGas=tip,
                nonce=nonce,
                type=2,
            )
            del tx["from"]
            signed = signer.sign(tx)
            nonce += 1
            await w3.eth.send_raw_transaction(signed.raw)
            deadline = time.monotonic() + DEPLOY_TIMEOUT
            while True:
                try:
                    receipt = await w3.eth.get_transaction_receipt(HexStr(signed.tx_hash))
                    break
                except TransactionNotFound:
                    if time.monotonic() > deadline:
                        raise ConfigurationError(
                            f"{signed.tx_hash} was not mined within {DEPLOY_TIMEOUT:g}s"
                        ) from None
                    await asyncio.sleep(0.1)
            if receipt["status"] != 1:
                raise ConfigurationError(f"the deployment transaction {signed.tx_hash} reverted")
            return dict(receipt)

        def creation(name: str, *args: Any) -> dict[str, Any]:
            inputs = next(e for e in abi_of(name) if e["type"] == "constructor")["inputs"]
            encoded = encode([i["type"] for i in inputs], list(args)).hex()
            return {"data": artifact(name)["bytecode"] + encoded, "value": 0}

        token_receipt = await send(creation("UsdStablecoin", "USD Coin (dev)", "USDC"))
        token = cast(ChecksumAddress, token_receipt["contractAddress"])
        vault_receipt = await send(creation("SavingsVault", token, "Savings USDC", "svUSDC"))
        vault = str(vault_receipt["contractAddress"])
        stable = w3.eth.contract(address=token, abi=abi_of("UsdStablecoin"))
        units = int(mint.scaleb(6))
        await send({"to": token, "value": 0, "data": stable.encode_abi("mint", args=[me, units])})
        router = weth = None
        if uniswap is not None:

            def published(package: str, name: str, *args: Any) -> dict[str, Any]:
                path = uniswap / "@uniswap" / package / "build" / f"{name}.json"
                build = json.loads(path.read_text(encoding="utf-8"))
                ctor = next((e for e in build["abi"] if e["type"] == "constructor"), None)
                types = [i["type"] for i in ctor["inputs"]] if ctor else []
                code = "0x" + str(build["bytecode"]).removeprefix("0x")
                return {"data": code + encode(types, list(args)).hex(), "value": 0}

            weth = str((await send(published("v2-periphery", "WETH9")))["contractAddress"])
            made = await send(published("v2-core", "UniswapV2Factory", me))
            factory = str(made["contractAddress"])
            made = await send(published("v2-periphery", "UniswapV2Router02", factory, weth))
            router = str(made["contractAddress"])
            usdc, eth = int(pool_usdc.scaleb(6)), int(pool_eth.scaleb(18))
            approve = stable.encode_abi("approve", args=[router, usdc])
            await send({"to": token, "value": 0, "data": approve})
            pool = w3.eth.contract(
                address=to_checksum_address(router),
                abi=_router_abi(uniswap),
            )
            deadline = int((await w3.eth.get_block("latest"))["timestamp"]) + 600
            liquidity = pool.encode_abi(
                "addLiquidityETH", args=[token, usdc, usdc, eth, me, deadline]
            )
            await send({"to": router, "value": eth, "data": liquidity})
        return ChainConfig(
            rpc_url=rpc_url,
            chain_id=chain_id,
            token=str(token),
            vault=vault,
            router=router,
            weth=weth,
            confirmations=confirmations,
        )
    finally:
        await w3.provider.disconnect()
