"""Reconciliation: the intents fiduciary recorded against the chain's own books.

Every difference is listed: an intent recorded ``mined`` whose transaction the chain no longer
has (a reorg: ``ChainWallet.recheck`` sends the same bytes again) or whose receipt says
otherwise; a transaction still in flight (``signed``) or of unknown outcome; a token Transfer
from the account that no intent explains (made outside fiduciary, with the same key).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from eth_typing import HexStr
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from web3 import AsyncWeb3
from web3.exceptions import TransactionNotFound

from .config import ChainConfig
from .intents import IntentBook

__all__ = ["Difference", "reconcile"]

TRANSFER_TOPIC = "0x" + keccak(text="Transfer(address,address,uint256)").hex()

Kind = Literal["vanished", "receipt_differs", "in_flight", "unknown", "unrecorded_transfer"]


@dataclass(frozen=True, slots=True)
class Difference:
    kind: Kind
    tx_hash: str
    detail: str


async def reconcile(
    w3: AsyncWeb3[Any], config: ChainConfig, intents: IntentBook, address: str
) -> list[Difference]:
    """The differences between the intents of ``address`` and the chain (none: in agreement)."""
    sender = to_checksum_address(address)
    found: list[Difference] = []
    recorded = await intents.by_sender(config.chain_id, sender)
    for intent in recorded:
        if intent.status in ("refused", "reverted"):
            continue  # no transfer either way (a reverted one is checked by its receipt below)
        if intent.status == "signed":
            found.append(Difference("in_flight", intent.tx_hash, f"nonce {intent.nonce}"))
            continue
        if intent.status == "unknown":
            found.append(Difference("unknown", intent.tx_hash, intent.detail or ""))
            continue
        try:
            receipt = await w3.eth.get_transaction_receipt(HexStr(intent.tx_hash))
        except TransactionNotFound:
            found.append(
                Difference("vanished", intent.tx_hash, f"recorded in block {intent.block_number}")
            )
            continue
        if receipt["status"] != 1 or receipt["blockNumber"] != intent.block_number:
            found.append(
                Difference(
                    "receipt_differs",
                    intent.tx_hash,
                    f"recorded block {intent.block_number}, chain: block "
                    f"{receipt['blockNumber']} status {receipt['status']}",
                )
            )
    ours = {i.tx_hash.lower() for i in recorded}
    topic = "0x" + "0" * 24 + sender.lower().removeprefix("0x")
    logs = await w3.eth.get_logs(
        {
            "address": to_checksum_address(config.token),
            "fromBlock": 0,
            "toBlock": "latest",
            "topics": [HexStr(TRANSFER_TOPIC), HexStr(topic)],
        }
    )
    for log in logs:
        tx_hash = "0x" + bytes(log["transactionHash"]).hex()
        if tx_hash.lower() not in ours:
            found.append(Difference("unrecorded_transfer", tx_hash, f"block {log['blockNumber']}"))
    return found
