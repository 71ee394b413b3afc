"""What a mined transaction did to the wallet, read from the chain after its receipt.

``effects`` gives the post-execution guards their facts: the stablecoin the transaction itself
moved in or out of the wallet (its Transfer logs), the wallet's stablecoin balance at the
receipt's block (``balanceOf`` at that block: not a later one, which another transaction may
have moved), and for a swap the output it realised (the token's Transfer to the wallet, or the
wrapped coin's ``Withdrawal`` the router unwrapped for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from web3.types import TxReceipt

__all__ = ["Effects", "effects", "unwrapped"]

TRANSFER = keccak(text="Transfer(address,address,uint256)")
WITHDRAWAL = keccak(text="Withdrawal(address,uint256)")  # WETH9: the coin unwrapped


@dataclass(frozen=True, slots=True)
class Effects:
    token_change: Decimal  # the stablecoin in (+) or out (-) of the wallet by this transaction
    token_balance_after: Decimal  # the wallet's stablecoin at the receipt's block


def _address(topic: Any) -> str:
    return "0x" + bytes(topic).hex()[-40:]


async def effects(token: Any, receipt: TxReceipt, me: str, decimals: int) -> Effects:
    """The stablecoin ``receipt``'s transaction moved for ``me``, and ``me``'s balance after."""
    mine = me.lower()
    units = 0
    for log in receipt["logs"]:
        topics = log["topics"]
        if str(log["address"]).lower() != str(token.address).lower() or len(topics) != 3:
            continue
        if bytes(topics[0]) != TRANSFER:
            continue
        value = int.from_bytes(bytes(log["data"]), "big")
        if _address(topics[2]) == mine:
            units += value
        if _address(topics[1]) == mine:
            units -= value
    block = int(receipt["blockNumber"])
    held = await token.functions.balanceOf(to_checksum_address(me)).call(block_identifier=block)
    return Effects(
        token_change=Decimal(units).scaleb(-decimals),
        token_balance_after=Decimal(int(held)).scaleb(-decimals),
    )


def unwrapped(receipt: TxReceipt, weth: str) -> int:
    """The wrapped coin ``receipt``'s transaction unwrapped (WETH9 ``Withdrawal``), in wei."""
    total = 0
    for log in receipt["logs"]:
        topics = log["topics"]
        if (
            str(log["address"]).lower() == weth.lower()
            and topics
            and bytes(topics[0]) == WITHDRAWAL
        ):
            total += int.from_bytes(bytes(log["data"]), "big")
    return total
