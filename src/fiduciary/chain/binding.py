"""What an approval of a chain write binds besides its arguments: the chain id, the sender and
the contract the transaction calls. They are arguments of every chain write, filled from the
wallet's configuration when the call is made and hidden from the model's schema, so they are
in the arguments' digest the person approves; the calldata and the value are a function of the
arguments and the contract (a token's ``transfer(to, units)``, a vault's ``deposit``...). A
call approved for one chain, account or contract is refused before anything is signed when
the wallet that would execute it is another (``check``)."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from eth_utils.address import to_checksum_address
from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from .errors import ChainError
from .wallet import ChainWallet

__all__ = ["BoundAddress", "BoundChain", "check", "tx_digest"]

BoundChain = SkipJsonSchema[Annotated[int, Field(description="Filled by the wallet.")]]
BoundAddress = SkipJsonSchema[Annotated[str, Field(description="Filled by the wallet.")]]


def check(wallet: ChainWallet, chain_id: int, sender: str, contract: str, expected: str) -> None:
    """Refuse (``not_this_chain``) a call whose bound chain, sender or contract is not the
    wallet's: it was approved for another deployment. ``expected``: the contract the wallet
    would call for it now."""
    cfg = wallet.config
    wrong = []
    if chain_id != cfg.chain_id:
        wrong.append(f"chain {chain_id}, not {cfg.chain_id}")
    if sender.lower() != wallet.address.lower():
        wrong.append(f"the account {sender}, not {wallet.address}")
    if contract.lower() != expected.lower():
        wrong.append(f"the contract {_shown(contract)}, not {to_checksum_address(expected)}")
    if wrong:
        raise ChainError(
            "not_this_chain",
            "this call was approved for " + "; ".join(wrong) + ": nothing was signed or sent. "
            "Ask the person again on this chain.",
        )


def tx_digest(tx: dict[str, Any]) -> str:
    """sha256 of what a transaction does (chain id, sender, to, calldata, value): shown on a
    card, compared with a transaction read back from the chain."""
    data = tx.get("data") or "0x"
    shown = {
        "chain_id": int(tx["chainId"]),
        "from": str(tx["from"]).lower(),
        "to": str(tx["to"]).lower(),
        "data": (data if isinstance(data, str) else "0x" + bytes(data).hex()).lower(),
        "value": int(tx.get("value", 0)),
    }
    return hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()


def _shown(address: str) -> str:
    try:
        return to_checksum_address(address)
    except ValueError:
        return repr(address[:50])
