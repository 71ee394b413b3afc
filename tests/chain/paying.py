"""Paying the wallet from another account, outside fiduciary: a raw ERC-20 transfer signed
with eth-account and sent by JSON-RPC, as any payer's wallet would."""

from __future__ import annotations

import secrets
from decimal import Decimal

from eth_account import Account
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from fiduciary.chain.wallet import ChainWallet

from .anvil import mined_receipt, rpc


def topic(address: str) -> str:
    return "0x" + "0" * 24 + address.lower().removeprefix("0x")


def pay(url: str, token: str, key: bytes, to: str, amount: Decimal) -> str:
    """``transfer(to, amount)`` on ``token`` signed by ``key`` (outside fiduciary); its hash."""
    account = Account.from_key(key)
    units = int(amount.scaleb(6))
    data = keccak(text="transfer(address,uint256)")[:4].hex() + topic(to)[2:] + f"{units:064x}"
    tx = {
        "to": to_checksum_address(token),
        "data": "0x" + data,
        "value": 0,
        "gas": 100_000,
        "maxFeePerGas": 10**10,
        "maxPriorityFeePerGas": 10**9,
        "nonce": int(rpc(url, "eth_getTransactionCount", account.address, "pending"), 16),
        "chainId": 31337,
        "type": 2,
    }
    signed = account.sign_transaction(tx)
    tx_hash = str(rpc(url, "eth_sendRawTransaction", "0x" + signed.raw_transaction.hex()))
    assert int(mined_receipt(url, tx_hash)["status"], 16) == 1
    return tx_hash


async def funded_payer(wallet: ChainWallet, url: str, amount: Decimal) -> bytes:
    """A new account holding ETH for gas and ``amount`` USDC sent by the wallet."""
    key = secrets.token_bytes(32)
    address = str(Account.from_key(key).address)
    rpc(url, "anvil_setBalance", address, hex(10**18))
    await wallet.send(f"fund-{address}", address, "USDC", amount)
    return key
