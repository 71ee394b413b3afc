"""Counting on chain, outside fiduciary: token balances and Transfer logs by raw JSON-RPC."""

from __future__ import annotations

from decimal import Decimal

from eth_utils.crypto import keccak

from .anvil import rpc

TRANSFER_TOPIC = "0x" + keccak(text="Transfer(address,address,uint256)").hex()


def _topic(address: str) -> str:
    return "0x" + "0" * 24 + address.lower().removeprefix("0x")


def token_balance(url: str, token: str, holder: str) -> Decimal:
    data = "0x70a08231" + _topic(holder)[2:]  # balanceOf(address)
    result = rpc(url, "eth_call", {"to": token, "data": data}, "latest")
    return Decimal(int(result, 16)).scaleb(-6)


def transfers(url: str, token: str, sender: str) -> list[dict[str, str]]:
    """The Transfer logs of ``token`` from ``sender``, in chain order."""
    logs: list[dict[str, str]] = rpc(
        url,
        "eth_getLogs",
        {
            "address": token,
            "fromBlock": "0x0",
            "toBlock": "latest",
            "topics": [TRANSFER_TOPIC, _topic(sender)],
        },
    )
    return logs


def nonce_of(url: str, address: str) -> int:
    return int(rpc(url, "eth_getTransactionCount", address, "latest"), 16)
