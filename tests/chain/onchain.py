"""Counting on chain, outside fiduciary: token balances and Transfer logs by raw JSON-RPC."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from eth_utils.crypto import keccak

from .anvil import rpc

TRANSFER_TOPIC = "0x" + keccak(text="Transfer(address,address,uint256)").hex()
AUTHORIZATION_USED_TOPIC = "0x" + keccak(text="AuthorizationUsed(address,bytes32)").hex()


def _topic(address: str) -> str:
    return "0x" + "0" * 24 + address.lower().removeprefix("0x")


def token_balance(url: str, token: str, holder: str) -> Decimal:
    data = "0x70a08231" + _topic(holder)[2:]  # balanceOf(address)
    result = rpc(url, "eth_call", {"to": token, "data": data}, "latest")
    return Decimal(int(result, 16)).scaleb(-6)


def transfers(url: str, token: str, sender: str, to: str | None = None) -> list[dict[str, str]]:
    """The Transfer logs of ``token`` from ``sender`` (to ``to``, if given), in chain order."""
    topics = [TRANSFER_TOPIC, _topic(sender)] + ([] if to is None else [_topic(to)])
    return _logs(url, token, topics)


def authorizations_used(url: str, token: str, authorizer: str) -> list[dict[str, Any]]:
    """The EIP-3009 ``AuthorizationUsed`` logs of ``token`` for ``authorizer``'s nonces."""
    return _logs(url, token, [AUTHORIZATION_USED_TOPIC, _topic(authorizer)])


def _logs(url: str, token: str, topics: list[str]) -> list[dict[str, Any]]:
    logs: list[dict[str, Any]] = rpc(
        url,
        "eth_getLogs",
        {"address": token, "fromBlock": "0x0", "toBlock": "latest", "topics": topics},
    )
    return logs


def nonce_of(url: str, address: str) -> int:
    return int(rpc(url, "eth_getTransactionCount", address, "latest"), 16)
