"""Deploying the contracts on a dev chain: the USD stablecoin (OpenZeppelin ERC20, 6 decimals)
and an ERC-4626 savings vault over it (OpenZeppelin ERC4626), from the committed artifacts;
the deployer receives the minted supply. The addresses go to a ``ChainConfig``."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
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

DEPLOY_TIMEOUT = 60.0


async def deploy(
    rpc_url: str,
    signer: Signer,
    *,
    mint: Decimal = Decimal(1_000_000),
    confirmations: int = 1,
) -> ChainConfig:
    """Deploy the stablecoin and the vault with ``signer`` (who pays the gas and receives
    ``mint`` USDC); the configuration that names them."""
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
        return ChainConfig(
            rpc_url=rpc_url,
            chain_id=chain_id,
            token=str(token),
            vault=vault,
            confirmations=confirmations,
        )
    finally:
        await w3.provider.disconnect()
